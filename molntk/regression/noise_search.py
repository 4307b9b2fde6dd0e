"""Two noise levels (energy rows, force rows) chosen by grouped leave-one-out, the search shared
by the exact and the sparse energy–force models.

Observations y are of two kinds (``is_force``), grouped by configuration (its energy and its 3n
force components). A model with noise variances λ_E on energy rows and λ_F on force rows is
scored by the sum of the two normalised grouped-LOO mean squared errors,

    mean(r_E²) / mean(y_E²) + mean(r_F²) / mean(y_F²),

r the residuals of each group predicted by the model fitted without it, over the grid
λ_E = ρ s_E, λ_F = q ρ s_F (ρ in :data:`SCALE_GRID`, q in :data:`RATIO_GRID`; s_E, s_F the
mean prior variances of the two kinds of rows; pairs with ρ or q ρ below a floor skipped).
The model supplies, per ratio q (one factorisation each), the LOO residuals at each ρ.

For a Gaussian model with C = (K + Λ)⁻¹ and α = C y, the residuals of group g are
r_g = (C_gg)⁻¹ α_g (:func:`grouped_residuals`; :func:`cholesky_grouped_residuals` from one
Cholesky factorisation of K + Λ on K's device).

Where one factorisation per ratio is too dear (an exact energy+force model of thousands of
configurations), :func:`climb_noise` finds a local minimum of the same criterion on the same
(ρ, q) lattice, one factorisation per visited point, from a given start.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import NamedTuple

import numpy as np
import scipy.linalg
import torch

from molntk.errors import InputError
from molntk.regression.blocked_cholesky import lower_cholesky_in_place

#: Noise scales ρ of the CV grid: λ_E = ρ s_E (half decades; the low end is reached only by
#: kernels accurate enough for a floor ``psd_rtol`` that low: noise-free energies and forces
#: of an accurate quadrature choose the smallest λ the kernel allows).
SCALE_GRID = np.logspace(-13, 1, 29)
#: Ratios q of the CV grid: λ_F = q ρ s_F (decades; up to 1e8: the sparse malonaldehyde force
#: field at N = 100 chose q = 1e7, a lower criterion than on the grid's former end 1e6).
RATIO_GRID = np.logspace(-6, 8, 15)


class NoiseChoice(NamedTuple):
    """The chosen noise levels, their criterion, whether the choice lies on an end of the
    grid (the largest or smallest usable ρ, which may be the floor, an end of the ratios, or
    beside a grid point scored and found not positive definite: then a wider grid, a lower
    floor or a more accurate kernel may do better), and the factorisations of the model the
    search made (one per ratio scored, or per grid point for a search by Cholesky)."""

    reg_energy: float
    reg_force: float
    score: float
    at_grid_edge: bool
    factorisations: int


#: Per ratio q, the LOO residuals at noise scale ρ (None where the system is not positive definite).
ResidualsAt = Callable[[float], "np.ndarray | None"]


def grouped_residuals(block: Callable[[np.ndarray], np.ndarray], alpha: np.ndarray, groups: Sequence[np.ndarray]) -> np.ndarray:
    """Leave-one-group-out residuals r_g = (C_gg)⁻¹ α_g, ``block(g)`` giving C_gg."""
    out = np.empty_like(alpha)
    for g in groups:
        out[g] = np.linalg.solve(block(g), alpha[g])
    return out


def loo_criterion(residuals: np.ndarray, y: np.ndarray, is_force: np.ndarray) -> float:
    """mean(r_E²) / mean(y_E²) + mean(r_F²) / mean(y_F²) (module docstring) of LOO residuals r."""
    norm_e, norm_f = max(float(np.mean(y[~is_force] ** 2)), 1e-300), max(float(np.mean(y[is_force] ** 2)), 1e-300)
    return float(np.mean(residuals[~is_force] ** 2) / norm_e + np.mean(residuals[is_force] ** 2) / norm_f)


def usable_scales(q: float, floor: float, scales: np.ndarray = SCALE_GRID) -> list[float]:
    """The noise scales ρ of ``scales`` whose λ's both reach the floor at ratio q: ρ ≥ floor and q ρ ≥ floor."""
    return [rho for rho in scales if rho >= floor and q * rho >= floor]


