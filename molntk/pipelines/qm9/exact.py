"""Exact kernel models of a ``qm9-property`` run (steps 2–4 of :mod:`molntk.pipelines.qm9`).

- selection: each candidate's kernel on the first ``n_select`` training molecules, kernel
  ridge with λ by cross-validation, lowest CV error (RMSE, or MAE with ``cv_loss:
  absolute``) wins (:func:`select_candidate`);
- the chosen kernel from the block assembler: K(train, train) of the largest exact training
  size and K(test and rotated copies, train), with a block boundary at every training
  size, so the kernel of size n is the top-left block and its cost the measured seconds
  of the blocks inside it (:func:`shell_kernels`);
- per target and size: kernel ridge (the NTK mean at t = ∞) on the dressed-atom residual,
  evaluated on the test set and the rotated copies (:func:`exact_records`); for a sum of
  networks' NTKs, on Σ_i c_i Θ_i / τ_i with the weights chosen with λ (:func:`sum_records`).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from molntk.molecular import BlockKernelOf, MoleculeSet
from molntk.pipelines.qm9.assembly import BlockAssembler, block_kernel
from molntk.pipelines.qm9.candidates import Candidate
from molntk.pipelines.qm9.config import QM9PropertyConfig
from molntk.pipelines.qm9.evaluate import evaluate_model
from molntk.pipelines.qm9.sets import QM9Sets
from molntk.regression import KernelRegressor
from molntk.regression.kernel_sum import KernelSumRegressor
from molntk.regression.selection import lambda_grid
from molntk.regression.solvers import cholesky_fits
from molntk.scale.memory import available_ram_bytes
from molntk.scale.progress import Progress, labelled


def fit_kernel_ridge(K: np.ndarray, y: np.ndarray, config: QM9PropertyConfig, quadrature: bool,
                     reg_relative: float | None = None) -> KernelRegressor:
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
    mean_diag = None if reg_relative is None else float(np.mean(np.diagonal(K)))
    return kernel_ridge(config, quadrature, len(K), reg_relative, mean_diag).fit(K, y)


def kernel_ridge(config: QM9PropertyConfig, quadrature: bool, n: int, reg_relative: float | None = None,
                 mean_diag: float | None = None) -> KernelRegressor:
    """The unfitted regressor of :func:`fit_kernel_ridge` for n training molecules: λ by CV,
    or (with ``reg_relative``) λ = reg_relative · ``mean_diag`` (the training kernel's mean
    diagonal) and the large-N solver."""
    reg = config.regression
    if reg_relative is None:
        grid = lambda_grid(reg.psd_rtol, quadrature)
        return KernelRegressor("ntk", reg="cv", cv=reg.cv, cv_loss=reg.cv_loss, psd_rtol=reg.psd_rtol, relative_grid=grid)
    solver = reg.large_solver
    if solver == "auto":
        solver = "cholesky" if cholesky_fits(n, available_ram_bytes() // 4) else "pcg"
    return KernelRegressor("ntk", reg=reg_relative * mean_diag, solver=solver, pcg_tol=reg.pcg_tol, psd_rtol=reg.psd_rtol)


#: Key of a search row's CV error, by ``regression.cv_loss``.
CV_ERROR_KEYS = {"squared": "cv_rmse", "absolute": "cv_mae"}


def at_grid_edge(candidates: Sequence[Candidate], best: int) -> bool | None:
    """Whether the chosen candidate's ``grid_value`` is the smallest or largest value of its
    model's grid on some axis with at least two values (the grid may be too narrow there: a
    wider one could choose beyond it); None when the candidates have no grid values or no
    axis has two distinct ones."""
    values = [c.grid_value for c in candidates]
    if None in values:
        return None
    points = [v if isinstance(v, tuple) else (v,) for v in values]
    axes = [sorted({point[i] for point in points}) for i in range(len(points[best]))]
    varied = [i for i, axis in enumerate(axes) if len(axis) >= 2]
    if not varied:
        return None
    return any(points[best][i] in (axes[i][0], axes[i][-1]) for i in varied)


def select_candidate(
    candidates: list[Candidate], selection: MoleculeSet, y: np.ndarray, config: QM9PropertyConfig, assembler: BlockAssembler,
) -> tuple[int, list[dict[str, Any]]]:
    """Index of the candidate with the lowest CV error on the ``selection`` molecules
    (targets ``y``), and the search table: a row per candidate (CV RMSE ``cv_rmse``, or CV MAE
    ``cv_mae`` with ``regression.cv_loss: absolute``; relative λ and
    whether λ is at an end of its grid, ``at_grid_edge``); the chosen row says whether the
    chosen hyperparameter is at an end of its model's grid (``hyperparameter_at_grid_edge``,
    :func:`at_grid_edge`; None on the other rows). Each candidate describes only the
    selection molecules, one candidate at a time, so the losing candidates never hold
    descriptors of the whole run."""
    error_key = CV_ERROR_KEYS[config.regression.cv_loss]
    if len(candidates) == 1:
        return 0, [{"candidate": candidates[0].label, "params": candidates[0].params, error_key: None, "chosen": True,
                    "hyperparameter_at_grid_edge": None}]
    rows = []
    for cand in candidates:
        selection_kernel = assembler.assemble(block_kernel(cand, selection), np.arange(len(y)))
        model = fit_kernel_ridge(selection_kernel.matrices[f"{cand.matrix}_train"], y, config, cand.quadrature)
        error = model.cv_result_.best_error * float(np.mean(model.target_scale_))
        rows.append({
            "candidate": cand.label,
            "params": cand.params,
            error_key: error,
            "reg_relative": model.reg_relative_,
            "at_grid_edge": model.cv_result_.at_grid_edge,
            "kernel_seconds": float(selection_kernel.seconds.sum()),
        })
    best = int(np.argmin([row[error_key] for row in rows]))
    edge = at_grid_edge(candidates, best)
    for i, row in enumerate(rows):
        row["chosen"] = i == best
        row["hyperparameter_at_grid_edge"] = edge if i == best else None
    return best, rows


@dataclass
class ShellKernels:
    """The chosen kernel on the run's sets, the compute seconds of the training and test
    kernels of each training size (cumulative over the nested sizes) and the test
    molecules' self-kernels k(x, x) (the prior variances of the std)."""

    train: np.ndarray
    test: np.ndarray
    rotated: np.ndarray
    train_seconds: np.ndarray
    test_seconds: np.ndarray
    test_diag: np.ndarray
    folder: Path | None = None

    @property
    def storage(self) -> str:
        return "memory" if self.folder is None else "disk"

    def release(self) -> None:
        """Drop the matrices; out-of-core ones are deleted from disk (they are scratch:
        the block cache is what a rerun reuses, and a full-QM9 matrix is ~97 GB)."""
        self.train = self.test = self.rotated = np.zeros((0, 0))
        self.test_diag = np.zeros(0)
        if self.folder is not None:
            shutil.rmtree(self.folder)


