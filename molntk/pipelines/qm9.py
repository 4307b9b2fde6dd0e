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
3. The chosen kernel is evaluated in *shells* of the nested training sets: shell k holds
   training molecules n_{k−1} … n_k, and the blocks (shell k × shells ≤ k), (test ×
   shell k) and (rotated × shell k) are computed once each. The kernel of training size
   n_k is the top-left block, and its cost is the measured time of shells ≤ k, so
   ``fit_seconds`` (kernel of the training set + regression fit) and
   ``predict_seconds`` (test × train kernel + product) are measured, not extrapolated.
4. Per target and training size: the dressed-atom model is fitted (floor, and the
   baseline whose residual the kernels learn for extensive energies), then kernel ridge
   on the residual with λ by CV; MAE, RMSE, R² on the test set; the invariance error is
   the standard deviation of a molecule's predictions over its original and rotated
   copies, averaged over the invariance set, in target units.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from molntk.config import ConfigProblem, ConfigValidationError, QM9DataConfig, QM9PropertyConfig
from molntk.data.molecule import Molecule
from molntk.pipelines.molecule_kernels import MoleculeGroup, MoleculeKernel

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
    kernel: MoleculeKernel
    quadrature: bool = False


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
    """Molecules and target values of one run: nested training shells, test and rotated sets."""

    sizes: list[int]
    shells: list[MoleculeGroup]
    test: MoleculeGroup
    rotated: MoleculeGroup
    n_rotations: int
    train_targets: dict[str, np.ndarray]
    test_targets: dict[str, np.ndarray]
    train_molecules: list[Molecule]
    units: dict[str, str]

    def selection(self, n: int) -> MoleculeGroup:
        """The first ``n`` training molecules, as a group of their own."""
        return MoleculeGroup(self.train_molecules[:n], self.test.dtype, self.test.device)


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
    bounds = [0, *sizes]
    shells = [MoleculeGroup(train[a:b], dtype, device) for a, b in zip(bounds, bounds[1:])]
    inv = config.invariance
    rotated = rotated_copies(test[: inv.n_molecules], inv.n_rotations, inv.seed)
    return QM9Sets(
        sizes=sizes,
        shells=shells,
        test=MoleculeGroup(test, dtype, device),
        rotated=MoleculeGroup(rotated, dtype, device),
        n_rotations=inv.n_rotations,
        train_targets={t: np.asarray(qm9.target(t))[train_idx] for t in config.targets},
        test_targets={t: np.asarray(qm9.target(t))[test_idx] for t in config.targets},
        train_molecules=train,
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
    from molntk.baselines import (
        MLPNTK,
        AugmentedMLPNTK,
        BagOfBonds,
        CoulombMatrix,
        DScribeSOAPKernel,
        FCHL19Kernel,
        MLPArchitecture,
        PowerSpectrumKernel,
        RotationSet,
    )
    from molntk.kernels.molecular import MolecularKernel
    from molntk.kernels.so3 import SO3Grid
    from molntk.kernels.so3.spec import parse_architecture
    from molntk.pipelines.molecule_kernels import (
        FeatureMapKernel,
        MoleculeDescriptorKernel,
        SO3NTKKernel,
        laplacian_candidates,
    )

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
            kernel = MolecularKernel(net, ctx, engine.pairing, reduce, engine.block_size)
            label = f"{c.layers} (σw={c.sigma_w:g}, σb={c.sigma_b:g})"
            own = features
            if c.smearing_width is not None:
                own = dataclasses.replace(features, smearing_width=c.smearing_width)
                label += f", smearing {c.smearing_width:g} rad"
            quadrature = engine.mode == "fast"
            out["so3-ntk"].append(Candidate(label, c.model_dump(), SO3NTKKernel(kernel, own), quadrature))
    mlp_like = (("mlp-ntk", models.mlp_ntk), ("augmented-mlp-ntk", models.augmented_mlp_ntk))
    for name, section in mlp_like:
        if section is None:
            continue
        out[name] = []
        for c in section.candidates:
            arch = MLPArchitecture(c.depth, c.activation, c.sigma_w, c.sigma_b)
            label = f"depth {c.depth} {c.activation} (σw={c.sigma_w:g}, σb={c.sigma_b:g})"
            if name == "mlp-ntk":
                kern = MLPNTK(features, arch, pairing, reduce, engine.block_size)
            else:
                rotations = RotationSet.differences(RotationSet.random(section.rotations, section.seed))
                kern = AugmentedMLPNTK(features, arch, rotations, pairing, reduce, engine.block_size)
                label += f", {2 * section.rotations} rotations"
            kernel = FeatureMapKernel(kern, features, output=1)
            out[name].append(Candidate(label, c.model_dump(), kernel, quadrature=name != "mlp-ntk"))
    if models.power_spectrum is not None:
        out["power-spectrum"] = [
            Candidate(f"ζ={z}", {"zeta": z}, FeatureMapKernel(PowerSpectrumKernel(features, z, pairing=pairing, reduce=reduce), features))
            for z in models.power_spectrum.zetas
        ]
    if models.soap is not None:
        soap = models.soap
        out["soap-dscribe"] = [
            Candidate(f"ζ={z}", {**soap.model_dump(exclude={"zetas"}), "zeta": z}, MoleculeDescriptorKernel(DScribeSOAPKernel(
                r_cut=soap.r_cut, n_max=soap.n_max, l_max=soap.l_max, sigma=soap.sigma, zeta=z, pairing=pairing, reduce=reduce)))
            for z in soap.zetas
        ]
    if models.fchl19 is not None:
        out["fchl19"] = [
            Candidate(f"σ={w:g}", {"sigma": w}, MoleculeDescriptorKernel(FCHL19Kernel(w, pairing=pairing, reduce=reduce)))
            for w in models.fchl19.sigmas
        ]
    globals_ = (("cm-laplacian", models.coulomb_matrix, CoulombMatrix()), ("bob-laplacian", models.bag_of_bonds, BagOfBonds()))
    for name, section, descriptor in globals_:
        if section is not None:
            kernels = laplacian_candidates(descriptor, reference, section.width_factors)
            out[name] = [
                Candidate(f"σ={k.kernel.sigma:.3g} ({f:g}× median)", {"width_factor": f, "sigma": k.kernel.sigma}, k)
                for f, k in zip(section.width_factors, kernels)
            ]
    return out


# ---------------------------------------------------------------------------------------
# Regression pieces
# ---------------------------------------------------------------------------------------


def dressed_atom(train: Sequence[Molecule], y_train: np.ndarray, *others: Sequence[Molecule]) -> tuple[np.ndarray, ...]:
    """Dressed-atom predictions (fitted on ``train``) for ``train`` and each of ``others``."""
    from molntk.features.environments import QM9_ELEMENTS
    from molntk.regression import DressedAtomModel, element_counts

    model = DressedAtomModel().fit(element_counts(train, QM9_ELEMENTS), y_train)
    return tuple(model.predict(element_counts(mols, QM9_ELEMENTS)) for mols in (train, *others))


def fit_kernel_ridge(K: np.ndarray, y: np.ndarray, config: QM9PropertyConfig, quadrature: bool) -> Any:
    """Kernel ridge (the NTK mean at t = ∞) with λ by the configured cross-validation.

    A quadrature kernel is accurate to about psd_rtol relative, so λ is searched only down
    to psd_rtol · mean(diag K): a smaller λ would fit the quadrature error (it amplifies a
    1e-4 kernel error into prediction errors larger than the signal; measured on QM9).
    """
    from molntk.regression import KernelRegressor
    from molntk.regression.selection import relative_grid_from

    reg = config.regression
    grid = relative_grid_from(reg.psd_rtol) if quadrature else None
    return KernelRegressor("ntk", reg="cv", cv=reg.cv, psd_rtol=reg.psd_rtol, relative_grid=grid).fit(K, y)


class KernelBlocks:
    """Blocks of one candidate's kernel between groups of the run, each computed once.

    Groups are tagged: training shells 0, 1, …, the test set −1, the rotated set −2, the
    selection set −3. Descriptors are computed when a block first needs them. With a
    ``cache_dir`` every block is a checksummed file (:class:`molntk.scale.BlockCache`)
    keyed by the model, its hyperparameters, the feature and engine settings, the
    molecules of every group and the molntk version, holding the matrix and the seconds
    its computation took: a killed run, rerun, loads the finished blocks, recomputes the
    rest, and reports the same kernels and times.
    """

    def __init__(self, candidate: Candidate, groups: dict[int, MoleculeGroup], key: dict[str, Any], cache_dir: Path | None):
        from molntk.scale import BlockCache
        from molntk.scale.molecular import molecule_fingerprint

        self.candidate, self.groups = candidate, groups
        self._descs: dict[int, Any] = {}
        fingerprints = {str(tag): molecule_fingerprint(g.molecules) for tag, g in groups.items()}
        material = json.dumps({**key, "candidate": candidate.params, "groups": fingerprints}, sort_keys=True, default=str)
        self.cache = None if cache_dir is None else BlockCache(cache_dir, material)

    def _desc(self, tag: int) -> Any:
        if tag not in self._descs:
            self._descs[tag] = self.candidate.kernel.describe(self.groups[tag])
        return self._descs[tag]

    def block(self, rows: int, cols: int | None) -> tuple[np.ndarray, float]:
        """K(group rows, group cols) (cols None: rows with itself, symmetric) and its compute seconds."""
        r, c = np.array([rows]), None if cols is None else np.array([cols])
        if self.cache is not None and (hit := self.cache.load(r, c)) is not None:
            return hit["kernel"], float(hit["seconds"])
        start = time.perf_counter()
        matrix = self.candidate.kernel(self._desc(rows), None if cols is None else self._desc(cols))
        seconds = time.perf_counter() - start
        if self.cache is not None:
            self.cache.store(r, c, {"kernel": matrix, "seconds": np.asarray(seconds)})
        return matrix, seconds


SELECTION, TEST, ROTATED = -3, -1, -2


def select_candidate(
    candidates: list[Candidate], blocks: list[KernelBlocks], y: np.ndarray, config: QM9PropertyConfig
) -> tuple[int, list[dict[str, Any]]]:
    """Index of the candidate with the lowest CV error on the selection set (targets ``y``),
    and the search table."""
    if len(candidates) == 1:
        return 0, [{"candidate": candidates[0].label, "params": candidates[0].params, "cv_rmse": None, "chosen": True}]
    rows = []
    for cand, kernel_blocks in zip(candidates, blocks):
        K, seconds = kernel_blocks.block(SELECTION, None)
        model = fit_kernel_ridge(K, y, config, cand.quadrature)
        curve = model.info["cv"]
        rmse = math.sqrt(curve["score"][curve["best_index"]]) * float(np.mean(model.info["target_scale"]))
        rows.append({
            "candidate": cand.label,
            "params": cand.params,
            "cv_rmse": rmse,
            "reg_relative": model.info["reg_relative"],
            "at_grid_edge": curve["at_grid_edge"],
            "kernel_seconds": seconds,
        })
    best = int(np.argmin([row["cv_rmse"] for row in rows]))
    for i, row in enumerate(rows):
        row["chosen"] = i == best
    return best, rows


@dataclass
class ShellKernels:
    """The chosen kernel on the run's sets, assembled from shells, with cumulative times."""

    train: np.ndarray
    test: np.ndarray
    rotated: np.ndarray
    train_seconds: np.ndarray
    test_seconds: np.ndarray


def shell_kernels(blocks: KernelBlocks, sets: QM9Sets, progress: Progress | None, label: str) -> ShellKernels:
    """K(train, train), K(test, train), K(rotated, train), shell by shell (module docstring, step 3)."""
    n, n_shells = sets.sizes[-1], len(sets.shells)
    K = np.zeros((n, n))
    K_test = np.zeros((len(sets.test), n))
    K_rot = np.zeros((len(sets.rotated), n))
    t_train, t_test = np.zeros(n_shells), np.zeros(n_shells)
    bounds = [0, *sets.sizes]
    total, done = n_shells * (n_shells + 1) // 2 + n_shells, 0
    for k in range(n_shells):
        rows = slice(bounds[k], bounds[k + 1])
        for j in range(k + 1):
            cols = slice(bounds[j], bounds[j + 1])
            block, seconds = blocks.block(k, None if j == k else j)
            K[rows, cols], K[cols, rows] = block, block.T
            t_train[k] += seconds
            done += 1
            _report(progress, label, done, total)
        K_test[:, rows], t_test[k] = blocks.block(TEST, k)
        if len(sets.rotated):
            K_rot[:, rows] = blocks.block(ROTATED, k)[0]
        done += 1
        _report(progress, label, done, total)
    return ShellKernels(K, K_test, K_rot, np.cumsum(t_train), np.cumsum(t_test))


def _report(progress: Progress | None, label: str, done: int, total: int) -> None:
    if progress is not None:
        progress(label, done, total)


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
    config: QM9PropertyConfig, source: str, progress: Progress | None = None, cache_dir: Path | None = None
) -> dict[str, Any]:
    """Run the pipeline (kernel blocks cached under ``cache_dir`` when given); returns
    ``{"records", "search", "predictions", "kernel_seconds", "sizes", …}``."""
    if config.kernel.threads is not None:
        torch.set_num_threads(config.kernel.threads)
    dtype, device = engine_options(config)
    sets = load_sets(config, source, dtype, device)
    records: list[dict[str, Any]] = []
    search: list[dict[str, Any]] = []
    predictions: dict[str, dict[str, list[float]]] = {}
    kernel_seconds: list[dict[str, Any]] = []
    n_inv = len(sets.rotated) // sets.n_rotations

    by_reduce: dict[str, list[str]] = {}
    for target in config.targets:
        by_reduce.setdefault(target_settings(config, target)[0], []).append(target)
    residual = {t: target_settings(config, t)[1] for t in config.targets}
    _dressed_atom_records(sets, config.targets, records, predictions)
    n_select = config.learning_curve.n_select
    selection = sets.selection(n_select)
    groups_by_tag = {**dict(enumerate(sets.shells)), TEST: sets.test, ROTATED: sets.rotated, SELECTION: selection}

    for reduce, targets in by_reduce.items():
        y_sel = np.stack([_residual_targets(sets, t, residual[t], n_select) for t in targets], axis=1)
        for name, candidates in build_candidates(config, reduce, selection.molecules).items():
            key = {"model": name, "reduce": reduce, "features": config.features.model_dump(),
                   "kernel": config.kernel.model_dump(exclude={"threads", "device"})}
            blocks = [KernelBlocks(c, groups_by_tag, key, cache_dir) for c in candidates]
            best, rows = select_candidate(candidates, blocks, y_sel, config)
            search += [{"model": name, "targets": targets, "reduce": reduce, **row} for row in rows]
            chosen = candidates[best]
            kernels = shell_kernels(blocks[best], sets, progress, name)
            kernel_seconds.append({"model": name, "reduce": reduce, "train": float(kernels.train_seconds[-1]),
                                   "test": float(kernels.test_seconds[-1])})
            for target in targets:
                for k, n in enumerate(sets.sizes):
                    records.append(_fit_and_evaluate(
                        config, sets, kernels, name, chosen, target, residual[target], k, n, n_inv, predictions
                    ))
    return {
        "records": records,
        "search": search,
        "predictions": predictions,
        "kernel_seconds": kernel_seconds,
        "sizes": sets.sizes,
        "n_test": len(sets.test),
        "n_invariance_molecules": n_inv,
        "device": device,
        "dtype": str(dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "test_targets": {t: sets.test_targets[t].tolist() for t in config.targets},
        "units": sets.units,
    }


def _residual_targets(sets: QM9Sets, target: str, residual: bool, n: int) -> np.ndarray:
    y = sets.train_targets[target][:n]
    if not residual:
        return y
    return y - dressed_atom(sets.train_molecules[:n], y)[0]


def _dressed_atom_records(sets: QM9Sets, targets: list[str], records: list, predictions: dict) -> None:
    """The dressed-atom floor for each target and training size."""
    n_inv = len(sets.rotated) // sets.n_rotations
    for target in targets:
        for n in sets.sizes:
            start = time.perf_counter()
            _, pred = dressed_atom(sets.train_molecules[:n], sets.train_targets[target][:n], sets.test.molecules)
            seconds = time.perf_counter() - start
            records.append(
                _record("dressed-atom", target, n, sets.units[target], sets.test_targets[target], pred,
                        fit_seconds=seconds, predict_seconds=0.0,
                        invariance_error=0.0 if n_inv else None, hyperparameters="per-element linear")
            )
            if n == sets.sizes[-1]:
                predictions.setdefault(target, {})["dressed-atom"] = pred.tolist()


def _fit_and_evaluate(config, sets: QM9Sets, kernels: ShellKernels, name: str, chosen: Candidate, target: str,
                      residual: bool, k: int, n: int, n_inv: int, predictions: dict) -> dict[str, Any]:
    """Fit the kernel model of training size n (shell k) for ``target`` and evaluate it."""
    train = sets.train_molecules[:n]
    y = sets.train_targets[target][:n]
    start = time.perf_counter()
    if residual:
        base_train, base_test, base_rot = dressed_atom(train, y, sets.test.molecules, sets.rotated.molecules)
    else:
        base_train, base_test, base_rot = np.zeros(n), np.zeros(len(sets.test)), np.zeros(len(sets.rotated))
    model = fit_kernel_ridge(kernels.train[:n, :n], y - base_train, config, chosen.quadrature)
    fit_seconds = float(kernels.train_seconds[k]) + time.perf_counter() - start
    start = time.perf_counter()
    pred = base_test + model.predict(kernels.test[:, :n])
    predict_seconds = float(kernels.test_seconds[k]) + time.perf_counter() - start
    pred_rot = base_rot + model.predict(kernels.rotated[:, :n]) if n_inv else np.zeros(0)
    if n == sets.sizes[-1]:
        predictions.setdefault(target, {})[name] = pred.tolist()
    return _record(
        name, target, n, sets.units[target], sets.test_targets[target], pred,
        fit_seconds=fit_seconds, predict_seconds=predict_seconds,
        invariance_error=invariance_error(pred, pred_rot, sets.n_rotations),
        hyperparameters=chosen.label, reg_relative=model.info["reg_relative"],
        condition_number=model.info["condition_number"], eigenvalues_clipped=model.info["eigenvalues_clipped"],
    )
