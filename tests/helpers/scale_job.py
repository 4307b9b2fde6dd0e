"""A cached block-kernel run as a separate process (used by tests/scale/test_engine.py).

    python tests/helpers/scale_job.py CACHE_DIR OUT.npz [DELAY_SECONDS]

Computes the train × train and test × train kernels of a small SO(3) model on the first 30
QM9 molecules (train 0..23, test 24..29) in blocks of 4 molecules with the block cache in
CACHE_DIR, each block delayed by DELAY_SECONDS (so that the test can kill the run half way),
saves the matrices to OUT.npz and prints {"computed": blocks computed by this process}.
:func:`compute` is the same run in the calling process.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch

from molntk.data.qm9 import load_qm9
from molntk.features.environments import FeatureConfig
from molntk.features.radial import GaussianBasis
from molntk.kernels.so3 import Dense, Lift, Nonlinearity, Pool, SO3Grid, serial
from molntk.molecular import BlockKernelOf, SO3MolecularKernel
from molntk.scale import SerialExecutor, kernel_matrices
from molntk.utils.files import atomic_path


class SlowBlockKernel:
    """A block kernel that waits ``delay`` seconds before each block and counts blocks."""

    def __init__(self, inner: BlockKernelOf, delay: float) -> None:
        self.inner, self.delay, self.computed = inner, delay, 0
        self.n_molecules = inner.n_molecules

    def cache_key(self) -> str:
        return self.inner.cache_key()

    def item_keys(self) -> np.ndarray:
        return self.inner.item_keys()

    def compute_block(self, rows: np.ndarray, cols: np.ndarray | None) -> dict[str, np.ndarray]:
        time.sleep(self.delay)
        self.computed += 1
        return self.inner.compute_block(rows, cols)


def tiny_kernel() -> tuple[SO3MolecularKernel, FeatureConfig]:
    """A small, quick SO(3) NTK: band limit 2, Lift → erf → Pool → Dense on SO3Grid(1).

    erf, not ReLU: the ReLU dual has an infinite slope at correlation 1 (arccos), which
    amplifies the rounding of nearly identical environments far above 1e-16; erf's dual is
    smooth, so differently associated sums of the same kernel agree to rounding.
    """
    net = serial(Lift(2, 1.0, 0.1), Nonlinearity("erf"), Pool(), Dense(1.0, 0.1))
    kernel = SO3MolecularKernel(net, net.discretisation(SO3Grid(1), "fast"), features=FeatureConfig(band_limit=2, smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0)))
    return kernel, kernel.features


def compute(cache_dir: str, delay: float) -> tuple[dict[str, np.ndarray], int]:
    """The job's kernel matrices (one torch thread) and how many blocks this call computed."""
    torch.set_num_threads(1)
    kernel, _ = tiny_kernel()
    block_kernel = SlowBlockKernel(BlockKernelOf(kernel, load_qm9().molecules(range(30))), delay)
    K = kernel_matrices(block_kernel, np.arange(24), np.arange(24, 30), cache_dir=cache_dir, block_size=4, executor=SerialExecutor())
    return K, block_kernel.computed


def main() -> None:
    cache_dir, out = sys.argv[1], sys.argv[2]
    K, computed = compute(cache_dir, float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
    with atomic_path(out, suffix=".npz") as tmp:
        np.savez(tmp, **K)
    print(json.dumps({"computed": computed}))


if __name__ == "__main__":
    main()
