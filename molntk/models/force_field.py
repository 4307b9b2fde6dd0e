"""``SO3ForceFieldRegressor``: kernel ridge on energies and forces together (GDML/GAP form).

    from molntk.models.force_field import SO3ForceFieldRegressor
    model = SO3ForceFieldRegressor(grid_band_limit=5).fit(molecules, energies, forces)
    energies = model.predict(new_molecules);  forces = model.predict_forces(new_molecules)

Model: a Gaussian process E ~ GP(E_dressed, Θ) with Θ the molecular SO(3) NTK of the recipe
(:class:`~molntk.models.so3_recipe.SO3ModelRecipe`, the same parameters and defaults as
:class:`~molntk.models.so3_ntk.SO3NTKRegressor`), observed through the energies E_i and the
forces F_i = −∂E/∂r_i (in the energy unit per Å: eV and eV/Å give eV/Å, sign: the force
points downhill). The joint covariance K of y = [E − E_dressed; F] (N + 3Σn rows, energies
first, then each molecule's forces atom-major) is :func:`~molntk.molecular.derivative_kernels.joint_kernel`:

    K = [[Θ, −∂Θ/∂r'], [−∂Θ/∂r, ∂²Θ/∂r∂r']].

Fit: α = (K + Λ)⁻¹ y with Λ = diag(λ_E on energy rows, λ_F on force rows). E_dressed is the
dressed-atom linear model of the element counts (:class:`~molntk.regression.dressed_atom.DressedAtomModel`,
fitted on the training energies; with one composition, as an MD trajectory, it is the mean
energy); it does not depend on the positions, so it adds nothing to the forces.

λ_E and λ_F (both their ratio and their scale) are chosen by leave-one-configuration-out
cross-validation in closed form: for the rows g of one configuration (its energy and its 3n
force components), the LOO residual is r_g = (C_gg)⁻¹ α_g with C = (K + Λ)⁻¹ (the exact
grouped LOO of the GP mean with fixed λ's; the dressed-atom fit is not redone). The criterion
is the sum of the two normalised LOO mean squared errors, mean(r_E²)/mean(y_E²) +
mean(r_F²)/mean(y_F²), minimised over the grid λ_E = ρ · mean(diag K_EE), ρ in
:data:`~molntk.regression.noise_search.SCALE_GRID`, λ_F = q ρ · mean(diag K_FF), q in
:data:`~molntk.regression.noise_search.RATIO_GRID` (each λ at least
``psd_rtol`` times its mean diagonal; one eigendecomposition per ratio, :func:`select_noise`). Numbers instead
of "cv" in ``reg_energy`` / ``reg_force`` fix the absolute λ's. For thousands of
configurations ``noise_search="local"`` searches the whole grid on the first configurations
only (:data:`LOCAL_START_ROWS` rows: 250 configurations of 9 atoms), then moves from that choice to the best neighbouring
grid point of the whole problem while the criterion falls (one Cholesky factorisation per
visited point, on the GPU with ``device="cuda"``; :func:`select_noise_local`). The sparse
models factorise their system once per ratio q and score every ρ of it cheaply; for them
``noise_search="local"`` visits the ratios from the middle of the grid to the lower
neighbour while the best criterion over ρ falls
(:func:`~molntk.regression.noise_search.climb_ratios`: 3–6 factorisations instead of 15,
where each is the SVD of an r × r matrix, r up to m + 3Σn_j with ``inducing_frames``).

Predictions for a molecule M: E(M) = E_dressed(M) + Σ_j α_E,j Θ(M, M_j) − Σ_j α_F,jᵀ ∂Θ(M, M_j)/∂r_j,
and F(M) = −∂E(M)/∂r, which equals the derivative-kernel prediction [−∂Θ/∂r, ∂²Θ/∂r∂r'] α
exactly (the same derivatives, fewer operations): for the one-hidden-layer pooled networks
(the recipe's default) in closed form against the training frames' tangent feature maps
contracted with −α_F once per fitted model (:mod:`molntk.molecular.pooled_derivatives`), for
other networks by autograd of that expression
(:func:`~molntk.molecular.derivative_kernels.expansion_energy_and_gradient`).

Cost: fitting computes the joint kernel, N(N+1)/2 molecule pairs (closed form: ≈ 4.5 ms per
ethanol pair on the grid of band limit 7, one CPU thread, ≈ 33 ms per aspirin pair with 4 Å
maps; autograd, other networks: (3n + 2) passes, ≈ 70 ms per ethanol pair), and factorises an
(N + 3Σn) matrix once per ratio of the noise grid; predicting costs ≈ 1.7 ms per (test,
training) ethanol pair in closed form (``benchmarks/derivative_kernels.py``).

Memory: K is (N + 3Σn)² float64 values (1,000 aspirin frames: 64,000 rows, 33 GB) and the
solve holds a factor beside it; ``kernel_storage="upper"`` holds only K's upper triangle in
configuration order (each configuration's energy row, then its force rows), the rows of
configuration i against configurations j ≥ i, as row panels that the blocked Cholesky
factors in place (:func:`~molntk.regression.blocked_cholesky.upper_cholesky_panels`): 16 GB
for those 64,000 rows, with λ's chosen on the first configurations.

Sparse mode (``inducing=m``, GAP-style, for N in the thousands): m inducing environments s_j
chosen among the training environments (:func:`~molntk.features.inducing.inducing_environments`,
as in :class:`~molntk.models.so3_ntk.SO3NTKRegressor`) and

    E(M) = E_dressed(M) + Σ_j w_j Θ(M, s_j),   F(M) = −Σ_j w_j ∂Θ(M, s_j)/∂r,

w minimising Σ_E (y − K_E w)²/λ_E + Σ_F (y − K_F w)²/λ_F + wᵀ K_mm w with the energy rows
K_E = Θ(M_i, s_j), the force rows K_F = −∂Θ(M_i, s_j)/∂r_i (both by
:func:`~molntk.molecular.force_rows.force_rows`, ≈ 4× the cost of the energy rows alone) and
K_mm = Θ(s_i, s_j); solved through the Nyström features of K_mm's eigendecomposition (cut at
``rank_rtol``), λ_E and λ_F by the same grouped LOO and grid, in closed form
(:mod:`molntk.regression.sparse_joint`). Only the N × m and m × m kernels are computed;
``predict`` needs Θ(M, s_j), ``predict_forces`` one reverse pass through it with w as the
cotangent (≈ 2.5× the energy). Unlike the exact model, the force–force covariances ∂²Θ/∂r∂r'
never appear: the model's functions are spanned by Θ(·, s_j) alone.

Sparse in configurations (``inducing_frames=m``, the GDML form on m inducing frames): the
exact model's functions on m of the N training configurations F_1 … F_m (chosen by
:func:`~molntk.features.inducing.inducing_molecules`: farthest points in an invariant
descriptor of the molecules, or a seeded random sample), fitted to the energies and forces
of all N,

    E(M) = E_dressed(M) + Σ_j a_j Θ(M, F_j) − Σ_j b_jᵀ ∂Θ(M, F_j)/∂r_j,

w = (a, b) minimising Σ_E (y − K_E w)²/λ_E + Σ_F (y − K_F w)²/λ_F + wᵀ K_mm w with K_nm =
[K_E; K_F] the joint kernel (above) between the N training configurations and the m inducing
ones, (N + 3Σn) × (m + 3Σn_j), and K_mm its rows of the inducing configurations (symmetrised):
the projected-process solve of the sparse model (:mod:`molntk.regression.sparse_joint`, the
same grouped-LOO noise search, the rank cut ``rank_rtol``), on derivative functions instead
of inducing environments. With every training configuration inducing and fixed λ's it is the
exact model. The force–force covariances ∂²Θ/∂r∂r' stay in the model (unlike the sparse
model's), at N·m molecule pairs instead of N²/2 and a matrix of (N + 3Σn) × (m + 3Σn_j) instead
of the square; predictions are the exact model's, against the m inducing configurations.

Δ-learning (``baseline="gfn2-xtb"``, :mod:`molntk.models.delta`): the model learns the
residual of a physical baseline B in energies and forces, E − E_B and F − F_B (B converted into
``unit``, the energy unit of the data; forces in ``unit``/Å), and adds E_B and F_B back in
every prediction. Equilibrium geometries with their energies and zero forces (QM9) then
teach the correction the curvature the baseline lacks there: the learnt forces at those
geometries are −F_B.

Model files: ``model.save("ethanol.molntk.npz")``, ``SO3ForceFieldRegressor.load(…)`` (one
``.npz`` of plain arrays, :mod:`molntk.models.model_files`; the sparse model's inducing
environments are recomputed from the stored training molecules).
"""

