"""The two-noise-level search (molntk.regression.noise_search) on residual functions whose
criterion is known in closed form: it finds the grid's minimum and says when that lies on an
end of the grid or at the floor; the local searches (``climb_noise``, ``climb_ratios``) on
bowls; the Cholesky route to grouped LOO residuals against refits without each group."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from molntk.errors import InputError
from molntk.regression.noise_search import (RATIO_GRID, SCALE_GRID, cholesky_grouped_residuals, climb_noise, climb_ratios,
                                            loo_criterion, on_grid_edge, search_noise)

IS_FORCE = np.array([False, True, True, True])
Y = np.ones(4)


def bowl(best_rho: float, best_q: float):
    """Residuals whose criterion is (log ρ − log ρ*)² + (log q − log q*)² + 1 (each kind's
    normalised MSE half of it; y = 1)."""
    def residuals_for(q: float):
        def residuals_at(rho: float) -> np.ndarray:
            value = np.log10(rho / best_rho) ** 2 + np.log10(q / best_q) ** 2 + 1.0
            return np.full(4, np.sqrt(value / 2))
        return residuals_at
    return residuals_for


def test_the_minimum_inside_the_grid_is_found_and_not_flagged():
    choice = search_noise(bowl(1e-4, 10.0), Y, IS_FORCE, scale_e=2.0, scale_f=3.0)
    assert choice.reg_energy == pytest.approx(1e-4 * 2.0) and choice.reg_force == pytest.approx(10.0 * 1e-4 * 3.0)
    assert choice.score == pytest.approx(1.0) and not choice.at_grid_edge


@pytest.mark.parametrize("best_rho, best_q, floor, rho_chosen", [
    (1e-20, 1.0, 0.0, SCALE_GRID[0]),     # below the grid: its smallest ρ
    (1e-20, 1.0, 1e-6, 1e-6),             # below the floor: the floor
    (1e5, 1.0, 0.0, SCALE_GRID[-1]),      # above the grid
])
def test_a_choice_on_an_end_of_the_grid_or_at_the_floor_is_flagged(best_rho, best_q, floor, rho_chosen):
    choice = search_noise(bowl(best_rho, best_q), Y, IS_FORCE, scale_e=1.0, scale_f=1.0, floor=floor)
    assert choice.reg_energy == pytest.approx(rho_chosen) and choice.at_grid_edge


def test_a_ratio_on_an_end_is_flagged_and_no_positive_definite_point_is_an_input_error():
    assert search_noise(bowl(1e-4, 1e9), Y, IS_FORCE, 1.0, 1.0).reg_force == pytest.approx(1e-4 * RATIO_GRID[-1])
    assert search_noise(bowl(1e-4, 1e9), Y, IS_FORCE, 1.0, 1.0).at_grid_edge
    with pytest.raises(InputError, match="psd_rtol"):
        search_noise(lambda q: (lambda rho: None), Y, IS_FORCE, 1.0, 1.0)


def test_the_edge_at_a_small_ratio_is_where_the_force_noise_meets_the_floor():
    # q = 1e-2, floor 1e-6: λ_F = q ρ reaches the floor first, at ρ = 1e-4 (the grid's index 18)
    assert SCALE_GRID[18] == pytest.approx(1e-4)
    assert on_grid_edge(SCALE_GRID[18], 1e-2, floor=1e-6)
    assert not on_grid_edge(SCALE_GRID[19], 1e-2, floor=1e-6)
    assert not on_grid_edge(SCALE_GRID[18], 1.0, floor=1e-6)  # at q = 1 the floor is ρ = 1e-6
    assert on_grid_edge(SCALE_GRID[-1], 1.0, floor=0.0) and on_grid_edge(SCALE_GRID[18], RATIO_GRID[0], floor=0.0)


def not_positive_below(residuals_for, rho_min: float = 0.0, q_min: float = 0.0):
    """``residuals_for`` with K + Λ not positive definite (None) where ρ < ρ_min or q < q_min."""
    return lambda q: (lambda rho: None if rho < rho_min or q < q_min else residuals_for(q)(rho))


@pytest.mark.parametrize("search", [search_noise, climb_ratios])
def test_a_choice_beside_a_not_positive_definite_point_is_flagged(search):
    """The bowl's minimum lies where K + Λ is not positive definite: the search stops at the
    region's edge, inside the grid's usable ρ and q, and says so; a minimum away from that
    region is not flagged."""
    rho_min, q_min = float(SCALE_GRID[10]), float(RATIO_GRID[5])  # 1e-8, 0.1: the climb starts at q = 10
    in_rho = search(not_positive_below(bowl(1e-20, 10.0), rho_min=rho_min), Y, IS_FORCE, 1.0, 1.0)
    assert in_rho.reg_energy == pytest.approx(rho_min) and in_rho.at_grid_edge
    in_q = search(not_positive_below(bowl(1e-4, 1e-6), q_min=q_min), Y, IS_FORCE, 1.0, 1.0)
    assert in_q.reg_force == pytest.approx(q_min * 1e-4) and in_q.at_grid_edge
    away = search(not_positive_below(bowl(1e-4, 10.0), rho_min=rho_min), Y, IS_FORCE, 1.0, 1.0)
    assert away.reg_energy == pytest.approx(1e-4) and not away.at_grid_edge
    assert on_grid_edge(1e-4, 10.0, 0.0) is False
    assert on_grid_edge(1e-4, 10.0, 0.0, not_positive=[(1e-4, 1.0)]) is True  # the next smaller ratio failed
    assert on_grid_edge(1e-4, 10.0, 0.0, not_positive=[(1e-4, 1e-1)]) is False  # two ratios away


def lattice_bowl(best: tuple[int, int], not_positive_below: int = -1):
    """Scores (i − i*)² + (j − j*)² + 1 on the lattice, inf for ρ indices ≤ ``not_positive_below``."""
    def score(i: int, j: int) -> float:
        return np.inf if i <= not_positive_below else (i - best[0]) ** 2 + (j - best[1]) ** 2 + 1.0
    return score


@pytest.mark.parametrize("start", [(0, 0), (28, 12), (10, 3)])
def test_the_climb_finds_the_minimum_of_a_bowl_from_any_start(start):
    assert climb_noise(lattice_bowl((7, 9)), start) == (7, 9)


def test_the_climb_goes_up_in_rho_out_of_the_not_positive_definite_region():
    """From a start where K + Λ is not positive definite (inf) the climb moves up in ρ to the
    first finite point; the bowl's minimum lies in the inf region, so it stops at its edge."""
    assert climb_noise(lattice_bowl((3, 6), not_positive_below=5), (1, 6)) == (6, 6)
    with pytest.raises(InputError, match="psd_rtol"):
        climb_noise(lambda i, j: np.inf, (0, 0))