def shell_kernels(kernel: BlockKernelOf, sets: QM9Sets, assembler: BlockAssembler, progress: Progress | None,
                  label: str, sizes: Sequence[int] | None = None) -> ShellKernels:
    """K(train, train) and K(test and rotated, train) from the block assembler (module
    docstring) for the training ``sizes`` (default: all of the run's): blocks start
    at every training size and at the end of the test set (so the test kernel's cost is
    measured apart from the rotated copies')."""
    sizes = sets.sizes if sizes is None else list(sizes)
    n, m = sizes[-1], sets.n_test
    assembly = assembler.assemble(
        kernel, np.arange(n), sets.n_train + np.arange(m + sets.n_rotated),
        boundaries=sizes, test_boundaries=[m], storage=label, progress=labelled(progress, label),
    )
    (matrix,) = kernel.outputs
    K_test = assembly.matrices[f"{matrix}_test"]
    seconds = np.array([assembly.seconds_up_to(size, test_rows=m) for size in sizes])
    folder = None if assembler.matrices_dir is None else assembler.matrices_dir / label
    return ShellKernels(assembly.matrices[f"{matrix}_train"], K_test[:m], K_test[m:], seconds[:, 0], seconds[:, 1],
                        self_kernels(kernel, sets.n_train + np.arange(m)), folder)


