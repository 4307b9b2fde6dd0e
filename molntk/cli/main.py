"""The ``molntk`` command: root app, ``--version``, and the one-line handling of molntk errors.

Heavy libraries (torch, RDKit, pandas) are imported inside the commands, so that
``molntk --help`` stays fast.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from molntk._version import __version__
from molntk.cli import config_cmd, data, fit, info, predict, run
from molntk.cli.output import EXIT_FAILED, EXIT_USAGE, print_error
from molntk.errors import ConfigError, MolntkError, ModelFileError, OutputError

#: The exit statuses, as ``molntk --help`` and the README state them.
EXIT_CODES = ("Exit status: 0 all good; 1 some inputs failed (each named with its reason); "
              "2 usage, configuration, output-folder or model-file errors.")


def exit_code(error: MolntkError) -> int:
    """Exit status for a molntk error: 2 for configuration, output-folder and model-file
    problems (nothing can be done), 1 for failed data."""
    return EXIT_USAGE if isinstance(error, (ConfigError, ModelFileError, OutputError)) else EXIT_FAILED


class MolntkGroup(TyperGroup):
    """Root command group: a :class:`MolntkError` becomes red ``error:`` lines, no traceback."""

    def invoke(self, ctx: typer.Context) -> Any:
        """Run the command; print a molntk error as ``error:`` lines and exit with :func:`exit_code`."""
        try:
            return super().invoke(ctx)
        except MolntkError as error:
            print_error(str(error))
            raise typer.Exit(exit_code(error)) from None


app = typer.Typer(
    name="molntk",
    cls=MolntkGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    epilog=EXIT_CODES,
)
app.command("info")(info.info)
app.add_typer(data.app, name="data")
app.add_typer(config_cmd.app, name="config")
app.command("run")(run.run)
app.command("fit")(fit.fit)
app.command("predict")(predict.predict)


def _print_version(value: bool) -> None:
    """``--version``: print the molntk version and stop."""
    if value:
        typer.echo(f"molntk {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the molntk version and exit."),
    ] = False,
) -> None:
    """Molecular property prediction with equivariant neural tangent kernels."""
