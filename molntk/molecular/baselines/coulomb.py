"""Coulomb matrix and Bag of Bonds descriptors (Rupp et al. 2012; Hansen et al. 2015).

Coulomb matrix of a molecule with charges Z_i at positions R_i:

    C_ii = ½ Z_i^2.4,    C_ij = Z_i Z_j / |R_i − R_j|   (i ≠ j).

Length unit: Ångström by default, as in QML/qmllib, the implementations behind the usual
QM9 CM/BoB benchmarks (coordinates as given in the QM9 files). ``length_unit="bohr"`` gives
the atomic-unit matrix of Rupp et al. 2012: every off-diagonal entry is a₀/Å = 0.529177
times the Ångström one, while the diagonal does not depend on the unit. The choice thus
changes the balance between diagonal and off-diagonal entries in the Laplacian kernel's L1
distance, hence results: compare with published numbers in their unit.

- :class:`CoulombMatrix`: atoms reordered so that the row norms ‖C_i‖₂ decrease, padded
  with zero rows/columns to ``n_max`` atoms, lower triangle (with diagonal) flattened:
  n_max(n_max+1)/2 entries (QM9: n_max = 29, 435 entries). Atoms whose row norms tie
  (within a relative 1e-10: symmetry-equivalent atoms, as in the exactly symmetric QM9
  molecules such as C₂H₂) are ordered by their entries with the atoms already placed,
  largest first (:func:`canonical_order`). A plain row-norm sort breaks such ties by input
  order, so that permuting the atoms of C₂H₂ can move entries by ≈ 3 (C–H bonded vs
  non-bonded); with the tie-break the descriptor is permutation invariant.
- :class:`BagOfBonds`: for every element e a bag of the n_e diagonal entries ½ Z_e^2.4 and
  for every element pair e ≤ e' a bag of the C_ij with {Z_i, Z_j} = {e, e'}, i < j; each
  bag sorted in decreasing order and zero-padded to its largest size over the data
  (from the largest count ``max_counts[e]`` of each element: n_e(n_e−1)/2 or n_e n_e').

Both are invariant to translations, rotations and (through the sorting) permutations of
the atoms; all molecules are processed as padded arrays (no loops over atom pairs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar, NamedTuple

import numpy as np
import torch
from ase.units import Bohr
from torch import Tensor

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.data.qm9 import QM9_ELEMENTS, QM9_MAX_ATOMS

LENGTH_UNITS = ("angstrom", "bohr")
#: Largest number of atoms of each element in one QM9 molecule (H, C, N, O, F).
QM9_MAX_COUNTS: Mapping[int, int] = MappingProxyType({1: 20, 6: 9, 7: 7, 8: 5, 9: 6})
#: Molecules per chunk of the padded (chunk, n, n) arrays.
_CHUNK = 2048


def _as_list(molecules: Molecule | Sequence[Molecule]) -> list[Molecule]:
    return [molecules] if isinstance(molecules, Molecule) else list(molecules)


def coulomb_matrices(molecules: Sequence[Molecule], n_max: int, length_unit: str = "angstrom") -> tuple[np.ndarray, np.ndarray]:
    """Unsorted Coulomb matrices (M, n_max, n_max) and charges (M, n_max), zero-padded."""
    if length_unit not in LENGTH_UNITS:
        raise ValueError(f"unknown length unit {length_unit!r}; choose one of {LENGTH_UNITS}")
    for m in molecules:
        if m.n_atoms > n_max:
            raise InputError(m.describe(), f"{m.n_atoms} atoms do not fit a descriptor padded to {n_max} atoms")
    n_atoms = np.array([m.n_atoms for m in molecules], dtype=np.int64)
    mol = np.repeat(np.arange(len(molecules)), n_atoms)
    atom = np.arange(mol.size) - np.repeat(np.cumsum(n_atoms) - n_atoms, n_atoms)
    z = np.zeros((len(molecules), n_max))
    pos = np.zeros((len(molecules), n_max, 3))
    if molecules:
        z[mol, atom] = np.concatenate([m.numbers for m in molecules])
        pos[mol, atom] = np.concatenate([m.positions for m in molecules])
    if length_unit == "bohr":
        pos = pos / Bohr
    dist = np.linalg.norm(pos[:, :, None, :] - pos[:, None, :, :], axis=-1)
    off = ~np.eye(n_max, dtype=bool)
    real = (z[:, :, None] > 0) & (z[:, None, :] > 0) & off
    cm = np.divide(z[:, :, None] * z[:, None, :], dist, out=np.zeros_like(dist), where=real)
    diag = np.arange(n_max)
    cm[:, diag, diag] = 0.5 * z**2.4
    return cm, z


def canonical_order(cm: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Atom order (M, n) for Coulomb matrices (M, n, n): decreasing row norm, ties broken greedily.

    Position k takes, among the atoms not yet placed, those with the largest row norm (within
    ``rtol``), then keeps those with the largest entry with the atom at position 0, then at
    position 1, … (each within ``rtol``); remaining ties are automorphisms of the molecule
    and give identical matrices. Vectorised over molecules; loops over positions only.
    """
    n_mol, n = cm.shape[:2]
    rows = np.arange(n_mol)[:, None]
    norms = np.linalg.norm(cm, axis=2)
    remaining = np.ones((n_mol, n), dtype=bool)
    order = np.zeros((n_mol, n), dtype=np.int64)
    for k in range(n):
        candidates = remaining.copy()
        for j in range(-1, k):
            key = norms if j < 0 else cm[rows, order[:, j : j + 1], np.arange(n)]
            masked = np.where(candidates, key, -np.inf)
            best = masked.max(1, keepdims=True)
            candidates &= masked >= best - rtol * np.abs(best)
            if j < 0:  # only padding left (norm 0): any order
                candidates[best[:, 0] == 0] &= np.cumsum(candidates[best[:, 0] == 0], axis=1) == 1
            if (candidates.sum(1) <= 1).all():
                break
        pick = np.argmax(candidates, axis=1)
        order[:, k] = pick
        remaining[np.arange(n_mol), pick] = False
    return order


