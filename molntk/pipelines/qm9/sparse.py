"""Sparse (inducing-environment) models of ``task: qm9-property`` (config section ``sparse``).

For a model listed in ``sparse.models``, with the candidate chosen for its exact version:

1. m inducing environments are chosen among the atoms of the largest training set, or of
   the first ``sparse.pool`` training molecules (:func:`inducing_set`; fixed for every
   training size, so one kernel serves the whole learning curve, and a pool beyond the
   largest training set keeps the inducing set of a longer curve): by farthest-point
   sampling in the space the model compares atoms in, the channel amplitudes of molntk's
   feature maps (:func:`~molntk.features.inducing.inducing_environments`) or, for FCHL19
   and SOAP, their own descriptors (:func:`~molntk.molecular.descriptors.inducing_atoms`);
2. the block assembler computes Θ(inducing, inducing) (m × m, symmetric blocks) and
   Θ(molecule, inducing) = Σ_{a∈M} [Z_a = Z_s] k(x_a, x_s) for every molecule of the run
   (training, test, rotated copies; n × m), each inducing atom being a molecule of its own
   (:class:`~molntk.molecular.sets.InducingSet`; a baseline's descriptors of the run's
   molecules are computed once, for the choice and the kernel): blocks, cache, resume,
   GPUs and Dask as for the exact kernels;
3. for ``sparse.solver: nystrom``, Θ(inducing, inducing) factored once for every target and
   training size (:func:`~molntk.regression.nystrom.factor_inducing`: eigenvalues below
   ``sparse.rank_rtol`` · s_max dropped, or with ``sparse.factorisation: cholesky`` jittered
   and Cholesky factored in the matrix's own memory), the matrix replaced by its factor;
4. per target and training size n: the dressed-atom residual, then, on the first n rows,
   :class:`~molntk.regression.sparse.SparseKernelRegressor` (λ by closed-form LOO, GCV when
   ``regression.cv: gcv``) or :class:`~molntk.regression.falkon.FalkonRegressor`
   (``falkon``: preconditioned CG, λ on held-out training molecules), over the same relative
   grid as the exact model (floored at ``psd_rtol`` for quadrature kernels).

The sum of SO(3) NTKs (``so3_ntk_sum`` in ``sparse.models``) is one model on one inducing
set, chosen in step 1 in the first network's feature maps or, with ``sparse.sum_maps:
every``, in all networks' maps side by side (every network's maps describe the same atoms,
:func:`sum_inducing_set`): Θ = Σ_i a_i Θ_i with a_i = c_i / τ_i, the weights and training
scales the exact sum chose (:func:`sparse_sum_kernels`, :func:`sum_scales`); each network's blocks in
step 2 as for one network, its rows added into the sum's one network at a time (two n × m
matrices at most), then steps 3–4 on the sum.

``fit_seconds`` = the compute seconds of Θ(inducing, inducing), of its factor and of the
training rows' blocks + the fit; ``predict_seconds`` = the test rows' blocks + the product.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from molntk.features.environments import FeatureConfig
from molntk.features.inducing import inducing_environments
from molntk.molecular import InducingSet
from molntk.molecular.baselines import MoleculeDescriptorKernel
from molntk.molecular.descriptors import inducing_atoms
from molntk.pipelines.qm9.assembly import BlockAssembler, block_kernel
from molntk.pipelines.qm9.candidates import Candidate, dtype_and_device
from molntk.pipelines.qm9.config import QM9PropertyConfig, SparseConfig
from molntk.pipelines.qm9.evaluate import evaluate_model
from molntk.pipelines.qm9.exact import self_kernels
from molntk.pipelines.qm9.sets import QM9Sets
from molntk.regression.falkon import FalkonRegressor
from molntk.regression.nystrom import InducingRoot, factor_inducing
from molntk.regression.selection import lambda_grid
from molntk.regression.sparse import SparseKernelRegressor
from molntk.scale.blocks import TEST, TRAIN
from molntk.scale.progress import Progress, labelled

#: Suffix of a sparse model's name in the report.
SUFFIX = "-sparse"


@dataclass
class SparseKernels:
    """Θ among the m inducing environments (or, for the Nyström solver, its factor: step 3),
    Θ(molecule, inducing) for every molecule of the run (rows in the order of
    ``QM9Sets.molecules``), and seconds: the compute of the inducing block, of the row blocks
    that start below each row position (``row_seconds[i]``: the blocks of rows <
    ``row_ends[i]``) and the factorisation of step 3 (0 without one)."""

    inducing: np.ndarray | InducingRoot
    rows: np.ndarray
    inducing_seconds: float
    row_ends: np.ndarray
    row_seconds: np.ndarray
    factor_seconds: float = 0.0
    folder: Path | None = None

    def release(self) -> None:
        """Drop the matrices; out-of-core ones are deleted from disk (scratch, as
        :meth:`~molntk.pipelines.qm9.exact.ShellKernels.release`)."""
        self.inducing = self.rows = np.zeros((0, 0))
        if self.folder is not None:
            shutil.rmtree(self.folder)

    def seconds_between(self, start: int, stop: int) -> float:
        """Compute seconds of the row blocks within rows start … stop (block boundaries)."""
        inside = (self.row_ends > start) & (self.row_ends <= stop)
        return float(self.row_seconds[inside].sum())

    def seconds_entry(self, model: str, reduce: str, sets: QM9Sets) -> dict[str, Any]:
        """The run's ``kernel_seconds`` entry of the sparse model ``model``: the inducing block,
        the training rows (with the inducing block) and the test rows; where they were held."""
        n_train, n_test = sets.n_train, sets.n_test
        return {"model": model, "reduce": reduce, "inducing": self.inducing_seconds,
                "train": self.inducing_seconds + self.seconds_between(0, n_train),
                "test": self.seconds_between(n_train, n_train + n_test), "storage": "memory" if self.folder is None else "disk"}


#: The run's inducing sets on molntk's feature maps, by the maps they were chosen in: a model
#: on maps already chosen in (the sparse SO(3) NTK and the sparse sum's first network, or the
#: power spectrum on the same maps) takes the same set without a second farthest-point sampling.
ChosenSets = dict[tuple[FeatureConfig, ...], InducingSet]


def inducing_set(candidate: Candidate, sets: QM9Sets, sparse: SparseConfig, chosen: ChosenSets,
                 beside: Sequence[Candidate] = ()) -> InducingSet:
    """Step 1: the run's molecules after the ``sparse.environments`` inducing atoms, chosen
    among the atoms of the training molecules (the first ``sparse.pool`` of them when given,
    :attr:`~molntk.pipelines.qm9.sets.QM9Sets.inducing_pool` when those reach beyond the
    largest training set) in the space of the candidate's kernel: its own per-atom
    descriptors for a baseline that has them (FCHL19, SOAP), else the channel amplitudes of
    its feature maps, side by side with those of the networks ``beside`` it (a sum's); a
    choice in maps of ``chosen`` is taken from there."""
    source = sets.molecules if sets.inducing_pool is None else sets.inducing_pool
    options = {"method": sparse.selection, "seed": sparse.seed, "pool": sparse.pool or sets.n_train}
    if isinstance(candidate.kernel, MoleculeDescriptorKernel):
        rows = inducing_atoms(candidate.kernel.describe(source), sparse.environments, **options)
        return InducingSet(sets.molecules, rows, source=sets.inducing_pool)
    key = tuple(c.kernel.features for c in (candidate, *beside))
    if key not in chosen:
        rows = inducing_environments([source.environments(features) for features in key], sparse.environments, **options)
        chosen[key] = InducingSet(sets.molecules, rows, source=sets.inducing_pool)
    return chosen[key]


def sum_inducing_set(terms: Sequence[Candidate], sets: QM9Sets, sparse: SparseConfig, chosen: ChosenSets) -> InducingSet:
    """Step 1 of a sum of SO(3) NTKs: in the first network's maps, or with ``sparse.sum_maps:
    every`` in every network's maps side by side (each network's maps describe the same atoms)."""
    return inducing_set(terms[0], sets, sparse, chosen, beside=terms[1:] if sparse.sum_maps == "every" else ())


def sparse_kernels(candidate: Candidate, sets: QM9Sets, sparse: SparseConfig, chosen: ChosenSets,
                   assembler: BlockAssembler, progress: Progress | None, label: str) -> SparseKernels:
    """Steps 1–3 of the module docstring for the chosen ``candidate``."""
    inducing = inducing_set(candidate, sets, sparse, chosen)
    return _factored(_assembled(candidate, inducing, sets, assembler, progress, label), sparse)


def sparse_sum_kernels(terms: Sequence[Candidate], coefficients: Sequence[float], inducing: InducingSet, sets: QM9Sets,
                       sparse: SparseConfig, assembler: BlockAssembler, progress: Progress | None,
                       label: str) -> SparseKernels:
    """Steps 2–3 for Θ = Σ_i a_i Θ_i, the kernels of the networks ``terms`` weighted by
    ``coefficients`` a_i (c_i / τ_i; a term of weight 0 is not computed) on the ``inducing``
    set (step 1, :func:`sum_inducing_set`, chosen once per run and shared by every weight
    vector): each network's Θ(inducing, inducing) and rows assembled as :func:`sparse_kernels`
    does (its blocks cached under its own key) and added in place into the first's, then one
    factor of the sum."""
    total: SparseKernels | None = None
    for i, (term, a) in enumerate(zip(terms, coefficients)):
        if a == 0:
            continue
        part = _assembled(term, inducing, sets, assembler, progress, f"{label}-term{i + 1}")
        if total is None:
            total = part
            total.inducing, total.rows = _writable(total.inducing), _writable(total.rows)
            _add_scaled(total.inducing, a, None)
            _add_scaled(total.rows, a, None)
            continue
        _add_scaled(total.inducing, a, part.inducing)
        _add_scaled(total.rows, a, part.rows)
        total.inducing_seconds += part.inducing_seconds
        total.row_ends = np.concatenate([total.row_ends, part.row_ends])
        total.row_seconds = np.concatenate([total.row_seconds, part.row_seconds])
        part.release()
    if total is None:
        raise ValueError("a sum of kernels needs a term of positive weight")
    return _factored(total, sparse)


def sum_scales(terms: Sequence[Candidate], sets: QM9Sets, n_molecules: int = 1000) -> list[float]:
    """τ_i of each network when no exact sum chose them: the mean self-kernel Θ_i(M, M) of
    the first ``n_molecules`` training molecules (the exact sum's τ_i is that mean over its
    training set). On QM9 1,000 molecules estimate it to ≈ 1.5 % (the 3 Å quadratic-head
    network's self-kernels vary by 46 % of their mean; the first 1,000 of the standard split
    are 0.8 % above the mean of the first 10,000), far finer than the ×3 steps of a weight grid."""
    rows = np.arange(min(n_molecules, sets.n_train))
    scales = []
    for term in terms:
        scales.append(float(np.mean(self_kernels(block_kernel(term, sets.molecules), rows))))
        sets.molecules.release()
    return scales


def _assembled(candidate: Candidate, inducing: InducingSet, sets: QM9Sets, assembler: BlockAssembler,
               progress: Progress | None, label: str) -> SparseKernels:
    """Step 2 for ``candidate`` on the ``inducing`` set: Θ(inducing, inducing) (not yet
    factored) and the rows of every molecule of the run, with their compute seconds."""
    kernel = block_kernel(candidate, inducing)
    for group in (sets.molecules, sets.inducing_pool):  # the block kernel holds the inducing set's own copy
        if group is not None:
            group.release()
    m, n_train, n_test = len(inducing.rows), sets.n_train, sets.n_test
    assembly = assembler.assemble(
        kernel, np.arange(m), m + np.arange(len(sets.molecules)),
        test_boundaries=[*sets.sizes, n_train + n_test], storage=label,
        progress=labelled(progress, label),
    )
    seconds = assembly.seconds
    row_blocks = [(b.row_slice.stop, s) for b, s in zip(assembly.blocks, seconds) if b.matrix == TEST]
    return SparseKernels(
        inducing=assembly.matrices.pop(f"{candidate.matrix}_train"),
        rows=assembly.matrices[f"{candidate.matrix}_test"],
        inducing_seconds=float(sum(s for b, s in zip(assembly.blocks, seconds) if b.matrix == TRAIN)),
        row_ends=np.array([end for end, _ in row_blocks]),
        row_seconds=np.array([s for _, s in row_blocks]),
        folder=None if assembler.matrices_dir is None else assembler.matrices_dir / label,
    )


def _factored(kernels: SparseKernels, sparse: SparseConfig) -> SparseKernels:
    """Step 3: for ``sparse.solver: nystrom``, Θ(inducing, inducing) replaced by its factor."""
    start = time.perf_counter()
    if sparse.solver == "nystrom":
        kernels.inducing = factor_inducing(kernels.inducing, sparse.rank_rtol, sparse.factorisation, overwrite=True)
    kernels.factor_seconds = time.perf_counter() - start
    return kernels


def _writable(matrix: np.ndarray) -> np.ndarray:
    """``matrix``, or for an out-of-core matrix (the assembler's read-only memory map) the
    same file reopened for writing, so the sum accumulates in it."""
    if isinstance(matrix, np.memmap) and not matrix.flags.writeable:
        return np.load(matrix.filename, mmap_mode="r+")
    return matrix


def _add_scaled(out: np.ndarray, a: float, part: np.ndarray | None, rows: int = 4096) -> None:
    """out += a · part in place, ``rows`` rows at a time (no full-size temporary; out may be
    a memory map); without ``part``, out *= a."""
    for start in range(0, len(out), rows):
        stop = start + rows
        if part is None:
            out[start:stop] *= a
        else:
            out[start:stop] += a * part[start:stop]


def fit_sparse(K_nm: np.ndarray, K_mm: np.ndarray | InducingRoot, y: np.ndarray, config: QM9PropertyConfig,
               quadrature: bool) -> SparseKernelRegressor | FalkonRegressor:
    """Step 4's regressor, λ over the relative grid floored for quadratures, scored by
    ``regression.cv_loss``: ``sparse.solver`` "nystrom" by LOO (or GCV) on K_mm's factor
    (step 3); "falkon" on held-out training molecules, on the kernel's device."""
    reg, sparse = config.regression, config.sparse
    grid = lambda_grid(reg.psd_rtol, quadrature)
    if sparse.solver == "falkon":
        _, device = dtype_and_device(config)
        return FalkonRegressor(reg="cv", cv_loss=reg.cv_loss, relative_grid=grid,
                               validation_fraction=sparse.falkon_validation, tol=sparse.falkon_tol,
                               max_iter=sparse.falkon_max_iter, device=device).fit(K_nm, K_mm, y)
    cv = "gcv" if reg.cv == "gcv" else "loo"
    return SparseKernelRegressor(reg="cv", cv=cv, cv_loss=reg.cv_loss, relative_grid=grid,
                                 rank_rtol=sparse.rank_rtol, factorisation=sparse.factorisation).fit(K_nm, K_mm, y)


def sparse_records(config: QM9PropertyConfig, sets: QM9Sets, kernels: SparseKernels, name: str, label: str,
                   quadrature: bool, target: str, residual: bool, predictions: dict, **extra: Any) -> list[dict[str, Any]]:
    """Records of the sparse model for ``target`` at every training size (step 4): ``label``
    names its kernel, ``quadrature`` whether the kernel is a quadrature (λ floored);
    ``extra`` goes into every record."""
    n_train, n_test = sets.n_train, sets.n_test
    m = kernels.rows.shape[1]
    label = f"{label}; {m} inducing environments ({config.sparse.selection})"
    test_seconds = kernels.seconds_between(n_train, n_train + n_test)
    return [
        evaluate_model(
            sets, name + SUFFIX, target, residual, n, predictions,
            fit=lambda z, n=n: fit_sparse(kernels.rows[:n], kernels.inducing, z, config, quadrature),
            test_kernel=kernels.rows[n_train : n_train + n_test], rotated_kernel=kernels.rows[n_train + n_test :],
            kernel_seconds=(kernels.inducing_seconds + kernels.factor_seconds + kernels.seconds_between(0, n), test_seconds),
            hyperparameters=label, n_inducing=m, **extra,
        )
        for n in sets.sizes
    ]
