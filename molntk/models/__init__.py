"""End-to-end models: molecules in, predictions out.

- :mod:`~molntk.models.so3_recipe`: :class:`SO3ModelRecipe`, the SO(3) NTK model's settings
  with their one set of defaults (the main QM9 job's, configs/qm9_u0.yaml), and the one place
  that builds its feature maps, network, discretisation, molecular kernel and λ grid;
- :mod:`~molntk.models.so3_ntk`: :class:`SO3NTKRegressor`, that model as a scikit-learn
  estimator (exact or sparse kernel ridge, NTK-GP variance, model files);
- :mod:`~molntk.models.so3_ntk_sum`: :class:`SO3NTKSumRegressor`, the NTK of several SO(3)
  networks side by side (Σ_i c_i Θ_i/τ_i, the weights by CV), the same estimator otherwise;
- :mod:`~molntk.models.delta`: the physical baselines (GFN2-xTB) whose residual an
  :class:`SO3NTKRegressor` with ``baseline`` learns (Δ-learning);
- :mod:`~molntk.models.force_field`: :class:`SO3ForceFieldRegressor`, kernel ridge on energies
  and forces together with the derivative kernels of the same NTK (GDML/GAP form);
- :mod:`~molntk.models.loading`: ``load_model``, any of these estimators from its model file.
"""

from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.models.so3_ntk import SO3NTKRegressor
from molntk.models.so3_ntk_sum import SO3NTKSumRegressor
from molntk.models.so3_recipe import SO3ModelRecipe

__all__ = ["SO3ForceFieldRegressor", "SO3ModelRecipe", "SO3NTKRegressor", "SO3NTKSumRegressor"]