from __future__ import annotations

import hashlib
import json
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.linalg
import torch
from sklearn.base import BaseEstimator, RegressorMixin

from molntk._version import __version__
from molntk.data.molecule import Molecule
from molntk.errors import InputError, ModelFileError
from molntk.features.inducing import environments_as_molecules, inducing_environments, inducing_molecules
from molntk.models.so3_ntk import RECIPE_PARAMS, SO3NetworkParams, SO3SolverParams, as_molecules, check_inducing, present_elements
from molntk.models.delta import BaselineResult, check_baseline, check_energy_unit
from molntk.models.delta import baseline_results as baseline_results_of
from molntk.models.model_files import (dressed_atom_arrays, dressed_atom_from_arrays, load_model_file, molecule_arrays,
                                       molecules_from_arrays, optional_text, provenance_from_meta, training_provenance,
                                       write_model_archive)
from molntk.models.so3_recipe import SO3ModelRecipe
from molntk.molecular.derivative_kernels import (block_indices, complete_joint_cache, derivative_rows,
                                                 expansion_energy_and_gradient, joint_blocks, joint_kernel)
from molntk.molecular.force_rows import force_rows
from molntk.molecular.pooled_derivatives import (
    closed_form_expansion,
    closed_form_supported,
    contracted_tangent_features,
    tangent_features,
    value_budget,
)
from molntk.molecular.sets import molecule_digests
from molntk.molecular.so3 import SO3MolecularKernel
from molntk.regression.blocked_cholesky import (CHOLESKY_BLOCK, add_to_panels_diagonal, place_in_panels,
                                              upper_cholesky_in_place, upper_cholesky_panels, upper_panels,
                                              upper_panels_solve)
from molntk.regression.dressed_atom import DressedAtomModel, element_counts
from molntk.regression.noise_search import (RATIO_GRID, SCALE_GRID, NoiseChoice, cholesky_grouped_residuals, climb_noise,
                                            grouped_residuals, loo_criterion, nearest_index, on_grid_edge,
                                            search_noise)
from molntk.regression.sparse_joint import (fit_sparse_joint, scored_rows, solve_sparse_joint, sparse_joint_host_bytes,
                                            sparse_joint_system)
from molntk.scale.devices import map_over_threads
from molntk.scale.memory import available_ram_bytes
from molntk.scale.progress import ProgressCallback
from molntk.utils.files import atomic_write_json

#: Query molecules whose tangent feature maps are computed together when predicting (exact model).
QUERY_BATCH = 64
#: Rows (energies and force components) of the leading configurations whose full-grid choice
#: starts the local noise search (:func:`select_noise_local`): 250 configurations of a 9-atom
#: molecule, 109 of a 21-atom one; the grid search's 15 eigendecompositions of a matrix of this
#: side stay about a minute on a multi-core host whatever the molecule's size.
LOCAL_START_ROWS = 7000


def local_start(groups: Sequence[np.ndarray]) -> int:
    """The number of leading configurations whose rows (1 + 3n each, ``groups``) total at most
    :data:`LOCAL_START_ROWS` (at least 1)."""
    return max(1, int(np.searchsorted(np.cumsum([len(g) for g in groups]), LOCAL_START_ROWS, side="right")))

#: Name and version of the force field's model file format.
FORMAT = "molntk-so3-force-field"
FORMAT_VERSION = 1


