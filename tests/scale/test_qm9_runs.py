"""The QM9 pipeline through the scale layer: a killed ``molntk run`` resumes from its block
cache, Dask workers and out-of-core matrices give the serial numbers, block kernels on two
devices give the serial blocks. (The engine itself on a small kernel: test_engine.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from molntk.cli.main import app
from molntk.molecular import BlockKernelOf, MoleculeSet
from molntk.pipelines.qm9.candidates import build_candidates
from molntk.pipelines.tasks import TASKS
from molntk.scale import DeviceExecutor, SerialExecutor, kernel_matrices
from tests.helpers.qm9_configs import FIXED, SMALL, TINY


@pytest.mark.slow
def test_killed_run_resumes_from_its_kernel_cache_with_the_same_numbers(tmp_path):
    """`molntk run` killed by SIGKILL mid-kernel, then the same command again: it finishes from the
    cached blocks and reports exactly the numbers of an uninterrupted run (no cache)."""
    config = tmp_path / "resume.yaml"
    config.write_text(
        "task: qm9-property\nlearning_curve: {n_train: [10, 20, 30, 40], n_test: 15, n_select: 10}\n"
        "invariance: {n_molecules: 3, n_rotations: 2}\n" + FIXED +
        "models: {so3_ntk: {candidates: [{layers: 'lift:3 relu pool dense', sigma_w: 1.0, sigma_b: 0.1}]},\n"
        "         mlp_ntk: null, augmented_mlp_ntk: null, coulomb_matrix: null, bag_of_bonds: null,\n"
        "         power_spectrum: {zetas: [2]}}\n"
    )
    out = tmp_path / "out"
    command = [sys.executable, "-m", "molntk", "run", str(config), "--json", "--set", f"output={out}"]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    cache = out / "kernel_cache"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(cache.glob("*/*.npz"))) < 4 and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "report.json").exists(), "the run finished before it could be killed"
    assert len(list(cache.glob("*/*.npz"))) >= 4
    resumed = subprocess.run(command, capture_output=True, text=True, env=env)
    assert resumed.returncode == 0, resumed.stderr
    fresh = subprocess.run(
        [*command[:-2], "--set", f"output={tmp_path / 'fresh'}", "--set", "cache=false"],
        capture_output=True, text=True, env=env,
    )
    assert fresh.returncode == 0, fresh.stderr
    keys = ("model", "n_train", "mae", "rmse", "r2", "invariance_error", "hyperparameters")
    numbers = [
        [{k: r[k] for k in keys} for r in json.loads(run.stdout)["result"]["records"]] for run in (resumed, fresh)
    ]
    assert numbers[0] == numbers[1]


def _numbers(document: dict) -> list[dict]:
    keys = ("model", "n_train", "mae", "rmse", "r2", "invariance_error", "hyperparameters")
    return [{k: r[k] for k in keys} for r in document["result"]["records"]]


@pytest.mark.slow
def test_dask_workers_and_out_of_core_matrices_give_the_serial_numbers(tmp_path):
    """The same config on 2 local Dask workers (``--workers 2``) and with the matrices as
    ``.npy`` memory maps (``compute.storage=disk``; the engine's memmaps are tested in
    test_engine.py): the blocks are the same, so every reported number equals the serial
    in-RAM run's exactly."""
    pytest.importorskip("distributed")
    config = tmp_path / "small.yaml"
    config.write_text(SMALL)
    runs = {}
    for label, extra in {"serial": [], "dask": ["--workers", "2"], "disk": ["--set", "compute.storage=disk"]}.items():
        result = CliRunner().invoke(app, ["run", str(config), "--json", "--set", f"output={tmp_path / label}", *extra])
        assert result.exit_code == 0, result.output
        runs[label] = json.loads(result.stdout)
    assert runs["dask"]["result"]["executor"] == "DaskExecutor"
    assert runs["serial"]["result"]["executor"] == "SerialExecutor"
    assert _numbers(runs["dask"]) == _numbers(runs["serial"])
    assert _numbers(runs["disk"]) == _numbers(runs["serial"])
    storage = {r["model"]: r["storage"] for r in runs["disk"]["result"]["kernel_seconds"]}
    assert storage == {"so3-ntk": "disk", "power-spectrum": "disk"}
    assert {r["storage"] for r in runs["serial"]["result"]["kernel_seconds"]} == {"memory"}
    scratch = tmp_path / "disk" / "kernel_matrices"
    assert scratch.is_dir() and not list(scratch.iterdir())  # each model's matrices deleted once evaluated


def test_block_kernel_on_two_devices_equals_serial(qm9, tmp_path, one_thread):
    """BlockKernelOf.on(device) through the DeviceExecutor (two CPU "devices": the
    multi-GPU code path without a GPU) gives the serial blocks bit for bit, for the SO(3)
    NTK and a feature-map baseline. (This caught a race: the two threads building Wigner
    tables at once could leave e3nn in float32; see molntk.kernels.so3.wigner.)"""
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    molecules = qm9.molecules(list(range(14)))
    candidates = build_candidates(TASKS.load(str(path), []), "sum", molecules)
    group = MoleculeSet(molecules)
    for name in ("so3-ntk", "power-spectrum"):
        kernel = BlockKernelOf(candidates[name][0].kernel, group, outputs=(candidates[name][0].matrix,))
        serial = kernel_matrices(kernel, np.arange(10), np.arange(10, 14), block_size=4, executor=SerialExecutor())
        devices = kernel_matrices(kernel, np.arange(10), np.arange(10, 14), block_size=4, executor=DeviceExecutor(["cpu", "cpu"]))
        for matrix in serial:
            assert np.array_equal(serial[matrix], devices[matrix]), (name, matrix)
