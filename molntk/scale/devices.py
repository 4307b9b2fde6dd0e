"""Where a run computes: its torch device and its number of CPU threads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


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
