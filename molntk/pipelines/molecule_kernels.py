"""Every molecular kernel of the QM9 pipeline behind one interface.

A :class:`MoleculeKernel` turns a :class:`MoleculeGroup` into descriptors once
(``describe``) and evaluates the kernel between descriptor sets (``__call__``, a float64
numpy (M1, M2) matrix; ``b`` omitted: ``a`` with itself, symmetric). The kernel that is
regressed on is the NTK for the network models (SO(3) NTK, MLP NTK, augmented MLP NTK) and
the kernel itself for the classic ones (power spectrum, Coulomb matrix, bag of bonds).

A :class:`MoleculeGroup` computes the environment feature maps of its molecules once per
:class:`~molntk.features.environments.FeatureConfig`, so all models built on the same
feature maps share them. :class:`MoleculeBlockKernel` makes a MoleculeKernel on a group a
block kernel of :mod:`molntk.scale` (descriptors once, a kernel call per block), so the
pipeline's matrices come from the block engine: cached, resumable, on GPUs or Dask.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from molntk.baselines import BagOfBonds, CoulombMatrix, LaplacianKernel, LocalKernel, median_l1_width
from molntk.data.molecule import Molecule
from molntk.features.environments import (
    QM9_MAX_ATOMS,
    EnvironmentBatch,
    FeatureConfig,
    PaddedFeatures,
    environment_features,
    padded_features,
)
from molntk.features.inducing import concatenate, environments_as_molecules
from molntk.kernels.molecular import MolecularKernel


@dataclass
class MoleculeGroup:
    """A list of molecules with their environment feature maps, computed on first use."""

    molecules: list[Molecule]
    dtype: torch.dtype = torch.float64
    device: str = "cpu"
    _environments: dict[FeatureConfig, EnvironmentBatch] = field(default_factory=dict, repr=False)

    def environments(self, config: FeatureConfig) -> EnvironmentBatch:
        if config not in self._environments:
            self._environments[config] = environment_features(self.molecules, config, dtype=self.dtype, device=self.device)
        return self._environments[config]

    def __len__(self) -> int:
        return len(self.molecules)


@dataclass
class InducingGroup:
    """The inducing environments ``rows`` of ``group`` (each a molecule of its own,
    :func:`~molntk.features.inducing.environments_as_molecules`) followed by the group's
    molecules: a molecule kernel on it holds Θ(inducing, inducing) and Θ(molecule,
    inducing) of a sparse model. Only kernels that describe molecules by their
    environments (``environments``) can use it."""

    group: MoleculeGroup
    rows: torch.Tensor

    @property
    def dtype(self) -> torch.dtype:
        return self.group.dtype

    @property
    def device(self) -> str:
        return self.group.device

    @property
    def molecules(self) -> list[Molecule]:
        raise TypeError("a sparse model needs a kernel over atom environments; this one describes whole molecules")

    def environments(self, config: FeatureConfig) -> EnvironmentBatch:
        feats = self.group.environments(config)
        return concatenate(environments_as_molecules(feats, self.rows), feats)

    def __len__(self) -> int:
        return len(self.rows) + len(self.group)


class MoleculeKernel(Protocol):
    """Descriptors of a group once, then the regression kernel between descriptor sets."""

    def describe(self, group: MoleculeGroup | InducingGroup) -> Any: ...

    def __call__(self, a: Any, b: Any | None = None) -> np.ndarray: ...


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy()


@dataclass(frozen=True)
class SO3NTKKernel:
    """The molecular NTK of an SO(3) environment network (:class:`MolecularKernel`); with
    ``pairing="atom-index"`` on the reference's layout of 29 padded atoms."""

    kernel: MolecularKernel
    features: FeatureConfig

    def describe(self, group: MoleculeGroup) -> EnvironmentBatch | PaddedFeatures:
        if self.kernel.pairing == "atom-index":
            return padded_features(group.molecules, self.features, n_atoms=QM9_MAX_ATOMS, dtype=group.dtype, device=group.device)
        return group.environments(self.features)

    def __call__(self, a: EnvironmentBatch | PaddedFeatures, b: EnvironmentBatch | PaddedFeatures | None = None) -> np.ndarray:
        return _numpy(self.kernel(a, b).ntk)


