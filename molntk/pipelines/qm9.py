"""``task: qm9-property``: learning curves of the SO(3) NTK and its baselines on QM9.

Steps (everything a model sees of the data is training data, except its final test
predictions):

1. Standard split (seed); the training sizes are nested prefixes of the training split
   (:func:`~molntk.data.splits.nested_subsets`); the test set is the first ``n_test``
   molecules of the test split; the invariance set is the first ``n_molecules`` of the
   test set, each under ``n_rotations`` Haar-random rotations.
2. Hyperparameters of every kernel model are chosen on the first ``n_select`` training
   molecules: each candidate's kernel, its λ and its score by cross-validation
   (:class:`~molntk.regression.KernelRegressor`), lowest CV error wins. The search is in
   the report.
3. The chosen kernel is computed by the block engine (:mod:`molntk.scale`: blocks under a
   memory budget, an on-disk cache, GPUs or Dask as ``compute`` says): K(train, train)
   of the largest training set and K(test and rotated copies, train), with a block
   boundary at every training size. The kernel of training size n_k is the top-left
   block, and its cost is the measured compute time of the blocks inside it, so
   ``fit_seconds`` (kernel of the training set + regression fit) and
   ``predict_seconds`` (test × train kernel + product) are measured, not extrapolated;
   a rerun finds the blocks (and their recorded times) in the cache.
4. Per target and training size: the dressed-atom model is fitted (floor, and the
   baseline whose residual the kernels learn for extensive energies), then kernel ridge
   on the residual with λ by CV; MAE, RMSE, R² on the test set; the invariance error is
   the standard deviation of a molecule's predictions over its original and rotated
   copies, averaged over the invariance set, in target units.
5. With a ``sparse`` section: the listed models again as sparse models on inducing atom
   environments, at every training size (:mod:`molntk.pipelines.qm9_sparse`); the exact
   models then stop at ``sparse.exact_up_to``.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from molntk.config import ConfigProblem, ConfigValidationError
from molntk.data.molecule import Molecule
from molntk.data.qm9 import QM9_ELEMENTS
from molntk.molecular import BlockKernelOf, InducingSet, MolecularKernel, MoleculeSet, SO3MolecularKernel
from molntk.molecular.baselines import MLPNTK, AugmentedMLPNTK, BagOfBonds, CoulombMatrix, DScribeSOAPKernel, FCHL19Kernel
from molntk.molecular.baselines import LaplacianKernel, MLPArchitecture, PowerSpectrumKernel, RotationSet, median_l1_width
from molntk.pipelines.qm9_config import QM9DataConfig, QM9PropertyConfig

if TYPE_CHECKING:
    from molntk.data.qm9 import QM9

#: Targets whose kernels average over atom pairs when ``reduce: auto`` (intensive).
INTENSIVE_TARGETS = frozenset({"homo", "lumo", "gap"})
#: Targets learned as residuals of the dressed-atom model when ``residual: auto`` (extensive energies).
DRESSED_ATOM_TARGETS = frozenset({"u0", "u", "h", "g", "u0_atom", "u_atom", "h_atom", "g_atom", "zpve"})
#: Chemical accuracy for energies (meV), drawn on the learning curve.
CHEMICAL_ACCURACY_MEV = 43.0

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Candidate:
    """One hyperparameter setting of a model: report label, JSON parameters, its kernel, and
    whether the kernel is a quadrature (accurate to ``regression.psd_rtol``, not to rounding)."""

    label: str
    params: dict[str, Any]
    kernel: MolecularKernel
    quadrature: bool = False

    @property
    def matrix(self) -> str:
        """The matrix kernel ridge is fitted on: the kernel's last output (the NTK Θ of a
        network's kernel, else the kernel itself)."""
        return self.kernel.outputs[-1]


def rotated_copies(molecules: Sequence[Molecule], n_rotations: int, seed: int) -> list[Molecule]:
    """Each molecule under ``n_rotations`` Haar-random rotations (scipy), molecule-major order."""
    from scipy.spatial.transform import Rotation

    matrices = Rotation.random(len(molecules) * n_rotations, random_state=seed).as_matrix()
    out = []
    for i, molecule in enumerate(molecules):
        for r in range(n_rotations):
            rot = matrices[i * n_rotations + r]
            out.append(Molecule(molecule.numbers, molecule.positions @ rot.T, id=f"{molecule.id}@rot{r}"))
    return out