def on_grid_edge(rho: float, q: float, floor: float, ratios: np.ndarray = RATIO_GRID,
                 scales: np.ndarray = SCALE_GRID, not_positive: Collection[tuple[float, float]] = ()) -> bool:
    """Whether (ρ, q) lies on an end of the grid (:class:`NoiseChoice`): the smallest or largest
    usable ρ at q (:func:`usable_scales`), an end of ``ratios``, or a neighbour on the (ρ, q)
    lattice (ρ's or q's next grid value, the other fixed) among the points ``not_positive``
    (scored, K + Λ not positive definite): the choice then sits on the edge of the region the
    kernel's accuracy allows."""
    usable = usable_scales(q, floor, scales)
    if rho in (usable[0], usable[-1]) or q in (ratios[0], ratios[-1]):
        return True
    i, j = int(np.argmin(np.abs(scales - rho))), int(np.argmin(np.abs(ratios - q)))
    neighbours = [(scales[i - 1], q), (scales[i + 1], q), (rho, ratios[j - 1]), (rho, ratios[j + 1])]
    failed = {(float(a), float(b)) for a, b in not_positive}
    return any((float(a), float(b)) in failed for a, b in neighbours)


def nearest_index(grid: np.ndarray, value: float) -> int:
    """The index of the point of a logarithmic ``grid`` nearest to ``value`` > 0 in log."""
    return int(np.argmin(np.abs(np.log10(np.asarray(grid) / value))))


def search_noise(residuals_for: Callable[[float], ResidualsAt], y: np.ndarray, is_force: np.ndarray, scale_e: float,
                 scale_f: float, floor: float = 0.0, ratios: np.ndarray = RATIO_GRID,
                 scales: np.ndarray = SCALE_GRID) -> NoiseChoice:
    """The (λ_E, λ_F) minimising the module docstring's criterion (:class:`NoiseChoice`);
    ``residuals_for(q)`` factorises the model for ratio q and returns its residuals at each ρ. InputError (naming
    ``psd_rtol``) when no grid point gives a positive definite system."""
    counted, failed = _Counted(residuals_for), []
    best = min((_best_at_ratio(counted, q, y, is_force, floor, scales, failed) + (q,) for q in ratios),
               key=lambda t: t[0])
    return _choice(*best, scale_e, scale_f, floor, ratios, scales, counted.calls, failed)


def climb_ratios(residuals_for: Callable[[float], ResidualsAt], y: np.ndarray, is_force: np.ndarray, scale_e: float,
                 scale_f: float, floor: float = 0.0, ratios: np.ndarray = RATIO_GRID,
                 scales: np.ndarray = SCALE_GRID, start: int | None = None) -> NoiseChoice:
    """:func:`search_noise`'s criterion minimised over every ρ of each visited ratio but locally
    over the ratios: from ``ratios[start]`` (None: the middle one) to the lower of its two
    neighbours while that is lower than the current ratio's best: one factorisation per visited
    ratio (3 or more) instead of one per ratio, for models whose factorisation per ratio is
    dear (the SVD of an r × r system per ratio with r in the tens of thousands). A local minimum
    in q; the choice is the grid's where the criterion's best over ρ is unimodal in log q.
    InputError (naming ``psd_rtol``) when no visited point gives a positive definite system."""
    visited: dict[int, tuple[float, float]] = {}
    counted, failed = _Counted(residuals_for), []

    def best_at(j: int) -> float:
        if j not in visited:
            visited[j] = _best_at_ratio(counted, ratios[j], y, is_force, floor, scales, failed)
        return visited[j][0]

    here = len(ratios) // 2 if start is None else int(start)
    while True:
        lower = min((j for j in (here - 1, here + 1) if 0 <= j < len(ratios)), key=best_at)
        if not best_at(lower) < best_at(here):
            break
        here = lower
    return _choice(*visited[here], ratios[here], scale_e, scale_f, floor, ratios, scales, counted.calls, failed)


class _Counted:
    """``residuals_for`` that counts its calls (each one factorisation of the model)."""

    def __init__(self, residuals_for: Callable[[float], ResidualsAt]) -> None:
        self.residuals_for, self.calls = residuals_for, 0

    def __call__(self, q: float) -> ResidualsAt:
        self.calls += 1
        return self.residuals_for(q)


def _best_at_ratio(residuals_for: Callable[[float], ResidualsAt], q: float, y: np.ndarray, is_force: np.ndarray,
                   floor: float, scales: np.ndarray, failed: list[tuple[float, float]]) -> tuple[float, float]:
    """(criterion, ρ) of the best usable ρ at ratio q ((inf, nan) when none is usable and positive
    definite); appends to ``failed`` each (ρ, q) whose system is not positive definite."""
    best: tuple[float, float] = (np.inf, np.nan)
    usable = usable_scales(q, floor, scales)
    if not usable:
        return best
    residuals_at = residuals_for(float(q))
    for rho in usable:
        res = residuals_at(float(rho))
        if res is None:
            failed.append((float(rho), float(q)))
        elif (score := loo_criterion(res, y, is_force)) < best[0]:
            best = (score, rho)
    return best


