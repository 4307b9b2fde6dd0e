"""``molntk data``: the QM9 dataset (``data qm9``) and the user's molecule files (``data read``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from molntk.cli.output import EXIT_FAILED, print_json, print_qm9_summary, print_read_result, stdout
from molntk.data.molecule import element_number
from molntk.data.qm9 import load_qm9, qm9_cache_dir, qm9_summary
from molntk.data.readers import ReadResult, names_molecule_file, read_molecules, read_smiles
from molntk.errors import InputError

app = typer.Typer(help="Datasets and molecule files.", no_args_is_help=True)


@app.command("qm9")
def qm9(
    summary: Annotated[
        bool, typer.Option("--summary", help="Report molecule count, per-target statistics and split sizes.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table.")] = False,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the train/valid/test split.")] = 0,
    cache_dir: Annotated[
        Path | None,
        typer.Option("--cache-dir", help="molntk cache directory (default: $MOLNTK_CACHE_DIR, else the user cache)."),
    ] = None,
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="Parse the QM9 source files again and rewrite the cache.")
    ] = False,
) -> None:
    """Load QM9 (all 130,831 molecules, offline, cached on first use) and summarise it.

    Without --summary only the molecule count and the cache location are printed.
    """
    data = load_qm9(cache_dir, rebuild=rebuild)
    if summary:
        report = qm9_summary(data, seed=seed)
    else:
        report = {"n_molecules": len(data), "n_atoms": int(data.numbers.size), "cache": str(qm9_cache_dir(cache_dir))}
    if as_json:
        print_json(report)
    elif summary:
        print_qm9_summary(report, title=f"QM9 ({data.source})")
    else:
        counts = f"{report['n_molecules']:,} molecules, {report['n_atoms']:,} atoms"
        stdout().print(Text(f"QM9 ({data.source}): {counts}\ncache: {report['cache']}"))


def _parse_elements(text: str | None) -> list[int] | None:
    """``"H,C,N,O,F"`` → atomic numbers; a bad symbol is a usage error."""
    if text is None:
        return None
    symbols = [s.strip() for s in text.split(",") if s.strip()]
    if not symbols:
        raise typer.BadParameter("expected element symbols such as H,C,N,O,F", param_hint="--elements")
    try:
        return [element_number(s, source="--elements") for s in symbols]
    except InputError as error:
        raise typer.BadParameter(error.problem, param_hint="--elements") from None


@app.command("read")
def read(
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="PATH", help="Molecule files: .xyz, .extxyz, .sdf, .mol, .smi, .smiles.", show_default=False
        ),
    ] = None,
    smiles: Annotated[
        list[str] | None,
        typer.Option("--smiles", help="A SMILES string to embed in 3D (repeatable).", show_default=False),
    ] = None,
    add_hs: Annotated[
        bool, typer.Option("--add-hs", help="Add hydrogens implied but missing in SDF/MOL records.")
    ] = False,
    elements: Annotated[
        str | None,
        typer.Option("--elements", metavar="H,C,N,O,F", help="Allowed elements; a molecule with another one fails."),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(min=0, help="Seed of the 3D embedding of SMILES (default: the reader's).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")] = False,
) -> None:
    """Read molecule files and SMILES; list the molecules and every item that failed, with its reason.

    ``--smiles CCO CCN`` takes several SMILES: with --smiles, an argument that is no existing
    path and has no molecule-file suffix is a SMILES string. Exit status: 0 if everything was
    read, 1 if any file, record or SMILES failed.
    """
    if not paths and not smiles:
        raise typer.BadParameter("give at least one PATH or --smiles", param_hint="PATH")
    if smiles:  # with --smiles, a positional argument that names no file is one more SMILES
        arguments = paths or []
        paths = [a for a in arguments if names_molecule_file(a)]
        smiles = [*smiles, *(a for a in arguments if not names_molecule_file(a))]
    allowed = _parse_elements(elements)
    options = {"allowed_elements": allowed} | ({} if seed is None else {"seed": seed})
    from_files = read_molecules(paths or (), add_hs=add_hs, **options)
    from_smiles = read_smiles(smiles or (), **options)
    result = ReadResult(from_files.molecules + from_smiles.molecules, from_files.failures + from_smiles.failures)
    if as_json:
        print_json(result.to_dict())
    else:
        print_read_result(result.to_dict())
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)
