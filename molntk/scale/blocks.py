"""Block kernels and block plans.

A *block kernel* is any object with

    compute_block(rows: np.ndarray, cols: np.ndarray | None) -> dict[str, np.ndarray]

returning named float64 matrices of shape (len(rows), len(cols)) for the molecules with
indices ``rows`` × ``cols`` of its molecule set; ``cols=None`` asks for the symmetric
diagonal block rows × rows. Optional: ``cache_key() -> str`` (content hash of the kernel
config) and ``item_keys() -> np.ndarray`` ((n_molecules, k) uint8 content digests of the
molecules), both needed for the on-disk cache, which knows a block by the kernel and the
item keys of its molecules (:mod:`molntk.scale.cache`), ``bytes_per_pair`` (memory per
pair, for the budget) and ``on(device) -> block kernel`` (a copy on another device).

A *plan* cuts the training indices into consecutive blocks B_0 … B_{p-1} of at most b
molecules (never across a ``boundary``: positions where a block must start, such as the
sizes of a learning curve, so that every prefix up to a boundary is a union of whole
blocks) and the test indices into T_0 … T_{q-1}:

- train × train: the p(p+1)/2 blocks K[B_i, B_j], i ≤ j; the diagonal ones are symmetric
  calls, and K[B_j, B_i] = K[B_i, B_j]ᵀ is mirrored, not computed;
- test × train: the q·p blocks K[T_i, B_j].

The plan depends only on the indices and b, never on the executor, so every executor and
every rerun computes the same blocks (and finds them in the cache).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

#: Which matrix a block belongs to.
TRAIN, TEST = "train", "test"


@runtime_checkable
class BlockKernel(Protocol):
    def compute_block(self, rows: np.ndarray, cols: np.ndarray | None) -> dict[str, np.ndarray]:
        """Named (len(rows), len(cols)) float64 matrices; ``cols=None``: rows × rows."""
        ...


@dataclass(frozen=True)
class Block:
    """One block: ``matrix`` (TRAIN or TEST), row and column slices into that matrix, and
    the molecule indices ``rows``, ``cols`` (``cols`` None: symmetric diagonal block)."""

    matrix: str
    row_slice: slice
    col_slice: slice
    rows: np.ndarray
    cols: np.ndarray | None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.row_slice.stop - self.row_slice.start, self.col_slice.stop - self.col_slice.start)

    @property
    def mirrored(self) -> bool:
        """Off-diagonal train block: also written transposed below the diagonal."""
        return self.matrix == TRAIN and self.cols is not None


def as_indices(indices: object, name: str) -> np.ndarray:
    """``indices`` as a 1-d int64 array; ValueError naming ``name`` for anything else."""
    arr = np.asarray(indices)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"{name} must be a 1-d array of integer molecule indices, got shape {arr.shape} dtype {arr.dtype}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} has a negative molecule index {int(arr.min())}")
    return arr.astype(np.int64)


def timed_block(kernel: BlockKernel, rows: np.ndarray, cols: np.ndarray | None) -> tuple[dict[str, np.ndarray], float]:
    """``kernel.compute_block(rows, cols)`` and its wall-clock seconds."""
    start = time.perf_counter()
    arrays = kernel.compute_block(rows, cols)
    return arrays, time.perf_counter() - start


def _cuts(n: int, side: int, boundaries: Iterable[int] = ()) -> list[slice]:
    """Consecutive slices of at most ``side`` covering 0 … n, a new one at every boundary."""
    starts = sorted({0, *(b for b in boundaries if 0 < b < n)})
    ends = [*starts[1:], n]
    return [slice(a, min(a + side, end)) for start, end in zip(starts, ends) for a in range(start, end, side)]


def plan_blocks(
    train_idx: np.ndarray,
    test_idx: np.ndarray | None,
    side: int,
    boundaries: Iterable[int] = (),
    test_boundaries: Iterable[int] = (),
) -> list[Block]:
    """All blocks to compute (see module docstring), train blocks first, row-major;
    ``boundaries`` (``test_boundaries``): train (test) positions at which a block must start."""
    if side < 1:
        raise ValueError(f"block side must be >= 1, got {side}")
    train_cuts = _cuts(len(train_idx), side, boundaries)
    blocks = []
    for i, si in enumerate(train_cuts):
        for sj in train_cuts[i:]:
            diagonal = si == sj
            blocks.append(Block(TRAIN, si, sj, train_idx[si], None if diagonal else train_idx[sj]))
    if test_idx is not None:
        for si in _cuts(len(test_idx), side, test_boundaries):
            for sj in train_cuts:
                blocks.append(Block(TEST, si, sj, test_idx[si], train_idx[sj]))
    return blocks
