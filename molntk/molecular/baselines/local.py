"""The base of the local baselines: per-atom descriptors compared by an environment kernel
and summed over atom pairs (:func:`~molntk.molecular.pair_sum.pair_sum`), exactly as the
SO(3) molecular kernel does:

    K(M, M') = Σ_{a∈M} Σ_{b∈M'} [Z_a = Z_b] k(x_a, x_b)    (``pairing="element"``)

with x_a the descriptor of atom a (Fourier coefficients, a power spectrum, a SOAP or FCHL19
vector, ...); ``shared`` drops [Z_a = Z_b], ``reduce="mean"`` divides by
n_atoms(M) · n_atoms(M').
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from molntk.data.molecule import Molecule
from molntk.features.environments import EnvironmentBatch, FeatureConfig
from molntk.molecular.descriptors import AtomDescriptors
from molntk.molecular.pair_sum import atom_counts, check_options, pair_sum, reduce_pairs
from molntk.molecular.protocol import KernelMatrices, dataclass_settings
from molntk.molecular.sets import InducingSet, MoleculeSet, as_molecule_set

#: What a local kernel call takes: descriptors, environment feature maps or molecules.
KernelInput = AtomDescriptors | EnvironmentBatch | MoleculeSet | Molecule | Sequence[Molecule]


@dataclass(frozen=True, eq=False)
class ComparedDescriptors(AtomDescriptors):
    """Atom descriptors whose ``values`` are already what a local kernel's
    :meth:`~LocalKernel.env_kernel` compares, atoms grouped by centre element
    (:meth:`LocalKernel.prepare`). Whole sets only: not taken apart by molecule."""

    def select(self, indices: Sequence[int] | np.ndarray | Tensor) -> AtomDescriptors:
        raise TypeError("prepared descriptors are grouped by element, not by molecule: select molecules before prepare()")


def atom_rows(values: Tensor, index: Tensor) -> Tensor:
    """values[index] for increasing, non-empty atom indices (a pair-sum block's): a view
    where they are consecutive."""
    first, last = int(index[0]), int(index[-1])
    return values[first : last + 1] if last - first + 1 == len(index) else values[index]


@dataclass(frozen=True, kw_only=True)
class LocalKernel(ABC):
    """A local baseline (a frozen dataclass) behind the molecular kernel protocol
    (:mod:`molntk.molecular.protocol`): :meth:`describe` gives :class:`AtomDescriptors`,
    :meth:`env_kernel` compares them, a call sums it over atom pairs."""

    pairing: str = "element"
    reduce: str = "sum"
    block_size: int = 256
    name: ClassVar[str]
    #: The matrices :meth:`env_kernel` returns, in order.
    outputs: ClassVar[tuple[str, ...]] = ("kernel",)

    def __post_init__(self) -> None:
        check_options(self.pairing, self.reduce, self.block_size)

    @property
    def symmetric(self) -> bool:
        """Whether k(x, x') = k(x', x) holds (mathematically; then a symmetric call mirrors blocks)."""
        return True

    @abstractmethod
    def describe(self, molecules: MoleculeSet | InducingSet | Molecule | Sequence[Molecule]) -> AtomDescriptors:
        """Descriptors of every atom of ``molecules``."""

    def from_environments(self, batch: EnvironmentBatch) -> AtomDescriptors:
        """Descriptors from environment feature maps (not every baseline has them)."""
        raise TypeError(f"{self.name} does not use molntk's environment feature maps: pass molecules or its describe()")

    @abstractmethod
    def env_kernel(self, x1: Tensor, x2: Tensor | None = None) -> tuple[Tensor, ...]:
        """Kernels (n1, n2) between compared rows x1, x2 (:meth:`compared`; x2 None: x1 with itself)."""

    def compared(self, values: Tensor) -> Tensor:
        """What :meth:`env_kernel` compares, made from descriptor values once per call (the
        values themselves, unless a kernel stores something smaller than it compares)."""
        return values

    def prepare(self, descriptors: AtomDescriptors) -> ComparedDescriptors:
        """``descriptors`` with their values made :meth:`compared` once and their atoms
        grouped by centre element, for a side that many calls share (a row block of the
        block engine): the pair sum then takes each element's atoms as a slice, not a copy."""
        if isinstance(descriptors, ComparedDescriptors):
            return descriptors
        d = descriptors
        order = torch.argsort(d.centre_numbers, stable=True)
        return ComparedDescriptors(self.compared(d.values)[order], d.centre_numbers[order], d.molecule_index[order],
                                   d.n_molecules)

    def on(self, device: str) -> LocalKernel:
        """The kernel itself: it holds no device state (its descriptors carry the device)."""
        return self

    def settings(self) -> dict[str, Any]:
        return dataclass_settings(self)

    def descriptors(self, x: KernelInput) -> AtomDescriptors:
        """``x`` as descriptors: as they are, converted from feature maps, or described."""
        if isinstance(x, AtomDescriptors):
            return x
        if isinstance(x, EnvironmentBatch):
            return self.from_environments(x)
        return self.describe(x)

    def __call__(self, a: KernelInput, b: KernelInput | None = None) -> KernelMatrices:
        """The molecular kernels (M1, M2) named by :attr:`outputs`, in the descriptors' dtype and device."""
        d1 = self.prepare(self.descriptors(a))
        d2 = None if b is None else self.prepare(self.descriptors(b))
        v1 = d1.values
        v2 = v1 if d2 is None else d2.values

        def block(i1: Tensor, i2: Tensor, diagonal: bool) -> tuple[Tensor, ...]:
            return self.env_kernel(atom_rows(v1, i1), None if diagonal else atom_rows(v2, i2))

        kernels = pair_sum(block, d1, d2, n_outputs=len(self.outputs), mirror=self.symmetric, pairing=self.pairing,
                           block_size=self.block_size, dtype=v1.dtype, device=v1.device)
        counts1 = atom_counts(d1)
        kernels = reduce_pairs(kernels, counts1, counts1 if d2 is None else atom_counts(d2), self.reduce)
        return KernelMatrices(**dict(zip(self.outputs, kernels, strict=True)))


@dataclass(frozen=True, kw_only=True)
class FeatureMapKernel(LocalKernel):
    """A local baseline on molntk's environment feature maps (``features``): describing
    molecules computes (or, for a :class:`MoleculeSet`, reuses) their feature maps."""

    features: FeatureConfig

    def describe(self, molecules: MoleculeSet | InducingSet | Molecule | Sequence[Molecule]) -> AtomDescriptors:
        return self.from_environments(as_molecule_set(molecules).environments(self.features))

    @abstractmethod
    def from_environments(self, batch: EnvironmentBatch) -> AtomDescriptors: ...


@dataclass(frozen=True, kw_only=True)
class MoleculeDescriptorKernel(LocalKernel):
    """A local baseline with per-atom descriptors of its own, computed from the molecules:
    once per molecule set and :meth:`descriptor_key` (:meth:`MoleculeSet.descriptors`), so
    candidates that differ only in ``kernel_fields`` share them, and a sparse model's
    inducing atoms (:class:`InducingSet`) are rows of the set's descriptors."""

    #: Fields of the environment kernel k, not of the descriptors (besides pairing, reduce, block_size).
    kernel_fields: ClassVar[frozenset[str]] = frozenset()

    def describe(self, molecules: MoleculeSet | InducingSet | Molecule | Sequence[Molecule]) -> AtomDescriptors:
        return as_molecule_set(molecules).descriptors(self.descriptor_key(), self.atom_descriptors)

    def descriptor_key(self) -> str:
        """The kernel's type and every field its descriptors depend on (all fields but
        ``pairing``, ``reduce``, ``block_size`` and :attr:`kernel_fields`)."""
        skip = {"pairing", "reduce", "block_size"} | self.kernel_fields
        return f"{type(self).__name__}{[(f.name, getattr(self, f.name)) for f in fields(self) if f.name not in skip]!r}"

    @abstractmethod
    def atom_descriptors(self, molecules: list[Molecule]) -> AtomDescriptors:
        """Per-atom descriptors of ``molecules``."""
