"""The SO(3) experiment: QM9 energies, rotation-augmented per-atom MLPs, what is measured.

Data: a random QM9 subset; the target y(M) is the U0 atomization energy minus a dressed-atom
fit Σ_Z n_Z(M) w_Z on the training molecules, divided by σ_y, the standard deviation of that
residual over them (y in units of σ_y). Every molecule is a set of environment feature maps
(:mod:`molntk.features.environments`); a rotation R acts on them by f̂^l ↦ D^l(R) f̂^l
(:mod:`molntk.molecular.rotation`), so rotated copies cost no new featurisation. The l = 0
coefficient of every channel is centred, f̂^0_c ↦ f̂^0_c − ⟨f̂^0_c⟩ (the mean over the
training environments): a rotation-invariant shift (D^0 = 1) that removes the common
positive offset of the densities, which otherwise gives the molecular NTK one eigenvalue
≈ 100 times the next (the direction of the atom counts, which the dressed-atom residual
does not contain), so that gradient descent at the kernel rate would learn nothing else
in a few hundred steps.

Model: E(M) = Σ_{a∈M} N(env_a), one per-atom MLP N shared by all centre elements
(:mod:`~molntk.pipelines.emergent.atom_sum`), trained by full-batch gradient descent on the
augmented set: each of the n training molecules replaced by k Haar-random rotations of it
(n·k molecules, loss 1/(2nk) Σ (E − y)²). Its mean over initialisations tends as the width
grows to the NTK prediction μ_s of the ``shared`` molecular MLP NTK on the n·k augmented
molecules (:class:`~molntk.regression.dynamics.NTKDynamics`, rate η / nk); as k → ∞ that
tends to the prediction of the orbit-averaged kernel, the NTK of the SO(3) network
``lift:L σ pool dense`` (rate η / n), which is invariant (to the accuracy of its grid).

Measured on the evaluation set (the n_test test molecules, then n_rot of them under R
Haar-random rotations each): the **rotation std** of a predictor ŷ,

    rotation std = √( mean_M var_r ŷ(R_r M) )       (var over the R rotations, 1/(R−1)),

in units of σ_y; for the mean of ensembles of every size in ``ensemble.sizes`` (the mean
of the rotation stds of ⌊members / size⌋ disjoint groups; size 1: single members), for
μ_s of the augmented MLP NTK and for the SO(3) NTK; and the test MAE (in σ_y) of each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from molntk.data.qm9 import QM9_ELEMENTS, load_qm9
from molntk.ensembles import TrainingRun, group_means
from molntk.features.environments import EnvironmentBatch, FeatureConfig, environment_features
from molntk.features.radial import GaussianBasis
from molntk.kernels.so3.grids import SO3Grid
from molntk.kernels.so3.spec import parse_architecture
from molntk.molecular import SO3MolecularKernel
from molntk.molecular.baselines.mlp import MLPArchitecture, MLPNTK
from molntk.molecular.rotation import Angles, haar_angles, rotated_batch
from molntk.pipelines.emergent.so3_config import EmergentSO3Config
from molntk.regression import NTKDynamics
from molntk.regression.dressed_atom import DressedAtomModel, element_counts

#: The target: U0 atomization energy (meV).
TARGET = "u0_atom"


def feature_config(config: EmergentSO3Config) -> FeatureConfig:
    f = config.features
    return FeatureConfig(
        elements=QM9_ELEMENTS,
        band_limit=f.band_limit,
        smearing_width=f.smearing_width,
        radial=GaussianBasis(n=f.n_radial, r_min=0.5, r_cut=f.r_cut),
    )


def architecture(config: EmergentSO3Config) -> MLPArchitecture:
    """The per-atom MLP: one hidden layer."""
    net = config.network
    return MLPArchitecture(depth=1, activation=net.activation, sigma_w=net.sigma_w, sigma_b=net.sigma_b)


def mlp_kernel(config: EmergentSO3Config) -> MLPNTK:
    """The molecular NTK of Σ_a N(env_a) with one shared per-atom MLP."""
    return MLPNTK(features=feature_config(config), architecture=architecture(config), pairing="shared")


def so3_kernel(config: EmergentSO3Config) -> SO3MolecularKernel:
    """The molecular NTK of Σ_a N(env_a) with N the SO(3) network ``lift:L σ pool dense``."""
    net, features = config.network, feature_config(config)
    spec = f"lift:{features.band_limit} {net.activation} pool dense"
    so3 = parse_architecture(spec, sigma_w=net.sigma_w, sigma_b=net.sigma_b)
    return SO3MolecularKernel(so3, so3.discretisation(SO3Grid(net.grid), "fast"), pairing="shared", features=features)


@dataclass(frozen=True)
class EnergySets:
    """``train`` (n molecules) with targets ``y_train`` (n,) in units of σ_y = ``sigma_mev``;
    ``evaluate``: the ``n_test`` test molecules, then ``n_rotated`` of them under
    ``rotations`` rotations each (molecule-major); ``y_test`` (n_test,); ``augment_angles``:
    k_max rotations per training molecule (molecule-major); ``slots``: the largest molecule."""

    train: EnvironmentBatch
    y_train: Tensor
    evaluate: EnvironmentBatch
    y_test: Tensor
    rotations: int
    augment_angles: Angles
    sigma_mev: float
    slots: int

    @property
    def n_test(self) -> int:
        return int(self.y_test.shape[0])

    def augmented(self, k: int) -> tuple[EnvironmentBatch, Tensor]:
        """Each training molecule under the first k of its rotations, and the targets (n·k,)."""
        n = self.train.n_molecules
        angles = tuple(a.reshape(n, -1)[:, :k].reshape(-1) for a in self.augment_angles)
        return rotated_batch(self.train, k, angles), self.y_train.repeat_interleave(k)


def energy_sets(config: EmergentSO3Config) -> EnergySets:
    """The sets of :class:`EnergySets` (float64) from ``data.seed`` (subset, rotations of the
    test molecules) and ``augmentation.seed`` (rotations of the training molecules)."""
    data, qm9 = config.data, load_qm9()
    rng = np.random.default_rng(data.seed)
    chosen = rng.choice(len(qm9), data.n_train + data.n_test, replace=False)
    molecules = qm9.molecules(chosen)
    energies = qm9.target(TARGET)[chosen]
    train, test = molecules[: data.n_train], molecules[data.n_train :]
    dressed = DressedAtomModel().fit(element_counts(train, QM9_ELEMENTS), energies[: data.n_train])
    residual = energies - dressed.predict(element_counts(molecules, QM9_ELEMENTS))
    sigma = float(residual[: data.n_train].std())
    y = torch.from_numpy(residual / sigma)
    features = feature_config(config)
    train_batch, test_batch = environment_features(train, features), environment_features(test, features)
    offset = train_batch.coeffs[:, :, 0].mean(0)
    for batch in (train_batch, test_batch):
        batch.coeffs[:, :, 0] -= offset
    angles = haar_angles(data.n_rotated * data.rotations, data.seed + 1)
    rotated = rotated_batch(test_batch.select(range(data.n_rotated)), data.rotations, angles)
    evaluate = _concatenate(test_batch, rotated)
    k_max = config.augmentation.k[-1]
    return EnergySets(
        train=train_batch,
        y_train=y[: data.n_train],
        evaluate=evaluate,
        y_test=y[data.n_train :],
        rotations=data.rotations,
        augment_angles=haar_angles(data.n_train * k_max, config.augmentation.seed),
        sigma_mev=sigma,
        slots=max(m.n_atoms for m in molecules),
    )


def _concatenate(a: EnvironmentBatch, b: EnvironmentBatch) -> EnvironmentBatch:
    """The molecules of ``a`` then those of ``b``."""
    return EnvironmentBatch(
        torch.cat([a.coeffs, b.coeffs]),
        torch.cat([a.centre_numbers, b.centre_numbers]),
        torch.cat([a.molecule_index, b.molecule_index + a.n_molecules]),
        torch.cat([a.atom_index, b.atom_index]),
        a.n_molecules + b.n_molecules,
        a.config,
    )


def ntk_means(kernel: Any, train: EnvironmentBatch, y: Tensor, evaluate: EnvironmentBatch, *, lr: float, steps: tuple[int, ...]) -> Tensor:
    """μ_s (T, m) on ``evaluate`` after each of ``steps`` gradient-descent steps of size ``lr``
    on the mean squared error over the training molecules (kernel rate lr / n)."""
    dyn = NTKDynamics.fit(kernel(train).ntk, y, lr=lr / train.n_molecules)
    return torch.from_numpy(dyn.means(kernel(evaluate, train).ntk, steps=steps)[..., 0])


def rotation_std(predictions: Tensor, n_test: int, rotations: int) -> Tensor:
    """√(mean_M var_r ŷ(R_r M)) over the rotated evaluation molecules: (..., m) → (...)."""
    rotated = predictions[..., n_test:].unflatten(-1, (-1, rotations))
    return rotated.var(-1, correction=1).mean(-1).sqrt()


def test_mae(predictions: Tensor, y_test: Tensor) -> Tensor:
    """Mean |ŷ − y| over the test molecules: (..., m) → (...)."""
    return (predictions[..., : y_test.shape[0]] - y_test).abs().mean(-1)


def ensemble_records(
    run: TrainingRun, ntk: Tensor, so3: Tensor, sets: EnergySets, *, k: int, width: int, sizes: list[int]
) -> list[dict[str, Any]]:
    """One record per recorded step for the ensemble trained with k rotations at ``width``:
    rotation stds and test MAEs (module doc) of the ensemble, its sub-ensembles and single
    members, of μ_s of the augmented MLP NTK (``ntk``, (T, m)) and of the SO(3) NTK (``so3``)."""
    members = run.predictions.shape[1]
    spread = lambda p: rotation_std(p, sets.n_test, sets.rotations)  # noqa: E731
    records = []
    for j, step in enumerate(run.steps):
        pred = run.predictions[j].to(torch.float64)  # (E, m)
        mean = pred.mean(0)
        record = {
            "k": k,
            "width": width,
            "members": members,
            "step": step,
            "train_loss": float(run.train_loss[j].mean()),
            "rotation_std_ensemble": float(spread(mean)),
            "rotation_std_member": float(spread(pred).mean()),
            "rotation_std_ntk": float(spread(ntk[j])),
            "rotation_std_so3": float(spread(so3[j])),
            "test_mae_ensemble": float(test_mae(mean, sets.y_test)),
            "test_mae_member": float(test_mae(pred, sets.y_test).mean()),
            "test_mae_ntk": float(test_mae(ntk[j], sets.y_test)),
            "test_mae_so3": float(test_mae(so3[j], sets.y_test)),
        }
        for size in sizes:
            record[f"rotation_std_E{size}"] = float(spread(group_means(pred, size)).mean())
        records.append(record)
    return records
