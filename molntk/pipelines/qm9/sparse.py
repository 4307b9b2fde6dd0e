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

``fit_seconds`` = the compute seconds of Θ(inducing, inducing), of its factor and of the
training rows' blocks + the fit; ``predict_seconds`` = the test rows' blocks + the product.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from molntk.features.inducing import inducing_environments
from molntk.molecular import InducingSet
from molntk.molecular.baselines import MoleculeDescriptorKernel
from molntk.molecular.descriptors import inducing_atoms
from molntk.pipelines.qm9.assembly import BlockAssembler, block_kernel
from molntk.pipelines.qm9.candidates import Candidate, dtype_and_device
from molntk.pipelines.qm9.config import QM9PropertyConfig, SparseConfig
from molntk.pipelines.qm9.evaluate import evaluate_model
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


def inducing_set(candidate: Candidate, sets: QM9Sets, sparse: SparseConfig) -> InducingSet:
    """Step 1: the run's molecules after the ``sparse.environments`` inducing atoms, chosen
    among the atoms of the training molecules (the first ``sparse.pool`` of them when given,
    :attr:`~molntk.pipelines.qm9.sets.QM9Sets.inducing_pool` when those reach beyond the
    largest training set) in the space of the candidate's kernel: its own per-atom
    descriptors for a baseline that has them (FCHL19, SOAP), else the channel amplitudes of
    its feature maps."""
    source = sets.molecules if sets.inducing_pool is None else sets.inducing_pool
    options = {"method": sparse.selection, "seed": sparse.seed, "pool": sparse.pool or sets.n_train}
    if isinstance(candidate.kernel, MoleculeDescriptorKernel):
        rows = inducing_atoms(candidate.kernel.describe(source), sparse.environments, **options)
    else:
        rows = inducing_environments(source.environments(candidate.kernel.features), sparse.environments, **options)
    return InducingSet(sets.molecules, rows, source=sets.inducing_pool)


def sparse_kernels(candidate: Candidate, sets: QM9Sets, sparse: SparseConfig, assembler: BlockAssembler,
                   progress: Progress | None, label: str) -> SparseKernels:
    """Steps 1–3 of the module docstring for the chosen ``candidate``."""
    inducing = inducing_set(candidate, sets, sparse)
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
    inducing_seconds = float(sum(s for b, s in zip(assembly.blocks, seconds) if b.matrix == TRAIN))
    row_blocks = [(b.row_slice.stop, s) for b, s in zip(assembly.blocks, seconds) if b.matrix == TEST]
    inducing, start = assembly.matrices.pop(f"{candidate.matrix}_train"), time.perf_counter()
    if sparse.solver == "nystrom":
        inducing = factor_inducing(inducing, sparse.rank_rtol, sparse.factorisation, overwrite=True)
    return SparseKernels(
        inducing=inducing,
        rows=assembly.matrices[f"{candidate.matrix}_test"],
        inducing_seconds=inducing_seconds,
        row_ends=np.array([end for end, _ in row_blocks]),
        row_seconds=np.array([s for _, s in row_blocks]),
        factor_seconds=time.perf_counter() - start,
        folder=None if assembler.matrices_dir is None else assembler.matrices_dir / label,
    )


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


def sparse_records(config: QM9PropertyConfig, sets: QM9Sets, kernels: SparseKernels, name: str, chosen: Candidate,
                   target: str, residual: bool, predictions: dict) -> list[dict[str, Any]]:
    """Records of the sparse model for ``target`` at every training size (step 4)."""
    n_train, n_test = sets.n_train, sets.n_test
    m = kernels.rows.shape[1]
    label = f"{chosen.label}; {m} inducing environments ({config.sparse.selection})"
    test_seconds = kernels.seconds_between(n_train, n_train + n_test)
    return [
        evaluate_model(
            sets, name + SUFFIX, target, residual, n, predictions,
            fit=lambda z, n=n: fit_sparse(kernels.rows[:n], kernels.inducing, z, config, chosen.quadrature),
            test_kernel=kernels.rows[n_train : n_train + n_test], rotated_kernel=kernels.rows[n_train + n_test :],
            kernel_seconds=(kernels.inducing_seconds + kernels.factor_seconds + kernels.seconds_between(0, n), test_seconds),
            hyperparameters=label, n_inducing=m,
        )
        for n in sets.sizes
    ]