def counted(residuals_for):
    """``residuals_for`` that records each ratio it factorises."""
    calls: list[float] = []

    def wrapped(q: float):
        calls.append(q)
        return residuals_for(q)
    return wrapped, calls


@pytest.mark.parametrize("best_q, start", [(10.0, None), (1e-5, None), (1e8, 2), (1e3, 14)])
def test_the_ratio_climb_finds_the_grids_choice_of_a_bowl_with_fewer_factorisations(best_q, start):
    """The criterion's best over ρ is unimodal in log q: the climb ends at the grid search's
    choice (the same λ's, criterion and edge flag), each visited ratio factorised once, and
    fewer ratios than the grid's 15 (from the middle: |steps| + 3 at most); each choice
    reports the factorisations it made."""
    grid = search_noise(bowl(1e-4, best_q), Y, IS_FORCE, 2.0, 3.0)
    residuals_for, calls = counted(bowl(1e-4, best_q))
    climb = climb_ratios(residuals_for, Y, IS_FORCE, 2.0, 3.0, start=start)
    assert climb[:4] == grid[:4]
    assert len(calls) == len(set(calls)) < len(RATIO_GRID)
    assert climb.factorisations == len(calls) and grid.factorisations == len(RATIO_GRID)
    here = len(RATIO_GRID) // 2 if start is None else start
    target = int(np.argmin(np.abs(np.log10(RATIO_GRID / best_q))))
    assert len(calls) <= abs(target - here) + 3


def test_the_ratio_climb_stops_at_the_local_minimum_nearer_its_start():
    """Two wells in log q (q = 1e-4 deeper, q = 1e4 shallower): from the middle the climb goes
    to the one it reaches first downhill, which the full grid search passes over; and no
    positive definite point is an InputError naming ``psd_rtol``."""
    def two_wells(q: float):
        depth = min(np.log10(q / 1e-4) ** 2, np.log10(q / 1e4) ** 2 + 0.5)
        return lambda rho: np.full(4, np.sqrt((np.log10(rho / 1e-4) ** 2 + depth + 1.0) / 2))
    assert search_noise(two_wells, Y, IS_FORCE, 1.0, 1.0).reg_force == pytest.approx(1e-8)
    assert climb_ratios(two_wells, Y, IS_FORCE, 1.0, 1.0, start=9).reg_force == pytest.approx(1.0)
    with pytest.raises(InputError, match="psd_rtol"):
        climb_ratios(lambda q: (lambda rho: None), Y, IS_FORCE, 1.0, 1.0)


def test_cholesky_grouped_residuals_are_the_brute_force_leave_one_group_out():
    """Groups of unequal sizes, residuals against refitting without each group (explicit
    solves); a matrix that is not positive definite gives None."""
    rng = np.random.default_rng(1)
    groups = [np.array([0, 4, 5]), np.array([1, 6]), np.array([2, 7, 8]), np.array([3])]
    n = 9
    x = rng.normal(size=(n, n + 2))
    K, y, lam = x @ x.T, rng.normal(size=n), np.full(n, 0.2)
    got = cholesky_grouped_residuals(torch.as_tensor(K), torch.as_tensor(y), torch.as_tensor(lam), groups)
    for g in groups:
        keep = np.setdiff1d(np.arange(n), g)
        a = np.linalg.solve(K[np.ix_(keep, keep)] + np.diag(lam[keep]), y[keep])
        np.testing.assert_allclose(got[g], y[g] - K[np.ix_(g, keep)] @ a, rtol=0, atol=1e-10)
    assert cholesky_grouped_residuals(torch.as_tensor(K), torch.as_tensor(y), torch.as_tensor(np.full(n, -50.0)), groups) is None


def test_the_criterion_is_the_sum_of_the_normalised_mean_squared_errors():
    residuals, y = np.array([1.0, 2.0, 0.0, 2.0]), np.array([2.0, 1.0, 3.0, 1.0])
    assert loo_criterion(residuals, y, IS_FORCE) == pytest.approx(1.0 / 4.0 + (4.0 + 0.0 + 4.0) / 3 / (11.0 / 3))
