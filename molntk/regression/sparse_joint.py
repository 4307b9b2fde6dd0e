"""Sparse (projected-process, GAP-style) regression on energy and force rows with a noise
level each, and its grouped leave-one-out.

Observations y (n,) of two kinds (``is_force``: energy rows, force rows), grouped by
configuration, with kernel rows K_nm (n, m) against m inducing points whose kernel is K_mm;
the model y ≈ K_nm w with

    w = argmin  Σ_i (y_i − K_i w)² / λ_{kind(i)} + wᵀ K_mm w,

the posterior mean of a GP whose prior is restricted to the span of the inducing points
(noise λ_E on energy rows, λ_F on force rows).

Solve (stable, no normal equations): K_mm = U diag(s) Uᵀ with the eigenvalues ≤
``rank_rtol`` · s_max dropped, root R = U_r s_r^{-1/2} (:func:`~molntk.regression.nystrom.inducing_root`);
w = R v turns the prior into ‖v‖² and the rows into the Nyström features B = K_nm R. With
λ = ρ d (d = s_E on energy rows, q s_F on force rows) and the scaled rows B̃ = D^{-1/2} B,
ỹ = D^{-1/2} y, v is kernel ridge with noise ρ on B̃: thin SVD B̃ = Q diag(σ) Wᵀ and
w = R W diag(σ/(σ² + ρ)) Qᵀ ỹ (:class:`~molntk.regression.nystrom.NystromFactors`). The SVD
for each ratio q comes from QR factorisations of the energy block and the force block of B,
computed once: B_E = Q_E R_E, B_F = Q_F R_F, B̃ = diag(Q_E, Q_F) S_q with
S_q = [R_E/√d_E; R_F/√d_F] (at most 2r × r), S_q = U diag(σ) Wᵀ, Q = diag(Q_E, Q_F) U.

Grouped LOO: with the inducing points (and s_E, s_F) held fixed, the fit is ridge regression
with fixed features, hat matrix H = Q diag(h) Qᵀ, h = σ²/(σ² + ρ), and leaving out the rows g of
one configuration gives the residuals D_g^{1/2} (I − H_gg)⁻¹ (ỹ − H ỹ)_g (the (C_gg)⁻¹ α_g of
:mod:`~molntk.regression.noise_search` for C = (B̃B̃ᵀ + ρ)⁻¹ = (I − H)/ρ, scaled). λ_E and λ_F
are chosen by :func:`~molntk.regression.noise_search.search_noise` with s_E, s_F the mean
diagonals of the Nyström kernel B Bᵀ on energy and on force rows. Rows are reordered by
configuration (configurations of equal size next to each other), so that the H_gg of all
configurations of one size are one batched product.

Cost: O(m³) for K_mm, O(n m r) for B, O(n r²) for the QRs once; per ratio O(r³) for the SVD
of S_q and O(n r²) for Q; per noise scale O(Σ_g n_g² r) for the H_gg.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from molntk.errors import InputError
from molntk.regression import validation
from molntk.regression.noise_search import RATIO_GRID, SCALE_GRID, ResidualsAt, search_noise
from molntk.regression.nystrom import RANK_RTOL, InducingRoot, NystromFactors, inducing_root

#: Configurations per batched product of the grouped LOO (bounds its (groups, n_g, r) temporary).
GROUP_CHUNK = 256


@dataclass(frozen=True)
class SparseJointFit:
    """``weights`` w (m,), the noise levels used, the LOO criterion (None for fixed λ's), the
    rank r kept of K_mm and the number of its eigenvalues dropped."""

    weights: np.ndarray
    reg_energy: float
    reg_force: float
    cv_score: float | None
    rank: int
    n_dropped: int


@dataclass(frozen=True)
class _Rows:
    """The system with rows in configuration order: y, the force-row mask, the configuration
    sizes (ascending, one per configuration), the root of K_mm, the QR factors of the energy
    and force blocks of B = K_nm R and the mean diagonals s_E, s_F of B Bᵀ."""

    y: np.ndarray
    is_force: np.ndarray
    sizes: np.ndarray
    root: InducingRoot
    energy: tuple[np.ndarray, np.ndarray]
    force: tuple[np.ndarray, np.ndarray]
    scale_e: float
    scale_f: float

    def factors(self, d_e: float, d_f: float) -> NystromFactors:
        """Thin SVD of D^{-1/2} B (module docstring), D = d_E on energy rows, d_F on force rows."""
        (q_e, r_e), (q_f, r_f) = self.energy, self.force
        u, sigma, wt = np.linalg.svd(np.vstack([r_e / np.sqrt(d_e), r_f / np.sqrt(d_f)]), full_matrices=False)
        Q = np.empty((self.y.size, sigma.size))
        Q[~self.is_force], Q[self.is_force] = q_e @ u[: r_e.shape[0]], q_f @ u[r_e.shape[0] :]
        return NystromFactors(self.root.root, Q, sigma, wt, self.root.n_dropped, self.root.min_raw)

    def scaled(self, d_e: float, d_f: float) -> tuple[np.ndarray, np.ndarray]:
        """(D^{1/2} diagonal, D^{-1/2} y)."""
        root_d = np.sqrt(np.where(self.is_force, d_f, d_e))
        return root_d, self.y / root_d

    def residuals_for(self, q: float) -> ResidualsAt:
        """The grouped-LOO residuals at each ρ for the ratio q (module docstring)."""
        d_e, d_f = self.scale_e, q * self.scale_f
        fac = self.factors(d_e, d_f)
        root_d, y = self.scaled(d_e, d_f)
        coeffs = fac.Q.T @ y[:, None]

        def residuals_at(rho: float) -> np.ndarray:
            fitted_off = fac.residuals(y[:, None], coeffs, rho)[0][:, 0]  # ỹ − H ỹ
            h = fac.sigma**2 / (fac.sigma**2 + rho)
            return root_d * _grouped_solve(fac.Q, h, fitted_off, self.sizes)

        return residuals_at


def _grouped_solve(Q: np.ndarray, h: np.ndarray, e: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """(I − H_gg)⁻¹ e_g for every configuration g, H = Q diag(h) Qᵀ, rows in configuration order
    (``sizes`` ascending): the configurations of one size as batched products."""
    out, start = np.empty_like(e), 0
    sizes_present, counts = np.unique(sizes, return_counts=True)
    for size, count in zip(sizes_present, counts):
        for first in range(0, count, GROUP_CHUNK):
            n = min(GROUP_CHUNK, count - first)
            rows = slice(start, start + n * size)
            q = Q[rows].reshape(n, size, -1)
            block = np.eye(size) - (q * h) @ q.transpose(0, 2, 1)
            out[rows] = np.linalg.solve(block, e[rows].reshape(n, size, 1)).reshape(-1)
            start += n * size
    return out


def _rows(K_nm: object, K_mm: object, y: object, is_force: np.ndarray, groups: Sequence[np.ndarray], rank_rtol: float) -> _Rows:
    """Validate and order the system (configurations by size) and factor it once."""
    root = inducing_root(K_mm, rank_rtol)
    y = validation.vector(y, "y", length=len(is_force))
    K_nm = validation.matrix(K_nm, "K_nm", rows=len(is_force))
    if K_nm.shape[1] != root.root.shape[0]:
        raise InputError("K_nm", f"must have {root.root.shape[0]} columns (one per inducing point), got shape {K_nm.shape}")
    if is_force.all() or not is_force.any():
        raise InputError("y", "needs both energy and force rows")
    order = np.concatenate(sorted(groups, key=len))
    if not np.array_equal(np.sort(order), np.arange(len(is_force))):
        raise InputError("groups", "must partition the rows")
    is_force = is_force[order]
    B = K_nm[order] @ root.root
    energy, force = B[~is_force], B[is_force]
    return _Rows(y[order], is_force, np.array(sorted(len(g) for g in groups)), root, np.linalg.qr(energy),
                 np.linalg.qr(force), float(np.mean(np.sum(energy**2, axis=1))), float(np.mean(np.sum(force**2, axis=1))))


def fit_sparse_joint(K_nm: object, K_mm: object, y: object, is_force: np.ndarray, groups: Sequence[np.ndarray], *,
                     reg_energy: float | None = None, reg_force: float | None = None, floor: float = 0.0,
                     rank_rtol: float = RANK_RTOL, ratios: np.ndarray = RATIO_GRID,
                     scales: np.ndarray = SCALE_GRID) -> SparseJointFit:
    """The inducing weights w of the module docstring for rows K_nm (n, m) against inducing points
    with kernel K_mm, targets y (n,), the force-row mask and the configurations' row groups
    (a partition of the rows); λ_E = ``reg_energy``, λ_F = ``reg_force`` (both > 0), or both None:
    chosen by grouped LOO over the grid (λ's below ``floor`` times their mean diagonal skipped)."""
    system = _rows(K_nm, K_mm, y, np.asarray(is_force, dtype=bool), groups, rank_rtol)
    score = None
    if reg_energy is None or reg_force is None:
        reg_energy, reg_force, score = search_noise(system.residuals_for, system.y, system.is_force, system.scale_e,
                                                    system.scale_f, floor, ratios, scales)
    elif reg_energy <= 0 or reg_force <= 0:
        raise InputError("reg_energy" if reg_energy <= 0 else "reg_force", "must be > 0 for the sparse model")
    fac = system.factors(reg_energy, reg_force)
    _, y_scaled = system.scaled(reg_energy, reg_force)
    weights = fac.weights(fac.Q.T @ y_scaled[:, None], 1.0)[:, 0]
    return SparseJointFit(weights, float(reg_energy), float(reg_force), score, system.root.root.shape[1], system.root.n_dropped)
