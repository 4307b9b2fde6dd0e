"""``molntk run CONFIG``: validate a configuration, run its task, print the result.

The task comes from :data:`molntk.pipelines.tasks.TASKS` (schema and run), the printing
from :data:`molntk.cli.show.SHOW`; progress goes to stderr (:func:`molntk.cli.progress.job_progress`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from molntk.cli.config_cmd import SetOption
from molntk.cli.output import EXIT_FAILED, print_json
from molntk.cli.progress import job_progress
from molntk.cli.show import SHOW
from molntk.pipelines.tasks import TASKS


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
    """Validate a configuration and run the job its 'task' key names (exit status 1 when items of its data could not be used)."""
    overrides = list(overrides or ())
    if workers is not None or scheduler is not None:
        overrides.append("compute.executor=dask")
        overrides += [f"compute.workers={workers}"] if workers is not None else []
        overrides += [f"compute.scheduler={scheduler}"] if scheduler is not None else []
    resolved = TASKS.load(config, overrides)
    with job_progress() as progress:
        result = TASKS[resolved.task].run(resolved, config, progress)
    if as_json:
        print_json({"config": resolved.to_dict(), "result": result})
    else:
        SHOW[resolved.task](resolved, result)
    if result.get("read_failures"):
        raise typer.Exit(EXIT_FAILED)