def self_kernels(kernel: BlockKernelOf, rows: np.ndarray, block: int = 64) -> np.ndarray:
    """k(x, x) of the molecules ``rows``: the diagonals of symmetric blocks of ``block``
    molecules (block/2 times the n molecule pairs, a few % of a learning curve's kernel work)."""
    (matrix,) = kernel.outputs
    parts = [np.diagonal(kernel.compute_block(rows[i : i + block], None)[matrix]) for i in range(0, len(rows), block)]
    return np.concatenate(parts) if parts else np.zeros(0)


def exact_records(config: QM9PropertyConfig, sets: QM9Sets, kernels: ShellKernels, name: str, chosen: Candidate,
                  target: str, residual: bool, sizes: Sequence[int], predictions: dict) -> list[dict[str, Any]]:
    """Records of the exact model for ``target`` at each of the training ``sizes`` (those
    of ``kernels``): kernel ridge on the first n rows; above ``regression.eigh_max`` with the
    relative λ of the largest size at or below it (:func:`fit_kernel_ridge`)."""
    records = []
    reg_relative = None  # of the largest size ≤ eigh_max, for the sizes above it
    for k, n in enumerate(sizes):
        large = n > config.regression.eigh_max
        fixed = reg_relative if large else None
        record = evaluate_model(
            sets, name, target, residual, n, predictions,
            fit=lambda z, n=n, fixed=fixed: fit_kernel_ridge(kernels.train[:n, :n], z, config, chosen.quadrature, fixed),
            test_kernel=kernels.test[:, :n], rotated_kernel=kernels.rotated[:, :n],
            kernel_seconds=(float(kernels.train_seconds[k]), float(kernels.test_seconds[k])),
            hyperparameters=chosen.label, test_diag=kernels.test_diag,
        )
        reg_relative = reg_relative if large else record["reg_relative"]
        records.append(record)
    return records


def sum_label(weights: Sequence[float], networks: Sequence[Candidate]) -> str:
    """The label of Σ_i c_i Θ_i: "c_1·[network 1] + c_2·[network 2] + …"."""
    return " + ".join(f"{c:g}·[{network.label}]" for c, network in zip(weights, networks))


def sum_records(config: QM9PropertyConfig, sets: QM9Sets, terms: Sequence[ShellKernels], name: str,
                chosen: Sequence[Candidate], weights: Sequence[float] | Sequence[Sequence[float]], target: str, residual: bool,
                sizes: Sequence[int], predictions: dict) -> list[dict[str, Any]]:
    """Records of kernel ridge on the weighted sum of the ``terms``' kernels (the kernels of
    the networks ``chosen``) for ``target`` at each training size: the weights (c_2, … from
    ``weights``) and λ by CV on the training molecules
    (:class:`~molntk.regression.kernel_sum.KernelSumRegressor`); above
    ``regression.eigh_max`` the weights and relative λ of the largest size at or below it
    (the sum's mean diagonal is Σ_i c_i, as each term is divided by its own). Each record
    gives the chosen ``term_weights`` (c_1 = 1, …), also in its ``hyperparameters``, and the
    networks' training scales ``term_scales`` (τ_i)."""
    quadrature = any(c.quadrature for c in chosen)
    records: list[dict[str, Any]] = []
    fixed: tuple[tuple[float, ...], float] | None = None  # (weights, relative λ) of the largest size ≤ eigh_max
    for k, n in enumerate(sizes):
        large = n > config.regression.eigh_max
        if large and fixed is not None:
            model = KernelSumRegressor(kernel_ridge(config, quadrature, n, fixed[1], sum(fixed[0])), [fixed[0][1:]])
        else:
            model = KernelSumRegressor(kernel_ridge(config, quadrature, n), weights)
        record = evaluate_model(
            sets, name, target, residual, n, predictions,
            fit=lambda z, n=n, model=model: model.fit([t.train[:n, :n] for t in terms], z),
            test_kernel=[t.test[:, :n] for t in terms], rotated_kernel=[t.rotated[:, :n] for t in terms],
            kernel_seconds=(sum(float(t.train_seconds[k]) for t in terms), sum(float(t.test_seconds[k]) for t in terms)),
            hyperparameters="", test_diag=[t.test_diag for t in terms],
        )
        record["hyperparameters"] = sum_label(model.weights_, chosen)
        record["term_weights"] = list(model.weights_)
        record["term_scales"] = [float(tau) for tau in model.scales_]
        if not large:
            fixed = (model.weights_, record["reg_relative"])
        records.append(record)
    return records