@dataclass(frozen=True)
class FeatureMapKernel:
    """A local baseline on molntk's feature maps; ``output`` picks which of its kernels
    (0: the only one, or NNGP; 1: NTK) is regressed on."""

    kernel: LocalKernel
    features: FeatureConfig
    output: int = 0

    def describe(self, group: MoleculeGroup) -> Any:
        return self.kernel.descriptors(group.environments(self.features))

    def __call__(self, a: Any, b: Any | None = None) -> np.ndarray:
        return _numpy(self.kernel.kernels(a, b)[self.output])


@dataclass(frozen=True)
class MoleculeDescriptorKernel:
    """A local baseline with descriptors of its own (SOAP, FCHL19), computed from the molecules."""

    kernel: LocalKernel

    def describe(self, group: MoleculeGroup) -> Any:
        return self.kernel.features(group.molecules)

    def __call__(self, a: Any, b: Any | None = None) -> np.ndarray:
        return _numpy(self.kernel.kernels(a, b)[0])


@dataclass(frozen=True)
class GlobalDescriptorKernel:
    """Laplacian kernel exp(−‖x − x'‖₁/σ) on a Coulomb-matrix or bag-of-bonds descriptor."""

    kernel: LaplacianKernel

    def describe(self, group: MoleculeGroup) -> torch.Tensor:
        return self.kernel.features(group.molecules)

    def __call__(self, a: torch.Tensor, b: torch.Tensor | None = None) -> np.ndarray:
        return _numpy(self.kernel(a, b))


def laplacian_candidates(
    descriptor: CoulombMatrix | BagOfBonds, reference: Sequence[Molecule], width_factors: Sequence[float]
) -> list[GlobalDescriptorKernel]:
    """Laplacian kernels with σ = factor × median L1 distance among ``reference`` (training molecules)."""
    median = median_l1_width(descriptor(list(reference)))
    return [GlobalDescriptorKernel(LaplacianKernel(descriptor, factor * median)) for factor in width_factors]


class MoleculeBlockKernel:
    """A block kernel (:mod:`molntk.scale.blocks`) of a :class:`MoleculeKernel` on a group:
    the descriptors of every molecule are computed once, here; a block is the kernel
    between the descriptor subsets of its molecules, ``{"kernel": K[rows, cols]}``.
    ``key``: the cache key (content hash of the model, its settings and the molecules)."""

    def __init__(self, kernel: MoleculeKernel, group: MoleculeGroup | InducingGroup, key: str) -> None:
        self.kernel = kernel
        self.descriptors = kernel.describe(group)
        self.n_molecules = len(group)
        self._key = key

    def cache_key(self) -> str:
        return self._key

    def compute_block(self, rows: np.ndarray, cols: np.ndarray | None) -> dict[str, np.ndarray]:
        from molntk.scale.molecular import subset

        a = subset(self.descriptors, rows)
        with torch.no_grad():
            return {"kernel": self.kernel(a, None if cols is None else subset(self.descriptors, cols))}

    def on(self, device: str) -> MoleculeBlockKernel:
        """A copy computing on ``device``: descriptors moved, an SO(3) kernel's discretisation
        rebuilt there; the cache key is unchanged."""
        from molntk.scale.molecular import to_device

        copy = object.__new__(MoleculeBlockKernel)
        copy.__dict__.update(self.__dict__)
        copy.descriptors = to_device(self.descriptors, device)
        if isinstance(self.kernel, SO3NTKKernel):
            inner = self.kernel.kernel
            ctx = inner.network.discretisation(inner.ctx.grid, inner.ctx.mode, inner.ctx.dtype, device)
            copy.kernel = dataclasses.replace(self.kernel, kernel=dataclasses.replace(inner, ctx=ctx))
        return copy
