"""Per-atom descriptors and their molecular pair sums (the assembly all local baselines share).

A local baseline describes atom a of molecule M by a vector x_a (Fourier coefficients, a
power spectrum, an FCHL19 vector, ...) and compares atoms by an environment kernel k. The
molecular kernel is the Behler–Parrinello pair sum of DESIGN §3, exactly as for the SO(3)
networks (:mod:`molntk.kernels.molecular`):

    ``element`` (default):  K(M, M') = Σ_{a∈M} Σ_{b∈M'} [Z_a = Z_b] k(x_a, x_b)
    ``shared``:             K(M, M') = Σ_{a∈M} Σ_{b∈M'} k(x_a, x_b)

and ``reduce="mean"`` divides by n_atoms(M) · n_atoms(M'). Environment kernels are
evaluated in blocks of at most ``block_size`` atoms per side; for a symmetric call with a
symmetric k only the blocks on or above the diagonal are computed and mirrored. An
environment kernel may return several kernels at once (NNGP and NTK); they are summed
alike.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from molntk.data.molecule import Molecule
from molntk.features.environments import EnvironmentBatch
from molntk.kernels.molecular import REDUCTIONS, _scatter_block

#: Pairings of atoms offered to the local baselines (the SO(3) kernel's atom-index layout is
#: a reference-comparison device and is not offered here).
PAIRINGS = ("element", "shared")

#: k(x1, x2) → kernels of shape (n1, n2), in the descriptors' dtype; x2 None means x2 = x1.
EnvKernel = Callable[[Tensor, "Tensor | None"], tuple[Tensor, ...]]


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

    @property
    def n_atoms(self) -> Tensor:
        """Atoms per molecule, shape (n_molecules,)."""
        return torch.bincount(self.molecule_index, minlength=self.n_molecules)


def is_molecule_list(x: object) -> bool:
    """Whether ``x`` is a Molecule or a sequence of them (as opposed to precomputed features)."""
    return isinstance(x, Molecule) or (isinstance(x, Sequence) and all(isinstance(m, Molecule) for m in x))


def check_options(pairing: str, reduce: str, block_size: int) -> None:
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; choose one of {PAIRINGS}")
    if reduce not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduce!r}; choose one of {REDUCTIONS}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")


def _groups(d: AtomDescriptors, pairing: str) -> dict[int, Tensor]:
    if pairing == "shared":
        return {0: torch.arange(d.values.shape[0], device=d.values.device)}
    z = d.centre_numbers
    return {int(e): torch.nonzero(z == e).flatten() for e in torch.unique(z).tolist()}


def pair_sum(
    env_kernel: EnvKernel,
    d1: AtomDescriptors,
    d2: AtomDescriptors | None = None,
    *,
    n_outputs: int,
    symmetric: bool,
    pairing: str = "element",
    reduce: str = "sum",
    block_size: int = 256,
) -> tuple[Tensor, ...]:
    """The ``n_outputs`` molecular kernels (M1, M2) of ``env_kernel`` by the pair sum above.

    ``symmetric``: whether k(x, x') = k(x', x), which allows computing only the upper
    block triangle when ``d2`` is None. Dtype and device: those of the descriptors.
    """
    check_options(pairing, reduce, block_size)
    same = d2 is None
    d2 = d1 if same else d2
    mirror = same and symmetric
    groups2 = _groups(d2, pairing)
    opts = dict(dtype=d1.values.dtype, device=d1.values.device)
    out = [torch.zeros(d1.n_molecules, d2.n_molecules, **opts) for _ in range(n_outputs)]
    for key, idx1 in _groups(d1, pairing).items():
        idx2 = groups2.get(key)
        if idx2 is None:
            continue
        blocks2 = idx2.split(block_size)
        for i, b1 in enumerate(idx1.split(block_size)):
            for j, b2 in enumerate(blocks2):
                if mirror and j < i:
                    continue
                diagonal = same and i == j
                ks = env_kernel(d1.values[b1], None if diagonal else d2.values[b2])
                m1 = d1.molecule_index[b1].to(opts["device"])
                m2 = d2.molecule_index[b2].to(opts["device"])
                for target, k in zip(out, ks, strict=True):
                    _scatter_block(target, k, m1, m2)
                    if mirror and j > i:
                        _scatter_block(target, k.T, m2, m1)
    if reduce == "mean":
        norm = d1.n_atoms[:, None].to(out[0]) * d2.n_atoms[None, :].to(out[0])
        out = [k / norm for k in out]
    return tuple(out)


#: What a local kernel call takes: molecules, their environment feature maps, or descriptors.
KernelInput = Molecule | Sequence[Molecule] | EnvironmentBatch | AtomDescriptors


class LocalKernel(ABC):
    """Base of the local (atom-pair-sum) baselines.

    A subclass is a frozen dataclass with fields ``pairing``, ``reduce``, ``block_size`` and
    defines :meth:`features` (molecules → :class:`AtomDescriptors`, computed once per
    molecule set and reused across calls) and :meth:`env_kernel`. Kernel calls accept
    molecules, an :class:`~molntk.features.environments.EnvironmentBatch` (the SO(3)
    kernel's features, where the baseline is built on them) or precomputed descriptors.
    """

    name: str
    #: How many kernels :meth:`env_kernel` returns (NNGP and NTK: 2).
    n_outputs: ClassVar[int] = 1
    pairing: str
    reduce: str
    block_size: int

    @property
    def symmetric(self) -> bool:
        """Whether k(x, x') = k(x', x) holds (mathematically; then a symmetric call mirrors blocks)."""
        return True

    @abstractmethod
    def features(self, molecules: Molecule | Sequence[Molecule]) -> AtomDescriptors:
        """Descriptors of every atom of ``molecules``."""

    def from_environments(self, batch: EnvironmentBatch) -> AtomDescriptors:
        """Descriptors from precomputed environment feature maps (not every baseline has them)."""
        raise TypeError(f"{self.name} does not use molntk's environment feature maps: pass molecules or its own features()")

    @abstractmethod
    def env_kernel(self, x1: Tensor, x2: Tensor | None = None) -> tuple[Tensor, ...]:
        """Kernels (n1, n2) between descriptor rows x1, x2 (x2 None: x1 with itself)."""

    def descriptors(self, x: KernelInput) -> AtomDescriptors:
        """``x`` as descriptors: computed for molecules, converted for an EnvironmentBatch."""
        if isinstance(x, AtomDescriptors):
            return x
        if isinstance(x, EnvironmentBatch):
            return self.from_environments(x)
        if is_molecule_list(x):
            return self.features(x)
        raise TypeError(f"{self.name} needs molecules, an EnvironmentBatch or AtomDescriptors, got {type(x).__name__}")

    def kernels(self, a: KernelInput, b: KernelInput | None = None) -> tuple[Tensor, ...]:
        """All molecular kernels of the environment kernel's outputs, each (M1, M2)."""
        return pair_sum(
            self.env_kernel,
            self.descriptors(a),
            None if b is None else self.descriptors(b),
            n_outputs=self.n_outputs,
            symmetric=self.symmetric,
            pairing=self.pairing,
            reduce=self.reduce,
            block_size=self.block_size,
        )