@dataclass(frozen=True)
class CoulombMatrix:
    """Row-norm-sorted Coulomb matrix, lower triangle (module doc): molecules → (M, n(n+1)/2)."""

    n_max: int = QM9_MAX_ATOMS
    length_unit: str = "angstrom"
    name: ClassVar[str] = "cm"

    def __call__(self, molecules: Molecule | Sequence[Molecule]) -> Tensor:
        molecules = _as_list(molecules)
        rows, cols = np.tril_indices(self.n_max)
        out = np.zeros((len(molecules), rows.size))
        for start in range(0, len(molecules), _CHUNK):
            cm, _ = coulomb_matrices(molecules[start : start + _CHUNK], self.n_max, self.length_unit)
            order = canonical_order(cm)  # padding rows (norm 0) last
            cm = np.take_along_axis(cm, order[:, :, None], axis=1)
            cm = np.take_along_axis(cm, order[:, None, :], axis=2)
            out[start : start + len(cm)] = cm[:, rows, cols]
        return torch.from_numpy(out)


class Bag(NamedTuple):
    """One bag: elements e ≤ e' (in ``elements`` order), its padded size, and whether it holds
    the diagonal entries ½ Z_e^2.4 (e = e') rather than pair entries."""

    e: int
    f: int
    size: int
    diagonal: bool


@dataclass(frozen=True)
class BagOfBonds:
    """Bag of Bonds (module doc): molecules → (M, Σ bag sizes).

    ``elements``: allowed atomic numbers, bag order; ``max_counts``: largest count of each
    element per molecule (fixes the bag sizes, so that every data set gives the same layout).
    """

    elements: tuple[int, ...] = QM9_ELEMENTS
    max_counts: Mapping[int, int] = field(default_factory=lambda: QM9_MAX_COUNTS)
    length_unit: str = "angstrom"
    name: ClassVar[str] = "bob"

    def __post_init__(self) -> None:
        missing = [e for e in self.elements if e not in self.max_counts]
        if missing:
            raise ValueError(f"max_counts has no entry for element(s) {missing}")

    def _check_counts(self, molecules: list[Molecule]) -> None:
        """InputError for the first molecule with an unknown element or more atoms of one than its bags hold."""
        if not molecules:
            return
        numbers = np.concatenate([m.numbers for m in molecules])
        mol = np.repeat(np.arange(len(molecules)), [m.n_atoms for m in molecules])
        known = np.isin(numbers, self.elements)
        if not known.all():
            molecules[mol[np.argmin(known)]].check_elements(self.elements)
        slot = np.searchsorted(np.sort(self.elements), numbers)
        counts = np.zeros((len(molecules), len(self.elements)), dtype=np.int64)
        np.add.at(counts, (mol, slot), 1)
        limits = np.array([self.max_counts[e] for e in sorted(self.elements)])
        over = counts > limits
        if over.any():
            i, k = np.argwhere(over)[0]
            e = sorted(self.elements)[k]
            problem = f"{counts[i, k]} atoms of element {e} exceed its bag size max_counts[{e}] = {limits[k]}"
            raise InputError(molecules[i].describe(), problem)

    @property
    def bags(self) -> list[Bag]:
        """Every bag in descriptor order: per element its diagonal bag, its e–e pairs, then e–e' pairs."""
        out = []
        for i, e in enumerate(self.elements):
            n = self.max_counts[e]
            out.append(Bag(e, e, n, diagonal=True))
            out.append(Bag(e, e, n * (n - 1) // 2, diagonal=False))
            out.extend(Bag(e, f, n * self.max_counts[f], diagonal=False) for f in self.elements[i + 1 :])
        return out

    def __call__(self, molecules: Molecule | Sequence[Molecule]) -> Tensor:
        molecules = _as_list(molecules)
        self._check_counts(molecules)
        n_max = max([m.n_atoms for m in molecules], default=1)
        bags = self.bags
        out = np.zeros((len(molecules), sum(bag.size for bag in bags)))
        upper_i, upper_j = np.triu_indices(n_max, k=1)
        for start in range(0, len(molecules), _CHUNK):
            cm, z = coulomb_matrices(molecules[start : start + _CHUNK], n_max, self.length_unit)
            diag = np.diagonal(cm, axis1=1, axis2=2)
            pair_values = cm[:, upper_i, upper_j]
            zi, zj = z[:, upper_i], z[:, upper_j]
            offset = 0
            for bag in bags:
                if bag.diagonal:
                    values = np.where(z == bag.e, diag, -1.0)
                else:
                    member = ((zi == bag.e) & (zj == bag.f)) | ((zi == bag.f) & (zj == bag.e))
                    values = np.where(member, pair_values, -1.0)
                top = -np.sort(-values, axis=1)[:, : bag.size]  # decreasing; members are > 0, non-members −1
                out[start : start + len(cm), offset : offset + top.shape[1]] = np.maximum(top, 0.0)
                offset += bag.size
        return torch.from_numpy(out)