def target_settings(config: QM9PropertyConfig, target: str) -> tuple[str, bool]:
    """(reduce, dressed-atom residual) for ``target`` under the config's ``auto`` rules."""
    reg = config.regression
    reduce = reg.reduce if reg.reduce != "auto" else ("mean" if target in INTENSIVE_TARGETS else "sum")
    residual = reg.residual == "dressed-atom" or (reg.residual == "auto" and target in DRESSED_ATOM_TARGETS)
    return reduce, residual


# ---------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------


@dataclass
class QM9Sets:
    """Molecules and target values of one run. ``molecules`` holds the largest training set
    (its first n are the training set of size n), then the test set, then the rotated
    copies of the invariance set: one group, so each model describes every molecule once."""

    sizes: list[int]
    molecules: MoleculeSet
    n_test: int
    n_rotated: int
    n_rotations: int
    train_targets: dict[str, np.ndarray]
    test_targets: dict[str, np.ndarray]
    units: dict[str, str]

    @property
    def n_train(self) -> int:
        return self.sizes[-1]

    @property
    def train_molecules(self) -> list[Molecule]:
        return self.molecules.molecules[: self.n_train]

    @property
    def test_molecules(self) -> list[Molecule]:
        return self.molecules.molecules[self.n_train : self.n_train + self.n_test]

    @property
    def rotated_molecules(self) -> list[Molecule]:
        return self.molecules.molecules[self.n_train + self.n_test :]


def load_qm9_data(data: QM9DataConfig, source: str) -> QM9:
    """The QM9 molecules a ``data`` section asks for, with its split checked against their number.

    ``source`` names the configuration in the error raised when
    ``n_train + n_valid`` leaves no test molecules.
    """
    if data.source == "torch-geometric":
        from molntk.data.pyg import load_pyg_qm9

        molecules = load_pyg_qm9(data.root)
    else:
        from molntk.data.qm9 import load_qm9

        molecules = load_qm9(data.cache_dir)
    n_train, n_valid = data.split.n_train, data.split.n_valid
    if n_train + n_valid >= len(molecules):
        problem = (
            f"n_train + n_valid = {n_train:,} + {n_valid:,} = {n_train + n_valid:,} leaves no test molecules: "
            f"QM9 from {data.source} has {len(molecules):,}"
        )
        raise ConfigValidationError([ConfigProblem(source, "data.split", problem)])
    return molecules


def load_sets(config: QM9PropertyConfig, source: str, dtype: torch.dtype, device: str) -> QM9Sets:
    """Molecules and targets of a run (module docstring, step 1)."""
    from molntk.data.qm9 import QM9_TARGETS
    from molntk.data.splits import nested_subsets, standard_split

    data = config.data
    qm9 = load_qm9_data(data, source)
    split = standard_split(len(qm9), data.seed, data.split.n_train, data.split.n_valid)
    curve = config.learning_curve
    sizes = sorted(nested_subsets(split.train, curve.n_train))
    train_idx = split.train[: sizes[-1]]
    test_idx = split.test if curve.n_test is None else split.test[: curve.n_test]
    train = qm9.molecules(train_idx.tolist())
    test = qm9.molecules(test_idx.tolist())
    inv = config.invariance
    rotated = rotated_copies(test[: inv.n_molecules], inv.n_rotations, inv.seed)
    return QM9Sets(
        sizes=sizes,
        molecules=MoleculeSet([*train, *test, *rotated], dtype, device),
        n_test=len(test),
        n_rotated=len(rotated),
        n_rotations=inv.n_rotations,
        train_targets={t: np.asarray(qm9.target(t))[train_idx] for t in config.targets},
        test_targets={t: np.asarray(qm9.target(t))[test_idx] for t in config.targets},
        units={t: QM9_TARGETS[t].unit for t in config.targets},
    )


# ---------------------------------------------------------------------------------------
# Models and their hyperparameter candidates
# ---------------------------------------------------------------------------------------


def engine_options(config: QM9PropertyConfig) -> tuple[torch.dtype, str]:
    """(dtype, device) of the kernel engine (``device: auto``: CUDA when available)."""
    engine = config.kernel
    dtype = torch.float64 if engine.dtype == "float64" else torch.float32
    device = engine.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return dtype, device


