"""``molntk fit CONFIG``: the SO(3) model file of each target of a ``qm9-property`` config.

The pipeline is :func:`molntk.pipelines.qm9.fit_so3_models`; progress goes to stderr, the
files written to stdout (a table, or one JSON document with ``--json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from molntk.cli.config_cmd import SetOption
from molntk.cli.output import print_json, print_results_table, stdout
from molntk.cli.progress import job_progress
from molntk.config import ConfigProblem, ConfigValidationError
from molntk.pipelines.qm9 import QM9PropertyConfig, fit_so3_models
from molntk.pipelines.tasks import TASKS


def fit(
    config: Annotated[str, typer.Argument(metavar="CONFIG", help="A 'qm9-property' YAML configuration file.")],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Folder for the model files (default: models/ in the config's output folder).",
                     show_default=False),
    ] = None,
    overrides: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table.")] = False,
) -> None:
    """Fit the config's SO(3) NTK model of each target on its largest training set; write <target>.molntk.npz files."""
    resolved = TASKS.load(config, list(overrides or ()))
    if not isinstance(resolved, QM9PropertyConfig):
        problem = f"is {resolved.task!r}; molntk fit needs a 'qm9-property' configuration"
        raise ConfigValidationError([ConfigProblem(config, "task", problem)])
    with job_progress() as progress:
        result = fit_so3_models(resolved, config, out, progress)
    if as_json:
        print_json({"config": resolved.to_dict(), "result": result})
        return
    rows = [{"target": target, "file": path} for target, path in result["model_files"].items()]
    print_results_table(rows, [("target", "target", "s"), ("file", "model file", "s")],
                        title=f"{resolved.name}: SO(3) NTK models on {result['n_train']} training molecules")
    for reduce, label in result["candidates"].items():
        stdout().print(f"network ({reduce} over atom pairs): {label}")
