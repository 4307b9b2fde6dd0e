"""Train/test images for the image-classification pipeline, normalised with training statistics.

Sources (``data.source``):
- ``digits``: scikit-learn's 1797 handwritten digits, each randomly rotated
  (:func:`~molntk.data.images.load_digits_rotated`); a seeded permutation puts ``n_test``
  of them in the test set and the rest in the training pool;
- ``nct-crc-he``: a folder of NCT-CRC-HE tiles (``data.path``), split the same way;
- ``pathmnist``: a MedMNIST ``.npz`` (``data.path``): the training pool is the first
  max(n_train) images of its ``train`` split, the test set the first ``n_test`` of its
  ``test`` split.

The training pool is then permuted with ``data.seed``, so that training sets of the
learning curve are its first n_train images (nested). Channels are normalised,
x ← (x − mean_c) / std_c, with the mean and std of the largest training set; the test set
uses the same statistics, so nothing about it leaks into training.

The evaluation images add ρ(g) x, g = 1..n−1, to test images x (:func:`orbit_images`;
ρ(g): rotation by 2πg/n, :func:`~molntk.kernels.cn.rotate_images`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from molntk.config import ConfigProblem, ConfigValidationError
from molntk.data.images import ImageSet, load_digits_rotated, load_nct_crc_he, load_pathmnist_npz, normalise_channels
from molntk.kernels.cn import rotate_images
from molntk.pipelines.images.config import ImageDataConfig


@dataclass(frozen=True, eq=False)
class ImageSplit:
    """Training pool (its first n images train the size-n model) and test set, (N, C, H, W) float64."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[str, ...]
    description: str


def _too_small(source: str, key: str, message: str) -> ConfigValidationError:
    return ConfigValidationError([ConfigProblem(source, key, message)])


def _split_one_set(data: ImageSet, n_train: int, config: ImageDataConfig, source: str) -> tuple[np.ndarray, ...]:
    """Seeded split of one image set into (x_train, y_train, x_test, y_test)."""
    if config.n_test + n_train > len(data):
        raise _too_small(
            source,
            "data.n_test",
            f"n_test + max(n_train) = {config.n_test} + {n_train} exceeds the {len(data)} images of {config.source}",
        )
    order = np.random.default_rng(config.seed).permutation(len(data))
    test, train = order[: config.n_test], order[config.n_test : config.n_test + n_train]
    return data.images[train], data.labels[train], data.images[test], data.labels[test]


def load_image_split(config: ImageDataConfig, n_train: int, source: str) -> ImageSplit:
    """The normalised training pool (``n_train`` images) and test set that ``config`` asks for.

    ``source`` names the configuration in the error raised when the data has too few images.
    """
    if config.source == "digits":
        data = load_digits_rotated(size=config.size, rotation=config.rotation, seed=config.seed, normalise=False)
        x_train, y_train, x_test, y_test = _split_one_set(data, n_train, config, source)
        what = f"scikit-learn digits, {config.rotation} rotations, {config.size}×{config.size}"
    elif config.source == "nct-crc-he":
        data = load_nct_crc_he(config.path, size=config.size, limit_per_class=config.limit_per_class, normalise=False)
        x_train, y_train, x_test, y_test = _split_one_set(data, n_train, config, source)
        what = f"NCT-CRC-HE tiles from {config.path}, {config.size}×{config.size}"
    else:
        data = load_pathmnist_npz(config.path, "train", size=config.size, limit=n_train, normalise=False)
        test = load_pathmnist_npz(config.path, "test", size=config.size, limit=config.n_test, normalise=False)
        if len(data) < n_train or len(test) < config.n_test:
            raise _too_small(
                source,
                "n_train" if len(data) < n_train else "data.n_test",
                f"{config.path} has {len(data)} train and {len(test)} test images; "
                f"the configuration needs {n_train} and {config.n_test}",
            )
        order = np.random.default_rng(config.seed).permutation(n_train)
        x_train, y_train, x_test, y_test = data.images[order], data.labels[order], test.images, test.labels
        what = f"PathMNIST {config.path}, {config.size}×{config.size}"
    x_train, mean, std = normalise_channels(x_train)
    x_test, _, _ = normalise_channels(x_test, mean, std)
    return ImageSplit(x_train, y_train, x_test, y_test, data.classes, what)


def orbit_images(x: torch.Tensor, n: int) -> torch.Tensor:
    """ρ(g) x for g = 1..n−1, stacked g-major: ((n−1)·m, C, H, W)."""
    return torch.cat([rotate_images(x, 2 * math.pi * g / n) for g in range(1, n)]) if n > 1 else x[:0]