def build_candidates(config: QM9PropertyConfig, reduce: str, reference: Sequence[Molecule]) -> dict[str, list[Candidate]]:
    """Model name → its hyperparameter candidates; Laplacian widths scale with the median
    distance among ``reference`` (training molecules)."""
    from molntk.kernels.so3 import SO3Grid
    from molntk.kernels.so3.spec import parse_architecture

    models, engine = config.models, config.kernel
    features = config.features.feature_config()
    dtype, device = engine_options(config)
    pairing = "element" if engine.pairing == "atom-index" else engine.pairing  # the baselines'
    out: dict[str, list[Candidate]] = {}
    if models.so3_ntk is not None:
        grid = SO3Grid(engine.grid_band_limit, engine.sampling)
        out["so3-ntk"] = []
        for c in models.so3_ntk.candidates:
            net = parse_architecture(c.layers, sigma_w=c.sigma_w, sigma_b=c.sigma_b)
            ctx = net.discretisation(grid, engine.mode, dtype, device)
            label = f"{c.layers} (σw={c.sigma_w:g}, σb={c.sigma_b:g})"
            own = features
            if c.smearing_width is not None:
                own = dataclasses.replace(features, smearing_width=c.smearing_width)
                label += f", smearing {c.smearing_width:g} rad"
            kernel = SO3MolecularKernel(net, ctx, engine.pairing, reduce, engine.block_size, own)
            out["so3-ntk"].append(Candidate(label, c.model_dump(), kernel, quadrature=engine.mode == "fast"))
    mlp_like = (("mlp-ntk", models.mlp_ntk), ("augmented-mlp-ntk", models.augmented_mlp_ntk))
    for name, section in mlp_like:
        if section is None:
            continue
        out[name] = []
        for c in section.candidates:
            arch = MLPArchitecture(c.depth, c.activation, c.sigma_w, c.sigma_b)
            label = f"depth {c.depth} {c.activation} (σw={c.sigma_w:g}, σb={c.sigma_b:g})"
            options = {"pairing": pairing, "reduce": reduce, "block_size": engine.block_size}
            if name == "mlp-ntk":
                kernel = MLPNTK(features, arch, **options)
            else:
                rotations = RotationSet.differences(RotationSet.random(section.rotations, section.seed))
                kernel = AugmentedMLPNTK(features, arch, rotations, **options)
                label += f", {2 * section.rotations} rotations"
            out[name].append(Candidate(label, c.model_dump(), kernel, quadrature=name != "mlp-ntk"))
    if models.power_spectrum is not None:
        out["power-spectrum"] = [
            Candidate(f"ζ={z}", {"zeta": z}, PowerSpectrumKernel(features, z, pairing=pairing, reduce=reduce))
            for z in models.power_spectrum.zetas
        ]
    if models.soap is not None:
        soap = models.soap
        out["soap-dscribe"] = [
            Candidate(f"ζ={z}", {**soap.model_dump(exclude={"zetas"}), "zeta": z}, DScribeSOAPKernel(
                r_cut=soap.r_cut, n_max=soap.n_max, l_max=soap.l_max, sigma=soap.sigma, zeta=z, pairing=pairing, reduce=reduce))
            for z in soap.zetas
        ]
    if models.fchl19 is not None:
        out["fchl19"] = [
            Candidate(f"σ={w:g}", {"sigma": w}, FCHL19Kernel(w, pairing=pairing, reduce=reduce))
            for w in models.fchl19.sigmas
        ]
    globals_ = (("cm-laplacian", models.coulomb_matrix, CoulombMatrix()), ("bob-laplacian", models.bag_of_bonds, BagOfBonds()))
    for name, section, descriptor in globals_:
        if section is not None:
            median = median_l1_width(descriptor(list(reference)))
            kernels = [LaplacianKernel(descriptor, f * median) for f in section.width_factors]
            out[name] = [
                Candidate(f"σ={k.sigma:.3g} ({f:g}× median)", {"width_factor": f, "sigma": k.sigma}, k)
                for f, k in zip(section.width_factors, kernels)
            ]
    return out


# ---------------------------------------------------------------------------------------
# Regression pieces
# ---------------------------------------------------------------------------------------


