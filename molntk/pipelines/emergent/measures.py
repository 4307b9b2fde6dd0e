"""What the emergent-equivariance experiments share: the NTK prediction on evaluation inputs
and the distance of an ensemble from it.

For an ensemble of E members with outputs f_s (E, m, c) after s gradient-descent steps,
the NTK prediction μ_s (m, c) and NTK-GP variance Σ_s (m,) of the same training
(:func:`ntk_prediction`), and ⟨·⟩ the RMS over inputs and outputs of one evaluation set
("in": in distribution), :func:`ntk_agreement` gives

- ``mean_error`` (``mean_error_ood`` on the "ood" rows): ⟨mean_E f_s − μ_s⟩ / ⟨μ_s⟩. Theory:
  a finite-width bias O(1/width) plus the Monte Carlo error of E members, whose expected
  size does not fall with width: ``mc_floor`` = √(mean Σ_s / E) / ⟨μ_s⟩ at infinite width,
  ``mc_error`` = √(mean s² / E) / ⟨μ_s⟩ from the members' sample variance s²;
- ``mean_error_excess`` = √max(mean_error² − mc_error², 0): the bias, with the Monte Carlo
  part taken out (mean_error² − mc_error² estimates the squared bias without bias itself);
- ``member_deviation``: ⟨f_s − μ_s⟩ / ⟨μ_s⟩ over members, single networks against the NTK
  mean; it tends to ``ntk_gp_std`` = √(mean Σ_s) / ⟨μ_s⟩ (the spread of the initialisation
  that training does not remove), not to 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from molntk.kernels.result import PooledKernel
from molntk.regression import NTKDynamics


@dataclass(frozen=True)
class NTKPrediction:
    """μ_s (T, m, c) and the NTK-GP variance Σ_s (T, m) on the evaluation inputs at the
    recorded steps, for training on (x, y) with step η."""

    mean: Tensor
    variance: Tensor


def ntk_prediction(train: PooledKernel, cross: PooledKernel, y: Tensor, *, lr: float, steps: tuple[int, ...]) -> NTKPrediction:
    """μ_s and Σ_s after each of ``steps`` gradient-descent steps of size ``lr`` on the mean
    squared error over the n training points (kernel learning rate η / n), from the network's
    kernels on the training inputs (``train``) and between evaluation and training inputs
    (``cross``, with the evaluation inputs' NNGP self-kernels)."""
    dyn = NTKDynamics.fit(train.ntk, y, nngp_train=train.nngp, lr=lr / train.ntk.shape[0])
    mean = dyn.means(cross.ntk, steps=steps)
    variance = np.stack([dyn.variance(cross.ntk, cross.nngp, cross.self1, steps=s) for s in steps])
    return NTKPrediction(torch.from_numpy(mean), torch.from_numpy(variance))


def rms(x: Tensor) -> float:
    """√(mean x²) over all entries."""
    return float(x.square().mean().sqrt())


def ntk_agreement(pred: Tensor, mu: Tensor, variance: Tensor, rows: dict[str, slice]) -> dict[str, float]:
    """The measures of the module doc for member outputs ``pred`` (E, m, c) against μ_s
    ``mu`` (m, c) and Σ_s ``variance`` (m,); ``rows``: the "in" and "ood" evaluation rows."""
    members, inside = pred.shape[0], rows["in"]
    scale = {name: rms(mu[r]) for name, r in rows.items()}
    error = {name: rms(pred[:, r].mean(0) - mu[r]) / scale[name] for name, r in rows.items()}
    gp_std = float(variance[inside].mean().sqrt()) / scale["in"]
    mc_error = float(pred[:, inside].var(dim=0).mean().div(members).sqrt()) / scale["in"]
    return {
        "mean_error": error["in"],
        "mean_error_ood": error["ood"],
        "mc_floor": gp_std / members**0.5,
        "mc_error": mc_error,
        "mean_error_excess": max(error["in"] ** 2 - mc_error**2, 0.0) ** 0.5,
        "member_deviation": rms(pred[:, inside] - mu[inside]) / scale["in"],
        "ntk_gp_std": gp_std,
    }


def loglog_slope(x: list[float], y: list[float]) -> float | None:
    """Least-squares slope of log y against log x over the points with y > 0 (None if < 2)."""
    points = [(a, b) for a, b in zip(x, y) if b > 0]
    if len(points) < 2:
        return None
    logs = np.log(np.array(points))
    return float(np.polyfit(logs[:, 0], logs[:, 1], 1)[0])
