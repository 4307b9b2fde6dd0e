"""Descriptors of the baselines: one vector per atom (:class:`AtomDescriptors`, for the
atom-pair sums) or one per molecule (:class:`GlobalDescriptors`); and the inducing atoms of
a sparse model in a baseline's own descriptor space (:func:`inducing_atoms`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.features.environments import EnvironmentBatch, molecule_rows
from molntk.features.inducing import inducing_rows

#: Molecules per call when descriptors are computed in chunks (:meth:`AtomDescriptors.in_chunks`).
DESCRIBE_CHUNK = 2048


@dataclass(frozen=True, eq=False)
class AtomDescriptors:
    """One descriptor per atom of a list of molecules.

    ``values`` (n_atoms_total, ...): the descriptor of each atom, atoms ordered by molecule;
    ``centre_numbers`` (n_atoms_total,): Z of the atom; ``molecule_index``
    (n_atoms_total,): position of its molecule in the list; ``n_molecules``: length of the list.
    """

    values: Tensor
    centre_numbers: Tensor
    molecule_index: Tensor
    n_molecules: int

    @classmethod
    def from_batch(cls, batch: EnvironmentBatch, values: Tensor | None = None) -> AtomDescriptors:
        """Descriptors with the atom bookkeeping of ``batch`` (values default: its coefficients)."""
        values = batch.coeffs if values is None else values
        return cls(values, batch.centre_numbers, batch.molecule_index, batch.n_molecules)

    @classmethod
    def from_molecules(cls, molecules: Sequence[Molecule], values: np.ndarray) -> AtomDescriptors:
        """Per-atom ``values`` (n_atoms_total, d) of ``molecules`` (atoms in molecule order), float64."""
        n_atoms = [m.n_atoms for m in molecules]
        numbers = np.concatenate([m.numbers for m in molecules]) if molecules else np.zeros(0, np.int64)
        return cls(
            values=torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64)),
            centre_numbers=torch.from_numpy(numbers),
            molecule_index=torch.from_numpy(np.repeat(np.arange(len(molecules)), n_atoms)),
            n_molecules=len(molecules),
        )

    @classmethod
    def in_chunks(cls, molecules: Sequence[Molecule], describe: Callable[[Sequence[Molecule]], np.ndarray]) -> AtomDescriptors:
        """:meth:`from_molecules` of ``describe`` called on :data:`DESCRIBE_CHUNK` molecules at
        a time, each call's (atoms, width) rows written into one float64 array allocated
        after the first call: the memory of the descriptors once, not of a list of them and
        its concatenation."""
        values = np.zeros((0, 0))
        start = 0
        for first in range(0, len(molecules), DESCRIBE_CHUNK):
            rows = np.asarray(describe(molecules[first : first + DESCRIBE_CHUNK]), dtype=np.float64)
            if first == 0:
                values = np.empty((sum(m.n_atoms for m in molecules), rows.shape[1]), dtype=np.float64)
            values[start : start + len(rows)] = rows
            start += len(rows)
        if start != len(values):
            raise ValueError(f"the descriptors have {start} rows for the {len(values)} atoms of the molecules")
        return cls.from_molecules(molecules, values)

    def select(self, indices: Sequence[int] | np.ndarray | Tensor) -> AtomDescriptors:
        """The descriptors of molecules ``indices`` (in that order, repeats allowed)."""
        rows, new_index = molecule_rows(self.molecule_index, self.n_molecules, indices)
        return AtomDescriptors(self.values[rows], self.centre_numbers[rows], new_index, len(indices))

    def to(self, device: str) -> AtomDescriptors:
        """The same descriptors with every tensor on ``device``."""
        return type(self)(self.values.to(device), self.centre_numbers.to(device), self.molecule_index.to(device), self.n_molecules)

    def atoms_as_molecules(self, rows: Tensor) -> AtomDescriptors:
        """The descriptors of atoms ``rows`` (rows of ``values``), each a molecule of its own
        (molecule j = row j): what a sparse model's inducing atoms are."""
        rows = torch.as_tensor(rows, dtype=torch.long, device=self.values.device)
        n_atoms = self.values.shape[0]
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= n_atoms):
            raise InputError("rows", f"must index the {n_atoms} atoms of the descriptors")
        return AtomDescriptors(self.values[rows], self.centre_numbers[rows], torch.arange(rows.numel(), device=rows.device),
                               int(rows.numel()))

    def followed_by(self, other: AtomDescriptors) -> AtomDescriptors:
        """The molecules of these descriptors, then those of ``other`` (same descriptor width)."""
        if self.values.shape[1:] != other.values.shape[1:]:
            raise InputError("other", f"has descriptors of shape {tuple(other.values.shape[1:])}, not {tuple(self.values.shape[1:])}")
        return AtomDescriptors(
            torch.cat([self.values, other.values]),
            torch.cat([self.centre_numbers, other.centre_numbers]),
            torch.cat([self.molecule_index, other.molecule_index + self.n_molecules]),
            self.n_molecules + other.n_molecules,
        )


def inducing_atoms(descriptors: AtomDescriptors, m: int, *, method: str = "fps", seed: int = 0,
                   pool: int | None = None) -> Tensor:
    """Rows (ascending, into ``descriptors``) of m inducing atoms of the first ``pool``
    molecules (None: all): per element in proportion to its atoms, by farthest-point
    sampling on the descriptor vectors themselves (flattened, float64; for FCHL19 the FCHL19
    vectors, for SOAP the normalised SOAP vectors) or at random with ``seed``
    (:func:`~molntk.features.inducing.inducing_rows`)."""
    values = descriptors.values

    def points(rows: Tensor) -> Tensor:
        return values[rows.to(values.device)].flatten(1).to(torch.float64)

    return inducing_rows(descriptors, m, points, method=method, seed=seed, pool=pool)


@dataclass(frozen=True, eq=False)
class GlobalDescriptors:
    """One descriptor per molecule: ``values`` (n_molecules, d)."""

    values: Tensor

    @property
    def n_molecules(self) -> int:
        return int(self.values.shape[0])

    def select(self, indices: Sequence[int] | np.ndarray | Tensor) -> GlobalDescriptors:
        """The descriptors of molecules ``indices`` (in that order, repeats allowed)."""
        return GlobalDescriptors(self.values[torch.as_tensor(indices, device=self.values.device)])

    def to(self, device: str) -> GlobalDescriptors:
        """The same descriptors on ``device``."""
        return GlobalDescriptors(self.values.to(device))