def dressed_atom(train: Sequence[Molecule], y_train: np.ndarray, *others: Sequence[Molecule]) -> tuple[np.ndarray, ...]:
    """Dressed-atom predictions (fitted on ``train``) for ``train`` and each of ``others``."""
    from molntk.regression import DressedAtomModel, element_counts

    model = DressedAtomModel().fit(element_counts(train, QM9_ELEMENTS), y_train)
    return tuple(model.predict(element_counts(mols, QM9_ELEMENTS)) for mols in (train, *others))


def fit_kernel_ridge(K: np.ndarray, y: np.ndarray, config: QM9PropertyConfig, quadrature: bool,
                     reg_relative: float | None = None) -> Any:
    """Kernel ridge (the NTK mean at t = ∞).

    Without ``reg_relative``: λ by the configured cross-validation from one
    eigendecomposition. A quadrature kernel is accurate to about psd_rtol relative, so λ is
    searched only down to psd_rtol · mean(diag K): a smaller λ would fit the quadrature
    error (it amplifies a 1e-4 kernel error into prediction errors larger than the signal;
    measured on QM9).

    With ``reg_relative`` (training sets above ``regression.eigh_max``, where an O(n³)
    eigendecomposition is too slow): λ = reg_relative · mean(diag K), the relative λ chosen
    by CV at a smaller nested size, and (K + λI) W = y solved by Cholesky (when its factor
    fits a quarter of the available RAM, or ``large_solver: cholesky``) or by PCG.
    """
    from molntk.regression import KernelRegressor
    from molntk.regression.selection import lambda_grid

    reg = config.regression
    if reg_relative is None:
        grid = lambda_grid(reg.psd_rtol, quadrature)
        return KernelRegressor("ntk", reg="cv", cv=reg.cv, psd_rtol=reg.psd_rtol, relative_grid=grid).fit(K, y)
    from molntk.regression.solvers import cholesky_fits
    from molntk.scale.memory import available_ram_bytes

    solver = reg.large_solver
    if solver == "auto":
        solver = "cholesky" if cholesky_fits(len(K), available_ram_bytes() // 4) else "pcg"
    lam = reg_relative * float(np.mean(np.diagonal(K)))
    return KernelRegressor("ntk", reg=lam, solver=solver, pcg_tol=reg.pcg_tol, psd_rtol=reg.psd_rtol).fit(K, y)


@dataclass(frozen=True)
class Engine:
    """How the run's kernel matrices are computed (:mod:`molntk.scale`): the executor, the
    block cache (None: off), the block side and memory budget, and the folder of
    out-of-core matrices (None: in RAM)."""

    executor: Any
    cache_dir: Path | None
    block_molecules: int
    memory_budget_mb: float | None
    matrices_dir: Path | None

    def assemble(self, block_kernel: Any, train: np.ndarray, test: np.ndarray | None = None, *,
                 progress: Callable[[int, int], None] | None = None, storage: str | None = None, **plan: Any) -> Any:
        from molntk.scale import assemble_kernels

        storage_dir = None if self.matrices_dir is None or storage is None else self.matrices_dir / storage
        return assemble_kernels(
            block_kernel, train, test, cache_dir=self.cache_dir, memory_budget_mb=self.memory_budget_mb,
            block_size=self.block_molecules, executor=self.executor, progress=progress, storage_dir=storage_dir, **plan,
        )


def block_kernel(candidate: Candidate, group: MoleculeSet | InducingSet) -> BlockKernelOf:
    """The candidate's kernel on ``group`` as a block kernel of the matrix it is regressed on
    (descriptors computed here); its cache key hashes the kernel's settings and the group's
    fingerprint, so a rerun of the same config finds its blocks and nothing else does."""
    return BlockKernelOf(candidate.kernel, group, outputs=(candidate.matrix,))


def select_candidate(
    candidates: list[Candidate], selection: MoleculeSet, y: np.ndarray, config: QM9PropertyConfig, engine: Engine,
) -> tuple[int, list[dict[str, Any]]]:
    """Index of the candidate with the lowest CV error on the ``selection`` molecules
    (targets ``y``), and the search table. Each candidate describes only the selection molecules, one candidate
    at a time, so the losing candidates never hold descriptors of the whole run."""
    if len(candidates) == 1:
        return 0, [{"candidate": candidates[0].label, "params": candidates[0].params, "cv_rmse": None, "chosen": True}]
    rows = []
    for cand in candidates:
        selection_kernel = engine.assemble(block_kernel(cand, selection), np.arange(len(y)))
        model = fit_kernel_ridge(selection_kernel.matrices[f"{cand.matrix}_train"], y, config, cand.quadrature)
        curve = model.cv_result_
        rmse = math.sqrt(curve.scores[curve.best_index]) * float(np.mean(model.target_scale_))
        rows.append({
            "candidate": cand.label,
            "params": cand.params,
            "cv_rmse": rmse,
            "reg_relative": model.reg_relative_,
            "at_grid_edge": curve.at_grid_edge,
            "kernel_seconds": float(selection_kernel.seconds.sum()),
        })
    best = int(np.argmin([row["cv_rmse"] for row in rows]))
    for i, row in enumerate(rows):
        row["chosen"] = i == best
    return best, rows


@dataclass
class ShellKernels:
    """The chosen kernel on the run's sets and the compute seconds of the training and test
    kernels of each training size (cumulative over the nested sizes)."""

    train: np.ndarray
    test: np.ndarray
    rotated: np.ndarray
    train_seconds: np.ndarray
    test_seconds: np.ndarray
    folder: Path | None = None

    @property
    def storage(self) -> str:
        return "memory" if self.folder is None else "disk"

    def release(self) -> None:
        """Drop the matrices; out-of-core ones are deleted from disk (they are scratch:
        the block cache is what a rerun reuses, and a full-QM9 matrix is ~97 GB)."""
        self.train = self.test = self.rotated = np.zeros((0, 0))
        if self.folder is not None:
            shutil.rmtree(self.folder)


def shell_kernels(kernel: BlockKernelOf, sets: QM9Sets, engine: Engine, progress: Progress | None,
                  label: str, sizes: Sequence[int] | None = None) -> ShellKernels:
    """K(train, train) and K(test and rotated, train) from the block engine (module
    docstring, step 3) for the training ``sizes`` (default: all of the run's): blocks start
    at every training size and at the end of the test set (so the test kernel's cost is
    measured apart from the rotated copies')."""
    sizes = sets.sizes if sizes is None else list(sizes)
    n, m = sizes[-1], sets.n_test
    assembly = engine.assemble(
        kernel, np.arange(n), sets.n_train + np.arange(m + sets.n_rotated),
        boundaries=sizes, test_boundaries=[m], storage=label,
        progress=None if progress is None else (lambda done, total: progress(label, done, total)),
    )
    (matrix,) = kernel.outputs
    K_test = assembly.matrices[f"{matrix}_test"]
    seconds = np.array([assembly.seconds_up_to(size, test_rows=m) for size in sizes])
    folder = None if engine.matrices_dir is None else engine.matrices_dir / label
    return ShellKernels(assembly.matrices[f"{matrix}_train"], K_test[:m], K_test[m:], seconds[:, 0], seconds[:, 1], folder)


def invariance_error(pred_test: np.ndarray, pred_rot: np.ndarray, n_rotations: int) -> float | None:
    """mean over molecules of std(prediction over the original and its rotated copies)."""
    if pred_rot.size == 0:
        return None
    n = pred_rot.shape[0] // n_rotations
    orbit = np.concatenate([pred_test[:n, None], pred_rot.reshape(n, n_rotations)], axis=1)
    return float(orbit.std(axis=1).mean())


def _record(model: str, target: str, n: int, unit: str, y_true: np.ndarray, y_pred: np.ndarray, **extra: Any) -> dict:
    from molntk.regression import regression_metrics

    metrics = regression_metrics(y_true, y_pred)
    return {"model": model, "target": target, "n_train": n, **metrics, "unit": unit, **extra}


# ---------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------


def run_qm9_property(
    config: QM9PropertyConfig,
    source: str,
    progress: Progress | None = None,
    cache_dir: Path | None = None,
    matrices_dir: Path | None = None,
) -> dict[str, Any]:
    """Run the pipeline; returns ``{"records", "search", "predictions", "kernel_seconds",
    "sizes", …}``. Kernel blocks are cached under ``cache_dir`` when given; with
    ``compute.storage: disk`` the chosen kernels are ``.npy`` memory maps under ``matrices_dir``."""
    from molntk.scale import open_executor

    if config.kernel.threads is not None:
        torch.set_num_threads(config.kernel.threads)
    dtype, device = engine_options(config)
    sets = load_sets(config, source, dtype, device)
    compute = config.compute
    if compute.storage == "disk" and matrices_dir is None:
        raise ValueError("compute.storage 'disk' needs a folder for the kernel matrices (matrices_dir)")
    with open_executor(compute.executor, device=device, workers=compute.workers, scheduler=compute.scheduler) as executor:
        engine = Engine(executor, cache_dir, compute.block_molecules, compute.memory_budget_mb,
                        matrices_dir if compute.storage == "disk" else None)
        records, search, predictions, kernel_seconds = _run_models(config, sets, engine, progress)
    return {
        "records": records,
        "search": search,
        "predictions": predictions,
        "kernel_seconds": kernel_seconds,
        "sizes": sets.sizes,
        "n_test": sets.n_test,
        "n_invariance_molecules": sets.n_rotated // sets.n_rotations,
        "device": device,
        "executor": type(executor).__name__,
        "dtype": str(dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "test_targets": {t: sets.test_targets[t].tolist() for t in config.targets},
        "units": sets.units,
    }


def _run_models(config: QM9PropertyConfig, sets: QM9Sets, engine: Engine, progress: Progress | None) -> tuple[list, list, dict, list]:
    """Dressed atoms, then every model: candidates chosen on the selection set, the chosen
    kernel on the learning curve; targets that share a reduction share the kernels."""
    records: list[dict[str, Any]] = []
    search: list[dict[str, Any]] = []
    predictions: dict[str, dict[str, list[float]]] = {}
    kernel_seconds: list[dict[str, Any]] = []
    by_reduce: dict[str, list[str]] = {}
    for target in config.targets:
        by_reduce.setdefault(target_settings(config, target)[0], []).append(target)
    residual = {t: target_settings(config, t)[1] for t in config.targets}
    _dressed_atom_records(sets, config.targets, records, predictions)
    exact_up_to = None if config.sparse is None else config.sparse.exact_up_to
    exact_sizes = [n for n in sets.sizes if exact_up_to is None or n <= exact_up_to]
    n_select = config.learning_curve.n_select
    selection = MoleculeSet(sets.train_molecules[:n_select], sets.molecules.dtype, sets.molecules.device)
    for reduce, targets in by_reduce.items():
        y_sel = np.stack([_residual_targets(sets, t, residual[t], n_select) for t in targets], axis=1)
        for name, candidates in build_candidates(config, reduce, sets.train_molecules[:n_select]).items():
            best, rows = select_candidate(candidates, selection, y_sel, config, engine)
            search += [{"model": name, "targets": targets, "reduce": reduce, **row} for row in rows]
            chosen = candidates[best]
            if exact_sizes:
                kernel = block_kernel(chosen, sets.molecules)
                shells = shell_kernels(kernel, sets, engine, progress, f"{name}-{reduce}", exact_sizes)
                kernel_seconds.append({"model": name, "reduce": reduce, "train": float(shells.train_seconds[-1]),
                                       "test": float(shells.test_seconds[-1]), "storage": shells.storage})
                for target in targets:
                    reg_relative = None  # of the largest size ≤ eigh_max, for the sizes above it
                    for k, n in enumerate(exact_sizes):
                        large = n > config.regression.eigh_max
                        record = _fit_and_evaluate(config, sets, shells, name, chosen, target, residual[target], k, n,
                                                   predictions, reg_relative if large else None)
                        reg_relative = reg_relative if large else record["reg_relative"]
                        records.append(record)
                shells.release()
                del kernel  # its descriptors (GBs at large N) before the sparse model makes its own
            if config.sparse is not None and name.replace("-", "_") in config.sparse.models:
                from molntk.pipelines.qm9_sparse import SUFFIX, sparse_kernels, sparse_records

                label = f"{name}{SUFFIX}-{reduce}"
                sparse = sparse_kernels(chosen, sets, config.sparse, engine, progress, label)
                kernel_seconds.append({"model": name + SUFFIX, "reduce": reduce, "inducing": sparse.inducing_seconds,
                                       "train": sparse.inducing_seconds + sparse.seconds_between(0, sets.n_train),
                                       "test": sparse.seconds_between(sets.n_train, sets.n_train + sets.n_test),
                                       "storage": "memory" if engine.matrices_dir is None else "disk"})
                for target in targets:
                    records += sparse_records(config, sets, sparse, name, chosen, target, residual[target], predictions)
                sparse.release()
    return records, search, predictions, kernel_seconds


def _residual_targets(sets: QM9Sets, target: str, residual: bool, n: int) -> np.ndarray:
    y = sets.train_targets[target][:n]
    if not residual:
        return y
    return y - dressed_atom(sets.train_molecules[:n], y)[0]


def _dressed_atom_records(sets: QM9Sets, targets: list[str], records: list, predictions: dict) -> None:
    """The dressed-atom floor for each target and training size."""
    for target in targets:
        for n in sets.sizes:
            start = time.perf_counter()
            _, pred = dressed_atom(sets.train_molecules[:n], sets.train_targets[target][:n], sets.test_molecules)
            seconds = time.perf_counter() - start
            records.append(
                _record("dressed-atom", target, n, sets.units[target], sets.test_targets[target], pred,
                        fit_seconds=seconds, predict_seconds=0.0,
                        invariance_error=0.0 if sets.n_rotated else None, hyperparameters="per-element linear")
            )
            if n == sets.sizes[-1]:
                predictions.setdefault(target, {})["dressed-atom"] = pred.tolist()


def _fit_and_evaluate(config: QM9PropertyConfig, sets: QM9Sets, kernels: ShellKernels, name: str, chosen: Candidate,
                      target: str, residual: bool, k: int, n: int, predictions: dict,
                      reg_relative: float | None = None) -> dict[str, Any]:
    """Fit the kernel model of training size n (k-th size) for ``target`` and evaluate it
    (``reg_relative``: see :func:`fit_kernel_ridge`)."""
    return evaluate_model(
        sets, name, target, residual, n, predictions,
        fit=lambda z: fit_kernel_ridge(kernels.train[:n, :n], z, config, chosen.quadrature, reg_relative),
        test_kernel=kernels.test[:, :n], rotated_kernel=kernels.rotated[:, :n],
        kernel_seconds=(float(kernels.train_seconds[k]), float(kernels.test_seconds[k])), hyperparameters=chosen.label,
    )


def evaluate_model(sets: QM9Sets, name: str, target: str, residual: bool, n: int, predictions: dict, *,
                   fit: Callable[[np.ndarray], Any], test_kernel: np.ndarray, rotated_kernel: np.ndarray,
                   kernel_seconds: tuple[float, float], hyperparameters: str, **extra: Any) -> dict[str, Any]:
    """The record of one kernel model at training size n: the dressed-atom model (when
    ``residual``), ``fit`` on the residual targets of the first n training molecules (a
    fitted regressor with ``predict`` and the fitted attributes ``reg_relative_``, ``solver_``,
    ``cv_result_``, ``condition_number_``, ``eigenvalues_clipped_``), predictions from its kernels against
    the test set and the rotated copies; ``kernel_seconds`` (training, test) are added to
    the measured fit and predict times; ``extra`` goes into the record."""
    y = sets.train_targets[target][:n]
    start = time.perf_counter()
    if residual:
        base_train, base_test, base_rot = dressed_atom(sets.train_molecules[:n], y, sets.test_molecules, sets.rotated_molecules)
    else:
        base_train, base_test, base_rot = np.zeros(n), np.zeros(sets.n_test), np.zeros(sets.n_rotated)
    model = fit(y - base_train)
    fit_seconds = kernel_seconds[0] + time.perf_counter() - start
    start = time.perf_counter()
    pred = base_test + model.predict(test_kernel)
    predict_seconds = kernel_seconds[1] + time.perf_counter() - start
    pred_rot = base_rot + model.predict(rotated_kernel) if sets.n_rotated else np.zeros(0)
    if n == sets.sizes[-1]:
        predictions.setdefault(target, {})[name] = pred.tolist()
    return _record(
        name, target, n, sets.units[target], sets.test_targets[target], pred,
        fit_seconds=fit_seconds, predict_seconds=predict_seconds,
        invariance_error=invariance_error(pred, pred_rot, sets.n_rotations),
        hyperparameters=hyperparameters, reg_relative=model.reg_relative_, solver=model.solver_,
        reg_at_grid_edge=None if model.cv_result_ is None else model.cv_result_.at_grid_edge,
        condition_number=model.condition_number_, eigenvalues_clipped=model.eigenvalues_clipped_, **extra,
    )
