"""The digits experiment: the networks, the NTK predictions and what is measured.

Data (:mod:`~molntk.pipelines.emergent.digits_data`): n digits with one-hot class scores,
augmented by their C_k orbits to k·n; evaluation inputs are the C_k orbits of m test digits
("in") and of m Gaussian-noise images ("ood"). The target is a vector of class scores, as
in NTK classification (one-hot regression on the mean squared error, the label the argmax):
the class of a digit does not change when it turns, so the predictor should be invariant,
and it has both a continuous orbit spread (the scores) and a discrete one (the labels).

Networks: the CNN-GAP (:func:`cnn`), whose finite twins the ensembles train (NTK
parametrisation), and the C_k GCNN with the same layers (:func:`gcnn_for`). Trained on the
k·n augmented digits, the ensemble mean tends as the width grows to the NTK prediction μ_s
of the CNN on the augmented set (:func:`ntk_predictions`, rate η / kn); for k ∈ {2, 4}
(exact rotations) that equals μ_s of the C_k GCNN on the n digits (rate η / n), exactly
C_k-invariant; for other k the rotations interpolate and the two differ.

Measured per ensemble (k, augmented or not, width) and training step s, on the C_k orbits
(records of :func:`ensemble_records`):

- the ensemble against μ_s of its own training set (:func:`~molntk.pipelines.emergent.measures.ntk_agreement`);
- ``orbit_std_<who>_<set>``: the relative orbit std (:mod:`molntk.ensembles.orbits`) of
  the class scores ŷ(ρ(g) x) over g, for the ensemble mean, single members (mean over
  members), μ_s (``ntk``), the GCNN's μ_s (``gcnn``), and the means of sub-ensembles of
  every size E in ``ensemble.sizes`` (``E<size>``, mean over ⌊members / E⌋ disjoint groups);
- ``orbit_same_<who>_<set>``: the fraction of the orbit whose predicted label is that of
  the un-rotated image, mean over images (1: invariant labels; (1 + (k − 1)/10) / k for
  labels drawn at random);
- ``ntk_vs_gcnn_<set>``: ⟨μ_s − μ_s^GCNN⟩ / ⟨μ_s^GCNN⟩ (0 to rounding for exact rotations);
- ``accuracy_<who>``: the fraction of the test digits' orbit images labelled right.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from molntk.ensembles import TrainingRun, group_means, kernel_learning_rate, member_relative_orbit_std, relative_orbit_std
from molntk.kernels.cn import CnNetwork, cnn_gap, gcnn, serial
from molntk.kernels.result import PooledKernel
from molntk.pipelines.emergent.digits_config import EmergentDigitsConfig
from molntk.pipelines.emergent.digits_data import CLASSES, SETS, DigitsData
from molntk.pipelines.emergent.measures import NTKPrediction, ntk_agreement, ntk_prediction, rms
from molntk.pipelines.images.classification import orbit_same_predictions


def _layers(config: EmergentDigitsConfig) -> dict[str, Any]:
    net = config.network
    return dict(
        k=net.filter, padding=net.padding, activation=net.activation, head=net.head, sigma_w=net.sigma_w, sigma_b=net.sigma_b
    )


def cnn(config: EmergentDigitsConfig) -> CnNetwork:
    """The CNN-GAP of ``network`` with a readout of the 10 class scores (the kernel, per
    output unit, is that of one output: Θ ⊗ I)."""
    *body, readout = cnn_gap(config.network.depth, **_layers(config)).layers
    return serial(*body, replace(readout, out=CLASSES))


def gcnn_for(config: EmergentDigitsConfig, k: int) -> CnNetwork:
    """The C_k GCNN with the CNN's layers, its head per rotation and averaged last (the
    ordering for which the augmentation identity holds, :mod:`molntk.kernels.cn.models`)."""
    return gcnn(k, config.network.depth, per_rotation_head=True, **_layers(config))


def select(kernel: PooledKernel, rows: Tensor | slice, cols: Tensor) -> PooledKernel:
    """The kernel between the inputs ``rows`` of its first set and ``cols`` of its second."""
    return PooledKernel(
        nngp=kernel.nngp[rows][:, cols], ntk=kernel.ntk[rows][:, cols], self1=kernel.self1[rows], self2=kernel.self2[cols]
    )


@dataclass(frozen=True)
class NTKPredictions:
    """``cnn``: training set k (1: un-augmented) → μ_s and Σ_s of the CNN on all evaluation
    inputs (2·K·m); ``gcnn``: k → those of the C_k GCNN on the C_k orbits (2·k·m); the step
    size ``lr`` shared by every run."""

    cnn: dict[int, NTKPrediction]
    gcnn: dict[int, NTKPrediction]
    lr: float


def ntk_predictions(config: EmergentDigitsConfig, data: DigitsData, steps: tuple[int, ...]) -> NTKPredictions:
    """μ_s and Σ_s after each of ``steps`` gradient-descent steps: the CNN on every training
    set (one kernel on the C_K-augmented set, whose sub-blocks are the others), the C_k GCNN
    on the n digits; η = ``lr_scale`` · min n / λ_max over all training kernels."""
    ks = config.augmentation.k
    sets = [*ks, 1] if config.unaugmented else list(ks)
    net, x_all = cnn(config), data.orbit_train.flatten(0, 1)
    train_all, cross_all = net.kernel(x_all), net.kernel(data.x_eval, x_all)
    train = {k: select(train_all, data.train_rows(k), data.train_rows(k)) for k in sets}
    gcnns = {k: gcnn_for(config, k) for k in ks}
    gcnn_train = {k: g.kernel(data.x_train) for k, g in gcnns.items()}
    thetas = [t.ntk.numpy() for t in [*train.values(), *gcnn_train.values()]]
    lr = min(kernel_learning_rate(theta, config.training.lr_scale) for theta in thetas)
    cnn_means = {
        k: ntk_prediction(train[k], select(cross_all, slice(None), data.train_rows(k)), data.augmented(k)[1], lr=lr, steps=steps)
        for k in sets
    }
    gcnn_means = {
        k: ntk_prediction(gcnn_train[k], g.kernel(data.x_eval[data.eval_rows(k)], data.x_train), data.y_train, lr=lr, steps=steps)
        for k, g in gcnns.items()
    }
    return NTKPredictions(cnn_means, gcnn_means, lr)


def on_orbit(values: Tensor, k: int, name: str) -> Tensor:
    """The orbit values of one evaluation set, (k, ..., m, c), from values (..., 2·k·m, c) on
    the C_k orbit rows (:meth:`DigitsData.eval_rows`)."""
    one = values.unflatten(-2, (len(SETS), k, -1))[..., SETS.index(name), :, :, :]
    return one.movedim(-3, 0)


def orbit_same(scores: Tensor) -> Tensor:
    """Fraction of each orbit labelled as its un-rotated image, mean over images, from
    orbit scores (k, ..., m, c): one value per leading index of ``...`` ((): a float tensor)."""
    labels = scores.argmax(-1).movedim(0, -2)  # (..., k, m)
    flat = labels.reshape(-1, *labels.shape[-2:]).numpy()
    same = [orbit_same_predictions(one) / labels.shape[-2] for one in flat]
    return torch.tensor(same, dtype=torch.float64).reshape(labels.shape[:-2])


def accuracy(scores: Tensor, labels: Tensor) -> Tensor:
    """Fraction of orbit images labelled right, from orbit scores (k, ..., m, c) of images
    with labels (m,): (...)."""
    return (scores.argmax(-1) == labels).double().movedim(0, -1).flatten(-2).mean(-1)


def ensemble_records(
    run: TrainingRun, ntk: NTKPredictions, data: DigitsData, *, k: int, augmented: bool, width: int, sizes: list[int]
) -> list[dict[str, Any]]:
    """One record per recorded step for the ensemble trained on the C_k orbits (``augmented``)
    or on the digits alone, measured on the C_k orbits: the measures of the module doc."""
    rows = data.eval_rows(k)
    half = len(rows) // 2
    halves = {"in": slice(0, half), "ood": slice(half, len(rows))}
    own, equivariant = ntk.cnn[k if augmented else 1], ntk.gcnn[k]
    records = []
    for j, step in enumerate(run.steps):
        pred = run.predictions[j].to(torch.float64)[:, rows]  # (E, 2km, 10)
        mu, mu_gcnn = own.mean[j][rows], equivariant.mean[j]
        record: dict[str, Any] = {
            "k": k,
            "augmented": augmented,
            "width": width,
            "members": pred.shape[0],
            "step": step,
            "train_loss": float(run.train_loss[j].mean()),
            **ntk_agreement(pred, mu, own.variance[j][rows], halves),
        }
        single = {"ensemble": pred.mean(0), "ntk": mu, "gcnn": mu_gcnn}  # (2km, 10) each
        many = {"member": pred} | {f"E{size}": group_means(pred, size) for size in sizes}  # (groups, 2km, 10)
        labelled = {**single, "member": pred}
        for name in SETS:
            for who, values in single.items():
                record[f"orbit_std_{who}_{name}"] = relative_orbit_std(on_orbit(values, k, name))
            for who, values in many.items():
                record[f"orbit_std_{who}_{name}"] = float(member_relative_orbit_std(on_orbit(values, k, name)).mean())
            for who, values in labelled.items():
                record[f"orbit_same_{who}_{name}"] = float(orbit_same(on_orbit(values, k, name)).mean())
            record[f"ntk_vs_gcnn_{name}"] = rms(mu[halves[name]] - mu_gcnn[halves[name]]) / rms(mu_gcnn[halves[name]])
        for who, values in labelled.items():
            record[f"accuracy_{who}"] = float(accuracy(on_orbit(values, k, "in"), data.labels_test).mean())
        records.append(record)
    return records

