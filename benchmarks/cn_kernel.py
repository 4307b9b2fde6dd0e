"""Seconds and peak memory per image pair: C4 / C8 GCNN and CNN-GAP NTK kernels.

Architecture (the published C4 GCNN NTK): lifting 3×3 VALID → ReLU → group conv 3×3
VALID → ReLU → group pool → Dense → ReLU → Dense; n = 1 is the CNN-GAP. Each row
computes ``kernel(x1, x2)`` (NNGP and NTK) between two disjoint sets of N random
RGB images (the cost does not depend on the pixel values) and divides the wall time by
N² (the self-pair pass that every kernel matrix needs is included). Every configuration
runs in a fresh subprocess, so its peak RSS (``ru_maxrss``, including the ~0.3 GB of the
interpreter and torch) is its own. Prints a table and writes
``benchmarks/results/cn_kernel.json`` (atomically).

    python benchmarks/cn_kernel.py                  # all rows (CPU, and CUDA when available)
    python benchmarks/cn_kernel.py --devices cuda   # CUDA rows only; the file's CPU rows are kept
    python benchmarks/cn_kernel.py --quick          # small N, for a smoke run

Rows of the devices run replace that device's rows in the JSON file; other devices' rows stay.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from molntk.kernels.cn import gcnn
from molntk.utils.files import atomic_write_json

RESULTS = Path(__file__).resolve().parent / "results" / "cn_kernel.json"
MODELS = {"gcnn-c4": 4, "gcnn-c8": 8, "cnn-gap": 1}
#: Images per set (N1 = N2 = N) on CPU, chosen for ≈ 30–60 s per row on 2 cores.
IMAGES = {"gcnn-c4": 16, "gcnn-c8": 6, "cnn-gap": 32}


def run_row(spec: dict) -> dict:
    """One configuration, in this process: time kernel and report peak RSS."""
    device, dtype = torch.device(spec["device"]), getattr(torch, spec["dtype"])
    net = gcnn(spec["n"], 2)
    g = torch.Generator().manual_seed(0)
    n_images, size = spec["images"], spec["size"]
    x1 = torch.randn(n_images, 3, size, size, generator=g, dtype=dtype).to(device)
    x2 = torch.randn(n_images, 3, size, size, generator=g, dtype=dtype).to(device)
    net.kernel(x1[:1], x2[:1])  # warm-up: lazy initialisation, thread pools, CUDA context
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    wall, cpu = time.perf_counter(), time.process_time()
    kernels = net.kernel(x1, x2)
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    pairs = n_images * n_images
    row = {
        "model": spec["model"],
        "size": size,
        "n": spec["n"],
        "s_per_pair": wall / pairs,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "device": spec["device"],
        "dtype": spec["dtype"],
        "images": n_images,
        "cpu_s_per_pair": cpu / pairs,
        "baseline_rss_mb": baseline,
        "threads": torch.get_num_threads(),
        "finite": bool(torch.isfinite(kernels.ntk).all()),
    }
    if device.type == "cuda":
        row["peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return row


def specs(quick: bool, devices: list[str]) -> list[dict]:
    rows = []
    for device in devices:
        for model, n in MODELS.items():
            for size in (28, 32):
                images = IMAGES[model] if device == "cpu" else 4 * IMAGES[model]
                rows.append(
                    {"model": model, "n": n, "size": size, "device": device, "dtype": "float64", "images": 4 if quick else images}
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 images per set (smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="JSON results file")
    parser.add_argument("--devices", nargs="+", choices=["cpu", "cuda"], help="default: cpu, and cuda when available")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(run_row(json.loads(args.row))))
        return
    devices = args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    kept = json.loads(args.out.read_text()) if args.out.exists() else []
    results = [row for row in kept if row["device"] not in devices]
    header = f"{'model':<9} {'size':>4} {'n':>2} {'device':<6} {'N':>3} {'s/pair':>9} {'cpu s/pair':>10} {'peak MB':>8}"
    print(header)
    for spec in specs(args.quick, devices):
        child = subprocess.run(
            [sys.executable, __file__, "--row", json.dumps(spec)], capture_output=True, text=True, check=False
        )
        if child.returncode != 0:
            print(f"{spec['model']} {spec['size']} {spec['device']}: failed\n{child.stderr}", file=sys.stderr)
            continue
        row = json.loads(child.stdout.strip().splitlines()[-1])
        results.append(row)
        print(
            f"{row['model']:<9} {row['size']:>4} {row['n']:>2} {row['device']:<6} {row['images']:>3} "
            f"{row['s_per_pair']:>9.4f} {row['cpu_s_per_pair']:>10.4f} {row['peak_rss_mb']:>8.0f}",
            flush=True,
        )
    atomic_write_json(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
