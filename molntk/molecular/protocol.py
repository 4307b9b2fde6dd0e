"""The one protocol every molecular kernel follows, and what its calls return.

A molecular kernel K maps two lists of molecules to matrices K(M_i, M'_j) of shape
(M1, M2). Per-molecule work (neighbour lists, feature maps, descriptors) is separated from
the per-pair work so that it is done once per molecule set:

- ``describe(molecules)`` → descriptors of a molecule list, a
  :class:`~molntk.molecular.sets.MoleculeSet` or an
  :class:`~molntk.molecular.sets.InducingSet`, computed once;
- ``kernel(a, b=None)`` → :class:`KernelMatrices` between descriptor sets (``b`` omitted:
  ``a`` with itself, a symmetric matrix);
- ``prepare(descriptors)`` → descriptors readied once for a side that many calls share (a
  row block of :class:`~molntk.molecular.blocks.BlockKernelOf`, in every block of its row):
  what a call would otherwise make of them every time, or the descriptors themselves where
  it makes nothing;
- ``on(device)`` → a copy of the kernel that computes on ``device``;
- ``settings()`` → everything that defines the kernel's values except the device (JSON-able:
  the cache-key material of :class:`~molntk.molecular.blocks.BlockKernelOf`);
- ``outputs``: the names of the matrices a call returns; the last is the one a kernel ridge
  regression is fitted on (the NTK Θ of a network's kernel, else the kernel itself).

Descriptors follow :class:`Descriptors`: ``select(indices)`` (the descriptors of molecules
``indices``, equal to describing that sub-list) and ``to(device)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
from torch import Tensor

D = TypeVar("D", bound="Descriptors")


class Descriptors(Protocol):
    """Per-molecule descriptors of a molecule set, computed once and taken apart per block."""

    @property
    def n_molecules(self) -> int: ...

    def select(self: D, indices: Sequence[int] | np.ndarray | Tensor) -> D: ...

    def to(self: D, device: str) -> D: ...


class KernelMatrices(dict[str, Tensor]):
    """The named molecular kernel matrices of one call, each (M1, M2).

    Kernels of networks return ``{"nngp": K, "ntk": Θ}`` (the NNGP and the NTK), classic
    kernels ``{"kernel": K}``; the matrices also read as attributes (``result.ntk``).
    """

    def __repr__(self) -> str:
        shapes = ", ".join(f"{name}={tuple(t.shape)}" for name, t in self.items())
        return f"KernelMatrices({shapes})"

    @property
    def nngp(self) -> Tensor:
        """The NNGP K of a network's kernel."""
        return self["nngp"]

    @property
    def ntk(self) -> Tensor:
        """The NTK Θ of a network's kernel."""
        return self["ntk"]

    @property
    def kernel(self) -> Tensor:
        """The matrix of a classic kernel."""
        return self["kernel"]


@runtime_checkable
class MolecularKernel(Protocol):
    """What every molecular kernel offers (module docstring)."""

    outputs: tuple[str, ...]

    def describe(self, molecules: Any) -> Any: ...

    def __call__(self, a: Any, b: Any | None = None) -> KernelMatrices: ...

    def prepare(self, descriptors: Any) -> Any: ...

    def on(self, device: str) -> MolecularKernel: ...

    def settings(self) -> dict[str, Any]: ...


def dataclass_settings(kernel: object) -> dict[str, Any]:
    """``settings()`` of a frozen-dataclass kernel without device state: its type and ``repr``
    (which lists every field)."""
    return {"type": type(kernel).__name__, "repr": repr(kernel)}
