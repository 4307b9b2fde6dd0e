"""``validation.symmetric_kernel``: the blockwise check and symmetrisation equal the whole-matrix
formulas, in a copy or, when asked, in the caller's array."""

from __future__ import annotations

import numpy as np
import pytest

from molntk.errors import InputError
from molntk.regression import validation


def nearly_symmetric(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, n))
    return A + A.T + 1e-9 * rng.normal(size=(n, n))


@pytest.mark.parametrize("block", [3, 7, 1024])  # blocks of 3 and 7 rows (a remainder at n = 20), one block
def test_blockwise_symmetrisation_is_the_mean_with_the_transpose(monkeypatch, block: int) -> None:
    monkeypatch.setattr(validation, "SYMMETRY_BLOCK", block)
    K = nearly_symmetric(20)
    kept = K.copy()
    copy = validation.symmetric_kernel(K, "K")
    # the same floating-point operation per entry as 0.5 * (K + Kᵀ): equal to the last bit
    np.testing.assert_array_equal(copy, 0.5 * (kept + kept.T))
    np.testing.assert_array_equal(K, kept)  # the caller's matrix is left alone
    assert copy.flags.c_contiguous and not np.shares_memory(copy, K)
    in_place = validation.symmetric_kernel(K, "K", overwrite=True)
    assert in_place is K
    np.testing.assert_array_equal(K, 0.5 * (kept + kept.T))


def test_overwrite_copies_what_it_cannot_write() -> None:
    K = nearly_symmetric(6)
    read_only = K.copy()
    read_only.flags.writeable = False
    assert not np.shares_memory(validation.symmetric_kernel(read_only, "K", overwrite=True), read_only)
    fortran = np.asfortranarray(K)
    result = validation.symmetric_kernel(fortran, "K", overwrite=True)
    assert result.flags.c_contiguous and not np.shares_memory(result, fortran)
    np.testing.assert_array_equal(fortran, K)


def test_asymmetry_in_a_late_block_is_found(monkeypatch) -> None:
    monkeypatch.setattr(validation, "SYMMETRY_BLOCK", 4)
    K = nearly_symmetric(20)
    K[17, 18] += 1e-3 * np.abs(K).max()  # in the last block of rows
    with pytest.raises(InputError, match=r"K_mm: is not symmetric: max \|K - Kᵀ\| = "):
        validation.symmetric_kernel(K, "K_mm")


def test_row_slices_cover_the_rows_once() -> None:
    assert validation.row_slices(10, 4) == [slice(0, 4), slice(4, 8), slice(8, 10)]
    assert validation.row_slices(0, 4) == [slice(0, 0)]
