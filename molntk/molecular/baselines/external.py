"""Local baselines on descriptors from optional packages: SOAP (DScribe) and FCHL19 (qmllib).

Both packages are imported only when a descriptor is computed; without them a clear
ImportError names what to install (``pip install "molntk[baselines]"``). The descriptors
are per-atom vectors; the molecular kernels are the element-resolved pair sums of
:mod:`molntk.molecular.pair_sum`:

- :class:`DScribeSOAPKernel`: DScribe's SOAP power spectrum p_a (GTO radial basis,
  ``n_max``, ``l_max``, Gaussian atom width ``sigma`` in Å, cutoff ``r_cut`` in Å), kernel
  Σ_a Σ_b [Z_a = Z_b] (p̂_a · p̂_b)^ζ with p̂ = p/‖p‖, as :mod:`.power_spectrum`;
- :class:`FCHL19Kernel`: qmllib's FCHL19 representation x_a (its default hyperparameters,
  overridable through ``options``), Gaussian kernel Σ_a Σ_b [Z_a = Z_b] exp(−‖x_a − x_b‖² / (2σ²))
  — qmllib's ``get_local_kernel``, the standard FCHL19 kernel-ridge model.

The descriptors of a molecule set are computed once and shared by every ζ (σ) candidate
(:meth:`~molntk.molecular.baselines.local.MoleculeDescriptorKernel.describe`); on an
:class:`~molntk.molecular.sets.InducingSet` the inducing atoms are rows of them, so the
sparse models compute Θ(M, {s}) = Σ_{a∈M} [Z_a = Z_s] k(x_a, x_s) on the same descriptors.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from molntk.data.molecule import Molecule
from molntk.data.qm9 import QM9_ELEMENTS
from molntk.molecular.baselines.local import MoleculeDescriptorKernel
from molntk.molecular.baselines.power_spectrum import normalise, normalised_dot_power
from molntk.molecular.descriptors import AtomDescriptors


def require(module: str, package: str, what: str) -> ModuleType:
    """Import ``module`` or raise an ImportError saying how to install ``package``."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"{what} needs the optional package {package!r}, which is not installed: "
            f'pip install "molntk[baselines]" (or: pip install {package})'
        ) from err


@dataclass(frozen=True)
class DScribeSOAPKernel(MoleculeDescriptorKernel):
    """SOAP (DScribe) per atom, normalised, (p̂ · p̂')^ζ, element-resolved pair sum."""

    elements: tuple[int, ...] = QM9_ELEMENTS
    r_cut: float = 5.0
    n_max: int = 6
    l_max: int = 4
    sigma: float = 0.5
    zeta: int = 2
    n_jobs: int = 1
    block_size: int = field(default=1024, kw_only=True)
    name: ClassVar[str] = "soap-dscribe"
    kernel_fields: ClassVar[frozenset[str]] = frozenset({"zeta"})

    def atom_descriptors(self, molecules: list[Molecule]) -> AtomDescriptors:
        """Normalised SOAP vectors of every atom (DScribe imported here)."""
        descriptors = require("dscribe.descriptors", "dscribe", "the SOAP baseline")
        from ase import Atoms

        for m in molecules:
            m.check_elements(self.elements)
        soap = descriptors.SOAP(
            species=list(self.elements), r_cut=self.r_cut, n_max=self.n_max, l_max=self.l_max,
            sigma=self.sigma, periodic=False, dtype="float64",
        )
        width = soap.get_number_of_features()

        def normalised_soap(chunk: Sequence[Molecule]) -> np.ndarray:
            out = soap.create([Atoms(numbers=m.numbers, positions=m.positions) for m in chunk], n_jobs=self.n_jobs)
            values = np.concatenate([np.asarray(o).reshape(-1, width) for o in (out if isinstance(out, list) else [out])])
            return normalise(torch.from_numpy(values)).numpy()

        return AtomDescriptors.in_chunks(molecules, normalised_soap)

    def env_kernel(self, x1: Tensor, x2: Tensor | None = None) -> tuple[Tensor]:
        return (normalised_dot_power(x1, x2, self.zeta),)


@dataclass(frozen=True)
class FCHL19Kernel(MoleculeDescriptorKernel):
    """FCHL19 (qmllib) per atom, Gaussian kernel of width ``sigma``, element-resolved pair sum."""

    sigma: float = 2.0
    elements: tuple[int, ...] = QM9_ELEMENTS
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    block_size: int = field(default=1024, kw_only=True)
    name: ClassVar[str] = "fchl19"
    kernel_fields: ClassVar[frozenset[str]] = frozenset({"sigma"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.sigma > 0:
            raise ValueError(f"sigma must be > 0, got {self.sigma}")

    def atom_descriptors(self, molecules: list[Molecule]) -> AtomDescriptors:
        """FCHL19 vectors of every atom (qmllib imported here; one call per molecule)."""
        representations = require("qmllib.representations", "qmllib", "the FCHL19 baseline")
        for m in molecules:
            m.check_elements(self.elements)
        def fchl19(chunk: Sequence[Molecule]) -> np.ndarray:
            return np.concatenate([
                representations.generate_fchl19(m.numbers, m.positions, elements=list(self.elements), **dict(self.options))
                for m in chunk])

        return AtomDescriptors.in_chunks(molecules, fchl19)

    def env_kernel(self, x1: Tensor, x2: Tensor | None = None) -> tuple[Tensor]:
        d = torch.cdist(x1, x1 if x2 is None else x2, compute_mode="donot_use_mm_for_euclid_dist")
        return (torch.exp(-(d * d) / (2 * self.sigma**2)),)