def joint_rows(n_molecules: int, n_atoms: Sequence[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Row kinds and groups of the joint system: a boolean mask of the force rows, and for each
    configuration the indices of its rows (its energy, then its 3n force components)."""
    offsets = force_offsets_of(n_atoms)
    is_force = np.zeros(n_molecules + offsets[-1], dtype=bool)
    is_force[n_molecules:] = True
    groups = [np.concatenate([[i], n_molecules + np.arange(offsets[i], offsets[i + 1])]) for i in range(n_molecules)]
    return is_force, groups


def leading_configurations(groups: Sequence[np.ndarray], first: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The joint rows of the first ``first`` configurations (their energies, then their forces:
    the joint system of those configurations alone) and that system's force mask and groups."""
    rows = np.concatenate([np.arange(first), *[g[1:] for g in groups[:first]]])
    return rows, *joint_rows(first, [(len(g) - 1) // 3 for g in groups[:first]])


def force_offsets_of(n_atoms: Sequence[int]) -> np.ndarray:
    """Start of each molecule's force rows among the force rows (length N + 1)."""
    return np.concatenate([[0], np.cumsum([3 * int(n) for n in n_atoms])]).astype(np.int64)


def grouped_loo_residuals(inverse: np.ndarray, alpha: np.ndarray, groups: Sequence[np.ndarray]) -> np.ndarray:
    """Leave-one-group-out residuals y_g − ŷ_g^(−g) = (C_gg)⁻¹ α_g of kernel ridge with C = (K + Λ)⁻¹, α = C y."""
    return grouped_residuals(lambda g: inverse[np.ix_(g, g)], alpha, groups)


def select_noise(K: np.ndarray, y: np.ndarray, is_force: np.ndarray, groups: Sequence[np.ndarray], floor: float = 0.0,
                 ratios: np.ndarray = RATIO_GRID, scales: np.ndarray = SCALE_GRID) -> NoiseChoice:
    """(λ_E, λ_F, criterion) minimising the normalised grouped-LOO criterion of the module docstring
    (:func:`~molntk.regression.noise_search.search_noise`) with s_E, s_F the mean diagonals of
    the energy and force blocks of K.

    One eigendecomposition per ratio: with D = diag(s_E, q s_F) and D^{-1/2} K D^{-1/2} = V S Vᵀ,
    (K + ρ D)⁻¹ = D^{-1/2} V (S + ρ)⁻¹ Vᵀ D^{-1/2}, whose group blocks and α cost O(rows²) per ρ."""
    diag = np.diag(K)
    scale_e, scale_f = float(np.mean(diag[~is_force])), float(np.mean(diag[is_force]))

    def residuals_for(q: float):
        root = 1.0 / np.sqrt(np.where(is_force, q * scale_f, scale_e))
        s, v = np.linalg.eigh(root[:, None] * K * root[None, :])
        w = root[:, None] * v  # (K + ρ D)⁻¹ = W (S + ρ)⁻¹ Wᵀ
        wy = w.T @ y

        def residuals_at(rho: float) -> np.ndarray | None:
            shifted = s + rho
            if shifted.min() <= 0:
                return None
            return grouped_residuals(lambda g: (w[g] / shifted) @ w[g].T, w @ (wy / shifted), groups)

        return residuals_at

    return search_noise(residuals_for, y, is_force, scale_e, scale_f, floor, ratios, scales)


def select_noise_local(K: np.ndarray, y: np.ndarray, is_force: np.ndarray, groups: Sequence[np.ndarray],
                       floor: float = 0.0, device: str | torch.device = "cpu", start_configs: int | None = None,
                       trace: list[dict[str, Any]] | None = None) -> NoiseChoice:
    """The noise search of ``noise_search="local"``: :func:`select_noise` on the rows of the
    first ``start_configs`` configurations (their energies and forces, a leading sub-problem of
    K), then :func:`~molntk.regression.noise_search.climb_noise` on the whole K from the (ρ, q)
    chosen there, each visited point scored by the same criterion from one Cholesky
    factorisation on ``device`` (:func:`~molntk.regression.noise_search.cholesky_grouped_residuals`;
    ``start_configs`` None: :func:`local_start`); ``trace`` (a list) receives every visited
    point as {rho, q, score} (score None where K + Λ is not positive definite). With at most
    ``start_configs`` configurations it is :func:`select_noise`. Memory: K and three matrices
    of its size on ``device`` (the shifted copy, its factor, the inverse)."""
    start_configs = local_start(groups) if start_configs is None else start_configs
    if len(groups) <= start_configs:
        return select_noise(K, y, is_force, groups, floor)
    rows, sub_force, sub_groups = leading_configurations(groups, start_configs)
    sub_k = K[np.ix_(rows, rows)]
    sub_diag = np.diag(sub_k)
    start_choice = select_noise(sub_k, y[rows], sub_force, sub_groups, floor)
    lam_e, lam_f = start_choice.reg_energy, start_choice.reg_force
    del sub_k
    rho0 = lam_e / float(np.mean(sub_diag[~sub_force]))
    q0 = lam_f / float(np.mean(sub_diag[sub_force])) / rho0
    start = (nearest_index(SCALE_GRID, rho0), nearest_index(RATIO_GRID, q0))
    diag = np.diag(K)
    scale_e, scale_f = float(np.mean(diag[~is_force])), float(np.mean(diag[is_force]))
    k_dev, y_dev = torch.as_tensor(K, device=device), torch.as_tensor(y, device=device)
    force_dev = torch.as_tensor(is_force, device=device)
    scores: dict[tuple[int, int], float] = {}
    not_positive: list[tuple[float, float]] = []  # (ρ, q) scored and not positive definite
    factorisations = start_choice.factorisations

    def score(i: int, j: int) -> float:
        nonlocal factorisations
        if (i, j) not in scores:
            rho, q = float(SCALE_GRID[i]), float(RATIO_GRID[j])
            value, residuals = np.inf, None
            if rho >= floor and q * rho >= floor:
                lam = torch.where(force_dev, q * rho * scale_f, rho * scale_e).to(k_dev.dtype)
                residuals = cholesky_grouped_residuals(k_dev, y_dev, lam, groups)
                factorisations += 1
                if residuals is not None:
                    value = loo_criterion(residuals, y, is_force)
                else:
                    not_positive.append((rho, q))
                if trace is not None:
                    trace.append({"rho": rho, "q": q, "score": None if residuals is None else value})
            scores[(i, j)] = value
        return scores[(i, j)]

    i, j = climb_noise(score, start)
    rho, q = SCALE_GRID[i], RATIO_GRID[j]
    return NoiseChoice(float(rho) * scale_e, float(q * rho) * scale_f, scores[(i, j)],
                       on_grid_edge(rho, q, floor, not_positive=not_positive), factorisations)


#: The folder inside a kernel cache where :func:`stored_noise_choice` keeps its choices.
NOISE_FOLDER = "noise"


def stored_noise_choice(cache_dir: str | Path | None, kernel: SO3MolecularKernel, molecules: Sequence[Molecule],
                        y: np.ndarray, is_force: np.ndarray, floor: float,
                        search: Callable[[], NoiseChoice]) -> NoiseChoice:
    """``search()`` (the :func:`select_noise` of the joint system of ``molecules``, targets
    ``y``), its result kept as ``<cache_dir>/noise/<key>.json`` (written atomically) and read
    back on the next call with the same key:

        key = sha256(json{kernel settings, the molecules' content digests, y, is_force, floor,
                          the (ρ, q) grid, molntk version})

    so a long fit killed after its search (the upper storage: a 64,000-row factorisation
    follows) does not search again. ``cache_dir`` None: ``search()``. A stored file that
    cannot be read is searched again and rewritten."""
    if cache_dir is None:
        return search()
    digest = hashlib.sha256()
    for part in (molecule_digests(molecules), np.asarray(y, dtype=np.float64), np.asarray(is_force, dtype=bool),
                 np.asarray(RATIO_GRID, dtype=np.float64), np.asarray(SCALE_GRID, dtype=np.float64)):
        digest.update(np.ascontiguousarray(part).tobytes())
    material = json.dumps({"kernel": kernel.settings(), "values": digest.hexdigest(), "floor": float(floor),
                           "molntk": __version__}, sort_keys=True, default=str)
    path = Path(cache_dir) / NOISE_FOLDER / f"{hashlib.sha256(material.encode()).hexdigest()[:40]}.json"
    try:
        stored = json.loads(path.read_text())
        return NoiseChoice(float(stored["reg_energy"]), float(stored["reg_force"]), float(stored["score"]),
                           bool(stored["at_grid_edge"]), int(stored["factorisations"]))
    except (OSError, ValueError, TypeError, KeyError):
        choice = search()
        atomic_write_json(path, {"reg_energy": float(choice.reg_energy), "reg_force": float(choice.reg_force),
                                 "score": float(choice.score), "at_grid_edge": bool(choice.at_grid_edge),
                                 "factorisations": int(choice.factorisations)})
        return choice


def exact_host_bytes(rows: int, grid_search: bool) -> int:
    """A lower bound on the host memory of the exact model's fit with ``rows`` = N + 3Σn joint
    rows, in float64 matrices of rows²: K and the solve's factor (2), with the grid search's
    scaled copy and eigenvectors (3; ``grid_search``: λ's by the whole grid); LAPACK's work
    arrays come on top (the eigendecomposition's about two more)."""
    return (3 if grid_search else 2) * rows * rows * 8


def check_exact_memory(rows: int, grid_search: bool, available: int | None = None) -> None:
    """InputError naming ``inducing`` when :func:`exact_host_bytes` exceeds the available RAM
    (``available`` bytes; None: :func:`~molntk.scale.memory.available_ram_bytes`), before any
    kernel is computed: the exact model of N configurations of n atoms has N(1 + 3n) rows."""
    need = exact_host_bytes(rows, grid_search)
    available = available_ram_bytes() if available is None else available
    if need > available:
        raise InputError("inducing", f"the exact energy+force model has {rows:,} joint rows: its fit needs ≈ "
                         f"{need / 2**30:.1f} GiB of memory, {available / 2**30:.1f} GiB are available; give "
                         "kernel_storage='upper' (molntk fit: --kernel-storage upper; its upper triangle only, "
                         f"{upper_host_bytes(rows) / 2**30:.1f} GiB), inducing_frames=m (m of the configurations) "
                         "or inducing=m (inducing environments) for a sparse model, or fewer configurations")


def upper_host_bytes(rows: int) -> int:
    """The host memory of ``kernel_storage="upper"``'s panels for ``rows`` joint rows: the upper
    triangle with the diagonal blocks, rows (rows + CHOLESKY_BLOCK) / 2 float64 values."""
    return 8 * rows * (rows + CHOLESKY_BLOCK) // 2


def check_upper_memory(rows: int, available: int | None = None) -> None:
    """InputError naming ``kernel_storage`` when :func:`upper_host_bytes` exceeds the available
    RAM (``available`` bytes; None: :func:`~molntk.scale.memory.available_ram_bytes`)."""
    need = upper_host_bytes(rows)
    available = available_ram_bytes() if available is None else available
    if need > available:
        raise InputError("kernel_storage", f"the upper triangle of {rows:,} joint rows needs ≈ {need / 2**30:.1f} GiB "
                         f"of memory, {available / 2**30:.1f} GiB are available; give inducing_frames=m or fewer "
                         "configurations")


def check_frames_memory(rows: int, columns: int, energy_rows: int, scored: int, available: int | None = None) -> None:
    """InputError naming ``inducing_frames`` when the fit with ``inducing_frames`` — the joint
    rows K_nm (``rows`` = N + 3Σn by ``columns`` = m + 3Σn_j, float64) and its projected-process
    solve (:func:`~molntk.regression.sparse_joint.sparse_joint_host_bytes`; ``energy_rows`` = N,
    ``scored`` rows in the LOO's configurations) — needs more than the available RAM
    (``available`` bytes; None: :func:`~molntk.scale.memory.available_ram_bytes`), before any
    kernel is computed."""
    need = sparse_joint_host_bytes(rows, columns, energy_rows, scored)
    available = available_ram_bytes() if available is None else available
    if need > available:
        raise InputError("inducing_frames", f"{rows:,} joint rows against {columns:,} inducing functions need ≈ "
                         f"{need / 2**30:.1f} GiB of memory, {available / 2**30:.1f} GiB are available; give fewer "
                         "inducing frames, or inducing=m (inducing environments)")


def _noise_level(value: float | str, name: str) -> float | None:
    """None for "cv", else a λ ≥ 0 (InputError naming ``name``)."""
    if isinstance(value, str):
        if value != "cv":
            raise InputError(name, f"must be 'cv' or a number ≥ 0, got {value!r}")
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value) or value < 0:
        raise InputError(name, f"must be 'cv' or a number ≥ 0, got {value!r}")
    return float(value)


def noise_levels(reg_energy: float | str, reg_force: float | str) -> tuple[float | None, float | None]:
    """(λ_E, λ_F) of an energy+force model's ``reg_energy`` and ``reg_force``: both None ("cv":
    chosen together by grouped LOO) or both numbers ≥ 0 (InputError naming the bad one)."""
    lam_e, lam_f = _noise_level(reg_energy, "reg_energy"), _noise_level(reg_force, "reg_force")
    if (lam_e is None) != (lam_f is None):
        raise InputError("reg_force" if lam_f is None else "reg_energy",
                         "reg_energy and reg_force are chosen together: both 'cv' or both numbers")
    return lam_e, lam_f


@dataclass(eq=False, repr=False)
class SO3ForceFieldRegressor(SO3NetworkParams, SO3SolverParams, RegressorMixin, BaseEstimator):
    """Kernel ridge on energies and forces with the SO(3) molecular NTK (module docstring).

    Parameters: the recipe's, as in :class:`~molntk.models.so3_ntk.SO3NTKRegressor`
    (``layers``, ``sigma_w``, ``sigma_b``, ``band_limit``, ``smearing_width``, ``radial``,
    ``elements``, ``element_width``, ``grid_band_limit``, ``sampling``, ``mode``, ``pairing``, ``psd_rtol``,
    ``device``, ``block_size``; float64 and ``reduce="sum"`` always); ``residual`` (subtract the
    dressed-atom model); ``reg_energy``, ``reg_force``: "cv" (both chosen together by
    grouped LOO) or absolute λ_E, λ_F (both must be numbers, or both "cv"; > 0 in sparse mode);
    ``noise_search`` ("cv" λ's): "grid" (the whole grid; exact model: one eigendecomposition of
    K per ratio) or "local" (exact model: the grid on the first :data:`LOCAL_START_ROWS` rows' configurations, then a
    local search on the whole K, one Cholesky factorisation per visited point on ``device``:
    :func:`select_noise_local`, for thousands of configurations; sparse models: every ρ, the
    ratios locally, module docstring); ``noise_ratio_start`` (sparse models, ``noise_search="local"``:
    the ratio λ_F / λ_E where the local search over ratios starts, e.g. a smaller model's
    ``reg_force_ / reg_energy_``, so that a refit with more inducing points or frames makes
    fewer factorisations when its choice is near; None: the grid's middle);
    ``inducing`` (None: the exact model; m: the sparse model), ``inducing_selection``,
    ``inducing_seed``, ``rank_rtol`` (sparse mode, as in :class:`~molntk.models.so3_ntk.SO3NTKRegressor`);
    ``inducing_frames`` (None, or m: the GDML form on m of the training configurations, chosen
    by ``inducing_selection`` and ``inducing_seed``, solved like the sparse model with ``rank_rtol``;
    module docstring; not with ``inducing``);
    ``kernel_storage`` (exact model): "full" (K as a square array, every noise search) or
    "upper" (only its upper triangle, in configuration order, as row panels: half the memory,
    for the largest exact models a machine holds; the λ's by the grid on the first
    :data:`LOCAL_START_ROWS` rows' configurations, ``cv_score_`` their criterion, then one
    factorisation of the whole K + Λ; with ``kernel_cache`` the kernel is completed in the
    cache before the panels are made);
    ``baseline`` (None, or the physical baseline of Δ-learning, module docstring) and ``unit``
    (the energy unit of the data: needed with a baseline; the ASE calculator reads it).

    The exact model's fit is refused (InputError naming ``inducing``) before any kernel is
    computed when its matrices exceed the available memory (:func:`check_exact_memory`).

    Fitted attributes: ``sparse_`` (whether the sparse model was fitted), ``training_elements_``,
    ``dressed_atom_`` (or None), ``reg_energy_``, ``reg_force_`` (λ_E, λ_F used), ``cv_score_``
    (the LOO criterion, or None), ``reg_at_grid_edge_`` (whether the λ's chosen lie on an end
    of the grid or at the floor; None for fixed λ's), ``noise_factorisations_`` (the
    factorisations of the joint system the noise search made; None for fixed λ's), ``kernel_`` (the molecular kernel), ``train_molecules_``; exact:
    ``energy_coef_`` (N,) and ``force_coef_`` (3Σn,) (α_E, α_F; with ``inducing_frames``: a and b
    on the inducing configurations, ``inducing_frame_rows_`` (int64 indices into the training
    configurations), ``n_inducing_`` functions and ``rank_`` kept; otherwise
    ``inducing_frame_rows_`` is None); sparse: ``inducing_rows_`` (int64
    rows into the training environments),
    ``inducing_`` (the inducing environments), ``inducing_weights_`` (w, (m,)), ``n_inducing_``
    and ``rank_`` (K_mm eigenvalues kept); ``unit_`` (the ``unit`` fitted with); ``target_``
    (the name of the energies fitted, ``"energy"`` unless ``fit`` is told another);
    ``provenance_`` (``n_train``, molntk version, time of the fit and what ``fit`` was told).
    """

    residual: bool = True
    reg_energy: float | str = "cv"
    reg_force: float | str = "cv"
    noise_search: str = "grid"
    device: str = "cpu"
    unit: str | None = None
    inducing_frames: int | None = None
    noise_ratio_start: float | None = None
    kernel_storage: str = "full"

    def recipe(self) -> SO3ModelRecipe:
        """The model these parameters describe (float64, sum over atom pairs)."""
        return SO3ModelRecipe(features=self.feature_config(), reduce="sum", dtype="float64",
                              **{name: getattr(self, name) for name in RECIPE_PARAMS if name not in ("reduce", "dtype")})

    def _check_params(self) -> tuple[float | None, float | None]:
        if self.pairing not in ("element", "shared"):
            raise InputError("pairing", f"must be 'element' or 'shared' for forces, got {self.pairing!r}")
        check_inducing(self.inducing, self.inducing_selection, self.inducing_seed)
        check_baseline(self.baseline)
        if self.baseline is not None:
            check_energy_unit(self.unit, self.baseline)
        if self.noise_search not in ("grid", "local"):
            raise InputError("noise_search", f"must be 'grid' or 'local', got {self.noise_search!r}")
        if self.inducing_frames is not None:
            if isinstance(self.inducing_frames, bool) or not isinstance(self.inducing_frames, numbers.Integral) \
                    or self.inducing_frames < 1:
                raise InputError("inducing_frames", f"must be None or a whole number ≥ 1, got {self.inducing_frames!r}")
            if self.inducing is not None:
                raise InputError("inducing_frames", "the model is sparse in configurations or in environments "
                                 f"(inducing={self.inducing!r}), not both: give one")
            check_inducing(1, self.inducing_selection, self.inducing_seed)  # the frames' selection and seed
        self._check_noise_ratio_start()
        if self.kernel_storage not in ("full", "upper"):
            raise InputError("kernel_storage", f"must be 'full' or 'upper', got {self.kernel_storage!r}")
        if self.kernel_storage == "upper" and (self.inducing is not None or self.inducing_frames is not None):
            raise InputError("kernel_storage", "'upper' holds the exact model's joint kernel; the sparse models "
                             "(inducing, inducing_frames) hold no square kernel: leave it 'full'")
        return noise_levels(self.reg_energy, self.reg_force)

    def _check_noise_ratio_start(self) -> None:
        """InputError naming ``noise_ratio_start`` unless it is None or a finite ratio > 0 given to
        a sparse model's local search."""
        start = self.noise_ratio_start
        if start is None:
            return
        if isinstance(start, bool) or not isinstance(start, numbers.Real) or not np.isfinite(start) or start <= 0:
            raise InputError("noise_ratio_start", f"must be None or a ratio λ_F/λ_E > 0, got {start!r}")
        if self.noise_search != "local" or (self.inducing is None and self.inducing_frames is None):
            raise InputError("noise_ratio_start", "starts the local search over ratios of the sparse models "
                             "(inducing or inducing_frames with noise_search='local'); the exact model's local "
                             "search starts from the whole grid on its first configurations")

    def _training_data(self, X: Any, energies: Any, forces: Any) -> tuple[list[Molecule], np.ndarray, np.ndarray]:
        """Molecules, energies (N,) and the flattened forces (3Σn,), validated."""
        molecules = as_molecules(X)
        if not molecules:
            raise InputError("X", "no molecules")
        for m in molecules:
            m.check_elements(self.elements)
        y = np.asarray(energies, dtype=np.float64)
        if y.shape != (len(molecules),):
            raise InputError("energies", f"must have shape ({len(molecules)},) for {len(molecules)} molecules, got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise InputError("energies", "must be finite")
        if forces is None or len(forces) != len(molecules):
            raise InputError("forces", f"must be a list of {len(molecules)} arrays (n_atoms, 3), one per molecule")
        flat = []
        for i, (m, f) in enumerate(zip(molecules, forces)):
            f = np.asarray(f, dtype=np.float64)
            if f.shape != (m.n_atoms, 3):
                raise InputError(f"forces[{i}]", f"must have shape ({m.n_atoms}, 3), got {f.shape}")
            if not np.all(np.isfinite(f)):
                raise InputError(f"forces[{i}]", "must be finite")
            flat.append(f.reshape(-1))
        return molecules, y, np.concatenate(flat)

    def fit(self, X: Any, energies: Any, forces: Sequence[Any], baseline_results: BaselineResult | None = None,
            *, target: str = "energy", provenance: dict[str, Any] | None = None,
            kernel_cache: str | Path | None = None, progress: ProgressCallback | None = None,
            factor_progress: ProgressCallback | None = None) -> SO3ForceFieldRegressor:
        """Fit on molecules X, their energies (N,) and forces (a list of (n_i, 3), energy unit
        per Å). With a ``baseline``, on E − E_B and F − F_B (``baseline_results``: the baseline
        of X in ``unit`` computed elsewhere, e.g. cached; None: computed here). ``target``
        names the energies (kept as ``target_`` and in the model file); ``provenance``
        (JSON-ready facts about the training set) is kept as ``provenance_`` with ``n_train``,
        the molntk version and the time of the fit. ``kernel_cache`` (exact model, and
        ``inducing_frames``): a folder where the joint kernel's rows (training configurations
        against themselves, or against the inducing ones) are stored as they are computed
        (:func:`~molntk.molecular.derivative_kernels.joint_kernel`'s ``cache_dir``), so a
        killed fit resumes from them. ``progress(done, total)``: the joint kernel's blocks of
        training configurations as they are done (exact model and ``inducing_frames``; the
        sparse model's rows are not reported). ``factor_progress(done, total)``: the
        factorisation of ``kernel_storage="upper"`` (block updates,
        :func:`~molntk.regression.blocked_cholesky.upper_cholesky_panels`; 17 minutes for
        64,000 rows on two threads, measured)."""
        lam_e, lam_f = self._check_params()
        if kernel_cache is not None and self.inducing is not None:
            raise InputError("kernel_cache", "stores a joint kernel of configurations; the sparse model on inducing "
                             "environments (inducing) has none")
        self._references = None  # the exact model's contracted training tangents, made at the first prediction
        molecules, e, f = self._training_data(X, energies, forces)
        if self.baseline is None and baseline_results is not None:
            raise InputError("baseline_results", "given, but the model has no baseline (baseline=None)")
        if self.baseline is not None:
            physical = baseline_results or baseline_results_of(self.baseline, molecules, self.unit)
            if len(physical.forces) != len(molecules):
                raise InputError("baseline_results", f"has {len(physical.forces)} molecules, X has {len(molecules)}")
            e = e - physical.energies
            f = f - np.concatenate([np.asarray(g, dtype=np.float64).reshape(-1) for g in physical.forces])
        self.unit_, self.target_ = self.unit, target
        self.provenance_ = training_provenance(len(molecules), provenance)
        counts = element_counts(molecules, self.elements)
        self.dressed_atom_ = DressedAtomModel().fit(counts, e) if self.residual else None
        base = self.dressed_atom_.predict(counts) if self.residual else 0.0
        y = np.concatenate([e - base, f])
        self.kernel_ = kernel = self.recipe().molecular_kernel(self.device)
        is_force, groups = joint_rows(len(molecules), [m.n_atoms for m in molecules])
        self.sparse_ = self.inducing is not None
        self.inducing_frame_rows_ = None
        if self.sparse_:
            self._fit_sparse(kernel, molecules, y, is_force, groups, lam_e, lam_f)
        elif self.inducing_frames is not None:
            self._fit_frames(kernel, molecules, y, is_force, groups, lam_e, lam_f, kernel_cache, progress)
        elif self.kernel_storage == "upper":
            self._fit_exact_upper(kernel, molecules, y, is_force, groups, lam_e, lam_f, kernel_cache, progress,
                                  factor_progress)
        else:
            self._fit_exact(kernel, molecules, y, is_force, groups, lam_e, lam_f, kernel_cache, progress)
        self.training_elements_ = present_elements(np.concatenate([m.numbers for m in molecules]))
        self.n_features_in_ = 1
        return self

    def _fit_exact(self, kernel: SO3MolecularKernel, molecules: list[Molecule], y: np.ndarray, is_force: np.ndarray,
                   groups: list[np.ndarray], lam_e: float | None, lam_f: float | None,
                   kernel_cache: str | Path | None, progress: ProgressCallback | None) -> None:
        """α of the joint kernel (module docstring, exact model)."""
        check_exact_memory(len(y), grid_search=lam_e is None and self.noise_search == "grid")
        K = joint_kernel(kernel, molecules, cache_dir=kernel_cache, progress=progress)
        if lam_e is None:
            choice = (select_noise_local(K, y, is_force, groups, floor=self.psd_rtol, device=kernel.ctx.device)
                      if self.noise_search == "local" else select_noise(K, y, is_force, groups, floor=self.psd_rtol))
            lam_e, lam_f, self.cv_score_, self.reg_at_grid_edge_, self.noise_factorisations_ = choice
        else:
            self.cv_score_ = self.reg_at_grid_edge_ = self.noise_factorisations_ = None
        self.reg_energy_, self.reg_force_ = lam_e, lam_f
        alpha = solve_joint(K, y, is_force, lam_e, lam_f, kernel.ctx.device)
        self.energy_coef_, self.force_coef_ = alpha[: len(molecules)], alpha[len(molecules):]
        self.train_molecules_ = molecules

    def _fit_exact_upper(self, kernel: SO3MolecularKernel, molecules: list[Molecule], y: np.ndarray,
                         is_force: np.ndarray, groups: list[np.ndarray], lam_e: float | None, lam_f: float | None,
                         kernel_cache: str | Path | None, progress: ProgressCallback | None,
                         factor_progress: ProgressCallback | None = None) -> None:
        """α of the exact model with K held as the upper triangle of its configuration-major
        order (``kernel_storage="upper"``): the λ's by :func:`select_noise` on the first
        :func:`local_start` configurations (their own joint kernel; with ``kernel_cache`` the
        choice is kept there, :func:`stored_noise_choice`, so a rerun after a kill does not search
        again), then, with ``kernel_cache``,
        every block of K computed into the cache before the panels are made (the tangent maps
        and the panels are never held together), the blocks placed in the panels of
        :func:`~molntk.regression.blocked_cholesky.upper_panels` (rows of configuration i
        against configurations j ≥ i: the upper triangle), K + Λ factored and solved there."""
        rows = len(y)
        check_upper_memory(rows)
        if lam_e is None:
            first = local_start(groups)
            sub_rows, sub_force, sub_groups = leading_configurations(groups, first)
            choice = stored_noise_choice(
                kernel_cache, kernel, molecules[:first], y[sub_rows], sub_force, self.psd_rtol,
                lambda: select_noise(joint_kernel(kernel, molecules[:first], cache_dir=kernel_cache), y[sub_rows],
                                     sub_force, sub_groups, floor=self.psd_rtol))
            lam_e, lam_f, self.cv_score_, self.reg_at_grid_edge_, self.noise_factorisations_ = choice
        else:
            self.cv_score_ = self.reg_at_grid_edge_ = self.noise_factorisations_ = None
        self.reg_energy_, self.reg_force_ = lam_e, lam_f
        if kernel_cache is not None:
            complete_joint_cache(kernel, molecules, kernel_cache, progress=progress)
        order = np.concatenate(groups)  # configuration-major row p is joint row order[p]
        position = np.empty_like(order)
        position[order] = np.arange(rows)
        panels = upper_panels(rows, CHOLESKY_BLOCK)
        n, off = len(molecules), force_offsets_of([m.n_atoms for m in molecules])
        for a, b, block in joint_blocks(kernel, molecules, cache_dir=kernel_cache,
                                        progress=None if kernel_cache is not None else progress):
            block_rows, block_cols, _ = block_indices(n, off, a, b)
            place_in_panels(panels, position[block_rows], position[block_cols], block)
        add_to_panels_diagonal(panels, np.where(is_force, lam_f, lam_e)[order])
        info = upper_cholesky_panels(panels, factor_progress)
        if info:
            raise InputError("reg_energy", f"K + Λ is not positive definite (pivot {info}) at λ_E = {lam_e:.3g}, "
                             f"λ_F = {lam_f:.3g}: give larger λ's or a larger psd_rtol")
        alpha = upper_panels_solve(panels, y[order])[position]
        self.energy_coef_, self.force_coef_ = alpha[:n], alpha[n:]
        self.train_molecules_ = molecules

    def _fit_frames(self, kernel: SO3MolecularKernel, molecules: list[Molecule], y: np.ndarray, is_force: np.ndarray,
                    groups: list[np.ndarray], lam_e: float | None, lam_f: float | None,
                    kernel_cache: str | Path | None, progress: ProgressCallback | None) -> None:
        """a, b on the inducing configurations (module docstring, ``inducing_frames``); K_nm is
        released once the system is built, before the noise search."""
        frames = inducing_molecules(kernel.describe(molecules), int(self.inducing_frames),
                                    method=self.inducing_selection, seed=int(self.inducing_seed))
        own_rows = np.concatenate([frames, *[groups[i][1:] for i in frames]])  # K_nm's rows in its columns' order
        check_frames_memory(len(y), len(own_rows), len(molecules), scored_rows(groups))
        K_nm = joint_kernel(kernel, molecules, [molecules[i] for i in frames], cache_dir=kernel_cache, progress=progress)
        K_mm = K_nm[own_rows]
        system = sparse_joint_system(K_nm, 0.5 * (K_mm + K_mm.T), y, is_force, groups, rank_rtol=self.rank_rtol)
        del K_nm, K_mm
        fit = solve_sparse_joint(system, reg_energy=lam_e, reg_force=lam_f, floor=self.psd_rtol, search=self.noise_search,
                                 start_ratio=self.noise_ratio_start)
        self.inducing_frame_rows_ = frames
        self.energy_coef_, self.force_coef_ = fit.weights[: len(frames)], fit.weights[len(frames):]
        self.rank_, self.n_inducing_ = fit.rank, len(fit.weights)
        self.reg_energy_, self.reg_force_, self.cv_score_ = fit.reg_energy, fit.reg_force, fit.cv_score
        self.reg_at_grid_edge_, self.noise_factorisations_ = fit.at_grid_edge, fit.factorisations
        self.train_molecules_ = molecules

    def _expansion_molecules(self) -> list[Molecule]:
        """The configurations the exact form expands in: the training ones, or the inducing ones."""
        if getattr(self, "inducing_frame_rows_", None) is None:
            return self.train_molecules_
        return [self.train_molecules_[i] for i in self.inducing_frame_rows_]

    def _fit_sparse(self, kernel: SO3MolecularKernel, molecules: list[Molecule], y: np.ndarray, is_force: np.ndarray,
                    groups: list[np.ndarray], lam_e: float | None, lam_f: float | None) -> None:
        """Inducing weights w on energy and force rows (module docstring, sparse model)."""
        feats = kernel.describe(molecules)
        rows = inducing_environments(feats, int(self.inducing), method=self.inducing_selection, seed=int(self.inducing_seed))
        self.inducing_rows_ = rows.cpu().numpy().astype(np.int64)
        self.inducing_ = environments_as_molecules(feats, rows)
        K_mm = kernel(self.inducing_).ntk.cpu().numpy()
        rows_e_f = force_rows(kernel, molecules, self.inducing_)
        fit = fit_sparse_joint(np.vstack([rows_e_f.energy, -rows_e_f.gradient]), K_mm, y, is_force, groups,
                               reg_energy=lam_e, reg_force=lam_f, floor=self.psd_rtol, rank_rtol=self.rank_rtol,
                               search=self.noise_search, start_ratio=self.noise_ratio_start)
        self.inducing_weights_, self.rank_, self.n_inducing_ = fit.weights, fit.rank, len(fit.weights)
        self.reg_energy_, self.reg_force_, self.cv_score_ = fit.reg_energy, fit.reg_force, fit.cv_score
        self.reg_at_grid_edge_, self.noise_factorisations_ = fit.at_grid_edge, fit.factorisations
        self.train_molecules_ = molecules

    def _query(self, X: Any, caller: str) -> tuple[list[Molecule], np.ndarray | float]:
        if not hasattr(self, "sparse_"):
            raise InputError("SO3ForceFieldRegressor", f"{caller} called before fit")
        molecules = as_molecules(X)
        for m in molecules:
            m.check_elements(self.training_elements_, "the elements of the training molecules")
        base = self.dressed_atom_.predict(element_counts(molecules, self.elements)) if self.dressed_atom_ is not None else 0.0
        return molecules, base

    def _baseline_of(self, molecules: list[Molecule]) -> BaselineResult | None:
        """The baseline's energies and forces of ``molecules`` in ``unit_`` (None without one)."""
        return None if self.baseline is None else baseline_results_of(self.baseline, molecules, self.unit_)

    def predict(self, X: Any) -> np.ndarray:
        """Energies (n,) of molecules X: E_dressed + Σ α_E Θ − Σ α_Fᵀ ∂Θ/∂r' (exact; one backward
        pass per test molecule), or E_dressed + Σ_j w_j Θ(M, s_j) (sparse)."""
        molecules, base = self._query(X, "predict")
        physical = self._baseline_of(molecules)
        if physical is not None:
            base = base + physical.energies
        if self.sparse_:
            return base + self.kernel_(molecules, self.inducing_).ntk.cpu().numpy() @ self.inducing_weights_
        if closed_form_supported(self.kernel_):
            return base + np.array([energy for energy, _ in self._expansion(molecules)])
        out = np.empty(len(molecules))
        for i, m in enumerate(molecules):
            rows = derivative_rows(self.kernel_, m, self._expansion_molecules(), second=False)
            out[i] = rows.theta @ self.energy_coef_ - rows.d_ref @ self.force_coef_
        return base + out

    def predict_forces(self, X: Any, return_energy: bool = False, *,
                       progress: ProgressCallback | None = None) -> list[np.ndarray] | tuple[np.ndarray, list[np.ndarray]]:
        """Forces F = −∂E/∂r of the predicted energy, a list of (n_atoms, 3) arrays (energy unit
        per Å); with ``return_energy`` also the energies (n,) of the same pass. Sparse model:
        −Σ_j w_j ∂Θ(M, s_j)/∂r, the force rows contracted with w as they are computed
        (:func:`~molntk.molecular.force_rows.force_rows` with ``weights``). ``progress(done,
        total)``: the batches of :data:`QUERY_BATCH` query molecules done (exact model and
        ``inducing_frames`` in closed form; not reported otherwise)."""
        molecules, base = self._query(X, "predict_forces")
        if self.sparse_:
            rows = force_rows(self.kernel_, molecules, self.inducing_, weights=self.inducing_weights_)
            splits = np.cumsum([3 * m.n_atoms for m in molecules])[:-1]
            energies = rows.energy[:, 0]
            forces = [-g.reshape(-1, 3) for g in np.split(rows.gradient[:, 0], splits)]
        else:
            expansion = self._expansion(molecules, progress)
            energies, forces = np.array([e for e, _ in expansion]), [-grad for _, grad in expansion]
        physical = self._baseline_of(molecules)
        if physical is not None:
            base = base + physical.energies
            forces = [f + np.asarray(g) for f, g in zip(forces, physical.forces)]
        return (base + energies, forces) if return_energy else forces

    def _expansion(self, molecules: list[Molecule], progress: ProgressCallback | None = None) -> list[tuple[float, np.ndarray]]:
        """The exact model's s(M) = Σ_j α_E,j Θ(M, M_j) − Σ_j α_F,jᵀ ∂Θ(M, M_j)/∂r_j and ∂s/∂r
        (n, 3) of each molecule (M_j the training configurations, or the inducing ones with
        ``inducing_frames``): in closed form against their tangents contracted with
        −α_F once per fitted model (:mod:`~molntk.molecular.pooled_derivatives`; the query
        molecules side by side on the CPU's threads, :func:`~molntk.scale.devices.map_over_threads`),
        else by autograd."""
        kernel = self.kernel_
        if not closed_form_supported(kernel):
            return [expansion_energy_and_gradient(kernel, m, self._expansion_molecules(), self.energy_coef_,
                                                  -self.force_coef_) for m in molecules]
        device = kernel.ctx.device
        if getattr(self, "_references", None) is None:
            coef = torch.as_tensor(-self.force_coef_, dtype=torch.float64, device=device)
            self._references = contracted_tangent_features(kernel, self._expansion_molecules(), coef)
        a = torch.as_tensor(self.energy_coef_, dtype=torch.float64, device=device)
        budget = value_budget(device)
        out = []
        for start in range(0, len(molecules), QUERY_BATCH):  # the query tangents of a batch in one pass
            queries = tangent_features(kernel, molecules[start : start + QUERY_BATCH])

            def expansion(i: int) -> tuple[float, np.ndarray]:
                value, grad = closed_form_expansion(kernel, queries.molecules(i, i + 1), self._references, a, budget=budget)
                return value, grad.reshape(-1, 3)

            out += map_over_threads(expansion, range(len(queries.n_atoms)), device)
            if progress is not None:
                progress(start // QUERY_BATCH + 1, -(-len(molecules) // QUERY_BATCH))
        return out

    # -- files ---------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the fitted force field to ``path`` (``.npz``, atomically; :mod:`molntk.models.model_files`):
        the parameters, unit, λ's and training elements as metadata; the training molecules;
        the dressed-atom model; α_E and α_F (exact) or the inducing rows into the training
        environments (recomputed by ``load``), w and the rank kept (sparse)."""
        if not hasattr(self, "sparse_"):
            raise InputError("SO3ForceFieldRegressor", "save called before fit")
        meta = {"format": FORMAT, "version": FORMAT_VERSION, "molntk": __version__, "params": self.get_params(),
                "ids": [m.id for m in self.train_molecules_], "unit": self.unit_, "target": self.target_,
                "provenance": self.provenance_, "sparse": self.sparse_,
                "training_elements": list(self.training_elements_), "reg_energy": self.reg_energy_,
                "reg_force": self.reg_force_, "cv_score": self.cv_score_,
                "reg_at_grid_edge": self.reg_at_grid_edge_, "noise_factorisations": self.noise_factorisations_}
        if self.sparse_:
            fitted = {"inducing_rows": self.inducing_rows_, "inducing_weights": self.inducing_weights_,
                      "rank": np.asarray(self.rank_, dtype=np.int64)}
        else:
            fitted = {"energy_coef": self.energy_coef_, "force_coef": self.force_coef_}
            if self.inducing_frame_rows_ is not None:
                fitted |= {"inducing_frame_rows": self.inducing_frame_rows_, "rank": np.asarray(self.rank_, dtype=np.int64)}
        return write_model_archive(path, meta, {**fitted, **dressed_atom_arrays(self.dressed_atom_),
                                                **molecule_arrays(self.train_molecules_)})

    @classmethod
    def load(cls, path: str | Path) -> SO3ForceFieldRegressor:
        """Read a force field written by :meth:`save`; a file that is not one (missing,
        damaged, another format) is a :class:`~molntk.errors.ModelFileError` naming it."""
        return load_model_file(path, FORMAT, FORMAT_VERSION, "SO(3) NTK force field", cls._from_archive)

    @classmethod
    def _from_archive(cls, path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> SO3ForceFieldRegressor:
        """The fitted force field held by a model file's arrays and metadata (:meth:`load`)."""
        params = dict(meta["params"])
        params["elements"] = tuple(params["elements"])
        model = cls(**params)
        model._check_params()
        model.unit_ = optional_text(meta, "unit")
        model.target_ = optional_text(meta, "target") or "energy"  # files written before the key was kept
        model.provenance_ = provenance_from_meta(path, meta)
        model.sparse_ = bool(meta["sparse"])
        if model.sparse_ != (model.inducing is not None):
            raise ModelFileError(str(path), f"inconsistent model file: inducing={model.inducing!r} but "
                                 f"{'a sparse' if model.sparse_ else 'an exact'} fitted state")
        model.train_molecules_ = molecules_from_arrays(arrays, meta["ids"])
        model.training_elements_ = present_elements(arrays["numbers"])
        model.dressed_atom_ = dressed_atom_from_arrays(arrays)
        model.reg_energy_, model.reg_force_, model.cv_score_ = meta["reg_energy"], meta["reg_force"], meta["cv_score"]
        model.reg_at_grid_edge_ = meta["reg_at_grid_edge"]
        model.noise_factorisations_ = meta.get("noise_factorisations")  # None in files written before it was recorded
        model.kernel_ = model.recipe().molecular_kernel(model.device)
        if model.sparse_:
            model._read_inducing_environments(path, arrays)
        else:
            model._read_expansion(path, arrays)
        model.n_features_in_ = 1
        return model


    def _read_inducing_environments(self, path: Path, arrays: dict[str, np.ndarray]) -> None:
        """The sparse model's inducing environments and weights from a model file's arrays (the
        environments recomputed from the training molecules, which the stored rows index)."""
        feats = self.kernel_.describe(self.train_molecules_)  # deterministic: the rows index them as at fit
        rows = np.asarray(arrays["inducing_rows"], dtype=np.int64)
        if rows.ndim != 1 or rows.size == 0 or rows.min() < 0 or rows.max() >= feats.n_env:
            raise ModelFileError(str(path), f"inducing_rows do not index the {feats.n_env} training environments")
        weights = np.asarray(arrays["inducing_weights"], dtype=np.float64)
        if weights.shape != rows.shape:
            raise ModelFileError(str(path), f"{rows.size} inducing rows for {weights.size} inducing weights")
        self.inducing_rows_, self.inducing_weights_ = rows, weights
        self.inducing_ = environments_as_molecules(feats, torch.as_tensor(rows))
        self.rank_, self.n_inducing_ = int(arrays["rank"]), rows.size

    def _read_expansion(self, path: Path, arrays: dict[str, np.ndarray]) -> None:
        """The exact form's coefficients a, b from a model file's arrays, on the training
        configurations or (``inducing_frames``) on the inducing ones that the stored rows index."""
        self.inducing_frame_rows_ = None
        if self.inducing_frames is not None:
            frames = np.asarray(arrays["inducing_frame_rows"], dtype=np.int64)
            n_train = len(self.train_molecules_)
            if frames.ndim != 1 or frames.size == 0 or frames.min() < 0 or frames.max() >= n_train:
                raise ModelFileError(str(path), f"inducing_frame_rows do not index the {n_train} training molecules")
            self.inducing_frame_rows_, self.rank_ = frames, int(arrays["rank"])
        expansion = self._expansion_molecules()
        self.energy_coef_ = np.asarray(arrays["energy_coef"], dtype=np.float64)
        self.force_coef_ = np.asarray(arrays["force_coef"], dtype=np.float64)
        n_forces = 3 * sum(m.n_atoms for m in expansion)
        if self.energy_coef_.shape != (len(expansion),) or self.force_coef_.shape != (n_forces,):
            raise ModelFileError(str(path), f"damaged model file (coefficients of shapes {self.energy_coef_.shape}, "
                                 f"{self.force_coef_.shape} for {len(expansion)} molecules with "
                                 f"{n_forces} force components)")
        if self.inducing_frames is not None:
            self.n_inducing_ = len(expansion) + n_forces

def solve_joint(K: np.ndarray, y: np.ndarray, is_force: np.ndarray, lam_e: float, lam_f: float,
                device: str | torch.device = "cpu") -> np.ndarray:
    """α = (K + diag(λ_E on energy rows, λ_F on force rows))⁻¹ y (the blocked Cholesky of
    :mod:`~molntk.regression.blocked_cholesky`; LU if not positive definite), in one working
    copy of K; on a CUDA ``device`` by :func:`solve_joint_on_device` (an aspirin model of
    1,000 frames: 64,000 rows, minutes of the host's Cholesky, seconds of a GPU's)."""
    lam = np.where(is_force, lam_f, lam_e)
    if torch.device(device).type != "cpu":
        return solve_joint_on_device(torch.tensor(K, device=device), y, lam)  # a copy on the device
    a = np.array(K, order="C")
    a[np.diag_indices_from(a)] += lam
    if upper_cholesky_in_place(a, CHOLESKY_BLOCK) == 0:
        return scipy.linalg.cho_solve((a.T, True), y, check_finite=False)
    a[:] = K
    a[np.diag_indices_from(a)] += lam
    return scipy.linalg.solve(a, y, overwrite_a=True, check_finite=False)


def solve_joint_on_device(K: torch.Tensor, y: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """:func:`solve_joint` with K a float64 tensor on its device, factored there; K's diagonal
    is overwritten by K + λ (the caller's copy). Its Cholesky factor (LU if K + diag(λ) is not
    positive definite): two matrices of K's size on the device."""
    y_t = torch.as_tensor(y, dtype=K.dtype, device=K.device)[:, None]
    K.diagonal().add_(torch.as_tensor(lam, dtype=K.dtype, device=K.device))
    factor, info = torch.linalg.cholesky_ex(K)
    if int(info) == 0:
        return torch.cholesky_solve(y_t, factor)[:, 0].cpu().numpy()
    del factor
    return torch.linalg.solve(K, y_t)[:, 0].cpu().numpy()
