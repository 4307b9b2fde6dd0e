"""Result files shared by every pipeline: report.json, config.yaml, metrics.csv, plots.

A pipeline writes into one folder per configuration (default ``results/<config name>/``):

- ``report.json``: ``{"config", "results", "created", "versions", **extra}``; ``results``
  is the list of records (one flat dict per model × training-set size);
- ``config.yaml``: the resolved configuration, ready for ``molntk run``;
- ``metrics.csv``: one row per record, the columns whose values are scalars;
- ``learning_curve.png``: a metric against ``n_train``, one line per ``model``.

Every file is written to a temporary sibling and renamed over its target
(:mod:`molntk.utils.files`), so an interrupted run never leaves a half-written file.
JSON has no NaN or infinity: such floats are written as ``null``; numpy scalars and
arrays become plain numbers and lists.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import yaml

from molntk._version import __version__
from molntk.errors import OutputError
from molntk.utils.files import atomic_path, atomic_write_json, atomic_write_text, folder_write_problem, staged_folder

#: Folder under which ``output_dir`` puts one folder per configuration name.
RESULTS_ROOT = Path("results")
#: Types written as CSV cells; records' other values (lists, dicts) stay in report.json only.
SCALARS = (bool, int, float, str, np.bool_, np.integer, np.floating)
#: Per-model marker and line style of learning curves (cycled).
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
LINESTYLES = ("-", "--", "-.", ":")


def output_dir(config_name: str, out: str | Path | None) -> Path:
    """The folder a run writes to: ``out`` if given, else ``results/<config_name>/``,
    created and checked writable (with its parent, where :func:`result_set` stages the
    files) before any work: :class:`~molntk.errors.OutputError` naming it otherwise."""
    if out is None:
        if not config_name or "/" in config_name or "\\" in config_name:
            raise ValueError(f"config name {config_name!r} cannot name a results folder")
        folder = RESULTS_ROOT / config_name
    else:
        folder = Path(out).expanduser()
    problem = folder_write_problem(folder)
    if problem is None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            problem = f"cannot be created ({err.strerror or err})"
    if problem is not None:
        raise OutputError(f"output folder {str(folder)!r}: {problem}")
    return folder


@contextmanager
def result_set(folder: Path) -> Iterator[Path]:
    """A staging folder for a run's result files, moved into ``folder`` when the block
    succeeds (:func:`~molntk.utils.files.staged_folder`): the folder holds the complete new
    set or, after a failure, exactly what it held before. An ``OSError`` on the way (a full
    disk) becomes an :class:`~molntk.errors.OutputError` naming the folder."""
    try:
        with staged_folder(folder) as stage:
            yield stage
    except OSError as err:
        reason = err.strerror or str(err)
        raise OutputError(f"output folder {str(folder)!r}: results not written ({reason}); it holds what it held before") from err


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON: numpy → Python, tuples → lists, paths → strings, NaN/±inf → None."""
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    return value


def versions() -> dict[str, str]:
    """Versions that produced a report: molntk, torch, Python and the platform."""
    return {
        "molntk": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def write_report(
    out_dir: str | Path, *, config: dict[str, Any], records: list[dict[str, Any]], extra: dict[str, Any] | None = None
) -> Path:
    """Write ``report.json`` and ``config.yaml`` into ``out_dir`` (atomically); returns the report's path.

    ``extra`` adds top-level keys; it may not replace ``config``, ``results``, ``created``
    or ``versions``.
    """
    out_dir = Path(out_dir)
    clash = sorted(set(extra or {}) & {"config", "results", "created", "versions"})
    if clash:
        raise ValueError(f"extra report keys {clash} would replace the report's own keys")
    report = {
        "config": config,
        "results": records,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(),
        **(extra or {}),
    }
    path = out_dir / "report.json"
    atomic_write_json(path, jsonable(report))
    atomic_write_text(out_dir / "config.yaml", yaml.safe_dump(jsonable(config), sort_keys=False, allow_unicode=True))
    return path


def write_metrics_csv(out_dir: str | Path, records: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``metrics.csv``: one row per record; the columns are the union of the records'
    keys that hold a scalar (bool, int, float, str or None) in every record that has them,
    in first-seen order. Returns its path."""
    columns: list[str] = []
    for record in records:
        columns += [key for key in record if key not in columns]
    scalar = [
        key
        for key in columns
        if all(record.get(key) is None or isinstance(record[key], SCALARS) for record in records)
    ]
    frame = pd.DataFrame([{key: record.get(key) for key in scalar} for record in records], columns=scalar)
    path = Path(out_dir) / "metrics.csv"
    atomic_write_text(path, frame.to_csv(index=False))
    return path


def plot_learning_curve(
    out_dir: str | Path,
    records: Sequence[Mapping[str, Any]],
    *,
    metric: str,
    ylabel: str,
    log_y: bool = True,
    hline: tuple[float, str] | None = None,
    filename: str = "learning_curve.png",
) -> Path:
    """Plot ``metric`` against ``n_train``, one line per ``model`` (log x; log y unless
    ``log_y=False``); ``hline=(value, label)`` adds a dashed reference line. Returns the PNG's path."""
    missing = [i for i, r in enumerate(records) if not {"model", "n_train", metric} <= r.keys()]
    if missing:
        raise ValueError(f"record {missing[0]} lacks 'model', 'n_train' or {metric!r}: cannot plot {metric}")
    with figure(figsize=(6.0, 4.2), dpi=120) as (fig, ax):
        for i, model in enumerate(dict.fromkeys(r["model"] for r in records)):
            points = sorted((r["n_train"], r[metric]) for r in records if r["model"] == model and r[metric] is not None)
            if points:  # markers and dashes differ, so that coinciding curves stay visible
                style = dict(marker=MARKERS[i % len(MARKERS)], linestyle=LINESTYLES[i % len(LINESTYLES)])
                ax.plot(*zip(*points), label=str(model), markerfacecolor="none", **style)
        if hline is not None:
            ax.axhline(hline[0], color="grey", linestyle="--", linewidth=1, label=hline[1])
        ax.set_xscale("log")
        if log_y:
            ax.set_yscale("log")
        ax.set_xlabel("training set size n_train")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        return save_figure(fig, Path(out_dir) / filename)


@contextmanager
def figure(*grid: int, **options: Any) -> Iterator[tuple[Any, Any]]:
    """``plt.subplots(*grid, **options)`` on matplotlib's file-only Agg backend (no display
    needed): yields (figure, axes) and closes the figure on exit, also after an error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(*grid, **options)
    try:
        yield fig, axes
    finally:
        plt.close(fig)


def save_figure(fig: Any, path: str | Path) -> Path:
    """Save a matplotlib figure as PNG at ``path`` atomically (temporary file, then ``os.replace``)."""
    path = Path(path)
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png")
    return path
