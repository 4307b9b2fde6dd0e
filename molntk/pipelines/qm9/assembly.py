"""How a ``qm9-property`` run computes its kernel matrices (step 3 of :mod:`molntk.pipelines.qm9`).

:class:`BlockAssembler` holds the run's :mod:`molntk.scale` settings (executor, block cache, block
side, memory budget, out-of-core folder); :func:`block_kernel` makes a candidate's
molecular kernel a block kernel on a group of molecules (or inducing environments).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from molntk.molecular import BlockKernelOf, InducingSet, MoleculeSet
from molntk.pipelines.qm9.candidates import Candidate
from molntk.scale import KernelAssembly, assemble_kernels
from molntk.scale.progress import ProgressCallback


@dataclass
class BlockTally:
    """How many kernel blocks a run computed and how many it read from its block cache
    (a rerun's kernel seconds are those recorded when its cached blocks were computed)."""

    computed: int = 0
    from_cache: int = 0

    def add(self, assembly: KernelAssembly) -> None:
        """Count the blocks of one assembly."""
        cached = int(assembly.from_cache.sum())
        self.from_cache += cached
        self.computed += len(assembly.from_cache) - cached


@dataclass(frozen=True)
class BlockAssembler:
    """How the run's kernel matrices are computed (:mod:`molntk.scale`): the executor, the
    block cache (None: off), the block side and memory budget, and the folder of
    out-of-core matrices (None: in RAM); ``tally`` counts the blocks it assembled."""

    executor: Any
    cache_dir: Path | None
    block_molecules: int
    memory_budget_mb: float | None
    matrices_dir: Path | None
    tally: BlockTally = field(default_factory=BlockTally)

    def assemble(self, block_kernel: Any, train: np.ndarray, test: np.ndarray | None = None, *,
                 progress: ProgressCallback | None = None, storage: str | None = None, **plan: Any) -> KernelAssembly:
        """:func:`~molntk.scale.assemble_kernels` of ``block_kernel`` under these settings; the
        matrices go to ``matrices_dir / storage`` when both are given."""
        storage_dir = None if self.matrices_dir is None or storage is None else self.matrices_dir / storage
        assembly = assemble_kernels(
            block_kernel, train, test, cache_dir=self.cache_dir, memory_budget_mb=self.memory_budget_mb,
            block_size=self.block_molecules, executor=self.executor, progress=progress, storage_dir=storage_dir, **plan,
        )
        self.tally.add(assembly)
        return assembly


def block_kernel(candidate: Candidate, group: MoleculeSet | InducingSet) -> BlockKernelOf:
    """The candidate's kernel on ``group`` as a block kernel of the matrix it is regressed on
    (descriptors computed here); its cache key hashes the kernel's settings and its item keys
    the content of each molecule, so a rerun of the same config finds its blocks, and so does
    any run of the same kernel on the same molecules (an extended learning curve)."""
    return BlockKernelOf(candidate.kernel, group, outputs=(candidate.matrix,))
