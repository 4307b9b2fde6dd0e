"""One record file from several ``molntk run configs/md_*.yaml`` outputs on one trajectory file.

Runs of one md config with different models (or settings) — each its own output folder,
side by side or one after another — are merged into one JSON file: every fit's record with its
per-frame errors (``frame_errors``: |E − Ê| per test frame in eV and Σ|F − F̂| over its force
components in eV/Å, in the order of ``test_frames``), the paired comparisons at each training
size (the lowest MAE against every other model on the same test frames, bootstrap over the
test frames, :func:`molntk.pipelines.md.run.paired_comparisons`) and, with ``--focus LABEL``,
that record against every other one whatever their sizes. The runs must share the trajectory
file (SHA-256) and the test frames; each run's whole config is kept (``molntk run`` of it
reproduces its records); a frames model's record is labelled with its number of
inducing frames and their selection (``so3-ntk-forces-frames-250-fps``), and a model whose
params set the feature maps' cutoff with it (``so3-ntk-forces-frames-100-fps-4A``). Lists of numbers are
written one list per line (the file stays readable and its diffs small)::

    python benchmarks/md_records.py --runs out/sgdml out/frames250 --focus so3-ntk-forces-frames-250-fps \
        --machine "2-core x86_64 CPU, one thread per run" --out benchmarks/results/md_ethanol/records_frames_X.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from molntk.pipelines.comparisons import lowest_against_others
from molntk.pipelines.md.fits import FOLDER
from molntk.pipelines.md.run import FRAME_ERRORS, MODEL_KEYS, paired_comparisons
from molntk.utils.files import atomic_write_text

#: The config key of each record name (the inverse of MODEL_KEYS).
CONFIG_KEYS = {name: key for key, name in MODEL_KEYS.items()}


def label(record: dict[str, Any], params: dict[str, Any]) -> str:
    """The record's model name; a frames model's with its inducing frames and their selection;
    an SO(3) model's with its feature maps' cutoff when its params set one (``-4A``)."""
    name = record["model"]
    if name == MODEL_KEYS["so3_forces_frames"]:
        name = f"{name}-{params['inducing_frames']}-{params.get('inducing_selection', 'fps')}"
    cutoff = (params.get("radial") or {}).get("r_cut")
    return name if cutoff is None else f"{name}-{cutoff:g}A"


def run_records(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run's report and its fit-cache records (with their per-frame errors), labelled."""
    report = json.loads((folder / "report.json").read_text())
    records = []
    for path in sorted((folder / FOLDER).glob("*.json")):
        record = json.loads(path.read_text())
        record["model"] = label(record, report["config"]["models"][CONFIG_KEYS[record["model"]]].get("params") or {})
        records.append(record)
    return report, records


def against_focus(records: list[dict[str, Any]], focus: str, counts: np.ndarray) -> list[dict[str, Any]]:
    """The ``focus`` record's MAE against each other record's on the same test frames (any size)."""
    [chosen] = [r for r in records if f"{r['model']}@{r['n_train']}" == focus or r["model"] == focus]
    rows = []
    for other in records:
        if other is chosen:
            continue
        for quantity, mae_key, errors_key, per_frame in (("energy", "energy_mae", "energy", None),
                                                         ("forces", "force_mae", "force_sums", counts)):
            scores = [(f"{r['model']}@{r['n_train']}", r[mae_key], np.asarray(r[FRAME_ERRORS][errors_key]))
                      for r in (chosen, other)]
            rows += [{"quantity": quantity, **row} for row in lowest_against_others(scores, per_frame)]
    return rows


def compact_json(obj: Any) -> str:
    """Indented JSON with every list of numbers on one line."""
    text = json.dumps(obj, indent=1, ensure_ascii=False)
    number_list = re.compile(r"\[\s*(-?[0-9][-+0-9.eE]*(?:,\s*-?[0-9][-+0-9.eE]*)*)\s*\]")
    return number_list.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text) + "\n"


def merge(folders: list[Path], focus: str | None, machine: str) -> dict[str, Any]:
    """The record file's content (module docstring)."""
    runs = [run_records(folder) for folder in folders]
    reports = [report for report, _ in runs]
    if len({r["data"]["sha256"] for r in reports}) != 1 or len({json.dumps(r["test_frames"]) for r in reports}) != 1:
        raise SystemExit("the runs differ in their trajectory file or their test frames")
    records = [record for _, recs in runs for record in recs]
    first = reports[0]
    counts = np.full(len(first["test_frames"]), 3.0 * first["data"]["n_atoms"])
    cross = against_focus(records, focus, counts) if focus else []
    comparisons = paired_comparisons([dict(r) for r in records], counts)
    return {
        "machine": machine, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": first["versions"], "data": first["data"],
        # each run's whole config (``molntk run`` of it reproduces the run's records)
        "runs": [{"models": [r["model"] for r in recs], "config": report["config"]} for report, recs in runs],
        "results": records, "comparisons": comparisons, "against_focus": cross,
        "test_frames": first["test_frames"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", type=Path, required=True, help="output folders of molntk run (md configs)")
    parser.add_argument("--out", type=Path, required=True, help="the record file to write")
    parser.add_argument("--focus", default=None, help="a record (model label, or label@n_train) compared with every other")
    parser.add_argument("--machine", default="", help="where the runs ran, in words")
    args = parser.parse_args()
    atomic_write_text(args.out, compact_json(merge(args.runs, args.focus, args.machine)))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