def _choice(score: float, rho: float, q: float, scale_e: float, scale_f: float, floor: float, ratios: np.ndarray,
            scales: np.ndarray, factorisations: int, not_positive: list[tuple[float, float]]) -> NoiseChoice:
    """The :class:`NoiseChoice` of the grid point (ρ, q) with its criterion ``score``."""
    if not np.isfinite(score):
        raise InputError("psd_rtol", f"no noise level of the CV grid at or above the floor {floor} gives a positive definite system")
    return NoiseChoice(rho * scale_e, q * rho * scale_f, score,
                       on_grid_edge(rho, q, floor, ratios, scales, not_positive), factorisations)


def cholesky_grouped_residuals(K: torch.Tensor, y: torch.Tensor, lam: torch.Tensor,
                               groups: Sequence[np.ndarray]) -> np.ndarray | None:
    """Grouped LOO residuals r_g = (C_gg)⁻¹ α_g with C = (K + diag(λ))⁻¹, α = C y, from one
    Cholesky factorisation and inversion on K's device (float64 tensors; the groups' blocks
    solved together per group size); None when K + diag(λ) is not positive definite. Memory
    besides K: on the CPU one matrix of its size (LAPACK's potrf and potri in place, the lower
    triangle of C), on a GPU two (factor and inverse)."""
    if K.device.type == "cpu":
        inverse = _cpu_lower_inverse(K.numpy(), lam.numpy())
        if inverse is None:
            return None
        alpha = scipy.linalg.blas.dsymv(1.0, inverse, y.numpy(), lower=1)
        block = lambda rows: _symmetric_block(inverse, rows)  # noqa: E731
    else:
        shifted = K.clone()
        shifted.diagonal().add_(lam)
        factor, info = torch.linalg.cholesky_ex(shifted)
        del shifted
        if int(info) != 0:
            return None
        inverse = torch.cholesky_inverse(factor)
        del factor
        alpha = inverse @ y
        block = lambda rows: inverse[rows[:, :, None], rows[:, None, :]]  # noqa: E731
    out, alpha = torch.empty(len(y), dtype=torch.float64, device=K.device), torch.as_tensor(alpha, device=K.device)
    for size in sorted({len(g) for g in groups}):
        rows = torch.as_tensor(np.stack([g for g in groups if len(g) == size]), device=K.device)
        out[rows] = torch.linalg.solve(torch.as_tensor(block(rows)), alpha[rows])
    return out.cpu().numpy()


def _cpu_lower_inverse(K: np.ndarray, lam: np.ndarray) -> np.ndarray | None:
    """The lower triangle of (K + diag(λ))⁻¹ in one working copy (the blocked Cholesky of
    :mod:`~molntk.regression.blocked_cholesky`, then LAPACK dpotri), or None when K + diag(λ)
    is not positive definite."""
    work = np.array(K, order="F", copy=True)
    work[np.diag_indices_from(work)] += lam
    if lower_cholesky_in_place(work) != 0:
        return None
    inverse, info = scipy.linalg.lapack.dpotri(work, lower=1, overwrite_c=1)
    return inverse if info == 0 else None


def _symmetric_block(lower: np.ndarray, rows: torch.Tensor) -> np.ndarray:
    """C[g, g] for each row set g of ``rows`` (G, s), from the lower triangle of a symmetric C."""
    r = rows.numpy()
    i, j = np.maximum(r[:, :, None], r[:, None, :]), np.minimum(r[:, :, None], r[:, None, :])
    return lower[i, j]


def climb_noise(score: Callable[[int, int], float], start: tuple[int, int],
                shape: tuple[int, int] = (len(SCALE_GRID), len(RATIO_GRID))) -> tuple[int, int]:
    """A local minimum of ``score(i, j)`` (the criterion at ρ = SCALE_GRID[i], q = RATIO_GRID[j];
    inf where unusable or not positive definite) on the lattice of ``shape``: from ``start`` up
    in ρ to the first finite point, then to the best of the four neighbours (ρ half a decade,
    q a decade either way) while that is lower. InputError (naming ``psd_rtol``) when no ρ
    above the start is positive definite."""
    here = start
    while not np.isfinite(score(*here)) and here[0] + 1 < shape[0]:
        here = (here[0] + 1, here[1])
    if not np.isfinite(score(*here)):
        raise InputError("psd_rtol", "no noise level of the CV grid at or above the start gives a positive definite system")
    while True:
        i, j = here
        neighbours = [(i + di, j + dj) for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1))
                      if 0 <= i + di < shape[0] and 0 <= j + dj < shape[1]]
        best = min(neighbours, key=lambda p: score(*p))
        if score(*best) >= score(*here):
            return here
        here = best
