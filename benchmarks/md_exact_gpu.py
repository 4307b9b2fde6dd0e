"""The exact energy+force SO(3) NTK at N = 1,000 training frames on one CUDA device (not a test).

    python benchmarks/md_exact_gpu.py --config configs/md_ethanol.yaml --n-train 1000 \\
        --json benchmarks/results/md_ethanol/records_h200_exact.json

The md task's ``so3_forces_exact`` model (the config's parameters with ``device="cuda"`` and
``noise_search="local"``) on the config's split (the first N frames of the seeded training
pool; the test frames), fitted and scored by the pipeline's own
:func:`molntk.pipelines.md.run.evaluate`, as ``molntk run`` would with those two settings:
the library's full noise search factorises the N(1 + 3n)-square joint matrix once per ratio
of its grid (15 eigendecompositions of a 28,000-square matrix for ethanol at N = 1,000); the
local search (:func:`~molntk.models.force_field.select_noise_local`) takes the full grid on
the first frames only (7,000 rows: 250 frames of ethanol, 109 of aspirin; ``--local-start-rows``)
and then one Cholesky factorisation on the GPU per visited point. On a CPU at N = 100 aspirin
frames (6,400 rows) ``--local-start-rows 2000`` (31 frames) replaces the 15 eigendecompositions
of the whole matrix by ≈ 10–16 Cholesky factorisations.

On a CPU (``--device cpu``) the training joint kernel takes about an hour at N = 1,000 on
two cores: ``--kernel-cache DIR`` stores its rows as they are computed, so a killed run
resumes from them (:func:`~molntk.molecular.derivative_kernels.joint_kernel`'s ``cache_dir``;
its kernel seconds are then those of the rows computed in that run).

Recorded beside the pipeline's record: the joint kernel on the device against the CPU's
compiled route on 4 frames (max |Δ| / max |K|), the kernel's seconds, and every point the
noise search visited ({rho, q, score}, score None where K + Λ is not positive definite).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

import molntk
import molntk.models.force_field as force_field
from molntk.data.labelled import read_labelled
from molntk.models.force_field import SO3ForceFieldRegressor, select_noise_local
from molntk.molecular.derivative_kernels import joint_kernel
from molntk.pipelines.md.run import MODEL_KEYS, evaluate, frames_path, split
from molntk.pipelines.tasks import TASKS
from molntk.utils.files import atomic_write_json, sha256_file

MODEL = MODEL_KEYS["so3_forces_exact"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=Path("configs/md_ethanol.yaml"))
    parser.add_argument("--n-train", type=int, default=1000)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--kernel-cache", type=Path, default=None,
                        help="store the training joint kernel's rows here as they are computed (a killed run resumes)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override, as molntk run's")
    parser.add_argument("--local-start-rows", type=int, default=force_field.LOCAL_START_ROWS,
                        help="joint rows of the configurations the local noise search's start grid is taken on "
                             "(its eigendecompositions; below N(1 + 3n), the Cholesky climb covers the rest)")
    args = parser.parse_args(argv)
    force_field.LOCAL_START_ROWS = args.local_start_rows
    config = TASKS.load(args.config, args.overrides)
    params = {**config.models.so3_forces_exact.params, "device": args.device, "noise_search": "local"}
    data = read_labelled(frames_path(config), [config.data.energy_key], forces=True)
    energies = np.asarray(data.targets[config.data.energy_key], dtype=np.float64)
    test, pool = split(config.split, len(data.molecules))
    out = {"command": "python benchmarks/md_exact_gpu.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "device": (torch.cuda.get_device_name() if args.device == "cuda"
                      else f"cpu: {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"),
           "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "frames_sha256": sha256_file(frames_path(config)),
           "versions": {"molntk": molntk.__version__, "torch": torch.__version__, "python": platform.python_version()},
           "results": []}
    # The closed form on the device against the CPU's compiled route, 4 frames: 10 pairs.
    first = [data.molecules[i] for i in pool[:4]]
    on_device = joint_kernel(SO3ForceFieldRegressor(**params).recipe().molecular_kernel(args.device), first)
    on_cpu = joint_kernel(SO3ForceFieldRegressor(**{**params, "device": "cpu"}).recipe().molecular_kernel("cpu"), first)
    out["device_vs_cpu_max_rel"] = float(np.max(np.abs(on_device - on_cpu)) / np.max(np.abs(on_cpu)))
    print(f"joint kernel, device vs cpu: max |Δ| / max |K| = {out['device_vs_cpu_max_rel']:.2e}", flush=True)
    visited: list[dict] = []
    force_field.select_noise_local = functools.partial(select_noise_local, trace=visited)
    kernel_seconds = []

    def timed_joint_kernel(*a, **k):
        tic = time.perf_counter()
        result = joint_kernel(*a, **k)
        kernel_seconds.append(time.perf_counter() - tic)
        print(f"joint kernel {result.shape} in {kernel_seconds[-1]:.1f} s", flush=True)
        return result

    force_field.joint_kernel = timed_joint_kernel
    record = evaluate(MODEL, SO3ForceFieldRegressor(**params), data, energies, pool[: args.n_train], test,
                      config.data.energy_unit, args.kernel_cache)
    record["kernel_seconds"] = kernel_seconds[0]
    record["noise_search"] = {"visited": visited}
    out["results"].append(record)
    atomic_write_json(args.json, out)
    print(f"N = {args.n_train}: energy MAE {record['energy_mae'] * 1e3:.2f} meV, force MAE "
          f"{record['force_mae'] * 1e3:.2f} meV/Å; fit {record['fit_seconds']:.0f} s (kernel {kernel_seconds[0]:.0f} s), "
          f"predict {record['predict_seconds']:.0f} s; {len(visited)} noise levels visited", flush=True)


if __name__ == "__main__":
    main()
