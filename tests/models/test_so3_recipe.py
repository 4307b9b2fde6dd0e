"""The SO(3) model's one set of defaults: :class:`SO3ModelRecipe`, :class:`SO3NTKRegressor`
and :class:`FeatureConfig` agree; the main QM9 job (configs/qm9_u0.yaml) is the recipe with
its QM9 feature maps, σ_w and λ floor; the recipe builds the model's pieces."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from molntk.features.environments import FeatureConfig
from molntk.features.radial import GaussianBasis
from molntk.kernels.so3 import SO3Grid
from molntk.models import SO3ModelRecipe, SO3NTKRegressor
from molntk.pipelines.qm9.candidates import so3_recipe
from molntk.pipelines.tasks import TASKS
from molntk.regression.selection import DEFAULT_RELATIVE_GRID, lambda_grid, relative_grid_from

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
#: Settings that SO3NTKRegressor takes under the recipe's names.
SHARED = ("layers", "sigma_w", "sigma_b", "grid_band_limit", "sampling", "mode", "pairing", "reduce", "dtype",
          "block_size", "psd_rtol", "rank_rtol")


def test_regressor_defaults_are_the_recipes() -> None:
    recipe, params = SO3ModelRecipe(), SO3NTKRegressor().get_params()
    assert SO3NTKRegressor().recipe() == recipe
    assert {name: params[name] for name in SHARED} == {name: getattr(recipe, name) for name in SHARED}
    assert (params["band_limit"], params["smearing_width"]) == (recipe.features.band_limit, recipe.features.smearing_width)
    assert tuple(params["elements"]) == recipe.features.elements
    assert params["radial"] is None  # the recipe's radial basis


def test_feature_config_defaults_are_the_recipes() -> None:
    assert FeatureConfig() == SO3ModelRecipe().features
    assert FeatureConfig() == FeatureConfig(
        elements=(1, 6, 7, 8, 9), band_limit=4, smearing_width=0.3, radial=GaussianBasis(n=8, r_min=0.5, r_cut=3.0)
    )


def test_main_job_is_the_recipe_with_the_width_growth_maps() -> None:
    """configs/qm9_u0.yaml with its chosen candidate (σ_b = 1, README results) is the recipe
    with four changes, chosen on QM9 training molecules: the width-growth radial basis,
    overlapping neighbour elements (w = 2.18), σ_w = 2.85 (the same pre-activation variance)
    and the λ floor 1e-10."""
    config = TASKS.load(CONFIGS / "qm9_u0.yaml")
    chosen = config.models.so3_ntk.candidates[1]
    assert chosen.smearing_width is None and config.regression.reduce == "auto"  # u0_atom is extensive: sum
    main = so3_recipe(config, chosen, "sum")
    width_growth = GaussianBasis(n=16, r_min=0.7, r_cut=3.0, width_growth=1.5)
    features = dataclasses.replace(FeatureConfig(), radial=width_growth, element_width=2.18)
    assert main == dataclasses.replace(SO3ModelRecipe(), features=features, sigma_w=2.85, psd_rtol=1e-10)


def test_recipe_builds_the_model() -> None:
    recipe = SO3ModelRecipe()
    kernel = recipe.molecular_kernel("cpu")
    assert kernel.ctx.grid == SO3Grid(5, "lebedev") and kernel.ctx.mode == "fast" and kernel.ctx.dtype == torch.float64
    assert (kernel.pairing, kernel.reduce, kernel.block_size, kernel.features) == ("element", "sum", 512, recipe.features)
    assert kernel.network == recipe.network()
    assert recipe.quadrature and np.array_equal(recipe.relative_grid, relative_grid_from(3e-8))
    exact = dataclasses.replace(recipe, mode="exact", dtype="float32")
    assert not exact.quadrature and exact.relative_grid is None
    assert exact.molecular_kernel().ctx.dtype == torch.float32


def test_lambda_grid_floors_quadratures_only() -> None:
    assert lambda_grid(1e-4, quadrature=False) is None
    grid = lambda_grid(1e-4, quadrature=True)
    assert np.array_equal(grid, DEFAULT_RELATIVE_GRID[DEFAULT_RELATIVE_GRID >= 1e-4 * (1 - 1e-9)]) and grid[0] == 1e-4
