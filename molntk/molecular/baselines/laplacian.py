"""Laplacian kernel on global molecular descriptors (Coulomb matrix, Bag of Bonds).

    K(M, M') = exp(−‖x(M) − x(M')‖₁ / σ)

It is positive definite for every σ > 0: exp(−|t|/σ) is the characteristic function of a
Cauchy distribution, so each coordinate factor is a PD kernel and the product over
coordinates is PD (Schur product theorem).

Width σ: :func:`median_l1_width` gives the usual default, the median L1 distance between
the descriptors of a (sub)sample of the training molecules, so that typical kernel values
are about e^{-1}; a pipeline then chooses σ by cross-validation over multiples of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from molntk.data.molecule import Molecule
from molntk.molecular.baselines.coulomb import BagOfBonds, CoulombMatrix
from molntk.molecular.descriptors import GlobalDescriptors
from molntk.molecular.protocol import KernelMatrices, dataclass_settings
from molntk.molecular.sets import InducingSet, MoleculeSet, as_molecule_set

#: What a Laplacian kernel call takes: descriptors or molecules.
DescriptorInput = GlobalDescriptors | MoleculeSet | Molecule | Sequence[Molecule]


def l1_distances(x1: Tensor, x2: Tensor | None = None, block_size: int = 4096) -> Tensor:
    """‖x1_i − x2_j‖₁ for descriptor rows (n1, d), (n2, d), computed in row blocks; exactly
    symmetric with a zero diagonal when ``x2`` is None."""
    x2 = x1 if x2 is None else x2
    return torch.cat([torch.cdist(block, x2, p=1) for block in x1.split(block_size)]) if len(x1) else x1.new_zeros(0, len(x2))


def median_l1_width(x: Tensor, max_samples: int = 2000, seed: int = 0) -> float:
    """Median L1 distance between distinct rows of ``x`` (a seeded subsample of at most
    ``max_samples`` rows): the default Laplacian kernel width."""
    if len(x) < 2:
        raise ValueError("the median distance needs at least two descriptors")
    if len(x) > max_samples:
        x = x[torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:max_samples]]
    d = l1_distances(x)
    rows, cols = torch.triu_indices(len(x), len(x), offset=1)
    width = float(np.median(d[rows, cols].cpu().numpy()))  # the usual median (mean of the middle two)
    if width <= 0:
        raise ValueError("all descriptors are identical: no distance to set a width from")
    return width


@dataclass(frozen=True)
class LaplacianKernel:
    """exp(−‖x − x'‖₁/σ) on a global descriptor (``CoulombMatrix()`` or ``BagOfBonds()``).

    ``kern(a, b)`` → ``{"kernel"}`` (M1, M2) for molecules or :meth:`describe` output.
    """

    descriptor: CoulombMatrix | BagOfBonds
    sigma: float
    outputs: ClassVar[tuple[str, ...]] = ("kernel",)

    def __post_init__(self) -> None:
        if not self.sigma > 0:
            raise ValueError(f"sigma must be > 0, got {self.sigma}")

    @property
    def name(self) -> str:
        return f"{self.descriptor.name}-laplacian"

    @classmethod
    def with_median_width(cls, descriptor: CoulombMatrix | BagOfBonds, molecules: Sequence[Molecule]) -> LaplacianKernel:
        """The kernel with σ = :func:`median_l1_width` of the descriptors of ``molecules``."""
        return cls(descriptor, median_l1_width(descriptor(list(molecules))))

    def describe(self, molecules: MoleculeSet | InducingSet | Molecule | Sequence[Molecule]) -> GlobalDescriptors:
        """Descriptors (M, d), float64: compute once per molecule set, then pass to calls."""
        return GlobalDescriptors(self.descriptor(as_molecule_set(molecules).molecules))

    def prepare(self, descriptors: GlobalDescriptors) -> GlobalDescriptors:
        """The descriptors as they are: a call makes nothing of them that it could keep."""
        return descriptors

    def on(self, device: str) -> LaplacianKernel:
        """The kernel itself: it holds no device state."""
        return self

    def settings(self) -> dict[str, Any]:
        return dataclass_settings(self)

    def _descriptors(self, x: DescriptorInput) -> Tensor:
        return (x if isinstance(x, GlobalDescriptors) else self.describe(x)).values

    def __call__(self, a: DescriptorInput, b: DescriptorInput | None = None) -> KernelMatrices:
        x1 = self._descriptors(a)
        x2 = None if b is None else self._descriptors(b)
        return KernelMatrices(kernel=torch.exp(-l1_distances(x1, x2) / self.sigma))
