"""Per-molecule threads against torch's own threads for the force field's kernels (not a test).

The exact energy+force model computes its joint kernel a query molecule at a time
(:func:`~molntk.molecular.derivative_kernels.joint_kernel`: Θ, ∂Θ/∂r', ∂Θ/∂r, ∂²Θ/∂r∂r'
against every reference frame) and predicts a query molecule at a time (the expansion
s(M) = Σ a_j Θ + Σ b_jᵀ ∂Θ/∂r'_j and ∂s/∂r). Its tensor operations are
memory-bound and scale poorly over torch's intra-op threads, so both loops run their
molecules side by side on Python threads, torch on one thread in each
(:func:`~molntk.scale.devices.map_over_threads`). This script times both ways with
``--threads`` threads on the md configs' exact 4 Å model (11 radial Gaussians to 4 Å, Lebedev
grid of band limit 7, H C O):

- rows: ``joint_kernel(kernel, frames[:queries], frames[queries:queries + refs])``;
- predictions: a model fitted with fixed λ's on ``--refs`` frames predicting ``--queries``
  frames (``predict_forces``);

"torch threads" replaces the per-molecule map by a plain loop (the molecules in turn, torch
on all threads). Milliseconds per frame pair, best of ``--repeats``, their ratio, and the
largest difference of the two results relative to their largest value.

    python benchmarks/threaded_rows.py                                     # ethanol sample
    python benchmarks/threaded_rows.py --frames .kit/md/aspirin.extxyz      # aspirin frames

Prints a table and replaces the rows of the same frames file and threads in ``--json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import timeit
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import numpy as np
import torch

from molntk.data.labelled import read_labelled
from molntk.models import force_field
from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.molecular import derivative_kernels
from molntk.molecular.derivative_kernels import joint_kernel
from molntk.scale.devices import torch_threads
from molntk.utils.files import atomic_write_json, sha256_file

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "md" / "ethanol_sample.extxyz"
RESULTS = ROOT / "benchmarks" / "results" / "threaded_rows.json"
MODEL = dict(elements=(1, 6, 8), grid_band_limit=7, psd_rtol=1e-12, reg_energy=1e-6, reg_force=1e-4,
             radial={"kind": "gaussian", "n": 11, "r_min": 0.5, "r_cut": 4.0})


def in_turn(function, items, device):
    """The plain loop that :func:`~molntk.scale.devices.map_over_threads` replaces."""
    return [function(x) for x in items]


def timed(repeats: int, work, plain: bool):
    """(best seconds of ``repeats`` calls of ``work``, its last result), with the per-molecule
    map (``plain`` False) or the plain loop."""
    result = []
    with ExitStack() as patches:
        if plain:
            for module in (derivative_kernels, force_field):
                patches.enter_context(mock.patch.object(module, "map_over_threads", in_turn))
        seconds = min(timeit.repeat(lambda: result.append(work()), number=1, repeat=repeats))
    return seconds, result[-1]


def largest_difference(a, b) -> float:
    flat = lambda x: np.concatenate([np.ravel(np.asarray(p)) for p in (x if isinstance(x, (tuple, list)) else [x])])  # noqa: E731
    fa, fb = flat(a), flat(b)
    return float(np.abs(fa - fb).max() / np.abs(fa).max())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=Path, default=SAMPLE, help="an extxyz file of frames with energies and forces")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--queries", type=int, default=8)
    parser.add_argument("--refs", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    data = read_labelled(args.frames, "energy", forces=True)
    frames = data.molecules
    queries, refs = frames[: args.queries], frames[args.queries : args.queries + args.refs]
    energies = np.asarray(data.targets["energy"])[args.queries : args.queries + args.refs]
    forces = data.forces[args.queries : args.queries + args.refs]
    rows = []
    with torch_threads(args.threads):
        model = SO3ForceFieldRegressor(**MODEL).fit(refs, energies, forces)
        kernel = model.kernel_
        model.predict_forces(queries[:1])  # the contracted training tangents, made once per model
        for name, work in (("rows", lambda: joint_kernel(kernel, queries, refs)),
                           ("predictions", lambda: model.predict_forces(queries, return_energy=True))):
            plain_s, plain = timed(args.repeats, work, plain=True)
            mapped_s, mapped = timed(args.repeats, work, plain=False)
            pairs = len(queries) * len(refs)
            rows.append({"frames": str(args.frames.name), "frames_sha256": sha256_file(args.frames),
                         "n_atoms": frames[0].n_atoms, "threads": args.threads, "work": name,
                         "queries": len(queries), "refs": len(refs),
                         "torch_threads_ms_per_pair": 1e3 * plain_s / pairs,
                         "molecule_threads_ms_per_pair": 1e3 * mapped_s / pairs,
                         "speedup": plain_s / mapped_s, "largest_relative_difference": largest_difference(plain, mapped)})
    print(f"{'work':<12} {'frames':<24} {'threads':>7} {'torch threads ms/pair':>22} {'molecule threads':>17} {'ratio':>6} {'rel. diff':>9}")
    for r in rows:
        print(f"{r['work']:<12} {r['frames']:<24} {r['threads']:>7} {r['torch_threads_ms_per_pair']:>22.2f} "
              f"{r['molecule_threads_ms_per_pair']:>17.2f} {r['speedup']:>6.2f} {r['largest_relative_difference']:>9.1e}")
    stamp = {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
             "torch": torch.__version__}
    old = json.loads(args.json.read_text())["records"] if args.json.exists() else []
    keep = [r for r in old if (r["frames_sha256"], r["threads"]) != (rows[0]["frames_sha256"], args.threads)]
    atomic_write_json(args.json, {"records": keep + [{**r, **stamp} for r in rows]})


if __name__ == "__main__":
    main()
