"""Where blocks are computed: this process, the GPUs of this machine, or a Dask cluster.

An executor takes a block kernel and a list of jobs (molecule indices ``rows``, ``cols``)
and yields ``(job number, {name: matrix}, seconds)`` as blocks finish, in any order
(``seconds``: the block's compute time where it ran); the engine places each block by its
number, so the assembled matrices do not depend on the executor
or on completion order.

- :class:`SerialExecutor`: one block after the other in this process.
- :class:`DeviceExecutor`: one copy of the block kernel per device (``kernel.on(device)``),
  job k on device k mod D (round robin), one thread per device; torch releases the GIL in
  its kernels, so D GPUs work in parallel.
- :func:`open_executor`: one of them by name, as a run's configuration asks for it.
- :class:`DaskExecutor`: the same jobs as Dask ``distributed`` tasks: the block kernel is
  scattered to every worker once, at most ``max_in_flight`` blocks are pending at a time,
  and results are gathered as they complete. :meth:`DaskExecutor.local` starts a
  LocalCluster of n single-threaded worker processes, :meth:`DaskExecutor.connect` joins an
  existing scheduler by address. Dask does all scheduling.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from molntk.scale.blocks import BlockKernel, timed_block

Job = tuple[np.ndarray, np.ndarray | None]
Result = tuple[int, dict[str, np.ndarray], float]


class Executor(Protocol):
    def run(self, kernel: BlockKernel, jobs: Sequence[Job]) -> Iterator[Result]:
        """Yield (job number, block matrices, compute seconds) for every job, in completion order."""
        ...


class SerialExecutor:
    """Blocks one after the other in this process."""

    def run(self, kernel: BlockKernel, jobs: Sequence[Job]) -> Iterator[Result]:
        for k, (rows, cols) in enumerate(jobs):
            yield k, *timed_block(kernel, rows, cols)


def cuda_devices() -> list[str]:
    """``cuda:0`` … ``cuda:{D-1}`` for the visible GPUs (empty without CUDA)."""
    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def round_robin(n_jobs: int, n_devices: int) -> list[list[int]]:
    """Job numbers per device: device d gets jobs d, d + D, d + 2D, …"""
    if n_devices < 1:
        raise ValueError("round_robin needs at least one device")
    return [list(range(d, n_jobs, n_devices)) for d in range(n_devices)]


@dataclass
class DeviceExecutor:
    """Blocks on several devices of this machine in parallel (round robin, one thread each).

    ``devices``: torch device names, e.g. ``["cuda:0", "cuda:1"]`` (default: all visible
    GPUs, see :func:`cuda_devices`). The block kernel must offer ``on(device)``.
    """

    devices: list[str] | None = None

    def __post_init__(self) -> None:
        if self.devices is None:
            self.devices = cuda_devices()
        if not self.devices:
            raise ValueError("DeviceExecutor needs at least one device (no CUDA device is visible)")

    def run(self, kernel: BlockKernel, jobs: Sequence[Job]) -> Iterator[Result]:
        if not hasattr(kernel, "on"):
            raise TypeError(f"{type(kernel).__name__} has no on(device) method: it cannot be placed on {self.devices}")
        copies = [kernel.on(device) for device in self.devices]
        done: queue.Queue[tuple[int, tuple[dict[str, np.ndarray], float] | None, Exception | None]] = queue.Queue()
        stop = threading.Event()

        def work(copy: BlockKernel, numbers: list[int]) -> None:
            for k in numbers:
                if stop.is_set():
                    return
                try:
                    done.put((k, timed_block(copy, *jobs[k]), None))
                except Exception as err:  # noqa: BLE001 (handed to the consumer, which re-raises it)
                    done.put((k, None, err))
                    return

        threads = [
            threading.Thread(target=work, args=(copy, numbers), daemon=True)
            for copy, numbers in zip(copies, round_robin(len(jobs), len(copies)))
        ]
        for t in threads:
            t.start()
        try:
            for _ in range(len(jobs)):
                k, result, error = done.get()
                if error is not None:
                    raise RuntimeError(f"block {k} failed on {self.devices[k % len(self.devices)]}") from error
                yield k, *result
        finally:
            stop.set()
            for t in threads:
                t.join()


@dataclass
class DaskExecutor:
    """Blocks as tasks on a Dask ``distributed`` cluster (``client``: a distributed.Client).

    ``max_in_flight``: pending blocks at a time (default 2 per worker thread), which bounds
    the memory of finished blocks not yet collected.
    """

    client: Any
    max_in_flight: int | None = None

    @classmethod
    @contextmanager
    def local(cls, n_workers: int, threads_per_worker: int = 1) -> Iterator[DaskExecutor]:
        """A LocalCluster of ``n_workers`` processes for the duration of a ``with`` block."""
        from distributed import Client, LocalCluster

        if n_workers < 1:
            raise ValueError(f"n_workers must be >= 1, got {n_workers}")
        with (
            LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True, dashboard_address=None) as cluster,
            Client(cluster) as client,
        ):
            yield cls(client)

    @classmethod
    @contextmanager
    def connect(cls, address: str) -> Iterator[DaskExecutor]:
        """An existing cluster by scheduler address (e.g. ``tcp://10.0.0.1:8786``)."""
        from distributed import Client

        with Client(address) as client:
            yield cls(client)

    def run(self, kernel: BlockKernel, jobs: Sequence[Job]) -> Iterator[Result]:
        from distributed import as_completed

        threads = sum(self.client.nthreads().values())
        if threads == 0:
            raise RuntimeError(f"the Dask cluster at {self.client.scheduler.address} has no workers")
        limit = self.max_in_flight or 2 * threads
        shared = self.client.scatter(kernel, broadcast=True, hash=False)
        number = {}

        def submit(k: int):
            future = self.client.submit(timed_block, shared, *jobs[k], pure=False)
            number[future.key] = k
            return future

        pending = iter(range(len(jobs)))
        completed = as_completed([submit(k) for _, k in zip(range(limit), pending)], with_results=True)
        for future, (arrays, seconds) in completed:
            yield number.pop(future.key), arrays, seconds
            k = next(pending, None)
            if k is not None:
                completed.add(submit(k))


EXECUTORS = ("auto", "serial", "devices", "dask")


@contextmanager
def open_executor(kind: str = "auto", *, device: str = "cpu", workers: int | None = None, scheduler: str | None = None) -> Iterator[Executor]:
    """The executor named ``kind``, open for a ``with`` block: ``auto`` (every visible GPU
    when ``device`` is CUDA, else this process), ``serial``, ``devices`` (every visible
    GPU), ``dask`` (a LocalCluster of ``workers`` processes, or the cluster at ``scheduler``)."""
    if kind not in EXECUTORS:
        raise ValueError(f"unknown executor {kind!r}; choose one of {', '.join(EXECUTORS)}")
    if kind == "dask":
        if (workers is None) == (scheduler is None):
            raise ValueError("the dask executor needs exactly one of workers (a local cluster) or scheduler (an address)")
        with DaskExecutor.local(workers) if workers is not None else DaskExecutor.connect(scheduler) as executor:
            yield executor
    elif kind == "devices" or (kind == "auto" and device.startswith("cuda") and cuda_devices()):
        yield DeviceExecutor()
    else:
        yield SerialExecutor()
