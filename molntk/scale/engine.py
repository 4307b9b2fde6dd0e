"""Assemble train × train and test × train kernel matrices from blocks (the entry point).

    kernel_matrices(block_kernel, train_idx, test_idx=None, *, cache_dir=None,
                    memory_budget_mb=None, block_size=None, executor=None,
                    progress=None, storage_dir=None) -> dict[str, np.ndarray]

returns ``{name + "_train": K[train, train], name + "_test": K[test, train]}`` for every
matrix ``name`` the block kernel produces (``nngp``, ``ntk`` for the SO(3) kernels), float64
arrays of shape (n, n) and (m, n). :func:`assemble_kernels` takes the same arguments plus
``boundaries`` and returns a :class:`KernelAssembly`: the matrices, the blocks and each
block's compute seconds. Algorithm:

1. block side b = min(⌊√(budget / bytes_per_pair)⌋, block_size or 256, n)
   (:mod:`molntk.scale.memory`), budget = ``memory_budget_mb`` or the default for the
   device (RAM/4, or free GPU memory/2);
2. the plan of :mod:`molntk.scale.blocks`: train blocks i ≤ j only, K[B_j, B_i] = K[B_i, B_j]ᵀ,
   no block across a ``boundary`` (a learning curve's sizes: the kernel of every prefix
   up to a boundary, and its cost, are then sums over whole blocks);
3. with ``cache_dir``: blocks already on disk (checksum verified) are used, damaged ones
   recomputed (:mod:`molntk.scale.cache`), every new block is written as soon as it is done
   with the seconds it took, so a killed run resumes where it stopped and reports the same
   times; assembled values are copies of the block values, hence bit-identical to an
   uninterrupted run;
4. the other blocks run on ``executor`` (default: all visible GPUs when CUDA is present and
   the kernel has ``on(device)``, else this process; or a :class:`DaskExecutor`);
5. ``progress(done, total)`` after every block;
6. out of core: with ``storage_dir`` the matrices are ``.npy`` files there, filled block by
   block through ``np.memmap`` (written as ``*.npy.partial`` and renamed when complete, so a
   ``.npy`` there is always whole) and returned as read-only memmaps: the RAM they need is
   the page cache the OS grants, not n² · 8 bytes.

Each block is checked: the same matrix names as the first, shape (len(rows), len(cols)),
float64, finite; a bad block is an error naming its molecule range.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from molntk.scale.blocks import TEST, TRAIN, Block, BlockKernel, as_indices, plan_blocks
from molntk.scale.cache import BlockCache, SECONDS
from molntk.scale.executors import DeviceExecutor, Executor, SerialExecutor, cuda_devices
from molntk.scale.memory import DEFAULT_BYTES_PER_PAIR, MAX_BLOCK, block_side, default_memory_budget
from molntk.scale.progress import ProgressCallback


def default_executor(kernel: BlockKernel) -> Executor:
    """All visible GPUs (:class:`DeviceExecutor`) when CUDA is present and the kernel can be
    moved (``on``), else :class:`SerialExecutor`."""
    devices = cuda_devices()
    return DeviceExecutor(devices) if devices and hasattr(kernel, "on") else SerialExecutor()


@dataclass(frozen=True, eq=False)
class KernelAssembly:
    """Assembled matrices (``name_train``, ``name_test``; memmaps when stored on disk), the
    planned blocks, each block's compute seconds (those loaded from the cache report the
    time recorded when they were computed) and whether it was loaded from the cache."""

    matrices: dict[str, np.ndarray]
    blocks: list[Block]
    seconds: np.ndarray
    from_cache: np.ndarray

    def seconds_up_to(self, n: int, test_rows: int | None = None) -> tuple[float, float]:
        """(train, test) compute seconds of the blocks within the first ``n`` training
        molecules (and the first ``test_rows`` test molecules; None: all): the cost of the
        kernels of that prefix (``n``, ``test_rows``: boundaries of the plan)."""
        def inside(b: Block) -> bool:
            if b.matrix == TRAIN:
                return b.row_slice.stop <= n and b.col_slice.stop <= n
            return b.col_slice.stop <= n and (test_rows is None or b.row_slice.stop <= test_rows)

        train = sum(s for b, s in zip(self.blocks, self.seconds) if b.matrix == TRAIN and inside(b))
        test = sum(s for b, s in zip(self.blocks, self.seconds) if b.matrix == TEST and inside(b))
        return float(train), float(test)


class _Assembly:
    """The output matrices, allocated at the first block (in RAM, or as ``.npy.partial``
    memmaps under ``storage_dir``), and the checks on every block."""

    def __init__(self, n_train: int, n_test: int | None, storage_dir: Path | None) -> None:
        self.shapes = {TRAIN: (n_train, n_train)} | ({} if n_test is None else {TEST: (n_test, n_train)})
        self.storage_dir = storage_dir
        self.out: dict[str, dict[str, np.ndarray]] = {}

    def _allocate(self, name: str, matrix: str) -> np.ndarray:
        shape = self.shapes[matrix]
        if self.storage_dir is None:
            return np.empty(shape)
        self.storage_dir.mkdir(parents=True, exist_ok=True)
        return np.lib.format.open_memmap(self.storage_dir / f"{name}_{matrix}.npy.partial", mode="w+", dtype=np.float64, shape=shape)

    def place(self, block: Block, arrays: dict[str, np.ndarray]) -> None:
        where = f"block rows {block.row_slice.start}:{block.row_slice.stop} × cols {block.col_slice.start}:{block.col_slice.stop} of the {block.matrix} matrix"
        if not self.out:
            if not arrays:
                raise ValueError(f"the block kernel returned no matrices for {where}")
            self.out = {name: {m: self._allocate(name, m) for m in self.shapes} for name in sorted(arrays)}
        if sorted(arrays) != sorted(self.out):
            raise ValueError(f"{where}: the block kernel returned matrices {sorted(arrays)}, earlier blocks {sorted(self.out)}")
        for name, a in arrays.items():
            if a.shape != block.shape or a.dtype != np.float64:
                raise ValueError(f"{where}: {name!r} is {a.dtype} {a.shape}, expected float64 {block.shape}")
            if not np.isfinite(a).all():
                raise ValueError(f"{where}: {name!r} has non-finite entries")
            target = self.out[name][block.matrix]
            target[block.row_slice, block.col_slice] = a
            if block.mirrored:
                target[block.col_slice, block.row_slice] = a.T

    def result(self) -> dict[str, np.ndarray]:
        """The matrices; stored ones flushed, renamed to ``.npy`` and reopened read-only."""
        out = {}
        for name, mats in self.out.items():
            for m, a in mats.items():
                if self.storage_dir is not None:
                    a.flush()
                    partial = Path(a.filename)
                    final = partial.with_suffix("")
                    os.replace(partial, final)
                    a = np.load(final, mmap_mode="r")
                out[f"{name}_{m}"] = a
        return out


def kernel_matrices(
    block_kernel: BlockKernel,
    train_idx: Sequence[int] | np.ndarray,
    test_idx: Sequence[int] | np.ndarray | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    memory_budget_mb: float | None = None,
    block_size: int | None = None,
    executor: Executor | None = None,
    progress: ProgressCallback | None = None,
    storage_dir: str | os.PathLike[str] | None = None,
) -> dict[str, np.ndarray]:
    """Train × train and test × train kernel matrices, computed in blocks (module docstring)."""
    return assemble_kernels(
        block_kernel, train_idx, test_idx, cache_dir=cache_dir, memory_budget_mb=memory_budget_mb,
        block_size=block_size, executor=executor, progress=progress, storage_dir=storage_dir,
    ).matrices


def assemble_kernels(
    block_kernel: BlockKernel,
    train_idx: Sequence[int] | np.ndarray,
    test_idx: Sequence[int] | np.ndarray | None = None,
    *,
    boundaries: Iterable[int] = (),
    test_boundaries: Iterable[int] = (),
    cache_dir: str | os.PathLike[str] | None = None,
    memory_budget_mb: float | None = None,
    block_size: int | None = None,
    executor: Executor | None = None,
    progress: ProgressCallback | None = None,
    storage_dir: str | os.PathLike[str] | None = None,
) -> KernelAssembly:
    """The matrices of :func:`kernel_matrices` with the plan's blocks and their seconds;
    ``boundaries`` (``test_boundaries``): training (test) positions where blocks must start
    (module docstring)."""
    if not callable(getattr(block_kernel, "compute_block", None)):
        raise TypeError(f"{type(block_kernel).__name__} is not a block kernel: it has no compute_block(rows, cols)")
    train = as_indices(train_idx, "train_idx")
    test = None if test_idx is None else as_indices(test_idx, "test_idx")
    if train.size == 0:
        raise ValueError("train_idx is empty")
    n_molecules = getattr(block_kernel, "n_molecules", None)
    for name, idx in (("train_idx", train), ("test_idx", test)):
        if n_molecules is not None and idx is not None and idx.size and idx.max() >= n_molecules:
            raise ValueError(f"{name} has molecule index {int(idx.max())}, but the block kernel has {n_molecules} molecules")
    executor = default_executor(block_kernel) if executor is None else executor
    if memory_budget_mb is not None and not memory_budget_mb > 0:
        raise ValueError(f"memory_budget_mb must be > 0, got {memory_budget_mb}")
    device = executor.devices[0] if isinstance(executor, DeviceExecutor) else "cpu"
    budget = int(memory_budget_mb * 2**20) if memory_budget_mb is not None else default_memory_budget(device)
    side = block_side(
        len(train),
        budget_bytes=budget,
        bytes_per_pair=getattr(block_kernel, "bytes_per_pair", DEFAULT_BYTES_PER_PAIR),
        max_block=MAX_BLOCK if block_size is None else block_size,
    )
    blocks = plan_blocks(train, test, side, boundaries, test_boundaries)
    assembly = _Assembly(len(train), None if test is None else len(test), None if storage_dir is None else Path(storage_dir))
    seconds = np.full(len(blocks), math.nan)
    from_cache = np.zeros(len(blocks), dtype=bool)
    cache = None
    if cache_dir is not None:
        key, items = getattr(block_kernel, "cache_key", None), getattr(block_kernel, "item_keys", None)
        if key is None or items is None:
            raise TypeError(f"{type(block_kernel).__name__} has no cache_key() and item_keys(): it cannot use the block cache")
        cache = BlockCache(cache_dir, key(), items())
    done, todo = 0, []
    for number, block in enumerate(blocks):
        cached = None if cache is None else cache.load(block.rows, block.cols)
        if cached is None:
            todo.append(number)
            continue
        seconds[number] = float(cached.pop(SECONDS, math.nan))
        from_cache[number] = True
        assembly.place(block, cached)
        done += 1
        if progress is not None:
            progress(done, len(blocks))
    for k, arrays, block_seconds in executor.run(block_kernel, [(blocks[n].rows, blocks[n].cols) for n in todo]):
        number = todo[k]
        block = blocks[number]
        assembly.place(block, arrays)
        seconds[number] = block_seconds
        if cache is not None:
            cache.store(block.rows, block.cols, {**arrays, SECONDS: np.asarray(block_seconds)})
        done += 1
        if progress is not None:
            progress(done, len(blocks))
    return KernelAssembly(assembly.result(), blocks, seconds, from_cache)
