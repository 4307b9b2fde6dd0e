"""``molntk predict``: apply a saved SO(3) NTK model to the user's molecules.

    molntk predict --model u0.molntk.npz --input mols.xyz more.sdf --out predictions.csv
    molntk predict --model u0.molntk.npz --smiles CCO 'C1=CC=CN=C1' --out predictions.csv

Every input item is read (:func:`molntk.data.readers.read_molecules`, ``read_smiles``)
with the elements of the model's training molecules; an item that cannot be read, or has
an element the model never saw in training, is reported with its reason and the others
are still predicted. The CSV (written atomically) has one row per predicted molecule:
``id``, ``smiles``, ``source``, ``prediction`` and ``std`` (NTK-GP standard deviation);
when no item could be predicted no file is written, so an existing one stays as it was. ``--out`` naming a folder or a place
that cannot be written is a usage error found before the model is loaded. Exit status 0
when every item was predicted, 1 when any failed, 2 for usage errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
import typer

from molntk.cli.output import print_json, print_read_result
from molntk.data.readers import ReadResult, read_molecules, read_smiles
from molntk.models.so3_ntk import SO3NTKRegressor
from molntk.utils.files import atomic_write_text, file_write_problem

#: Exit status when any input item failed.
EXIT_ITEMS_FAILED = 1


def predict(
    model: Annotated[Path, typer.Option("--model", help="Model file written by SO3NTKRegressor.save.")],
    out: Annotated[Path, typer.Option("--out", help="CSV file to write the predictions to.")],
    inputs: Annotated[
        list[str] | None,
        typer.Option("--input", help="Molecule file: .xyz, .extxyz, .sdf, .mol, .smi (repeatable).", show_default=False),
    ] = None,
    smiles: Annotated[
        list[str] | None, typer.Option("--smiles", help="A SMILES string (repeatable).", show_default=False)
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")] = False,
    more: Annotated[
        list[str] | None,
        typer.Argument(metavar="[MORE]...", help="More files (after --input) or SMILES (after --smiles).", show_default=False),
    ] = None,
) -> None:
    """Predict a property of molecules with a saved model; failed items are named with their reason.

    ``--input a.xyz b.sdf`` and ``--smiles CCO CCN`` take several values (or repeat the flag).
    """
    if not inputs and not smiles:
        raise typer.BadParameter("give at least one --input FILE or --smiles", param_hint="--input")
    if more:
        if inputs and smiles:
            raise typer.BadParameter(
                f"with both --input and --smiles, repeat the flag for each item ({more[0]!r} is ambiguous)", param_hint="--smiles"
            )
        inputs, smiles = (inputs + more, smiles) if inputs else (inputs, smiles + more)
    problem = file_write_problem(out)
    if problem:
        raise typer.BadParameter(f"{out} {problem}", param_hint="--out")
    regressor = SO3NTKRegressor.load(model)
    allowed = list(regressor.training_elements_)  # elements the model has seen in training
    from_files = read_molecules(inputs or (), allowed_elements=allowed)
    from_smiles = read_smiles(smiles or (), allowed_elements=allowed)
    result = ReadResult(from_files.molecules + from_smiles.molecules, from_files.failures + from_smiles.failures)
    rows = []
    if result.molecules:
        if regressor.inducing is None:
            mean, std = regressor.predict(result.molecules, return_std=True)
            std = std.reshape(len(result.molecules), -1)[:, 0]
        else:  # a sparse model has no NTK-GP variance: the std column stays empty
            mean, std = regressor.predict(result.molecules), np.full(len(result.molecules), np.nan)
        rows = [
            {"id": m.id, "smiles": m.smiles, "source": m.source, "prediction": float(p), "std": None if np.isnan(s) else float(s)}
            for m, p, s in zip(result.molecules, mean, std)
        ]
    if rows:  # with no prediction an existing file is left as it was
        frame = pd.DataFrame(rows, columns=["id", "smiles", "source", "prediction", "std"])
        atomic_write_text(out, frame.to_csv(index=False))
    document = result.to_dict() | {"predictions": rows, "out": str(out) if rows else None}
    if as_json:
        print_json(document)
    else:
        print_read_result(result.to_dict())
        typer.echo(f"{len(rows)} prediction(s) written to {out}" if rows else f"no predictions: {out} not written")
    if not result.ok:
        raise typer.Exit(EXIT_ITEMS_FAILED)
