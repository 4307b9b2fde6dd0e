"""Running elementwise kernels slab by slab: numpy on CPU threads, torch elsewhere.

The site-pair tensors of image kernels are large (≈ 10⁶ entries per image pair). On CPU
they are processed in slabs of at most ~10⁵ entries (cache resident) by numpy's
vectorised ufuncs (its arcsin and sqrt are 2–3× faster than torch's double-precision
ones here) on ``torch.get_num_threads()`` threads, each taking every k-th slab (numpy
releases the GIL inside a ufunc; one task per thread keeps the pool's overhead out of
the small slabs). Results are written in place into existing buffers and each thread
reuses its temporaries, so no large memory is touched for the first time (page faults
cost as much as the arithmetic). On other devices the same function runs once on the
whole torch tensors.

A slab function receives an array namespace ``xp`` (numpy or torch) and arrays that
support the numpy-style calls ``xp.multiply(a, b, out=c)``, ``xp.add``, ``xp.sqrt``,
``xp.arcsin``, ``xp.clip``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

#: Largest number of entries of one slab (1 MB in float64).
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


def for_each_slab(fn: Callable[..., None], arrays: Sequence[Tensor], dims: Sequence[int], scratch: int = 0) -> None:
    """Call ``fn(xp, *slabs, *temporaries)`` for every index over ``dims`` (size-1 dims broadcast).

    ``arrays`` share the sizes of ``dims`` or have size 1 there. ``fn`` must only write
    into its slabs and the ``scratch`` temporaries (arrays shaped like the first slab,
    reused from slab to slab by each thread), and slabs at different indices must be
    independent.
    """
    if arrays[0].device.type != "cpu":
        fn(torch, *arrays, *(torch.empty_like(arrays[0]) for _ in range(scratch)))
        return
    views = [a.detach().numpy() for a in arrays]
    sizes = [max(v.shape[d] for v in views) for d in dims]
    local = threading.local()

    def run(index: tuple[int, ...]) -> None:
        slabs = []
        for v in views:
            key = [slice(None)] * v.ndim
            for d, i in zip(dims, index):
                key[d] = i if v.shape[d] > 1 else 0
            slabs.append(v[tuple(key)])
        if not hasattr(local, "temporaries"):
            local.temporaries = [np.empty(slabs[0].shape, slabs[0].dtype) for _ in range(scratch)]
        fn(np, *slabs, *local.temporaries)

    indices = list(itertools.product(*(range(s) for s in sizes)))
    workers = min(torch.get_num_threads(), len(indices))

    def run_share(share: int) -> None:
        for index in indices[share::workers]:
            run(index)

    if workers <= 1:
        run_share(0)
        return
    for future in [_pool(workers).submit(run_share, share) for share in range(workers)]:
        future.result()
