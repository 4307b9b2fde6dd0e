"""Per-target standardisation of regression targets, undone on prediction.

Fitted on the training targets Y (n, k): m_j = mean_i Y_ij and σ_j = std_i Y_ij (ddof 0,
as scikit-learn's ``normalize_y``; σ_j = 1 for a constant target). Then

    Z = (Y - m) / σ,     Y = m + σ Z,     Var[Y] = σ² Var[Z].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from molntk.errors import InputError
from molntk.regression import validation


@dataclass(frozen=True, eq=False)
class TargetScaler:
    """Per-target ``mean`` and ``scale`` (k,); the identity when ``mean = 0, scale = 1``."""

    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, Y: object, *, enabled: bool = True) -> TargetScaler:
        """Mean and std of each column of Y ((n,) or (n, k)); the identity if not ``enabled``."""
        array = validation.as_float64(Y, "Y")
        Y2, _ = validation.targets(array, "Y", rows=max(array.shape[:1], default=1))
        if Y2.shape[0] == 0:
            raise InputError("Y", "has no rows")
        k = Y2.shape[1]
        if not enabled:
            return cls(mean=np.zeros(k), scale=np.ones(k))
        scale = Y2.std(axis=0)
        return cls(mean=Y2.mean(axis=0), scale=np.where(scale > 0, scale, 1.0))

    def transform(self, Y: np.ndarray) -> np.ndarray:
        """Z = (Y - m) / σ (broadcast over the last axis)."""
        return (Y - self.mean) / self.scale

    def inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        """Y = m + σ Z."""
        return self.mean + self.scale * Z

    def inverse_transform_variance(self, variance: np.ndarray) -> np.ndarray:
        """Var[Y] = σ² Var[Z]; a (m,) variance shared by all targets becomes (m, k)."""
        variance = variance[:, None] if variance.ndim == 1 else variance
        return variance * self.scale**2
