"""Where a run computes: its torch device and its number of CPU threads."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import torch

Item = TypeVar("Item")
Result = TypeVar("Result")


def resolve_device(name: str, key: str = "device") -> torch.device:
    """The torch device a configuration's ``device`` names: ``auto`` is CUDA when torch sees
    a GPU, else the CPU; ``cuda`` without a GPU is a ValueError naming the config ``key``;
    any other name as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{key} is 'cuda' but torch sees no CUDA device")
    return torch.device(name)


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's CPU thread count set to ``threads`` (None: unchanged) for the block, then restored."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def map_over_threads(function: Callable[[Item], Result], items: Sequence[Item],
                     device: torch.device | str) -> list[Result]:
    """``[function(x) for x in items]``, on the CPU spread over ``torch.get_num_threads()``
    Python threads, torch (and the compiled loops, which split by its thread count) on one
    thread each meanwhile, restored after; on another device, with one thread or one item, in
    order in this thread. For per-molecule work whose memory-bound tensor operations scale
    poorly over torch's own threads: on aspirin frames the force field's kernel rows take
    19.7 ms per frame pair with two torch threads and 15.5 ms on two Python threads, its
    predictions 6.4 and 4.2 ms (2-core CPU, ``benchmarks/threaded_rows.py``). Results in the
    order of ``items``; an exception of ``function`` is raised here."""
    threads = torch.get_num_threads()
    if torch.device(device).type != "cpu" or threads == 1 or len(items) < 2:
        return [function(x) for x in items]
    with torch_threads(1), ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        return list(pool.map(function, items))
