"""Sparse (projected-process, GAP-style) regression on energy and force rows with a noise
level each, and its grouped leave-one-out.

Observations y (n,) of two kinds (``is_force``: energy rows, force rows), grouped by
configuration, with kernel rows K_nm (n, m) against m inducing points whose kernel is K_mm;
the model y ≈ K_nm w with

    w = argmin  Σ_i (y_i − K_i w)² / λ_{kind(i)} + wᵀ K_mm w,

the posterior mean of a GP whose prior is restricted to the span of the inducing points
(noise λ_E on energy rows, λ_F on force rows).

Solve (stable, no normal equations): K_mm = U diag(s) Uᵀ with the eigenvalues ≤
``rank_rtol`` · s_max dropped, root R = U_r s_r^{-1/2} (:func:`~molntk.regression.nystrom.factor_inducing`);
w = R v turns the prior into ‖v‖² and the rows into the Nyström features B = K_nm R. With
λ = ρ d (d = s_E on energy rows, q s_F on force rows) and the scaled rows B̃ = D^{-1/2} B,
ỹ = D^{-1/2} y, v is kernel ridge with noise ρ on B̃: thin SVD B̃ = Q diag(σ) Wᵀ and
w = R W diag(σ/(σ² + ρ)) Qᵀ ỹ (:func:`~molntk.regression.nystrom.inducing_weights`). The SVD
for each ratio q comes from QR factorisations of the energy block and the force block of B,
computed once: B_E = Q_E R_E, B_F = Q_F R_F, B̃ = diag(Q_E, Q_F) S_q with
S_q = [R_E/√d_E; R_F/√d_F] (at most 2r × r), S_q = U diag(σ) Wᵀ, Q = diag(Q_E, Q_F) U, and
Qᵀ ỹ = Uᵀ [Q_Eᵀ y_E/√d_E; Q_Fᵀ y_F/√d_F] with Q_Eᵀ y_E, Q_Fᵀ y_F computed once: Q itself is
needed only for the rows that the LOO scores.

Grouped LOO: with the inducing points (and s_E, s_F) held fixed, the fit is ridge regression
with fixed features, hat matrix H = Q diag(h) Qᵀ, h = σ²/(σ² + ρ), and leaving out the rows g of
one configuration gives the residuals D_g^{1/2} (I − H_gg)⁻¹ (ỹ − H ỹ)_g (the (C_gg)⁻¹ α_g of
:mod:`~molntk.regression.noise_search` for C = (B̃B̃ᵀ + ρ)⁻¹ = (I − H)/ρ, scaled). λ_E and λ_F
are chosen by :func:`~molntk.regression.noise_search.search_noise` with s_E, s_F the mean
diagonals of the Nyström kernel B Bᵀ on energy and on force rows, scoring at most
:data:`LOO_GROUPS` configurations (a seeded sample of them beyond). Rows are reordered by
configuration, the scored ones first, those of equal size next to each other, so that the H_gg
of all scored configurations of one size are one batched product.

Cost: O(m³) for K_mm, O(n m r) for B, O(n r²) for the QRs once; per ratio O(r³) for the SVD
of S_q and O(n_s r²) for the scored rows of Q; per noise scale O(Σ_g n_g² r) over the scored
configurations (n_s rows). Measured (one thread, loaded 2-core machine) on random systems of
1,000 ethanol-sized configurations (28,000 rows) with m = r = 1,000: 20 s once, 5 s per ratio,
0.19 s per noise scale (2.5 min for the default 13 × 21 grid); in the ethanol fits of
``benchmarks/md_force_field.py`` K_mm keeps r ≈ 300–400 and the whole solve takes seconds.

Memory (:func:`sparse_joint_host_bytes`): the system is built once
(:func:`sparse_joint_system`), reading K_nm a few rows at a time into B's two blocks, whose
QR factorisations then overwrite them (LAPACK in place): besides K_nm, one n × r array. The
search and the solve (:func:`solve_sparse_joint`) need only the system, so a caller that
holds K_nm can release it before them (the frames model's K_nm is gigabytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from molntk.errors import InputError
from molntk.regression import validation
from molntk.regression.noise_search import RATIO_GRID, SCALE_GRID, ResidualsAt, climb_ratios, nearest_index, search_noise
from molntk.regression.nystrom import RANK_RTOL, InducingRoot, factor_inducing, inducing_weights

#: Values (float64) of the temporaries per batched product of the grouped LOO ((groups, n_g, r)
#: arrays) and per product of K_nm rows with the root (128 MiB).
CHUNK_VALUES = 2**24
#: Configurations whose LOO residuals score a noise level: all when there are at most this
#: many, else a seeded random sample of this many (each still left out exactly); the cost per
#: ratio and noise scale grows with them, not with the training set.
LOO_GROUPS = 500


@dataclass(frozen=True)
class SparseJointFit:
    """``weights`` w (m,), the noise levels used, the LOO criterion (None for fixed λ's), the
    rank r kept of K_mm, the number of its eigenvalues dropped, whether the λ's chosen lie
    on an end of the grid and the SVDs the search made (None for fixed λ's;
    :class:`~molntk.regression.noise_search.NoiseChoice`)."""

    weights: np.ndarray
    reg_energy: float
    reg_force: float
    cv_score: float | None
    rank: int
    n_dropped: int
    at_grid_edge: bool | None = None
    factorisations: int | None = None


@dataclass(frozen=True)
class SparseJointSystem:
    """The system with rows in configuration order, the scored configurations first (each block
    by ascending size): y, the force-row mask, the sizes of the scored configurations, the root
    of K_mm, the QR factors (Q, R) of the energy and force blocks of B = K_nm R (in row order
    within each kind), Q_Eᵀ y_E and Q_Fᵀ y_F, and the mean diagonals s_E, s_F of B Bᵀ."""

    y: np.ndarray
    is_force: np.ndarray
    scored_sizes: np.ndarray
    root: InducingRoot
    energy: tuple[np.ndarray, np.ndarray]
    force: tuple[np.ndarray, np.ndarray]
    projected: tuple[np.ndarray, np.ndarray]
    scale_e: float
    scale_f: float

    @property
    def n_scored(self) -> int:
        return int(self.scored_sizes.sum())

    def svd(self, d_e: float, d_f: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(U, σ, Wᵀ, C) of D^{-1/2} B = diag(Q_E, Q_F) U diag(σ) Wᵀ (module docstring), D = d_E on
        energy rows, d_F on force rows, and C = Qᵀ D^{-1/2} y = Uᵀ [Q_Eᵀ y_E/√d_E; Q_Fᵀ y_F/√d_F]."""
        (_, r_e), (_, r_f) = self.energy, self.force
        u, sigma, wt = np.linalg.svd(np.vstack([r_e / np.sqrt(d_e), r_f / np.sqrt(d_f)]), full_matrices=False)
        (p_e, p_f) = self.projected
        return u, sigma, wt, u.T @ np.concatenate([p_e / np.sqrt(d_e), p_f / np.sqrt(d_f)])

    def residuals_for(self, q: float) -> ResidualsAt:
        """The grouped-LOO residuals of the scored rows at each ρ for the ratio q (module docstring)."""
        d_e, d_f = self.scale_e, q * self.scale_f
        u, sigma, _, coeffs = self.svd(d_e, d_f)
        rows = slice(0, self.n_scored)
        is_force = self.is_force[rows]
        Q = np.empty((self.n_scored, sigma.size))  # the scored rows of Q = diag(Q_E, Q_F) U
        k_e = self.energy[1].shape[0]
        Q[~is_force] = self.energy[0][: int((~is_force).sum())] @ u[:k_e]
        force_rows, step = np.flatnonzero(is_force), _rows_per_chunk(sigma.size)
        for start in range(0, len(force_rows), step):  # without a temporary of all scored force rows
            stop = min(start + step, len(force_rows))  # Q_F's rows beyond the scored ones are not scored
            Q[force_rows[start:stop]] = self.force[0][start:stop] @ u[k_e:]
        root_d = np.sqrt(np.where(is_force, d_f, d_e))
        y = self.y[rows] / root_d

        def residuals_at(rho: float) -> np.ndarray:
            h = sigma**2 / (sigma**2 + rho)
            return root_d * _grouped_solve(Q, h, y - Q @ (h * coeffs), self.scored_sizes)

        return residuals_at

def _grouped_solve(Q: np.ndarray, h: np.ndarray, e: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """(I − H_gg)⁻¹ e_g for every configuration g, H = Q diag(h) Qᵀ, rows in configuration order
    (``sizes`` ascending): the configurations of one size as batched products."""
    out, start = np.empty_like(e), 0
    sizes_present, counts = np.unique(sizes, return_counts=True)
    for size, count in zip(sizes_present, counts):
        per_chunk = _rows_per_chunk(size * Q.shape[1])
        for first in range(0, count, per_chunk):
            n = min(per_chunk, count - first)
            rows = slice(start, start + n * size)
            q = Q[rows].reshape(n, size, -1)
            block = np.eye(size) - (q * h) @ q.transpose(0, 2, 1)
            out[rows] = np.linalg.solve(block, e[rows].reshape(n, size, 1)).reshape(-1)
            start += n * size
    return out


def _rows_per_chunk(width: int) -> int:
    """Rows of ``width`` values that fit :data:`CHUNK_VALUES` (at least one)."""
    return max(1, CHUNK_VALUES // max(width, 1))


def _features_qr(K_nm: np.ndarray, rows: np.ndarray, root: InducingRoot) -> tuple[np.ndarray, np.ndarray]:
    """The thin QR (Q, R) of B = K_nm[rows] R_root: B formed in Fortran order a few rows at a
    time (no copy of K_nm's rows), then factored by LAPACK in its own memory (Q overwrites B)."""
    B = np.empty((len(rows), root.rank), order="F")
    step = _rows_per_chunk(K_nm.shape[1])
    for start in range(0, len(rows), step):
        B[start : start + step] = root.features(K_nm[rows[start : start + step]])
    return scipy.linalg.qr(B, mode="economic", overwrite_a=True, check_finite=False)


def sparse_joint_system(K_nm: object, K_mm: object, y: object, is_force: np.ndarray, groups: Sequence[np.ndarray], *,
                        rank_rtol: float = RANK_RTOL, seed: int = 0) -> SparseJointSystem:
    """Validate and order the system (module docstring, :data:`LOO_GROUPS`: ``seed`` draws the
    scored configurations when there are more) and factor it once; K_nm is only read, and not
    referenced by the result."""
    root = factor_inducing(K_mm, rank_rtol)
    is_force = np.asarray(is_force, dtype=bool)
    y = validation.vector(y, "y", length=len(is_force))
    K_nm = validation.matrix(K_nm, "K_nm", rows=len(is_force))
    if K_nm.shape[1] != root.m:
        raise InputError("K_nm", f"must have {root.m} columns (one per inducing point), got shape {K_nm.shape}")
    if is_force.all() or not is_force.any():
        raise InputError("y", "needs both energy and force rows")
    if not np.array_equal(np.sort(np.concatenate(groups)), np.arange(len(is_force))):
        raise InputError("groups", "must partition the rows")
    scored = _scored_configurations(len(groups), seed)
    by_size = lambda picked: sorted((g for g, keep in zip(groups, scored) if keep == picked), key=len)  # noqa: E731
    first, rest = by_size(True), by_size(False)
    order = np.concatenate(first + rest)
    y, is_force = y[order], is_force[order]
    energy, force = (_features_qr(K_nm, order[kind], root) for kind in (~is_force, is_force))
    projected = (energy[0].T @ y[~is_force], force[0].T @ y[is_force])
    # mean diagonal of B Bᵀ on each kind of rows: ‖B_kind‖²_F / rows = ‖R_kind‖²_F / rows (Q orthonormal)
    scales = [float(np.sum(r**2)) / int(kind.sum()) for (_, r), kind in ((energy, ~is_force), (force, is_force))]
    return SparseJointSystem(y, is_force, np.array([len(g) for g in first]), root, energy, force, projected, *scales)


def sparse_joint_host_bytes(rows: int, columns: int, energy_rows: int, scored_rows: int) -> int:
    """An estimate of the host memory of building and solving the system for K_nm of ``rows``
    × ``columns`` (m; r ≤ m kept) with ``energy_rows`` energy rows and ``scored_rows`` rows in
    the LOO's scored configurations, in float64 values × 8: the larger of the build (K_nm, the
    features B and ≈ 5 m² for K_mm's symmetrised copy and eigendecomposition) and the search
    with K_nm released (the QR factors, K_mm's root, the scored rows of Q, and per ratio the
    SVD of S_q: S_q, its copy and U of (E + r) × r, Wᵀ and gesdd's ≈ 4 r² workspace)."""
    build = 2 * rows * columns + 5 * columns**2
    search = rows * columns + columns**2 + scored_rows * columns + 3 * (energy_rows + columns) * columns + 5 * columns**2
    return 8 * max(build, search)


def _scored_configurations(n_groups: int, seed: int) -> np.ndarray:
    """Which configurations the LOO scores (a mask): all, or a seeded sample of :data:`LOO_GROUPS`."""
    scored = np.zeros(n_groups, dtype=bool)
    scored[np.random.default_rng(seed).permutation(n_groups)[:LOO_GROUPS]] = True
    return scored


def scored_rows(groups: Sequence[np.ndarray], seed: int = 0) -> int:
    """Rows in the configurations :func:`sparse_joint_system` scores by LOO."""
    return int(sum(len(g) for g, keep in zip(groups, _scored_configurations(len(groups), seed)) if keep))


def solve_sparse_joint(system: SparseJointSystem, *, reg_energy: float | None = None, reg_force: float | None = None,
                       floor: float = 0.0, ratios: np.ndarray = RATIO_GRID, scales: np.ndarray = SCALE_GRID,
                       search: str = "grid", start_ratio: float | None = None) -> SparseJointFit:
    """The inducing weights w of the module docstring for a built system: λ_E = ``reg_energy``,
    λ_F = ``reg_force`` (both > 0), or both None: chosen by grouped LOO over the grid (λ's below
    ``floor`` times their mean diagonal skipped), every ratio (``search="grid"``) or the ratios
    from a start to a local minimum (``"local"``: :func:`~molntk.regression.noise_search.climb_ratios`;
    every ρ of a visited ratio either way). The local search starts at the grid ratio q nearest
    to ``start_ratio`` · s_E / s_F, ``start_ratio`` a ratio λ_F / λ_E of absolute noise levels
    (a smaller model's choice, say), or at the grid's middle ratio (None)."""
    score = edge = factorisations = None
    if reg_energy is None or reg_force is None:
        scored = slice(0, system.n_scored)
        args = (system.residuals_for, system.y[scored], system.is_force[scored], system.scale_e, system.scale_f, floor,
                ratios, scales)
        if validation.choice(search, "search", ("grid", "local")) == "grid":
            choice = search_noise(*args)
        else:
            start = None if start_ratio is None else nearest_index(ratios, start_ratio * system.scale_e / system.scale_f)
            choice = climb_ratios(*args, start=start)
        reg_energy, reg_force, score, edge, factorisations = choice
    elif reg_energy <= 0 or reg_force <= 0:
        raise InputError("reg_energy" if reg_energy <= 0 else "reg_force", "must be > 0 for the sparse model")
    _, sigma, wt, coeffs = system.svd(reg_energy, reg_force)
    weights = inducing_weights(system.root, wt.T * sigma, sigma, coeffs[:, None], 1.0)[:, 0]
    return SparseJointFit(weights, float(reg_energy), float(reg_force), score, system.root.rank,
                          system.root.n_dropped, edge, factorisations)


def fit_sparse_joint(K_nm: object, K_mm: object, y: object, is_force: np.ndarray, groups: Sequence[np.ndarray], *,
                     reg_energy: float | None = None, reg_force: float | None = None, floor: float = 0.0,
                     rank_rtol: float = RANK_RTOL, ratios: np.ndarray = RATIO_GRID,
                     scales: np.ndarray = SCALE_GRID, seed: int = 0, search: str = "grid",
                     start_ratio: float | None = None) -> SparseJointFit:
    """The inducing weights w of the module docstring for rows K_nm (n, m) against inducing points
    with kernel K_mm, targets y (n,), the force-row mask and the configurations' row groups
    (a partition of the rows): :func:`solve_sparse_joint` of :func:`sparse_joint_system`."""
    system = sparse_joint_system(K_nm, K_mm, y, is_force, groups, rank_rtol=rank_rtol, seed=seed)
    return solve_sparse_joint(system, reg_energy=reg_energy, reg_force=reg_force, floor=floor, ratios=ratios,
                              scales=scales, search=search, start_ratio=start_ratio)
