"""Kernel matrices at large N: blocks under a memory budget, an on-disk cache, GPUs and Dask.

Entry point (:mod:`molntk.scale.engine`)::

    from molntk.cli.progress import rich_progress
    from molntk.molecular import BlockKernelOf
    from molntk.scale import kernel_matrices

    bk = BlockKernelOf(kernel, molecules)                  # descriptors once per molecule
    with rich_progress() as bar:
        K = kernel_matrices(bk, train_idx, test_idx, cache_dir="cache/kernels", progress=bar)
    K["ntk_train"], K["ntk_test"], K["nngp_train"], K["nngp_test"]      # float64 numpy

``kernel_matrices(block_kernel, train_idx, test_idx=None, *, cache_dir=None,
memory_budget_mb=None, block_size=None, executor=None, progress=None, storage_dir=None)``
returns ``{name + "_train": (n, n), name + "_test": (m, n)}`` for the block kernel's
matrices (``assemble_kernels``: also the blocks and their seconds). Indices are positions
in the block kernel's molecule list. Train × train blocks are computed once per unordered
pair and mirrored; ``cache_dir`` makes runs resumable (a killed run rerun gives
bit-identical matrices); ``storage_dir`` keeps the matrices out of core (``.npy``
memmaps); ``executor`` is
:class:`SerialExecutor` (default without CUDA), :class:`DeviceExecutor` (all visible GPUs,
default with CUDA) or :class:`DaskExecutor` (``DaskExecutor.local(n_workers)`` or
``DaskExecutor.connect(address)``, used as context managers).

Modules: :mod:`~molntk.scale.blocks` (block kernel protocol, plan),
:mod:`~molntk.scale.memory` (budget → block side), :mod:`~molntk.scale.cache` (checksummed
block files), :mod:`~molntk.scale.executors`, :mod:`~molntk.scale.progress` (callback protocols; bars and lines are drawn by
:mod:`molntk.cli.progress`), :mod:`~molntk.scale.devices` (device and CPU threads of a run),
:mod:`~molntk.scale.engine`.
Block kernels of molecules: :class:`molntk.molecular.BlockKernelOf`.
"""

from molntk.scale.blocks import BlockKernel, plan_blocks
from molntk.scale.cache import BlockCache, DamagedBlockWarning
from molntk.scale.devices import resolve_device, torch_threads
from molntk.scale.engine import KernelAssembly, assemble_kernels, default_executor, kernel_matrices
from molntk.scale.executors import DaskExecutor, DeviceExecutor, SerialExecutor, cuda_devices, open_executor, round_robin
from molntk.scale.memory import block_side, default_memory_budget
from molntk.scale.progress import Progress, ProgressCallback, labelled

__all__ = [
    "BlockCache",
    "BlockKernel",
    "DamagedBlockWarning",
    "DaskExecutor",
    "DeviceExecutor",
    "KernelAssembly",
    "Progress",
    "ProgressCallback",
    "SerialExecutor",
    "assemble_kernels",
    "block_side",
    "cuda_devices",
    "default_executor",
    "default_memory_budget",
    "kernel_matrices",
    "labelled",
    "open_executor",
    "plan_blocks",
    "resolve_device",
    "round_robin",
    "torch_threads",
]
