"""Conversion and validation of the arrays and numbers the regression code takes.

Kernels and targets may be numpy arrays or torch tensors (any device, any float dtype);
they become float64 numpy arrays. Every failed check raises :class:`InputError` whose
``source`` is the argument's name (``"K_train"``, ``"Y"``, ...).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from molntk.errors import InputError

#: Largest ``max|K - Kᵀ| / max|K|`` accepted for a train kernel; it is then symmetrised.
SYMMETRY_RTOL = 1e-6


def as_float64(value: object, name: str) -> np.ndarray:
    """``value`` (numpy array, torch tensor, nested sequence) as a finite float64 array."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(name, f"must be a numeric array ({exc})") from None
    bad = ~np.isfinite(array)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InputError(name, f"contains a non-finite value ({array[index]}) at index {index}")
    return array


def matrix(value: object, name: str, *, rows: int | None = None, cols: int | None = None) -> np.ndarray:
    """A finite float64 2-d array, optionally with a required number of rows and columns."""
    array = as_float64(value, name)
    if array.ndim != 2:
        raise InputError(name, f"must be a 2-d matrix, got shape {array.shape}")
    if rows is not None and array.shape[0] != rows:
        raise InputError(name, f"must have {rows} rows, got shape {array.shape}")
    if cols is not None and array.shape[1] != cols:
        raise InputError(name, f"must have {cols} columns (one per training point), got shape {array.shape}")
    return array


def vector(value: object, name: str, *, length: int) -> np.ndarray:
    """A finite float64 1-d array of the given length."""
    array = as_float64(value, name)
    if array.shape != (length,):
        raise InputError(name, f"must have shape ({length},), got {array.shape}")
    return array


#: Rows per block of :func:`symmetric_kernel` (temporaries of 1024 × n entries).
SYMMETRY_BLOCK = 1024


def symmetric_kernel(value: object, name: str, *, overwrite: bool = False) -> np.ndarray:
    """A square, symmetric (to :data:`SYMMETRY_RTOL`) kernel matrix, returned as (K + Kᵀ)/2.

    Checked and averaged in blocks of :data:`SYMMETRY_BLOCK` rows (temporaries of that many
    rows, not of the matrix), in a copy, or with ``overwrite`` in ``value`` itself when it is
    a writable C-ordered float64 array (a kernel the caller assembled and gives away: one
    m × m array instead of two)."""
    array = matrix(value, name)
    n, n2 = array.shape
    if n != n2:
        raise InputError(name, f"must be square (a train-train kernel), got shape {array.shape}")
    if n == 0:
        raise InputError(name, "is empty")
    if not (overwrite and array.flags.c_contiguous and array.flags.writeable):
        array = np.array(array, order="C")
    asym = max(float(np.max(np.abs(array[rows, rows.start:] - array[rows.start:, rows].T))) for rows in row_slices(n, SYMMETRY_BLOCK))
    size = max(abs(float(array.max())), abs(float(array.min())))
    if asym > SYMMETRY_RTOL * size:
        raise InputError(name, f"is not symmetric: max |K - Kᵀ| = {asym:.3g} (max |K| = {size:.3g})")
    for rows in row_slices(n, SYMMETRY_BLOCK):
        mean = 0.5 * (array[rows, rows.start:] + array[rows.start:, rows].T)
        array[rows, rows.start:] = mean
        array[rows.start:, rows] = mean.T
    return array


def row_slices(m: int, step: int) -> list[slice]:
    """Consecutive slices of at most ``step`` rows covering 0 … m (one empty slice when m = 0)."""
    return [slice(start, min(start + step, m)) for start in range(0, max(m, 1), step)]


def targets(value: object, name: str, *, rows: int) -> tuple[np.ndarray, bool]:
    """Targets as an (n, k) array, and whether they were given as a 1-d (n,) array."""
    array = as_float64(value, name)
    if array.ndim not in (1, 2):
        raise InputError(name, f"must have shape (n,) or (n, k), got {array.shape}")
    if array.shape[0] != rows:
        raise InputError(name, f"must have {rows} rows (one per training point), got shape {array.shape}")
    if array.ndim == 2 and array.shape[1] == 0:
        raise InputError(name, f"has no target columns, shape {array.shape}")
    return (array[:, None], True) if array.ndim == 1 else (array, False)


def restore(array: np.ndarray, was_1d: bool) -> np.ndarray:
    """Undo :func:`targets`' reshaping: (m, 1) → (m,) when the targets were 1-d."""
    return array[:, 0] if was_1d else array


def nonnegative(value: object, name: str, *, allow_inf: bool = False) -> float:
    """A real number ≥ 0 (and finite unless ``allow_inf``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(name, f"must be a real number, got {value!r}")
    number = float(value)
    if math.isnan(number) or number < 0 or (math.isinf(number) and not allow_inf):
        raise InputError(name, f"must be {'≥ 0' if allow_inf else 'finite and ≥ 0'}, got {value!r}")
    return number


def positive(value: object, name: str) -> float:
    """A finite real number > 0."""
    number = nonnegative(value, name)
    if number == 0:
        raise InputError(name, "must be > 0, got 0")
    return number


def choice(value: object, name: str, options: tuple[str, ...]) -> str:
    """One of ``options``."""
    if value not in options:
        raise InputError(name, f"must be one of {', '.join(map(repr, options))}, got {value!r}")
    return str(value)
