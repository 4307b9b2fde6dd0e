"""The two-noise-level search (molntk.regression.noise_search) on residual functions whose
criterion is known in closed form: it finds the grid's minimum and says when that lies on an
end of the grid or at the floor."""

from __future__ import annotations

import numpy as np
import pytest

from molntk.errors import InputError
from molntk.regression.noise_search import RATIO_GRID, SCALE_GRID, search_noise

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
