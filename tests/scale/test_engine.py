"""Block engine, block cache and executors (serial, devices, Dask) on a small SO(3) kernel."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from molntk.features.environments import environment_features
from molntk.molecular import BlockKernelOf
from molntk.molecular.baselines import CoulombMatrix, LaplacianKernel
from molntk.scale import (
    DamagedBlockWarning,
    DeviceExecutor,
    SerialExecutor,
    block_side,
    assemble_kernels,
    kernel_matrices,
    plan_blocks,
    round_robin,
)
from molntk.scale.cache import CHECKSUM, BlockCache
from tests.helpers.scale_job import SlowBlockKernel, compute, tiny_kernel

JOB = Path(__file__).parents[1] / "helpers" / "scale_job.py"
TRAIN, TEST = np.arange(24), np.arange(24, 30)


@pytest.fixture(scope="module")
def molecules(qm9):
    return qm9.molecules(range(30))


@pytest.fixture(scope="module")
def block_kernel(molecules) -> BlockKernelOf:
    kernel, _ = tiny_kernel()
    return BlockKernelOf(kernel, molecules)


def test_selected_features_equal_features_of_the_sublist(molecules):
    _, config = tiny_kernel()
    order = [7, 3, 3, 12, 0]
    sub = environment_features(molecules, config).select(order)
    direct = environment_features([molecules[i] for i in order], config)
    assert sub.n_molecules == direct.n_molecules == 5
    for name in ("coeffs", "centre_numbers", "molecule_index", "atom_index"):
        assert torch.equal(getattr(sub, name), getattr(direct, name)), name
    with pytest.raises(ValueError, match="0..29"):
        environment_features(molecules, config).select([30])


def test_plan_computes_each_symmetric_block_once():
    blocks = plan_blocks(np.arange(10), np.arange(10, 13), 4)
    train = [b for b in blocks if b.matrix == "train"]
    assert len(train) == 3 * 4 // 2 and sum(b.cols is None for b in train) == 3
    assert all(b.row_slice.start <= b.col_slice.start for b in train)
    assert len(blocks) - len(train) == 1 * 3


def test_plan_starts_a_block_at_every_boundary():
    """Learning-curve sizes 3 and 7 of 10 molecules, side 4: cuts 0-3, 3-7, 7-10; every
    prefix up to a boundary is a union of whole blocks."""
    blocks = plan_blocks(np.arange(10), None, 4, boundaries=[3, 7, 10, 0])
    starts = sorted({b.row_slice.start for b in blocks})
    assert starts == [0, 3, 7]
    assert all(b.row_slice.stop - b.row_slice.start <= 4 for b in blocks)
    assert sorted({b.row_slice.stop for b in blocks}) == [3, 7, 10]
    assert len(plan_blocks(np.arange(10), None, 2, boundaries=[5])) == len([0, 2, 4, 5, 7, 9]) * 7 // 2


def test_block_side_from_memory_budget():
    assert block_side(10_000, budget_bytes=64 * 100**2, bytes_per_pair=64) == 100
    assert block_side(10_000, budget_bytes=2**40, bytes_per_pair=64, max_block=256) == 256
    assert block_side(50, budget_bytes=2**40, bytes_per_pair=64) == 50
    with pytest.raises(ValueError, match="below one molecule pair"):
        block_side(10, budget_bytes=10, bytes_per_pair=64)


def test_block_assembly_equals_one_shot_kernel(block_kernel, molecules, one_thread):
    """Blocks of 5 (uneven last block, memory-budget path) against one kernel call.

    Not bit-for-bit: the one-shot call sums the atom-pair kernels of a molecule pair inside
    larger environment blocks, so the floating-point additions are associated differently;
    each entry is a sum of ≤ 29² positive O(1) terms, so the rounding differences are
    ≲ 29² · 2⁻⁵³ relative — 1e-12 leaves a wide margin and still catches any misplaced block.
    """
    kernel, config = tiny_kernel()
    train = environment_features(molecules[:24], config)
    one_shot = kernel(train)
    one_shot_test = kernel(environment_features(molecules[24:], config), train)
    K = kernel_matrices(block_kernel, TRAIN, TEST, memory_budget_mb=64 * 25 / 2**20, executor=SerialExecutor())
    assert sorted(K) == ["nngp_test", "nngp_train", "ntk_test", "ntk_train"]
    for name in ("nngp", "ntk"):
        ref, ref_test = getattr(one_shot, name).numpy(), getattr(one_shot_test, name).numpy()
        scale = np.abs(ref).max()
        assert np.abs(K[f"{name}_train"] - ref).max() <= 1e-12 * scale
        assert np.abs(K[f"{name}_test"] - ref_test).max() <= 1e-12 * scale
    # molecules in any order: the blocks follow the index arrays
    perm = np.random.default_rng(0).permutation(24)
    K_perm = kernel_matrices(block_kernel, perm, block_size=7, executor=SerialExecutor())
    assert np.abs(K_perm["ntk_train"] - K["ntk_train"][np.ix_(perm, perm)]).max() <= 1e-12 * np.abs(K["ntk_train"]).max()


def test_cache_key_is_content_not_device(block_kernel, molecules):
    """One key scheme: the kernel's settings and the matrices kept, and per molecule its
    content digest; the device (a copy via on) is not part of it."""
    kernel, _ = tiny_kernel()
    assert block_kernel.on("cpu").cache_key() == block_kernel.cache_key() == BlockKernelOf(kernel, molecules).cache_key()
    assert BlockKernelOf(kernel, molecules, outputs=("ntk",)).cache_key() != block_kernel.cache_key()
    keys = block_kernel.item_keys()
    assert keys.shape == (30, 32) and len({k.tobytes() for k in keys}) == 30
    assert np.array_equal(BlockKernelOf(kernel, molecules[5:]).item_keys(), keys[5:])
    moved = _turned(molecules[0])
    assert not np.array_equal(BlockKernelOf(kernel, [moved]).item_keys()[0], keys[0])
    with pytest.raises(ValueError, match="no matrices"):
        BlockKernelOf(kernel, molecules, outputs=("kernel",))


def _turned(molecule):
    """The molecule turned by π about x: the same molecule, other coordinates."""
    return dataclasses.replace(molecule, positions=molecule.positions * np.array([1.0, -1.0, -1.0]))


def test_cache_finds_blocks_of_the_same_molecules_in_another_set(block_kernel, molecules, tmp_path, one_thread):
    """Blocks are known by their molecules, not their positions: a run on the 24 training
    molecules followed by other test molecules finds the training blocks a first run stored
    (its test blocks are new), and its matrices equal an uncached computation bit for bit."""
    kernel, _ = tiny_kernel()
    first = SlowBlockKernel(block_kernel, 0.0)
    kernel_matrices(first, TRAIN, TEST, cache_dir=tmp_path, block_size=8, executor=SerialExecutor())
    others = molecules[:24] + [_turned(m) for m in molecules[24:27]]
    second = SlowBlockKernel(BlockKernelOf(kernel, others), 0.0)
    cached = kernel_matrices(second, TRAIN, np.arange(24, 27), cache_dir=tmp_path, block_size=8, executor=SerialExecutor())
    assert first.computed == 3 * 4 // 2 + 3 and second.computed == 3  # only the 1 × 3 new test blocks
    fresh = kernel_matrices(BlockKernelOf(kernel, others), TRAIN, np.arange(24, 27), block_size=8, executor=SerialExecutor())
    for name in fresh:
        assert np.array_equal(cached[name], fresh[name]), name


def test_block_cache_needs_item_keys(block_kernel, tmp_path):
    class Unkeyed:
        def compute_block(self, rows, cols):
            return block_kernel.compute_block(rows, cols)

        def cache_key(self):
            return block_kernel.cache_key()

    with pytest.raises(TypeError, match="item_keys"):
        kernel_matrices(Unkeyed(), TRAIN, cache_dir=tmp_path, executor=SerialExecutor())
    with pytest.raises(ValueError, match="uint8"):
        BlockCache(tmp_path, "key", np.zeros((3, 32)))


def test_baseline_kernels_through_the_block_engine(molecules):
    kernel = LaplacianKernel(CoulombMatrix(), sigma=500.0)
    K = kernel_matrices(BlockKernelOf(kernel, molecules), TRAIN, TEST, block_size=5, executor=SerialExecutor())
    assert np.array_equal(K["kernel_train"], kernel(molecules[:24]).kernel.numpy())
    np.testing.assert_allclose(K["kernel_test"], kernel(molecules[24:], molecules[:24]).kernel.numpy(), rtol=1e-14)


def test_out_of_core_matrices_and_block_seconds(block_kernel, tmp_path, one_thread):
    """``storage_dir``: the matrices are whole ``.npy`` files (no ``.partial`` left), read-only
    memmaps equal to the in-memory assembly bit for bit; block seconds are positive, sum per
    prefix, and a rerun from the cache reports the seconds recorded when blocks were computed."""
    in_memory = assemble_kernels(block_kernel, TRAIN, TEST, block_size=6, boundaries=[10], executor=SerialExecutor()).matrices
    stored = assemble_kernels(block_kernel, TRAIN, TEST, block_size=6, boundaries=[10], executor=SerialExecutor(),
                              storage_dir=tmp_path / "K", cache_dir=tmp_path / "cache")
    assert sorted(p.name for p in (tmp_path / "K").iterdir()) == sorted(f"{name}.npy" for name in in_memory)
    for name, matrix in stored.matrices.items():
        assert isinstance(matrix, np.memmap) and not matrix.flags.writeable
        assert np.array_equal(matrix, in_memory[name]), name
    assert (stored.seconds > 0).all() and len(stored.seconds) == len(stored.blocks)
    train_10, test_10 = stored.seconds_up_to(10)
    train_all, test_all = stored.seconds_up_to(24)
    assert 0 < train_10 < train_all and 0 < test_10 < test_all
    assert train_all + test_all == pytest.approx(stored.seconds.sum())
    again = assemble_kernels(block_kernel, TRAIN, TEST, block_size=6, boundaries=[10], executor=SerialExecutor(),
                             cache_dir=tmp_path / "cache")
    assert np.array_equal(again.seconds, stored.seconds)


def test_device_executor_round_robin_and_equal_to_serial(block_kernel, one_thread):
    assert round_robin(5, 2) == [[0, 2, 4], [1, 3]]
    serial = kernel_matrices(block_kernel, TRAIN, TEST, block_size=6, executor=SerialExecutor())
    devices = kernel_matrices(block_kernel, TRAIN, TEST, block_size=6, executor=DeviceExecutor(["cpu", "cpu"]))
    for name in serial:
        assert np.array_equal(serial[name], devices[name]), name


def test_corrupted_cache_block_is_detected_and_recomputed(block_kernel, tmp_path, one_thread):
    counted = SlowBlockKernel(block_kernel, 0.0)
    first = kernel_matrices(counted, TRAIN, TEST, cache_dir=tmp_path, block_size=8, executor=SerialExecutor())
    n_blocks = counted.computed
    assert n_blocks == 3 * 4 // 2 + 3
    files = sorted(_blocks(tmp_path))
    assert len(files) == n_blocks
    # a well-formed npz with one altered value and the old checksum: only the checksum can tell
    with np.load(files[0]) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["ntk"] = arrays["ntk"].copy()
    arrays["ntk"].flat[0] *= 1.0 + 1e-9
    np.savez(files[0], **arrays)
    files[1].write_bytes(files[1].read_bytes()[:100])  # truncated
    again = SlowBlockKernel(block_kernel, 0.0)
    with pytest.warns(DamagedBlockWarning) as warned:
        second = kernel_matrices(again, TRAIN, TEST, cache_dir=tmp_path, block_size=8, executor=SerialExecutor())
    damaged = [str(w.message) for w in warned if w.category is DamagedBlockWarning]
    assert again.computed == 2 and len(damaged) == 2, [str(w.message) for w in warned]
    assert any("checksum mismatch" in m for m in damaged)
    for name in first:
        assert np.array_equal(first[name], second[name]), name
    third = SlowBlockKernel(block_kernel, 0.0)
    kernel_matrices(third, TRAIN, TEST, cache_dir=tmp_path, block_size=8, executor=SerialExecutor())
    assert third.computed == 0  # the rewritten blocks are valid
    with np.load(files[0]) as data:
        assert CHECKSUM in data.files


def _blocks(cache: Path) -> list[Path]:
    """Block files of a cache (not the temporary files of a write in progress)."""
    return [p for p in cache.glob("*/*.npz") if not p.name.startswith(".")]


def _job(cache: Path, out: Path, delay: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(JOB), str(cache), str(out), str(delay)], stdout=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_killed_run_resumes_bit_identically(tmp_path, one_thread):
    """SIGKILL a cached run after its first blocks are on disk; the rerun computes only the
    missing blocks, and its matrices equal those of an uninterrupted run bit for bit."""
    reference, computed = compute(str(tmp_path / "ref-cache"), 0.0)  # same job, this process
    assert computed == 21 + 12

    cache = tmp_path / "cache"
    victim = _job(cache, tmp_path / "resumed.npz", 0.15)
    deadline = time.monotonic() + 120
    while len(_blocks(cache)) < 3:
        assert victim.poll() is None, "the run finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(victim.pid, signal.SIGKILL)
    assert victim.wait(timeout=30) == -signal.SIGKILL
    on_disk = len(_blocks(cache))
    assert 3 <= on_disk < 33 and not (tmp_path / "resumed.npz").exists()

    rerun = _job(cache, tmp_path / "resumed.npz", 0.0)
    assert rerun.wait(timeout=120) == 0
    assert json.loads(rerun.stdout.read())["computed"] == 33 - on_disk
    with np.load(tmp_path / "resumed.npz") as resumed:
        assert sorted(resumed.files) == sorted(reference)
        for name in reference:
            assert np.array_equal(reference[name], resumed[name]), name


@pytest.mark.slow
def test_dask_with_two_local_workers_equals_serial(block_kernel, one_thread):
    pytest.importorskip("distributed")
    from molntk.scale import DaskExecutor

    serial = kernel_matrices(block_kernel, TRAIN, TEST, block_size=6, executor=SerialExecutor())
    with DaskExecutor.local(n_workers=2) as executor:
        assert len(executor.client.nthreads()) == 2
        dask = kernel_matrices(block_kernel, TRAIN, TEST, block_size=6, executor=executor)
    for name in serial:
        assert np.array_equal(serial[name], dask[name]), name


def test_bad_inputs_are_named(block_kernel):
    with pytest.raises(ValueError, match="test_idx has molecule index 30"):
        kernel_matrices(block_kernel, TRAIN, [30])
    with pytest.raises(ValueError, match="train_idx must be a 1-d array"):
        kernel_matrices(block_kernel, np.zeros((2, 2), dtype=int))
    with pytest.raises(TypeError, match="no compute_block"):
        kernel_matrices(object(), TRAIN)
