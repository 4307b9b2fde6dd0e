"""``molntk run CONFIG``: validate a configuration and run its task.

Each task of :data:`molntk.config.TASK_MODELS` has a runner in :data:`RUNNERS`; a new
task adds its config model there and its runner here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from molntk.cli.config_cmd import SetOption
from molntk.cli.output import print_json, print_qm9_summary
from molntk.config import QM9SummaryConfig, load_config

if TYPE_CHECKING:
    from molntk.config import ImageClassificationConfig, QM9PropertyConfig


def run_qm9_summary(config: QM9SummaryConfig, source: str) -> dict[str, Any]:
    """``task: qm9-summary``: :func:`~molntk.data.qm9.qm9_summary` with the configured split sizes."""
    from molntk.data.qm9 import qm9_summary
    from molntk.data.splits import standard_split
    from molntk.pipelines.qm9 import load_qm9_data

    data = config.data
    molecules = load_qm9_data(data, source)
    summary = qm9_summary(molecules, seed=data.seed)
    split = standard_split(len(molecules), data.seed, data.split.n_train, data.split.n_valid)
    summary["split"] = {"seed": data.seed, **split.sizes()}
    return summary


def show_qm9_summary(config: QM9SummaryConfig, result: dict[str, Any]) -> None:
    """Tables of a ``qm9-summary`` result."""
    print_qm9_summary(result, title=f"{config.name}: QM9 ({config.data.source})")


@dataclass(frozen=True)
class Runner:
    """How ``molntk run`` performs one task.

    ``compute(config, source)`` returns a JSON-serialisable result (``source`` names the
    configuration in errors); ``show(config, result)`` prints it as tables.
    """

    compute: Callable[[Any, str], dict[str, Any]]
    show: Callable[[Any, dict[str, Any]], None]


def run_image_classification(config: ImageClassificationConfig, source: str) -> dict[str, Any]:
    """``task: image-classification``: :func:`molntk.pipelines.images.run_image_classification`, imported lazily."""
    from molntk.pipelines.images import run_image_classification as run_images

    return run_images(config, source)


def show_image_classification(config: ImageClassificationConfig, result: dict[str, Any]) -> None:
    """Table of an ``image-classification`` result."""
    from molntk.pipelines.images import show_image_classification as show_images

    show_images(config, result)


def run_qm9_property(config: QM9PropertyConfig, source: str) -> dict[str, Any]:
    """``task: qm9-property``: :func:`molntk.pipelines.qm9_report.run_and_write` (imports torch lazily)."""
    from molntk.pipelines.qm9_report import run_and_write

    return run_and_write(config, source)


def show_qm9_property(config: QM9PropertyConfig, result: dict[str, Any]) -> None:
    """Tables of a ``qm9-property`` result."""
    from molntk.pipelines.qm9_report import show_qm9_property as show

    show(config, result)


#: Task name → its runner; every task of :data:`molntk.config.TASK_MODELS` has one.
RUNNERS: dict[str, Runner] = {
    "qm9-summary": Runner(run_qm9_summary, show_qm9_summary),
    "image-classification": Runner(run_image_classification, show_image_classification),
    "qm9-property": Runner(run_qm9_property, show_qm9_property),
}


def run(
    config: Annotated[
        str, typer.Argument(metavar="CONFIG", help="YAML configuration file (its 'task' picks the job).")
    ],
    overrides: SetOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document {config, result} instead of tables.")
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(min=1, help="Compute kernel blocks on a local Dask cluster of this many worker processes "
                     "(same as --set compute.executor=dask --set compute.workers=N)."),
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option(help="Compute kernel blocks on the Dask cluster at this scheduler address, e.g. tcp://10.0.0.1:8786."),
    ] = None,
) -> None:
    """Validate a configuration and run the job its 'task' key names."""
    overrides = list(overrides or ())
    if workers is not None or scheduler is not None:
        overrides.append("compute.executor=dask")
        overrides += [f"compute.workers={workers}"] if workers is not None else []
        overrides += [f"compute.scheduler={scheduler}"] if scheduler is not None else []
    resolved = load_config(config, overrides)
    runner = RUNNERS[resolved.task]
    result = runner.compute(resolved, config)
    if as_json:
        print_json({"config": resolved.to_dict(), "result": result})
    else:
        runner.show(resolved, result)
