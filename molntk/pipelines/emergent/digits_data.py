"""The digits of ``task: emergent-digits`` and their C_K orbits.

scikit-learn's handwritten digits (8×8, bundled: no network), pixel values / 16 ∈ [0, 1],
``data.pad`` zero pixels around each; a seeded permutation picks n training and m test
digits. Out of distribution: m images of Gaussian noise with the training pixels' mean and
standard deviation. Targets: one-hot class scores (10 outputs), which rotations leave
unchanged (ρ_out = identity).

Orbits: with K the largest k of the sweep, every image x gives ρ(2πg/K) x, g < K
(:func:`~molntk.kernels.cn.rotate_images`: exact ``rot90`` for quarter turns, bilinear
interpolation with zeros outside the image otherwise), rotated before standardisation, so
that what comes in from outside the frame is background; then every image is standardised
with the training digits' pixel mean and std (scalars: standardising commutes with exact
rotations). Since every k of the sweep divides K, the C_k orbit is the sub-orbit
g ∈ (K/k)·{0, …, k − 1} (:func:`sub_orbit`): one set of images serves every k, and the
C_k-augmented training set is nested in the C_K one; k = 1 is the un-augmented set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import Tensor

from molntk.kernels.cn import rotate_images
from molntk.pipelines.emergent.digits_config import EmergentDigitsConfig
from molntk.pipelines.images.classification import one_hot

#: The digits' classes 0–9, one output each.
CLASSES = 10
#: The two evaluation sets, in the order of the evaluation inputs.
SETS = ("in", "ood")


def orbit(x: Tensor, order: int) -> Tensor:
    """ρ(2πg/K) x for g = 0..K−1 (K = ``order``), g-major: (K, N, C, H, W)."""
    return torch.stack([rotate_images(x, 2 * math.pi * g / order) for g in range(order)])


def sub_orbit(k: int, order: int, size: int, sets: int = 1) -> Tensor:
    """Indices of the C_k sub-orbit in ``sets`` stacked g-major C_K orbits of ``size`` images
    each (rows s·K·size + g·size + i): row s·K·size + (K/k)·j·size + i for s < sets, j < k,
    i < size, in that order."""
    g = torch.arange(k) * (order // k)
    rows = torch.arange(sets)[:, None, None] * order * size + g[None, :, None] * size + torch.arange(size)
    return rows.flatten()


@dataclass(frozen=True)
class DigitsData:
    """``orbit_train`` (K, n, 1, H, W): the C_K orbits of the training digits; ``y_train``
    (n, 10) their one-hot scores; ``x_eval`` (2·K·m, 1, H, W): the C_K orbits of the m test
    digits ("in"), then of the m noise images ("ood"), g-major; ``labels_test`` (m,).
    Standardised, float64."""

    orbit_train: Tensor
    y_train: Tensor
    x_eval: Tensor
    labels_test: Tensor

    @property
    def order(self) -> int:
        """K, the size of the stored orbits."""
        return self.orbit_train.shape[0]

    @property
    def m(self) -> int:
        return self.labels_test.shape[0]

    @property
    def x_train(self) -> Tensor:
        """The training digits themselves (g = 0), (n, 1, H, W)."""
        return self.orbit_train[0]

    def train_rows(self, k: int) -> Tensor:
        """Rows of the C_k-augmented training set in ``orbit_train.flatten(0, 1)`` (k·n)."""
        return sub_orbit(k, self.order, self.orbit_train.shape[1])

    def augmented(self, k: int) -> tuple[Tensor, Tensor]:
        """The C_k-augmented training set, images (k·n, 1, H, W) g-major and scores (k·n, 10)."""
        return self.orbit_train.flatten(0, 1)[self.train_rows(k)], self.y_train.repeat(k, 1)

    def eval_rows(self, k: int) -> Tensor:
        """Rows of ``x_eval`` on the C_k orbits (2·k·m): "in" (k·m, g-major), then "ood"."""
        return sub_orbit(k, self.order, self.m, sets=len(SETS))


def digits_data(config: EmergentDigitsConfig) -> DigitsData:
    """The sets of :class:`DigitsData` from ``data.seed`` (the subset; + 1: the noise)."""
    data, order = config.data, config.augmentation.k[-1]
    digits = load_digits()
    chosen = np.random.default_rng(data.seed).permutation(len(digits.target))[: data.n_train + data.n_test]
    images = F.pad(torch.from_numpy(digits.images[chosen] / 16.0)[:, None], (data.pad,) * 4)
    train, test = images[: data.n_train], images[data.n_train :]
    mean, std = float(train.mean()), float(train.std())
    generator = torch.Generator().manual_seed(data.seed + 1)
    noise = mean + std * torch.randn(test.shape, generator=generator, dtype=torch.float64)
    x_eval = torch.cat([orbit(test, order).flatten(0, 1), orbit(noise, order).flatten(0, 1)])
    labels = torch.from_numpy(digits.target[chosen])
    return DigitsData(
        orbit_train=(orbit(train, order) - mean) / std,
        y_train=torch.from_numpy(one_hot(labels[: data.n_train].numpy(), CLASSES)),
        x_eval=(x_eval - mean) / std,
        labels_test=labels[data.n_train :],
    )
