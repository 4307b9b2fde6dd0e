"""The one molecule record every reader produces, and its validation.

A :class:`Molecule` is a set of atoms: atomic numbers ``numbers`` (shape ``(n,)``) and
Cartesian positions ``positions`` in Ångström (shape ``(n, 3)``), with an optional
identifier and SMILES string. Construction validates the atoms, so a ``Molecule`` that
exists is always usable: non-empty, known elements, finite coordinates, no two atoms
closer than :data:`MIN_DISTANCE` Å.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from ase.data import atomic_numbers as _SYMBOL_TO_Z
from ase.data import chemical_symbols as _Z_TO_SYMBOL

from molntk.errors import InputError

#: Two atoms closer than this (Å) cannot both be real: the input is rejected.
MIN_DISTANCE = 0.1
#: Largest atomic number accepted (oganesson).
MAX_Z = 118


def element_number(symbol: str, *, source: str = "input", line: int | None = None) -> int:
    """Atomic number of an element symbol (case-insensitive: ``"cl"`` → 17)."""
    key = symbol.strip()
    key = key[:1].upper() + key[1:].lower()
    z = _SYMBOL_TO_Z.get(key)
    if z is None or not 1 <= z <= MAX_Z:
        raise InputError(source, f"unknown element symbol {symbol!r}", line=line)
    return int(z)


def element_symbol(z: int) -> str:
    """Element symbol of an atomic number (1 → ``"H"``)."""
    if not 1 <= int(z) <= MAX_Z:
        raise InputError("atomic number", f"{z} is not an element (1..{MAX_Z})")
    return _Z_TO_SYMBOL[int(z)]


def _check_atoms(numbers: np.ndarray, positions: np.ndarray, source: str) -> None:
    if numbers.ndim != 1:
        raise InputError(source, f"atomic numbers must be a 1-d array, got shape {numbers.shape}")
    if numbers.size == 0:
        raise InputError(source, "molecule has no atoms")
    if positions.shape != (numbers.size, 3):
        raise InputError(
            source, f"positions must have shape ({numbers.size}, 3) for {numbers.size} atoms, got {positions.shape}"
        )
    bad_z = numbers[(numbers < 1) | (numbers > MAX_Z)]
    if bad_z.size:
        raise InputError(source, f"unknown atomic number {int(bad_z[0])} (elements are 1..{MAX_Z})")
    finite = np.isfinite(positions).all(axis=1)
    if not finite.all():
        i = int(np.flatnonzero(~finite)[0])
        raise InputError(source, f"atom {i} ({element_symbol(numbers[i])}) has non-finite coordinates {positions[i].tolist()}")
    if numbers.size > 1:
        diff = positions[:, None, :] - positions[None, :, :]
        dist = np.sqrt((diff**2).sum(-1))
        np.fill_diagonal(dist, np.inf)
        i, j = np.unravel_index(int(np.argmin(dist)), dist.shape)
        if dist[i, j] < MIN_DISTANCE:
            i, j = sorted((int(i), int(j)))
            raise InputError(
                source,
                f"atoms {i} ({element_symbol(numbers[i])}) and {j} ({element_symbol(numbers[j])}) are "
                f"{dist[i, j]:.3g} Å apart (minimum {MIN_DISTANCE} Å)",
            )


@dataclass(frozen=True, eq=False)
class Molecule:
    """Atoms of one molecule: ``numbers`` (Z, shape (n,)), ``positions`` (Å, shape (n, 3))."""

    numbers: np.ndarray
    positions: np.ndarray
    id: str | None = None
    smiles: str | None = None
    source: str = field(default="input", repr=False)

    def __post_init__(self) -> None:
        numbers = np.asarray(self.numbers)
        if numbers.dtype.kind not in "iu":
            if numbers.size and not np.all(np.asarray(numbers, dtype=float) == np.round(np.asarray(numbers, dtype=float))):
                raise InputError(self.source, f"atomic numbers must be integers, got {numbers.tolist()}")
            numbers = numbers.astype(np.int64) if numbers.size else np.zeros(0, dtype=np.int64)
        numbers = numbers.astype(np.int64, copy=True)
        positions = np.array(self.positions, dtype=np.float64, copy=True).reshape(-1, 3) if np.size(self.positions) else np.zeros((0, 3))
        _check_atoms(numbers, positions, self.describe())
        numbers.setflags(write=False)
        positions.setflags(write=False)
        object.__setattr__(self, "numbers", numbers)
        object.__setattr__(self, "positions", positions)

    def describe(self) -> str:
        """How error messages name this molecule: its source, and its id when it has one."""
        if self.id is not None and self.id != self.source:
            return f"{self.source} [{self.id}]"
        return self.source

    @property
    def n_atoms(self) -> int:
        return int(self.numbers.size)

    @property
    def symbols(self) -> list[str]:
        return [element_symbol(z) for z in self.numbers]

    @property
    def formula(self) -> str:
        """Hill formula: with carbon, C first, then H (if any), then the rest alphabetically
        (``CH4``, ``C2H6O``, ``C2N2``); without carbon, all alphabetically (``H2O``, ``H3N``)."""
        counts: dict[str, int] = {}
        for s in self.symbols:
            counts[s] = counts.get(s, 0) + 1
        first = [s for s in ("C", "H") if s in counts] if "C" in counts else []
        order = first + sorted(k for k in counts if k not in first)
        return "".join(f"{s}{counts[s] if counts[s] > 1 else ''}" for s in order)

    def check_elements(self, allowed: Iterable[int], what: str = "the model's element set") -> None:
        """Raise :class:`InputError` if the molecule has an element outside ``allowed`` (atomic
        numbers); ``what`` names that set in the message."""
        allowed_set = {int(z) for z in allowed}
        outside = sorted({int(z) for z in self.numbers} - allowed_set)
        if outside:
            names = ", ".join(element_symbol(z) for z in outside)
            known = ", ".join(element_symbol(z) for z in sorted(allowed_set))
            raise InputError(self.describe(), f"element(s) {names} outside {what} ({known})")

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "smiles": self.smiles,
            "source": self.source,
            "formula": self.formula,
            "numbers": self.numbers.tolist(),
            "positions": self.positions.tolist(),
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Molecule):
            return NotImplemented
        return (
            self.id == other.id
            and self.smiles == other.smiles
            and np.array_equal(self.numbers, other.numbers)
            and np.array_equal(self.positions, other.positions)
        )

    __hash__ = None  # type: ignore[assignment]
