"""Assemble train × train and test × train kernel matrices from blocks (the entry point).

    kernel_matrices(block_kernel, train_idx, test_idx=None, *, cache_dir=None,
                    memory_budget_mb=None, block_size=None, executor=None,
                    progress=None) -> dict[str, np.ndarray]

returns ``{name + "_train": K[train, train], name + "_test": K[test, train]}`` for every
matrix ``name`` the block kernel produces (``nngp``, ``ntk`` for the SO(3) kernels), float64
arrays of shape (n, n) and (m, n). Algorithm:

1. block side b = min(⌊√(budget / bytes_per_pair)⌋, block_size or 256, n)
   (:mod:`molntk.scale.memory`), budget = ``memory_budget_mb`` or the default for the
   device (RAM/4, or free GPU memory/2);
2. the plan of :mod:`molntk.scale.blocks`: train blocks i ≤ j only, K[B_j, B_i] = K[B_i, B_j]ᵀ;
3. with ``cache_dir``: blocks already on disk (checksum verified) are used, damaged ones
   recomputed (:mod:`molntk.scale.cache`), every new block is written as soon as it is done,
   so a killed run resumes where it stopped; assembled values are copies of the block
   values, hence bit-identical to an uninterrupted run;
4. the other blocks run on ``executor`` (default: all visible GPUs when CUDA is present and
   the kernel has ``on(device)``, else this process; or a :class:`DaskExecutor`);
5. ``progress(done, total)`` after every block.

Each block is checked: the same matrix names as the first, shape (len(rows), len(cols)),
float64, finite; a bad block is an error naming its molecule range.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from molntk.scale.blocks import TEST, TRAIN, Block, BlockKernel, as_indices, plan_blocks
from molntk.scale.cache import BlockCache
from molntk.scale.executors import DeviceExecutor, Executor, SerialExecutor, cuda_devices
from molntk.scale.memory import DEFAULT_BYTES_PER_PAIR, MAX_BLOCK, block_side, default_memory_budget
from molntk.scale.progress import ProgressCallback


def default_executor(kernel: BlockKernel) -> Executor:
    """All visible GPUs (:class:`DeviceExecutor`) when CUDA is present and the kernel can be
    moved (``on``), else :class:`SerialExecutor`."""
    devices = cuda_devices()
    return DeviceExecutor(devices) if devices and hasattr(kernel, "on") else SerialExecutor()


class _Assembly:
    """The output matrices, allocated at the first block, and the checks on every block."""

    def __init__(self, n_train: int, n_test: int | None) -> None:
        self.shapes = {TRAIN: (n_train, n_train)} | ({} if n_test is None else {TEST: (n_test, n_train)})
        self.out: dict[str, dict[str, np.ndarray]] = {}

    def place(self, block: Block, arrays: dict[str, np.ndarray]) -> None:
        where = f"block rows {block.row_slice.start}:{block.row_slice.stop} × cols {block.col_slice.start}:{block.col_slice.stop} of the {block.matrix} matrix"
        if not self.out:
            if not arrays:
                raise ValueError(f"the block kernel returned no matrices for {where}")
            self.out = {name: {m: np.empty(shape) for m, shape in self.shapes.items()} for name in sorted(arrays)}
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
        return {f"{name}_{m}": mats[m] for name, mats in self.out.items() for m in self.shapes}


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
) -> dict[str, np.ndarray]:
    """Train × train and test × train kernel matrices, computed in blocks (module docstring)."""
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
    blocks = plan_blocks(train, test, side)
    assembly = _Assembly(len(train), None if test is None else len(test))
    cache = None
    if cache_dir is not None:
        key = getattr(block_kernel, "cache_key", None)
        if key is None:
            raise TypeError(f"{type(block_kernel).__name__} has no cache_key(): it cannot use the block cache")
        cache = BlockCache(cache_dir, key())
    done, todo = 0, []
    for block in blocks:
        cached = None if cache is None else cache.load(block.rows, block.cols)
        if cached is None:
            todo.append(block)
            continue
        assembly.place(block, cached)
        done += 1
        if progress is not None:
            progress(done, len(blocks))
    for k, arrays in executor.run(block_kernel, [(b.rows, b.cols) for b in todo]):
        block = todo[k]
        assembly.place(block, arrays)
        if cache is not None:
            cache.store(block.rows, block.cols, arrays)
        done += 1
        if progress is not None:
            progress(done, len(blocks))
    return assembly.result()
