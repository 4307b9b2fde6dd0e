"""What the runs of the emergent experiments share: their setup (output folder, device,
dtype, member seeds, recorded steps) and the writing of their files."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from molntk.ensembles import record_steps
from molntk.pipelines.emergent.config import EmergentIsingConfig
from molntk.pipelines.emergent.digits_config import EmergentDigitsConfig
from molntk.pipelines.emergent.so3_config import EmergentSO3Config
from molntk.pipelines.files import output_dir, result_set, write_metrics_csv, write_report
from molntk.scale.devices import resolve_device

EmergentConfig = EmergentIsingConfig | EmergentSO3Config | EmergentDigitsConfig


@dataclass(frozen=True)
class RunSetup:
    """The run's start (``time.perf_counter``), output folder, device, network dtype, member
    seeds ``ensemble.seed`` … ``ensemble.seed + members − 1`` and recorded steps (about
    ``training.records``, log-spaced from 1 to ``training.steps``)."""

    start: float
    out: Path
    device: torch.device
    dtype: torch.dtype
    seeds: list[int]
    steps: tuple[int, ...]


def run_setup(config: EmergentConfig) -> RunSetup:
    """The :class:`RunSetup` of ``config``, its output folder checked before any work."""
    start = time.perf_counter()
    out = output_dir(config.name, config.output)
    ens, training = config.ensemble, config.training
    return RunSetup(
        start=start,
        out=out,
        device=resolve_device(config.compute.device, "compute.device"),
        dtype=getattr(torch, config.compute.dtype),
        seeds=list(range(ens.seed, ens.seed + ens.members)),
        steps=record_steps(training.steps, training.records),
    )


def write_results(
    setup: RunSetup, config: EmergentConfig, records: list[dict[str, Any]], extra: dict[str, Any], plot: Callable[[Path], Any]
) -> dict[str, Any]:
    """Write the plots (``plot(folder)``), ``report.json`` (``extra`` with the recorded steps,
    member seeds, device and wall time added), ``config.yaml`` and ``metrics.csv`` into the
    output folder, all or nothing (:func:`~molntk.pipelines.files.result_set`); return
    ``{"output", "summary", "results", "wall_seconds"}``."""
    extra = {**extra, "recorded_steps": list(setup.steps), "member_seeds": setup.seeds, "device": str(setup.device)}
    with result_set(setup.out) as stage:
        plot(stage)
        extra["wall_seconds"] = time.perf_counter() - setup.start
        write_report(stage, config=config.to_dict(), records=records, extra=extra)
        write_metrics_csv(stage, records)
    return {"output": str(setup.out), "summary": extra["summary"], "results": records, "wall_seconds": extra["wall_seconds"]}
