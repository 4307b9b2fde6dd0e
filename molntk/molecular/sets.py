"""Molecule sets: molecules with their environment feature maps, computed once per
:class:`~molntk.features.environments.FeatureConfig`, so that every kernel built on the same
feature maps shares them, and with the per-atom descriptors of baselines that compute their
own (FCHL19, SOAP), computed once per descriptor setting; and inducing sets of sparse models."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from molntk.data.molecule import Molecule
from molntk.features.environments import EnvironmentBatch, FeatureConfig, environment_features
from molntk.features.inducing import concatenate, environments_as_molecules
from molntk.molecular.descriptors import AtomDescriptors


#: Bytes of an item key (:meth:`MoleculeSet.item_keys`): a SHA-256 digest.
ITEM_KEY_BYTES = 32


def molecule_digests(molecules: Sequence[Molecule]) -> np.ndarray:
    """(n, 32) uint8: SHA-256 over (n_atoms, numbers as int64, positions as float64) of each molecule."""
    out = np.empty((len(molecules), ITEM_KEY_BYTES), dtype=np.uint8)
    for i, m in enumerate(molecules):
        h = hashlib.sha256(np.int64(m.n_atoms).tobytes())
        h.update(np.ascontiguousarray(m.numbers, dtype=np.int64).tobytes())
        h.update(np.ascontiguousarray(m.positions, dtype=np.float64).tobytes())
        out[i] = np.frombuffer(h.digest(), dtype=np.uint8)
    return out


@dataclass
class MoleculeSet:
    """A list of molecules with their environment feature maps (in ``dtype`` on ``device``),
    computed on first use per feature config, and per-atom descriptors, computed on first
    use per descriptor key, both kept until :meth:`release`."""

    molecules: list[Molecule]
    dtype: torch.dtype = torch.float64
    device: str = "cpu"
    _environments: dict[FeatureConfig, EnvironmentBatch] = field(default_factory=dict, repr=False)
    _descriptors: dict[str, AtomDescriptors] = field(default_factory=dict, repr=False)

    def environments(self, config: FeatureConfig) -> EnvironmentBatch:
        """The environment feature maps of every molecule under ``config``."""
        if config not in self._environments:
            self._environments[config] = environment_features(self.molecules, config, dtype=self.dtype, device=self.device)
        return self._environments[config]

    def descriptors(self, key: str, describe: Callable[[list[Molecule]], AtomDescriptors]) -> AtomDescriptors:
        """``describe(molecules)``, the per-atom descriptors of every molecule, computed once
        per ``key`` (a string naming everything they depend on: kernels whose settings differ
        only in how they compare the descriptors share them)."""
        if key not in self._descriptors:
            self._descriptors[key] = describe(self.molecules)
        return self._descriptors[key]

    def release(self) -> None:
        """Forget the feature maps and descriptors (GBs each at tens of thousands of
        molecules: SOAP's 2,325 numbers per atom, 1,280 per environment for 16 radial
        functions of 5 elements); a later :meth:`environments` or :meth:`descriptors`
        computes them again."""
        self._environments.clear()
        self._descriptors.clear()

    def item_keys(self) -> np.ndarray:
        """(n, 32) uint8: each molecule's content digest (:func:`molecule_digests`), what a
        kernel block's values depend on besides the kernel's settings (:mod:`molntk.scale.cache`)."""
        return molecule_digests(self.molecules)

    def __len__(self) -> int:
        return len(self.molecules)


@dataclass
class InducingSet:
    """The inducing atoms ``rows`` of ``source`` (rows of its atoms in molecule order, which
    are the rows of their environment feature maps and of their per-atom descriptors; by
    default ``source`` is ``base``), each a molecule of its own, followed by the molecules
    of ``base``: a local molecular kernel on it holds Θ(inducing, inducing) and
    Θ(molecule, inducing) of a sparse model, Θ(M, {s}) = Σ_{a∈M} [Z_a = Z_s] k(x_a, x_s).
    The atoms are described by the feature maps (:meth:`environments`) or the descriptors
    (:meth:`descriptors`) of the whole molecules, computed once per set and indexed for the
    inducing rows; kernels that describe whole molecules (``molecules``) cannot use it."""

    base: MoleculeSet
    rows: torch.Tensor
    source: MoleculeSet | None = None

    @property
    def inducing_source(self) -> MoleculeSet:
        """The set whose atoms the inducing rows index: ``source``, else ``base``."""
        return self.base if self.source is None else self.source

    @property
    def dtype(self) -> torch.dtype:
        return self.base.dtype

    @property
    def device(self) -> str:
        return self.base.device

    @property
    def molecules(self) -> list[Molecule]:
        raise TypeError("a sparse model needs a kernel over atoms (feature maps or per-atom descriptors); "
                        "this one describes whole molecules")

    def environments(self, config: FeatureConfig) -> EnvironmentBatch:
        """Feature maps of the inducing environments (one molecule each), then of the set's molecules."""
        feats = self.base.environments(config)
        inducing = environments_as_molecules(self.inducing_source.environments(config), self.rows)
        return concatenate(inducing, feats)

    def descriptors(self, key: str, describe: Callable[[list[Molecule]], AtomDescriptors]) -> AtomDescriptors:
        """Descriptors of the inducing atoms (one molecule each, rows of the set's own
        descriptors, :meth:`MoleculeSet.descriptors`), then of the set's molecules."""
        described = self.base.descriptors(key, describe)
        inducing = self.inducing_source.descriptors(key, describe).atoms_as_molecules(self.rows)
        return inducing.followed_by(described)

    def item_keys(self) -> np.ndarray:
        """(m + n, 32) uint8: each inducing atom's digest, SHA-256 of ("environment", its
        molecule's digest, its atom index in that molecule), then the molecules' digests:
        an inducing environment is known by its molecule and atom, not by its row."""
        source = self.inducing_source
        digests = source.item_keys()
        starts = np.cumsum([0] + [m.n_atoms for m in source.molecules])
        rows = self.rows.cpu().numpy().astype(np.int64)
        owner = np.searchsorted(starts, rows, side="right") - 1
        out = np.empty((len(rows), ITEM_KEY_BYTES), dtype=np.uint8)
        for i, (row, mol) in enumerate(zip(rows, owner)):
            h = hashlib.sha256(b"environment")
            h.update(digests[mol].tobytes())
            h.update(np.int64(row - starts[mol]).tobytes())
            out[i] = np.frombuffer(h.digest(), dtype=np.uint8)
        return np.concatenate([out, self.base.item_keys()])

    def __len__(self) -> int:
        return len(self.rows) + len(self.base)


def as_molecule_set(molecules: Molecule | Sequence[Molecule] | MoleculeSet | InducingSet, device: str = "cpu") -> MoleculeSet | InducingSet:
    """A set as it is; a molecule or a list of them as a float64 :class:`MoleculeSet` on ``device``."""
    if isinstance(molecules, (MoleculeSet, InducingSet)):
        return molecules
    return MoleculeSet([molecules] if isinstance(molecules, Molecule) else list(molecules), device=device)
