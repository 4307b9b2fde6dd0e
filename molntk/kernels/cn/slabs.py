"""Running elementwise kernels slab by slab: numpy on CPU threads, torch elsewhere.

The site-pair tensors of image kernels are large (≈ 10⁶ entries per image pair). On CPU
they are processed in slabs of ~10⁵ entries (cache resident) by numpy's vectorised ufuncs
(its arccos and sqrt are several times faster than torch's double-precision ones) in a
thread pool of ``torch.get_num_threads()`` workers (numpy releases the GIL), writing
in place into existing buffers so that no new large tensors are allocated. On other
devices the same function runs once on the whole torch tensors.

A slab function receives an array namespace ``xp`` (numpy or torch) and arrays that
support the numpy-style calls ``xp.multiply(a, b, out=c)``, ``xp.add``, ``xp.sqrt``,
``xp.arcsin``, ``xp.clip``, ``xp.empty_like``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

#: Target number of entries of one slab (about 1 MB in float64).
SLAB = 1 << 17


@lru_cache(maxsize=4)
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="molntk-cn")


def leading_dims(shape: Sequence[int], limit: int = SLAB) -> tuple[int, ...]:
    """The leading dimensions to iterate over so that one slab has at most ``limit`` entries."""
    dims, rest = [], int(np.prod(shape))
    for d, size in enumerate(shape):
        if rest <= limit:
            break
        dims.append(d)
        rest //= max(size, 1)
    return tuple(dims)


def for_each_slab(fn: Callable[..., None], arrays: Sequence[Tensor], dims: Sequence[int]) -> None:
    """Call ``fn(xp, *slabs)`` for every index over ``dims`` (size-1 dims broadcast).

    ``arrays`` share the sizes of ``dims`` or have size 1 there. ``fn`` must only write
    into its slabs, and slabs at different indices must be independent.
    """
    if arrays[0].device.type != "cpu":
        fn(torch, *arrays)
        return
    views = [a.detach().numpy() for a in arrays]
    sizes = [max(v.shape[d] for v in views) for d in dims]

    def run(index: tuple[int, ...]) -> None:
        slabs = []
        for v in views:
            key = [slice(None)] * v.ndim
            for d, i in zip(dims, index):
                key[d] = i if v.shape[d] > 1 else 0
            slabs.append(v[tuple(key)])
        fn(np, *slabs)

    indices = list(itertools.product(*(range(s) for s in sizes)))
    workers = torch.get_num_threads()
    if workers <= 1 or len(indices) == 1:
        for index in indices:
            run(index)
        return
    for future in [_pool(workers).submit(run, index) for index in indices]:
        future.result()
