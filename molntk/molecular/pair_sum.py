"""The Behler–Parrinello atom-pair sum: environment kernels → molecular kernels.

A molecule M is a set of atoms a with centre elements Z_a; an environment kernel k compares
atoms. The molecular kernels are

    ``element`` (default):  K(M, M') = Σ_{a∈M} Σ_{b∈M'} [Z_a = Z_b] k(a, b)
    ``shared``:             K(M, M') = Σ_{a∈M} Σ_{b∈M'} k(a, b)

(the NTK/NNGP of E(M) = Σ_a N_{Z_a}(env_a), one network per element or one for all), and
``reduce="mean"`` divides by n_atoms(M) · n_atoms(M') (intensive targets).

:func:`pair_sum` evaluates k in blocks of at most ``block_size`` atoms per side through a
callback ``block(i1, i2, diagonal)`` that gets the atom indices of the block (so a kernel
can index anything it precomputed per atom, such as the SO(3) network's self-kernels), and
scatters each block into its molecule pairs. For a symmetric call (second side omitted)
with a symmetric k (``mirror``) only the blocks on or above the diagonal are computed and
mirrored. A callback may return several kernels at once (NNGP and NTK); they are summed alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch
from torch import Tensor

#: Pairings of atoms in the pair sum.
PAIRINGS = ("element", "shared")
#: Reductions over atom pairs.
REDUCTIONS = ("sum", "mean")

#: block(i1, i2, diagonal) → kernels (len(i1), len(i2)) between the atoms i1 of the first
#: side and i2 of the second; ``diagonal``: i2 is i1 on the same side (a symmetric call).
BlockFn = Callable[[Tensor, Tensor, bool], Sequence[Tensor]]


class Atoms(Protocol):
    """The atom bookkeeping the pair sum needs: ``centre_numbers`` (n_atoms,) Z of each atom,
    ``molecule_index`` (n_atoms,) its molecule's position in the list (atoms ordered by
    molecule), ``n_molecules`` the length of the list."""

    centre_numbers: Tensor
    molecule_index: Tensor
    n_molecules: int


def check_options(pairing: str, reduce: str, block_size: int, pairings: Sequence[str] = PAIRINGS) -> None:
    """ValueError for a pairing outside ``pairings``, an unknown reduction or a block size < 1."""
    if pairing not in pairings:
        raise ValueError(f"unknown pairing {pairing!r}; choose one of {tuple(pairings)}")
    if reduce not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduce!r}; choose one of {REDUCTIONS}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")


def atom_counts(atoms: Atoms) -> Tensor:
    """Atoms per molecule, shape (n_molecules,)."""
    return torch.bincount(atoms.molecule_index, minlength=atoms.n_molecules)


def reduce_pairs(kernels: Sequence[Tensor], counts1: Tensor, counts2: Tensor, reduce: str) -> tuple[Tensor, ...]:
    """The kernels as they are (``sum``) or divided by n_atoms(M) · n_atoms(M') (``mean``)."""
    if reduce == "sum":
        return tuple(kernels)
    norm = counts1[:, None].to(kernels[0]) * counts2[None, :].to(kernels[0])
    return tuple(k / norm for k in kernels)


def scatter_block(target: Tensor, k: Tensor, m1: Tensor, m2: Tensor) -> None:
    """target[m1[i], m2[j]] += k[i, j] (sums atom-pair kernels into molecule pairs)."""
    rows = torch.zeros(target.shape[0], k.shape[1], dtype=k.dtype, device=k.device)
    rows.index_add_(0, m1, k)
    target.index_add_(1, m2, rows)


def _groups(atoms: Atoms, pairing: str) -> dict[int, Tensor]:
    """Atom indices per pairing group: per centre element, or one group of all atoms."""
    z = atoms.centre_numbers
    if pairing == "shared":
        return {0: torch.arange(len(z), device=z.device)}
    return {int(e): torch.nonzero(z == e).flatten() for e in torch.unique(z).tolist()}


def pair_sum(
    block: BlockFn,
    atoms1: Atoms,
    atoms2: Atoms | None = None,
    *,
    n_outputs: int,
    mirror: bool,
    pairing: str,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device | str,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Tensor, ...]:
    """The ``n_outputs`` summed kernels (M1, M2) of ``block`` by the pair sum above (no reduction:
    :func:`reduce_pairs`), in ``dtype`` on ``device``. ``atoms2`` None: the symmetric call on
    ``atoms1``; ``mirror``: k(a, b) = k(b, a), so that such a call computes only the upper
    block triangle. ``progress(done, total)`` after every block."""
    same = atoms2 is None
    atoms2 = atoms1 if same else atoms2
    mirror = same and mirror
    out = [torch.zeros(atoms1.n_molecules, atoms2.n_molecules, dtype=dtype, device=device) for _ in range(n_outputs)]
    groups2 = _groups(atoms2, pairing)
    tasks = []
    for key, idx1 in _groups(atoms1, pairing).items():
        idx2 = groups2.get(key)
        if idx2 is None:
            continue
        blocks2 = idx2.split(block_size)
        for i, b1 in enumerate(idx1.split(block_size)):
            for j, b2 in enumerate(blocks2):
                if mirror and j < i:
                    continue
                tasks.append((b1, b2, same and i == j, mirror and j > i))
    for done, (b1, b2, diagonal, mirrored) in enumerate(tasks):
        ks = block(b1, b2, diagonal)
        m1, m2 = atoms1.molecule_index[b1].to(device), atoms2.molecule_index[b2].to(device)
        for target, k in zip(out, ks, strict=True):
            scatter_block(target, k, m1, m2)
            if mirrored:
                scatter_block(target, k.T, m2, m1)
        if progress is not None:
            progress(done + 1, len(tasks))
    return tuple(out)
