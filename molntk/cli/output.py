"""What the commands print: JSON documents, rich tables, one-line errors.

Tables and messages go to stdout, errors to stderr. ``--json`` output is one JSON
document on stdout and nothing else there. Consoles are made per call so that they
write to the ``sys.stdout``/``sys.stderr`` of the moment (test runners swap them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

#: Line width of tables written to a file or pipe (rich would otherwise assume 80 columns).
PIPE_WIDTH = 160


#: Exit status of a run with an invalid usage, configuration, output folder or model file
#: (as for typer's usage errors).
EXIT_USAGE = 2
#: Exit status of a run where data items or files failed (each named with its reason).
EXIT_FAILED = 1


def stdout() -> Console:
    """A rich console on the current standard output; not cut to 80 columns when it is no terminal."""
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH
    return console


def stderr() -> Console:
    """A rich console on the current standard error."""
    return Console(stderr=True, highlight=False)


def print_json(document: Any) -> None:
    """Print ``document`` as one indented JSON document on stdout."""
    typer.echo(json.dumps(document, indent=2, allow_nan=False))


def print_error(message: str) -> None:
    """Print each line of ``message`` as one red ``error: ...`` line on stderr, unwrapped."""
    console = stderr()
    for line in message.splitlines() or [""]:
        console.print(Text(f"error: {line}", style="red"), soft_wrap=True)


def cells(*values: object) -> list[Text]:
    """Table cells shown verbatim (no rich markup: SMILES like ``[Na+]`` stay as written)."""
    return [value if isinstance(value, Text) else Text(str(value)) for value in values]


def _number(value: float | None) -> str:
    """A statistic for a table cell: thousands separators, 4 decimals below 1000, ``-`` when absent."""
    if value is None:
        return "-"
    return f"{value:,.4f}" if abs(value) < 1000 else f"{value:,.1f}"


def print_qm9_summary(summary: Mapping[str, Any], title: str = "QM9") -> None:
    """Render a :func:`molntk.data.qm9.qm9_summary` document as a table and a split line."""
    console = stdout()
    table = Table(title=f"{title}: {summary['n_molecules']:,} molecules, {summary['n_atoms']:,} atoms")
    table.add_column("target")
    table.add_column("unit")
    for stat in ("count", "mean", "std", "min", "max"):
        table.add_column(stat, justify="right", overflow="fold")
    for name, stats in summary["targets"].items():
        table.add_row(
            *cells(
                name,
                stats["unit"] or "",
                f"{stats['count']:,}",
                *(_number(stats[stat]) for stat in ("mean", "std", "min", "max")),
            )
        )
    console.print(table)
    split = summary.get("split")
    if split is None:
        console.print(Text("split: too few molecules for the standard split"))
    else:
        sizes = f"train {split['train']:,}, valid {split['valid']:,}, test {split['test']:,}"
        console.print(Text(f"split (seed {split['seed']}): {sizes}"))


def print_read_result(result: Mapping[str, Any]) -> None:
    """Render a :meth:`molntk.data.readers.ReadResult.to_dict` document: molecules, failures, counts."""
    console = stdout()
    if result["molecules"]:
        table = Table(title="Molecules")
        for column in ("id", "formula", "atoms", "source"):
            table.add_column(column, justify="right" if column == "atoms" else "left")
        for mol in result["molecules"]:
            table.add_row(*cells(mol["id"], mol["formula"], mol["n_atoms"], mol["source"]))
        console.print(table)
    if result["failures"]:
        table = Table(title="Failures", title_style="bold red")
        table.add_column("source")
        table.add_column("problem", style="red")
        for failure in result["failures"]:
            where = failure["source"] if failure["line"] is None else f"{failure['source']}:{failure['line']}"
            table.add_row(*cells(where, failure["problem"]))
        console.print(table)
    console.print(Text(f"{result['n_molecules']} molecule(s) read, {result['n_failures']} failed"))


def print_results_table(records: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str, str]], title: str) -> None:
    """Print the records as a rich table on stdout; ``columns`` are (key, header, format spec),
    e.g. ``("accuracy", "acc", ".3f")``. A missing or None value shows as ``-``."""
    table = Table(title=title)
    for i, (_, header, _) in enumerate(columns):
        table.add_column(header, justify="left" if i == 0 else "right")
    for record in records:
        values = [record.get(key) for key, _, _ in columns]
        table.add_row(*cells(*("-" if v is None else format(v, spec) for v, (_, _, spec) in zip(values, columns))))
    stdout().print(table)
