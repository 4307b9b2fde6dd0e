"""Standard QM9 split and nested training subsets."""

from __future__ import annotations

import numpy as np
import pytest

from molntk.data.splits import nested_subsets, standard_split
from molntk.errors import InputError

N_QM9 = 130_831


def test_standard_split_sizes_disjoint_and_complete() -> None:
    split = standard_split(N_QM9)
    assert split.sizes() == {"train": 110_000, "valid": 10_000, "test": 10_831}
    joined = np.concatenate([split.train, split.valid, split.test])
    np.testing.assert_array_equal(np.sort(joined), np.arange(N_QM9))  # disjoint and covers all


def test_standard_split_is_deterministic_per_seed() -> None:
    a, b, c = standard_split(N_QM9, seed=0), standard_split(N_QM9, seed=0), standard_split(N_QM9, seed=1)
    for name in ("train", "valid", "test"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert not np.array_equal(getattr(a, name), getattr(c, name))
    np.testing.assert_array_equal(a.train, np.random.default_rng(0).permutation(N_QM9)[:110_000])


def test_split_arrays_are_read_only() -> None:
    split = standard_split(100, n_train=60, n_valid=20)
    assert split.sizes() == {"train": 60, "valid": 20, "test": 20}
    with pytest.raises(ValueError):
        split.train[0] = 1


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"n": 1000}, "110000"),
        ({"n": 100, "n_train": 90, "n_valid": 11}, "101"),
        ({"n": 100, "n_train": 0, "n_valid": 10}, "n_train"),
        ({"n": 100, "n_train": 50, "n_valid": -1}, "n_valid"),
        ({"n": 100, "n_train": 50, "n_valid": 10, "seed": -3}, "seed"),
        ({"n": 100.5}, "100.5"),
    ],
)
def test_standard_split_rejects_impossible_sizes(kwargs: dict, named: str) -> None:
    with pytest.raises(InputError, match=named):
        standard_split(**kwargs)


def test_nested_subsets_are_prefixes() -> None:
    train = standard_split(N_QM9, seed=3).train
    subsets = nested_subsets(train, [10_000, 100, 1000, 100])
    assert list(subsets) == [100, 1000, 10_000]
    for size, subset in subsets.items():
        assert subset.size == size
        np.testing.assert_array_equal(subset, train[:size])
    np.testing.assert_array_equal(subsets[1000][:100], subsets[100])
    again = nested_subsets(train, [100, 1000, 10_000])
    assert all(np.array_equal(again[k], subsets[k]) for k in subsets)


@pytest.mark.parametrize(("sizes", "named"), [([5, 11], "11"), ([0], "0"), ([2.5], "2.5")])
def test_nested_subsets_reject_impossible_sizes(sizes: list, named: str) -> None:
    with pytest.raises(InputError, match=named):
        nested_subsets(np.arange(10), sizes)


def test_nested_subsets_reject_non_index_arrays() -> None:
    with pytest.raises(InputError, match="train_indices"):
        nested_subsets(np.linspace(0, 1, 5), [2])
