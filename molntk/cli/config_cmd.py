"""``molntk config``: show or validate YAML configuration files (see :mod:`molntk.config`,
the tasks in :mod:`molntk.pipelines.tasks`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from molntk.cli.output import print_error, stdout
from molntk.config import ConfigValidationError
from molntk.pipelines.tasks import TASKS

app = typer.Typer(help="Show and validate YAML configuration files.", no_args_is_help=True)

#: ``--set KEY=VALUE`` overrides, shared by ``config show``, ``config validate`` and ``run``.
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        show_default=False,
        help="Override a key, e.g. --set data.seed=1 or --set data.split.n_train=1000 (value parsed as YAML; repeatable).",
    ),
]

#: Exit status of an invalid configuration.
EXIT_INVALID = 2


@app.command("show")
def show(
    config: Annotated[str, typer.Argument(metavar="CONFIG", help="YAML configuration file.")],
    overrides: SetOption = None,
) -> None:
    """Print the resolved, validated configuration (defaults filled in, overrides applied) as YAML."""
    typer.echo(TASKS.load(config, overrides or ()).to_yaml(), nl=False)


@app.command("validate")
def validate(
    configs: Annotated[list[str], typer.Argument(metavar="CONFIG", help="YAML configuration files.")],
    overrides: SetOption = None,
) -> None:
    """Check configuration files; print every problem of every file (exit status 2 if any)."""
    invalid = False
    for path in configs:
        try:
            config = TASKS.load(path, overrides or ())
        except ConfigValidationError as error:
            print_error(str(error))
            invalid = True
            continue
        stdout().print(Text(f"ok: {path} (task {config.task}, name {config.name})", style="green"))
    if invalid:
        raise typer.Exit(EXIT_INVALID)
