"""Wall time and peak memory of a whole ``task: qm9-property`` run (not a test).

The scale target of the full split: ``configs/qm9_u0_full_so3.yaml`` (the sparse SO(3) NTK
on all 110,000 training molecules with 20,000 inducing environments, evaluated on all 10,831
test molecules) from the configuration file to the written report, on whatever device the
config's ``kernel.device: auto`` finds. Runs the same code as ``molntk run`` in this
process and records:

- ``wall_seconds``: the whole run (loading QM9, features, inducing environments, kernel
  blocks, solve, predictions, report files);
- ``kernel_seconds``: the pipeline's compute seconds of the kernel blocks per model;
- ``kernel_blocks``: how many blocks the run computed and how many it read from its block
  cache (a cached block's seconds are those recorded when it was computed, and the wall
  time does not include them);
- the test records (MAE with its bootstrap 95 % interval, RMSE, fit and predict seconds, λ,
  rank, …) and the paired comparisons of the models at each size (the lowest MAE against
  each other model on the same test molecules, :func:`molntk.pipelines.qm9.evaluate.paired_comparisons`);
- ``peak_rss_mb`` (this process) and ``gpu_peak_mb`` (torch's allocator, CUDA only).

    python benchmarks/full_qm9.py                                   # the full split (GPU)
    python benchmarks/full_qm9.py --set "learning_curve.n_train=[2000]" --set learning_curve.n_test=500

Writes benchmarks/results/full_qm9.json (``--json``): one entry per device, config,
overrides and date, so runs on other machines, sizes and days are kept beside each other.
``--records`` also writes the run's test records alone, as a JSON list in the shape of
report.json's ``results`` ({model, target, n_train, mae, rmse, …}):

    python benchmarks/full_qm9.py --config configs/qm9_u0_scale.yaml --output runs/qm9_u0_scale \
        --json benchmarks/results/full_qm9.json --records benchmarks/results/qm9_u0_scale.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import resource
import tempfile
import time
from pathlib import Path

import torch

from molntk.cli.progress import job_progress
from molntk.pipelines.qm9 import run_and_write
from molntk.pipelines.tasks import TASKS
from molntk.utils.files import atomic_write_text

RESULTS = Path(__file__).parent / "results" / "full_qm9.json"


def device_name() -> str:
    """The GPU's name where CUDA is available, else the CPU's architecture and core count."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    import os

    return f"{platform.machine()} CPU, {os.cpu_count()} cores"


def run(config_path: str, overrides: list[str], output: Path) -> dict:
    """One run of the pipeline; its timings, memory and records."""
    config = TASKS.load(config_path, [*overrides, f"output={output}"])
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    with job_progress() as progress:
        result = run_and_write(config, config_path, progress)
    wall = time.perf_counter() - start
    return {
        "config": config_path,
        "overrides": overrides,
        "device": device_name(),
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "wall_seconds": wall,
        "kernel_seconds": result["kernel_seconds"],
        "kernel_blocks": result["kernel_blocks"],
        "records": [{k: v for k, v in r.items() if k != "cv"} for r in result["records"]],
        "comparisons": result["comparisons"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "gpu_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/qm9_u0_full_so3.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--output", type=Path, default=None, help="run folder (default: a temporary one, deleted)")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--records", type=Path, default=None, help="also write the records alone, as a JSON list")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="molntk-full-qm9-") as scratch:
        row = run(args.config, args.overrides, args.output or Path(scratch))
    print(f"\n{row['device']}: {row['config']} {' '.join(row['overrides'])}")
    print(f"wall {row['wall_seconds']:.1f} s, peak RSS {row['peak_rss_mb']:.0f} MB"
          + (f", GPU peak {row['gpu_peak_mb']:.0f} MB" if row["gpu_peak_mb"] is not None else ""))
    blocks = row["kernel_blocks"]
    print(f"kernel blocks: {blocks['computed']} computed, {blocks['from_cache']} read from the block cache")
    for k in row["kernel_seconds"]:
        print(f"  kernel {k['model']}: " + ", ".join(f"{part} {k[part]:.1f} s" for part in ("inducing", "train", "test") if part in k))
    for r in row["records"]:
        print(f"  {r['model']:<16} n_train {r['n_train']:>6}  MAE {r['mae']:8.2f} {r['unit']} "
              f"[{r['mae_ci95_low']:.2f}, {r['mae_ci95_high']:.2f}]  fit {r['fit_seconds']:7.1f} s  predict {r['predict_seconds']:6.1f} s")
    for c in row["comparisons"]:
        print(f"  n_train {c['n_train']:>6}  {c['model']} lower than {c['against']} by {c['mae_difference']:.2f} "
              f"[{c['ci95_low']:.2f}, {c['ci95_high']:.2f}]" + ("" if c["resolved"] else "  (not resolved)"))
    runs = json.loads(args.json.read_text()) if args.json.exists() else {}
    runs[" ".join([row["device"], row["config"], *row["overrides"], row["date"]])] = row
    args.json.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(runs, indent=1) + "\n")
    print(f"wrote {args.json}")
    if args.records is not None:
        atomic_write_text(args.records, json.dumps(row["records"], indent=1) + "\n")
        print(f"wrote {args.records}")


if __name__ == "__main__":
    main()
