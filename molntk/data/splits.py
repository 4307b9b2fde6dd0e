"""Deterministic train/validation/test splits and nested training subsets.

The standard QM9 split draws one random permutation of the molecule positions
``0..n-1`` with ``numpy.random.default_rng(seed)``: its first ``n_train`` entries are
the training set, the next ``n_valid`` the validation set and the rest the test set
(for QM9's 130,831 molecules: 110,000 / 10,000 / 10,831). Every set keeps the
permutation's order, so any prefix of the training set is itself a uniformly random
subset; :func:`nested_subsets` takes such prefixes for learning curves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from molntk.errors import InputError
from molntk.utils.checks import integer

#: QM9 standard split sizes (training, validation); the test set is the rest.
QM9_N_TRAIN = 110_000
QM9_N_VALID = 10_000


@dataclass(frozen=True, eq=False)
class Split:
    """Disjoint index arrays (positions into a dataset) for training, validation and test."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    seed: int

    def sizes(self) -> dict[str, int]:
        """Number of molecules in each set: ``{"train": ..., "valid": ..., "test": ...}``."""
        return {"train": int(self.train.size), "valid": int(self.valid.size), "test": int(self.test.size)}


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.array(array, dtype=np.int64)
    array.setflags(write=False)
    return array


def standard_split(n: int, seed: int = 0, n_train: int = QM9_N_TRAIN, n_valid: int = QM9_N_VALID) -> Split:
    """Random split of ``n`` molecules: ``n_train`` training, ``n_valid`` validation, rest test.

    ``perm = default_rng(seed).permutation(n)``; train = ``perm[:n_train]``, valid =
    ``perm[n_train:n_train + n_valid]``, test = ``perm[n_train + n_valid:]``. The same
    ``(n, seed)`` always gives the same split. Raises :class:`InputError` when
    ``n_train + n_valid > n`` or a size or the seed is not a non-negative integer.
    """
    n = integer(n, "n", minimum=1)
    seed = integer(seed, "seed", minimum=0)
    n_train = integer(n_train, "n_train", minimum=1)
    n_valid = integer(n_valid, "n_valid", minimum=0)
    if n_train + n_valid > n:
        raise InputError(
            "n_train + n_valid", f"{n_train} + {n_valid} = {n_train + n_valid} exceeds the {n} molecules available"
        )
    perm = np.random.default_rng(seed).permutation(n)
    return Split(
        train=_frozen(perm[:n_train]),
        valid=_frozen(perm[n_train : n_train + n_valid]),
        test=_frozen(perm[n_train + n_valid :]),
        seed=seed,
    )


def nested_subsets(train_indices: np.ndarray, sizes: Iterable[int]) -> dict[int, np.ndarray]:
    """Nested training subsets: ``{size: train_indices[:size]}``, smallest size first.

    Each subset is a prefix of every larger one, so a learning curve adds molecules
    instead of redrawing them. The subsets are random only if ``train_indices`` is in
    random order, as :func:`standard_split` returns it. Repeated sizes appear once.
    Raises :class:`InputError` for a size that is not an integer in ``1..len(train_indices)``.
    """
    train = np.asarray(train_indices)
    if train.ndim != 1 or (train.size and train.dtype.kind not in "iu"):
        raise InputError("train_indices", f"must be a 1-d integer array, got shape {train.shape} and dtype {train.dtype}")
    checked = sorted({integer(size, "subset size", minimum=1) for size in sizes})
    too_large = [size for size in checked if size > train.size]
    if too_large:
        raise InputError("subset size", f"{too_large[0]} exceeds the {train.size} training molecules")
    return {size: _frozen(train[:size]) for size in checked}
