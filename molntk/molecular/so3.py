"""The molecular NNGP/NTK of an SO(3) environment network.

Behler–Parrinello model E(M) = Σ_{a∈M} N_{Z_a}(env_a): its NNGP/NTK is the atom-pair sum
(:mod:`molntk.molecular.pair_sum`) of the environment kernel k of the SO(3) network
(:class:`~molntk.kernels.so3.network.SO3Network`) on the environment feature maps
(:mod:`molntk.features.environments`):

- ``element`` (default): Θ(M, M') = Σ_{a∈M} Σ_{b∈M'} [Z_a = Z_b] k(env_a, env_b);
- ``shared``:  one network for all elements, Θ(M, M') = Σ_a Σ_b k(env_a, env_b);
- ``atom-index``: the published reference's unshared per-atom-index branches on a padded
  layout of :data:`~molntk.data.qm9.QM9_MAX_ATOMS` atoms (atom i pairs only with atom i;
  padding atoms have zero features and still contribute, as in the reference):
  Θ(M, M') = Σ_i k(env_i(M), env_i(M')). Not permutation invariant; for comparison only.

``reduce="mean"`` divides by n_atoms(M) · n_atoms(M') (intensive targets). Environment
kernels are evaluated in blocks of at most ``block_size`` environments per side, so the
memory of a call is bounded by the block size, not by the number of molecules; for a
symmetric call on a mirrored grid (Discretisation.symmetric) only blocks on or above the
diagonal are computed. The per-environment part of the recursion (self-kernels, whose
variances the nonlinearities need) is computed once per environment and call, and each
block's cross kernels are evaluated in cache-sized tiles (:meth:`SO3Network.cross_kernel`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from molntk.data.qm9 import QM9_MAX_ATOMS
from molntk.features.environments import EnvironmentBatch, FeatureConfig, PaddedFeatures, padded_features
from molntk.kernels.so3.context import Discretisation
from molntk.kernels.so3.network import SO3Network
from molntk.molecular.pair_sum import PAIRINGS, atom_counts, check_options, pair_sum, reduce_pairs
from molntk.molecular.protocol import KernelMatrices
from molntk.molecular.sets import InducingSet, MoleculeSet, as_molecule_set

#: Pairings of the SO(3) kernel: those of the pair sum and the reference's atom-index layout.
SO3_PAIRINGS = (*PAIRINGS, "atom-index")

SO3Features = EnvironmentBatch | PaddedFeatures


@dataclass
class SO3MolecularKernel:
    """Molecular NNGP/NTK of an SO(3) environment network on the feature maps ``features``
    (see module docstring); a call returns ``{"nngp", "ntk"}``."""

    network: SO3Network
    ctx: Discretisation
    pairing: str = "element"
    reduce: str = "sum"
    block_size: int = 256
    features: FeatureConfig = field(default_factory=FeatureConfig)
    outputs: ClassVar[tuple[str, ...]] = ("nngp", "ntk")

    def __post_init__(self) -> None:
        check_options(self.pairing, self.reduce, self.block_size, SO3_PAIRINGS)

    @property
    def symmetric_grid(self) -> bool:
        """Whether a set's env kernel with itself is computed on and above the diagonal and
        mirrored (:attr:`~molntk.kernels.so3.context.Discretisation.symmetric`)."""
        return self.ctx.symmetric

    # -- the protocol ----------------------------------------------------------------------

    def describe(self, molecules: Any) -> SO3Features:
        """Environment feature maps of ``molecules`` (padded for ``pairing="atom-index"``); a
        plain list is featurized in float64 on the kernel's device."""
        group = as_molecule_set(molecules, device=str(self.ctx.device))
        if self.pairing != "atom-index":
            return group.environments(self.features)
        if isinstance(group, InducingSet):
            raise TypeError("pairing='atom-index' has no single-environment kernel: no inducing environments")
        return padded_features(group.molecules, self.features, n_atoms=QM9_MAX_ATOMS, dtype=group.dtype, device=group.device)

    def prepare(self, descriptors: SO3Features) -> SO3Features:
        """The descriptors as they are: a call makes nothing of them that it could keep."""
        return descriptors

    def on(self, device: str) -> SO3MolecularKernel:
        """The same kernel with its discretisation rebuilt on ``device``."""
        ctx = self.network.discretisation(self.ctx.grid, self.ctx.mode, self.ctx.dtype, device)
        return dataclasses.replace(self, ctx=ctx)

    def settings(self) -> dict[str, Any]:
        """The network, grid, mode, dtype, pairing, reduction, block size and feature config."""
        return {
            "type": type(self).__name__,
            "network": repr(self.network),
            "grid": repr(self.ctx.grid),
            "mode": self.ctx.mode,
            "dtype": str(self.ctx.dtype),
            "pairing": self.pairing,
            "reduce": self.reduce,
            "block_size": self.block_size,
            "features": self.features.to_dict(),
        }

    def __call__(
        self,
        feats1: SO3Features | MoleculeSet | list,
        feats2: SO3Features | MoleculeSet | list | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> KernelMatrices:
        """NNGP and NTK (M1, M2) between feature maps (or molecules, described first)."""
        f1 = feats1 if isinstance(feats1, (EnvironmentBatch, PaddedFeatures)) else self.describe(feats1)
        f2 = feats2 if feats2 is None or isinstance(feats2, (EnvironmentBatch, PaddedFeatures)) else self.describe(feats2)
        if self.pairing == "atom-index":
            if not isinstance(f1, PaddedFeatures) or not (f2 is None or isinstance(f2, PaddedFeatures)):
                raise TypeError("pairing='atom-index' needs padded_features(...) inputs")
            kernels = self._atom_index(f1, f2, progress)
            counts1 = f1.mask.sum(1)
            counts2 = counts1 if f2 is None else f2.mask.sum(1)
        else:
            if not isinstance(f1, EnvironmentBatch) or not (f2 is None or isinstance(f2, EnvironmentBatch)):
                raise TypeError(f"pairing={self.pairing!r} needs environment_features(...) inputs")
            kernels = self._pair_sum(f1, f2, progress)
            counts1 = atom_counts(f1)
            counts2 = counts1 if f2 is None else atom_counts(f2)
        nngp, ntk = reduce_pairs(kernels, counts1, counts2, self.reduce)
        return KernelMatrices(nngp=nngp, ntk=ntk)

    # -- environment kernels ---------------------------------------------------------------

    def env_kernel(self, x1: Tensor, x2: Tensor | None) -> tuple[Tensor, Tensor]:
        """(NNGP, NTK) of the network between environment coefficient sets."""
        out = self.network.kernel(x1, x2, ctx=self.ctx, ntk=True)
        return out.nngp, out.ntk

    def _self_kernels(self, x: Tensor) -> list[Tensor]:
        return self.network.self_kernels(x, ctx=self.ctx)

    def _cross(self, x1: Tensor, x2: Tensor, self1: list[Tensor], self2: list[Tensor], symmetric: bool) -> tuple[Tensor, Tensor]:
        """Env kernels of x1 × x2 from their self-kernels (``symmetric``: x2 is x1)."""
        return self.network.cross_kernel(x1, x2, self1, self2, ctx=self.ctx, ntk=True, symmetric=symmetric)

    def _pair_sum(self, f1: EnvironmentBatch, f2: EnvironmentBatch | None, progress) -> tuple[Tensor, ...]:
        """The pair sum; self-kernels computed once per environment, indexed per block."""
        dtype, device = self.ctx.dtype, self.ctx.device
        x1 = f1.coeffs.to(dtype=dtype, device=device)
        x2 = x1 if f2 is None else f2.coeffs.to(dtype=dtype, device=device)
        self1 = self._self_kernels(x1)
        self2 = self1 if f2 is None else self._self_kernels(x2)

        def block(i1: Tensor, i2: Tensor, diagonal: bool) -> tuple[Tensor, Tensor]:
            i1, i2 = i1.to(device), i2.to(device)
            return self._cross(x1[i1], x2[i2], [s[i1] for s in self1], [s[i2] for s in self2], diagonal)

        return pair_sum(block, f1, f2, n_outputs=2, mirror=self.symmetric_grid, pairing=self.pairing,
                        block_size=self.block_size, dtype=dtype, device=device, progress=progress)

    def _atom_index(self, f1: PaddedFeatures, f2: PaddedFeatures | None, progress) -> tuple[Tensor, Tensor]:
        """Σ_i k(env_i(M), env_i(M')) over the padded layout.

        A padding atom has all-zero features, so its lifted kernel is the constant σ_b²
        whatever its partner: k(0, x) depends on x only through x's own self-kernel.
        Pairs with padding are therefore evaluated once per real environment (and once for
        (0, 0)) and broadcast, instead of once per molecule pair.
        """
        same = f2 is None
        f2 = f1 if same else f2
        if f1.coeffs.shape[1] != f2.coeffs.shape[1]:
            raise ValueError(f"padded layouts differ: {f1.coeffs.shape[1]} vs {f2.coeffs.shape[1]} atoms")
        dtype, device = self.ctx.dtype, self.ctx.device
        nngp = torch.zeros(f1.coeffs.shape[0], f2.coeffs.shape[0], dtype=dtype, device=device)
        ntk = torch.zeros_like(nngp)
        zero = torch.zeros(f1.coeffs[:1, 0].shape, dtype=dtype, device=device)
        zero_self = self._self_kernels(zero)
        n_atoms = f1.coeffs.shape[1]
        for atom in range(n_atoms):
            rows = torch.nonzero(f1.mask[:, atom]).flatten().to(device)
            cols = rows if same else torch.nonzero(f2.mask[:, atom]).flatten().to(device)
            pad_rows = torch.nonzero(~f1.mask[:, atom]).flatten().to(device)
            pad_cols = pad_rows if same else torch.nonzero(~f2.mask[:, atom]).flatten().to(device)
            x1 = f1.coeffs[rows, atom].to(dtype=dtype, device=device)
            x2 = x1 if same else f2.coeffs[cols, atom].to(dtype=dtype, device=device)
            self1 = self._self_kernels(x1)
            self2 = self1 if same else self._self_kernels(x2)
            for target, k in zip((nngp, ntk), self._dense_block(x1, x2, self1, self2, same)):
                target[rows[:, None], cols[None, :]] += k
            if len(pad_rows) or len(pad_cols):
                zz = self._cross(zero, zero, zero_self, zero_self, True)
                z_col = self._cross(zero, x2, zero_self, self2, False) if len(cols) else None  # (1, |cols|)
                x_z = self._cross(x1, zero, self1, zero_self, False) if len(rows) else None  # (|rows|, 1)
                for t, target in enumerate((nngp, ntk)):
                    if len(pad_rows) and len(cols):
                        target[pad_rows[:, None], cols[None, :]] += z_col[t]
                    if len(rows) and len(pad_cols):
                        target[rows[:, None], pad_cols[None, :]] += x_z[t]
                    if len(pad_rows) and len(pad_cols):
                        target[pad_rows[:, None], pad_cols[None, :]] += zz[t]
            if progress is not None:
                progress(atom + 1, n_atoms)
        return nngp, ntk

    def _dense_block(
        self, x1: Tensor, x2: Tensor, self1: list[Tensor], self2: list[Tensor], same: bool
    ) -> tuple[Tensor, Tensor]:
        """Environment kernels between all rows of x1 and x2 (``same``: x2 is x1), in blocks
        of ``block_size``; symmetric calls compute blocks on/above the diagonal only."""
        nngp = torch.zeros(x1.shape[0], x2.shape[0], dtype=self.ctx.dtype, device=self.ctx.device)
        ntk = torch.zeros_like(nngp)
        starts1 = range(0, x1.shape[0], self.block_size)
        starts2 = range(0, x2.shape[0], self.block_size)
        for i, a in enumerate(starts1):
            for j, b in enumerate(starts2):
                if same and self.symmetric_grid and j < i:
                    continue
                sa, sb = slice(a, a + self.block_size), slice(b, b + self.block_size)
                diagonal = same and i == j
                k_nngp, k_ntk = self._cross(x1[sa], x2[sb], [s[sa] for s in self1], [s[sb] for s in self2], diagonal)
                nngp[sa, sb], ntk[sa, sb] = k_nngp, k_ntk
                if same and self.symmetric_grid and j > i:
                    nngp[sb, sa], ntk[sb, sa] = k_nngp.T, k_ntk.T
        return nngp, ntk
