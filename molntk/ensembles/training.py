"""Full-batch gradient descent of an ensemble on the mean squared error, with the learning
rate of the kernel dynamics.

Every member minimises its own loss over the n training points (outputs of dimension k)

    L(θ) = 1/(2n) Σ_i ‖f(x_i; θ) - y_i‖²

by s steps θ ← θ - η ∇L from its initialisation. In NTK parametrisation, as the width grows,
the members' outputs become Gaussian processes with the mean and variance of
:class:`~molntk.regression.dynamics.NTKDynamics` fitted with learning rate η / n (the 1/n of
the mean) after ``steps=s`` (the kernel dynamics of gradient descent with step η):

    E[f_s(x)] → Θ(x, X) Θ⁻¹ (I - (I - η Θ / n)^s) Y.

Gradient descent is stable for η λ_max(Θ) / n < 2 (:func:`kernel_learning_rate` picks η from
that ratio). Training with augmentation is training on the augmented set (x, y) → all
(ρ(g) x, ρ_out(g) y).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from molntk.ensembles.stacked import StackedEnsemble


@dataclass(frozen=True)
class TrainingRun:
    """What :func:`train_full_batch` recorded: after ``steps[j]`` steps, the outputs
    ``predictions[j]`` (E, m, ...) of every member on the evaluation inputs and the training
    loss ``train_loss[j]`` (E,) of every member."""

    steps: tuple[int, ...]
    predictions: Tensor
    train_loss: Tensor

    def to_cpu(self) -> TrainingRun:
        """The same record with its tensors on the CPU."""
        return TrainingRun(self.steps, self.predictions.cpu(), self.train_loss.cpu())


def kernel_learning_rate(ntk_train: np.ndarray, scale: float) -> float:
    """η with η λ_max(Θ) / n = ``scale`` for the train NTK Θ (n, n) (stable below 2)."""
    if not 0 < scale < 2:
        raise ValueError(f"the learning-rate scale η λ_max / n must be in (0, 2) for gradient descent to converge, got {scale}")
    top = float(np.linalg.eigvalsh(ntk_train)[-1])
    return scale * ntk_train.shape[0] / top


def record_steps(total: int, count: int) -> tuple[int, ...]:
    """About ``count`` step counts from 1 to ``total``, evenly spaced in log (distinct, sorted)."""
    if total < 1 or count < 1:
        raise ValueError(f"need total >= 1 and count >= 1 steps, got {total} and {count}")
    return tuple(sorted({int(round(s)) for s in np.geomspace(1, total, count)}))


def train_full_batch(
    ensemble: StackedEnsemble, x: Tensor, y: Tensor, evaluate: Tensor, *, lr: float, record: Sequence[int]
) -> TrainingRun:
    """Train every member of ``ensemble`` on (x (n, ...), y (n, ...)) by gradient descent on
    L = 1/(2n) Σ_i ‖f(x_i) - y_i‖² with step ``lr`` for max(record) steps; after each step
    count in ``record`` (0 = at initialisation) evaluate all members on ``evaluate``.

    The ensemble's parameters are updated in place.
    """
    record = sorted(set(int(s) for s in record))
    if not record or record[0] < 0:
        raise ValueError(f"record must list step counts >= 0, got {record}")
    n, last = x.shape[0], record[-1]
    params = list(ensemble.params.values())
    outputs, losses, wanted = [], [], set(record)
    for step in range(last + 1):  # the parameters have taken `step` steps
        out = ensemble(x)
        if out.shape[1:] != y.shape:  # broadcasting would train another loss
            raise ValueError(f"the members' outputs {tuple(out.shape[1:])} do not match the targets {tuple(y.shape)}")
        loss = 0.5 * ((out - y) ** 2).flatten(1).sum(1) / n  # (E,): each member's own loss
        if step in wanted:
            with torch.no_grad():
                outputs.append(ensemble(evaluate))
            losses.append(loss.detach())
        if step == last:
            break
        grads = torch.autograd.grad(loss.sum(), params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(lr * g)
    return TrainingRun(tuple(record), torch.stack(outputs), torch.stack(losses))


def train_ensemble(
    make: Callable[[int], nn.Module],
    seeds: Sequence[int],
    x: Tensor,
    y: Tensor,
    evaluate: Tensor,
    *,
    lr: float,
    record: Sequence[int],
    chunk: int | None = None,
) -> TrainingRun:
    """Build the members ``make(seed)`` (:class:`StackedEnsemble`) and train them by
    :func:`train_full_batch`, ``chunk`` members at a time (None: all together; members are
    independent, so chunks change memory and speed, not results). The networks take the
    dtype and device of ``x``; their outputs are concatenated over chunks in seed order."""
    seeds = [int(s) for s in seeds]
    size = chunk or len(seeds)
    runs = [
        train_full_batch(
            StackedEnsemble(make, seeds[start : start + size], dtype=x.dtype, device=x.device),
            x, y, evaluate, lr=lr, record=record,
        )
        for start in range(0, len(seeds), size)
    ]
    return TrainingRun(
        runs[0].steps,
        torch.cat([run.predictions for run in runs], dim=1),
        torch.cat([run.train_loss for run in runs], dim=1),
    )
