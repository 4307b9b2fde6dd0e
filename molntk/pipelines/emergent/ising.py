"""The Ising experiment: data, the NTK prediction, the ensembles and what is measured.

Data (:mod:`molntk.data.ising`): n ±1 configurations on the periodic L × L lattice, their
local energies E(i) as targets (L² outputs), augmented by the C4 orbit to 4n; evaluation
inputs are the C4 orbits of m fresh ±1 configurations ("in") and of m configurations with
N(0, 1) spins ("ood").

Network: one hidden layer, ``serial(Flatten(), Dense(), Nonlinearity(σ), Dense(out=L²))``
(:mod:`molntk.kernels.cn`), whose finite twins the ensembles train and whose kernel Θ(x, x')
(per output unit; Θ ⊗ I for the L² outputs) gives the NTK prediction
μ_s = Θ(x, X) Θ⁻¹ (I - (I - η Θ / n)^s) Y after s gradient-descent steps of size η on the
augmented set (:class:`~molntk.regression.dynamics.NTKDynamics`). Trained on the full
orbits, that prediction is exactly C4-equivariant; it equals the one of the orbit-averaged
(GCNN) kernel on the un-augmented data (tests/pipelines/test_emergent.py).

Measured per width w, training step s (records of :func:`ensemble_records`), with ⟨·⟩ the
RMS over inputs and sites:

- the ensemble against the NTK prediction (:mod:`~molntk.pipelines.emergent.measures`):
  ``mean_error`` (``_ood``), ``mc_floor``, ``mc_error``, ``mean_error_excess``,
  ``member_deviation``, ``ntk_gp_std``;
- relative orbit std (:mod:`molntk.ensembles.orbits`) of the ensemble mean, of single
  members (mean over members) and of μ_s, in and out of distribution;
- ``test_rmse_ensemble`` / ``test_rmse_ntk`` against the true local energies (in distribution).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from molntk.data.ising import C4, c4_orbit, local_energies, rotate_lattice, spin_configurations
from molntk.ensembles import TrainingRun, member_relative_orbit_std, relative_orbit_std
from molntk.kernels.cn import CnNetwork, Dense, Flatten, Nonlinearity, serial
from molntk.pipelines.emergent.config import EmergentIsingConfig
from molntk.pipelines.emergent.measures import NTKPrediction, ntk_agreement, rms

#: The two evaluation sets, in the order of the evaluation inputs.
SETS = ("in", "ood")


def ising_network(config: EmergentIsingConfig) -> CnNetwork:
    """The one-hidden-layer MLP with one output per lattice site."""
    net, sites = config.network, config.data.lattice**2
    return serial(
        Flatten(),
        Dense(sigma_w=net.sigma_w, sigma_b=net.sigma_b),
        Nonlinearity(net.activation),
        Dense(out=sites, sigma_w=net.sigma_w, sigma_b=net.sigma_b),
    )


@dataclass(frozen=True)
class IsingData:
    """``x_train`` (n, 1, L, L) and ``y_train`` (n, L²); the augmented ``x_aug`` (4n, 1, L, L),
    ``y_aug`` (4n, L²) (the orbit g = 0..3 of every configuration, g-major); ``x_eval``
    (2·4m, 1, L, L): the orbits of the m "in" then of the m "ood" configurations;
    ``y_test`` (m, L²) the local energies of the "in" configurations."""

    x_train: Tensor
    y_train: Tensor
    x_aug: Tensor
    y_aug: Tensor
    x_eval: Tensor
    y_test: Tensor

    @property
    def m(self) -> int:
        return self.y_test.shape[0]


def ising_data(config: EmergentIsingConfig) -> IsingData:
    """The three sets of :class:`IsingData`, float64, from ``data.seed`` (+1, +2)."""
    data = config.data
    x_train = spin_configurations(data.n_train, data.lattice, seed=data.seed)
    x_in = spin_configurations(data.n_test, data.lattice, seed=data.seed + 1)
    x_ood = spin_configurations(data.n_test, data.lattice, seed=data.seed + 2, kind="gaussian")
    x_aug = c4_orbit(x_train).flatten(0, 1)
    x_eval = torch.cat([c4_orbit(x_in).flatten(0, 1), c4_orbit(x_ood).flatten(0, 1)])
    return IsingData(
        x_train=x_train,
        y_train=local_energies(x_train).flatten(1),
        x_aug=x_aug,
        y_aug=local_energies(x_aug).flatten(1),
        x_eval=x_eval,
        y_test=local_energies(x_in).flatten(1),
    )


def aligned(predictions: Tensor, m: int, lattice: int) -> dict[str, Tensor]:
    """Per evaluation set, the aligned orbit values ρ(g)⁻¹ ŷ(ρ(g) x): (4, ..., m, L²) from
    predictions (..., 2·4m, L²) on :attr:`IsingData.x_eval`."""
    grid = predictions.reshape(*predictions.shape[:-2], len(SETS), C4, m, lattice, lattice)
    out = {}
    for i, name in enumerate(SETS):
        back = [rotate_lattice(grid[..., i, g, :, :, :], -g) for g in range(C4)]
        out[name] = torch.stack(back).flatten(-2)
    return out


def ensemble_records(
    run: TrainingRun, ntk: NTKPrediction, data: IsingData, lattice: int, *, width: int, augmented: bool
) -> list[dict[str, Any]]:
    """One record per recorded step: the measures of the module doc for this ensemble."""
    m, rows = data.m, {name: slice(i * C4 * data.m, (i + 1) * C4 * data.m) for i, name in enumerate(SETS)}
    records = []
    for j, step in enumerate(run.steps):
        pred = run.predictions[j].to(torch.float64)  # (E, 2·4m, L²)
        mean, mu = pred.mean(0), ntk.mean[j]
        orbit_ensemble, orbit_members, orbit_ntk = aligned(mean, m, lattice), aligned(pred, m, lattice), aligned(mu, m, lattice)
        record = {
            "augmented": augmented,
            "width": width,
            "members": pred.shape[0],
            "step": step,
            "train_loss": float(run.train_loss[j].mean()),
            **ntk_agreement(pred, mu, ntk.variance[j], rows),
            "test_rmse_ensemble": rms(orbit_ensemble["in"] - data.y_test),
            "test_rmse_ntk": rms(orbit_ntk["in"] - data.y_test),
        }
        for name in SETS:
            record[f"orbit_std_ensemble_{name}"] = relative_orbit_std(orbit_ensemble[name])
            record[f"orbit_std_member_{name}"] = float(member_relative_orbit_std(orbit_members[name]).mean())
            record[f"orbit_std_ntk_{name}"] = relative_orbit_std(orbit_ntk[name])
        records.append(record)
    return records
