"""Checks of user-given numbers shared by the data and regression layers."""

from __future__ import annotations

import numbers

from molntk.errors import InputError


def integer(value: object, name: str, *, minimum: int) -> int:
    """``value`` as an int ≥ ``minimum``; :class:`InputError` naming ``name`` otherwise (bools are not integers)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(name, f"must be an integer, got {value!r}")
    if value < minimum:
        raise InputError(name, f"must be at least {minimum}, got {value}")
    return int(value)
