"""Memory budgets and the block side that fits one.

A block of b × b molecule pairs holds ``bytes_per_pair`` bytes per pair while it is computed
(its output matrices, the kernel's accumulators and the copy written to the cache), so the
largest side that fits a budget B is

    b = ⌊√(B / bytes_per_pair)⌋,

capped at ``max_block`` (smaller blocks keep the cache, progress and parallel work fine
grained) and at the number of molecules. The kernel's own per-environment working memory
is bounded by its environment block size, independently of b.

Default budget: a quarter of the available RAM (psutil, else ``MemAvailable`` of
/proc/meminfo) on the CPU, half of the free memory of a CUDA device.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

#: Default largest block side (molecules): fine enough for resuming, progress and
#: parallel workers, coarse enough that per-block overhead is negligible.
MAX_BLOCK = 256
#: Bytes per molecule pair of a block with two float64 outputs (NNGP, NTK), times four for
#: the kernel's accumulators, the numpy copy and the cache encoding.
DEFAULT_BYTES_PER_PAIR = 2 * 8 * 4


def available_ram_bytes() -> int:
    """Available (not just free) RAM in bytes."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("cannot tell the available memory: install psutil or pass memory_budget_mb") from None


def free_cuda_bytes(device: str) -> int:
    """Free memory of a CUDA device in bytes."""
    free, _total = torch.cuda.mem_get_info(torch.device(device))
    return int(free)


def default_memory_budget(device: str = "cpu") -> int:
    """Budget in bytes for one block: RAM/4 on the CPU, free GPU memory/2 on ``cuda[:i]``."""
    if device.startswith("cuda"):
        return free_cuda_bytes(device) // 2
    return available_ram_bytes() // 4


def block_side(
    n: int,
    *,
    budget_bytes: int,
    bytes_per_pair: int = DEFAULT_BYTES_PER_PAIR,
    max_block: int = MAX_BLOCK,
) -> int:
    """Molecules per block side: min(⌊√(budget/bytes_per_pair)⌋, max_block, n), at least 1.

    Raises ValueError when the budget does not hold even one pair.
    """
    if budget_bytes < bytes_per_pair:
        raise ValueError(f"memory budget of {budget_bytes} bytes is below one molecule pair ({bytes_per_pair} bytes)")
    if max_block < 1:
        raise ValueError(f"max_block must be >= 1, got {max_block}")
    fit = math.isqrt(budget_bytes // bytes_per_pair)
    return max(1, min(fit, max_block, n))
