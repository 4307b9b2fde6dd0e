"""Molecular kernels from atom-environment kernels (DESIGN §3).

Behler–Parrinello model E(M) = Σ_{a∈M} N_{Z_a}(env_a). Its NTK/NNGP is a sum over atom
pairs of an environment kernel k (one SO(3) network per centre element by default):

- ``element`` (default): Θ(M, M') = Σ_{a∈M} Σ_{b∈M'} [Z_a = Z_b] k(env_a, env_b);
- ``shared``:  one network for all elements, Θ(M, M') = Σ_a Σ_b k(env_a, env_b);
- ``atom-index``: the published reference's unshared per-atom-index branches on a padded
  layout (atom i pairs only with atom i; padding atoms have zero features and still
  contribute, as in the reference): Θ(M, M') = Σ_i k(env_i(M), env_i(M')). Not permutation
  invariant; for comparison only.

``reduce="mean"`` divides by n_atoms(M) · n_atoms(M') (intensive targets). Environment
kernels are evaluated in blocks of at most ``block_size`` environments per side, so the
memory of a call is bounded by the block size, not by the number of molecules; for a
symmetric call (x2 omitted) on a mirrored grid (Discretisation.symmetric) only blocks on or above the
diagonal are computed. The per-environment part of the recursion (self-kernels, whose
variances the nonlinearities need) is computed once per environment and call, and each
block's cross kernels are evaluated in cache-sized tiles (:meth:`SO3Network.cross_kernel`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from molntk.features.environments import EnvironmentBatch, PaddedFeatures
from molntk.kernels.so3.context import Discretisation
from molntk.kernels.so3.network import SO3Network

PAIRINGS = ("element", "shared", "atom-index")
REDUCTIONS = ("sum", "mean")


@dataclass(frozen=True)
class MoleculeKernels:
    """NNGP and NTK between two sets of molecules, shape (M1, M2) each."""

    nngp: Tensor
    ntk: Tensor


@dataclass
class MolecularKernel:
    """Molecular NNGP/NTK of an SO(3) environment network (see module docstring)."""

    network: SO3Network
    ctx: Discretisation
    pairing: str = "element"
    reduce: str = "sum"
    block_size: int = 256

    def __post_init__(self) -> None:
        if self.pairing not in PAIRINGS:
            raise ValueError(f"unknown pairing {self.pairing!r}; choose one of {PAIRINGS}")
        if self.reduce not in REDUCTIONS:
            raise ValueError(f"unknown reduction {self.reduce!r}; choose one of {REDUCTIONS}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")

    @property
    def symmetric_grid(self) -> bool:
        """Whether a set's env kernel with itself is computed on and above the diagonal and
        mirrored (:attr:`~molntk.kernels.so3.context.Discretisation.symmetric`)."""
        return self.ctx.symmetric

    def env_kernel(self, x1: Tensor, x2: Tensor | None) -> tuple[Tensor, Tensor]:
        out = self.network.kernel(x1, x2, ctx=self.ctx, ntk=True)
        return out.nngp, out.ntk

    def _self_kernels(self, x: Tensor) -> list[Tensor]:
        return self.network.self_kernels(x, ctx=self.ctx)

    def _cross(self, x1: Tensor, x2: Tensor, self1: list[Tensor], self2: list[Tensor], symmetric: bool) -> tuple[Tensor, Tensor]:
        """Env kernels of x1 × x2 from their self-kernels (``symmetric``: x2 is x1)."""
        return self.network.cross_kernel(x1, x2, self1, self2, ctx=self.ctx, ntk=True, symmetric=symmetric)

    def __call__(
        self,
        feats1: EnvironmentBatch | PaddedFeatures,
        feats2: EnvironmentBatch | PaddedFeatures | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> MoleculeKernels:
        if self.pairing == "atom-index":
            if not isinstance(feats1, PaddedFeatures) or not (feats2 is None or isinstance(feats2, PaddedFeatures)):
                raise TypeError("pairing='atom-index' needs padded_features(...) inputs")
            nngp, ntk = self._atom_index(feats1, feats2, progress)
            counts1 = feats1.mask.sum(1)
            counts2 = counts1 if feats2 is None else feats2.mask.sum(1)
        else:
            if not isinstance(feats1, EnvironmentBatch) or not (feats2 is None or isinstance(feats2, EnvironmentBatch)):
                raise TypeError(f"pairing={self.pairing!r} needs environment_features(...) inputs")
            nngp, ntk = self._pair_sum(feats1, feats2, progress)
            counts1 = torch.bincount(feats1.molecule_index, minlength=feats1.n_molecules)
            other = feats1 if feats2 is None else feats2
            counts2 = torch.bincount(other.molecule_index, minlength=other.n_molecules)
        if self.reduce == "mean":
            norm = counts1[:, None].to(nngp.dtype) * counts2[None, :].to(nngp.dtype)
            nngp, ntk = nngp / norm, ntk / norm
        return MoleculeKernels(nngp=nngp, ntk=ntk)

    def _groups(self, feats: EnvironmentBatch) -> dict[int, Tensor]:
        if self.pairing == "shared":
            return {0: torch.arange(feats.n_env, device=feats.coeffs.device)}
        z = feats.centre_numbers
        return {int(e): torch.nonzero(z == e).flatten() for e in torch.unique(z).tolist()}

    def _pair_sum(self, f1: EnvironmentBatch, f2: EnvironmentBatch | None, progress) -> tuple[Tensor, Tensor]:
        """Σ over same-group atom pairs, blockwise; self-kernels computed once per environment."""
        same = f2 is None
        f2 = f1 if same else f2
        dtype, device = self.ctx.dtype, self.ctx.device
        nngp = torch.zeros(f1.n_molecules, f2.n_molecules, dtype=dtype, device=device)
        ntk = torch.zeros_like(nngp)
        x1 = f1.coeffs.to(dtype=dtype, device=device)
        x2 = x1 if same else f2.coeffs.to(dtype=dtype, device=device)
        self1 = self._self_kernels(x1)
        self2 = self1 if same else self._self_kernels(x2)
        groups1, groups2 = self._groups(f1), self._groups(f2)
        tasks = []
        for key, idx1 in groups1.items():
            idx2 = groups2.get(key)
            if idx2 is None:
                continue
            blocks1 = idx1.split(self.block_size)
            blocks2 = idx2.split(self.block_size)
            for i, b1 in enumerate(blocks1):
                for j, b2 in enumerate(blocks2):
                    if same and self.symmetric_grid and j < i:
                        continue
                    tasks.append((b1, b2, same and i == j, same and self.symmetric_grid and j > i))
        for done, (b1, b2, diagonal, mirrored) in enumerate(tasks):
            m1, m2 = f1.molecule_index[b1].to(device), f2.molecule_index[b2].to(device)
            b1, b2 = b1.to(device), b2.to(device)
            k_nngp, k_ntk = self._cross(x1[b1], x2[b2], [s[b1] for s in self1], [s[b2] for s in self2], diagonal)
            for target, k in ((nngp, k_nngp), (ntk, k_ntk)):
                _scatter_block(target, k, m1, m2)
                if mirrored:
                    _scatter_block(target, k.T, m2, m1)
            if progress is not None:
                progress(done + 1, len(tasks))
        return nngp, ntk

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


def _scatter_block(target: Tensor, k: Tensor, m1: Tensor, m2: Tensor) -> None:
    """target[m1[i], m2[j]] += k[i, j] (sums atom-pair kernels into molecule pairs)."""
    rows = torch.zeros(target.shape[0], k.shape[1], dtype=k.dtype, device=k.device)
    rows.index_add_(0, m1, k)
    target.index_add_(1, m2, rows)
