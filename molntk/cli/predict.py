"""``molntk predict``: apply a saved SO(3) NTK model to the user's molecules.

    molntk predict --model u0.molntk.npz --smiles CCO 'C1=CC=CN=C1'
    molntk predict --model u0.molntk.npz --input mols.xyz table.csv --out predictions.json
    molntk predict --model u0.molntk.npz --input ligand.sdf --add-hs --out predictions.csv
    molntk predict --model energy.molntk.npz --input frames.xyz --out predicted.extxyz   # a force field

Every input item is read (:func:`molntk.data.readers.read_molecules`, ``read_smiles``;
``.csv`` inputs are tables of SMILES, :mod:`molntk.data.smiles_table`) with the elements of
the model's training molecules; an item that cannot be read, or has an element the model
never saw in training, is reported with its reason and the others are still predicted.
The table printed (and the ``--out`` file, CSV or JSON by its suffix, written atomically)
has one row per predicted molecule: ``id``, ``smiles``, ``source``, ``target``, ``unit``
(from the model file), ``prediction``, ``std`` (the calibrated standard deviation of y;
empty for a sparse model) and ``domain`` (the out-of-domain score; above 1: farther from
the training environments than 99 % of the training molecules). A force field's model file
(``molntk fit --forces``, :class:`~molntk.models.force_field.SO3ForceFieldRegressor`) predicts
the energy (``prediction``, no ``std`` or ``domain``) and each atom's force (``forces``,
(n_atoms, 3) in the energy unit per Å): its ``--out`` is ``.json`` or ``.extxyz`` (the
molecules with their predicted energies and forces, for ASE and other tools), not ``.csv``.
When no item could be predicted no file is written, so an existing one
stays as it was. ``--out`` with another suffix, naming a folder or a place that cannot be
written is a usage error found before the model is loaded; a ``.csv`` for a force field or
an ``.extxyz`` for an energy model, once it is. Exit status: 0 when every item
was predicted, 1 when any failed, 2 for usage errors and model files that cannot be used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pandas as pd
import typer
from ase.calculators.singlepoint import SinglePointCalculator
from rich.table import Table

from molntk.cli.output import EXIT_FAILED, cells, print_json, print_read_result, stdout
from molntk.data.labelled import write_labelled_frames
from molntk.data.readers import ReadResult, molecule_to_atoms, read_molecules, read_smiles
from molntk.data.smiles_table import TABLE_SUFFIX, read_smiles_table
from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.models.loading import load_model
from molntk.models.so3_ntk import SO3NTKRegressor
from molntk.pipelines.files import jsonable
from molntk.utils.files import atomic_write_json, atomic_write_text, file_write_problem

#: Suffixes of ``--out`` and the formats they select.
OUT_FORMATS = {".csv": "csv", ".json": "json", ".extxyz": "extxyz"}
#: The formats of a force field's predictions (energies and forces) and of an energy model's.
FORCE_FIELD_FORMATS, ENERGY_FORMATS = ("json", "extxyz"), ("csv", "json")
#: Columns of a prediction row (``domain``: :meth:`SO3NTKRegressor.domain_scores`, above 1 out of domain).
COLUMNS = ["id", "smiles", "source", "target", "unit", "prediction", "std", "domain"]


def read_inputs(inputs: list[str], smiles: list[str], allowed: list[int], add_hs: bool) -> ReadResult:
    """Molecules of the files (``.csv``: SMILES tables) in order, then of the SMILES strings."""
    results = [read_smiles_table(path, allowed_elements=allowed) if Path(path).suffix.lower() == TABLE_SUFFIX
               else read_molecules([path], add_hs=add_hs, allowed_elements=allowed) for path in inputs]
    results.append(read_smiles(smiles, allowed_elements=allowed))
    return ReadResult([m for r in results for m in r.molecules], [f for r in results for f in r.failures])


def prediction_rows(regressor: SO3NTKRegressor | SO3ForceFieldRegressor, result: ReadResult) -> list[dict[str, Any]]:
    """One row per molecule read (:data:`COLUMNS`); ``std`` None for a sparse model (no
    predictive variance); a force field's rows: ``std`` and ``domain`` None, and ``forces``
    ((n_atoms, 3) nested lists)."""
    molecules = result.molecules
    if not molecules:
        return []
    if isinstance(regressor, SO3ForceFieldRegressor):
        energies, forces = regressor.predict_forces(molecules, return_energy=True)
        return [
            {"id": m.id, "smiles": m.smiles, "source": m.source, "target": regressor.target_, "unit": regressor.unit_,
             "prediction": float(e), "std": None, "domain": None, "forces": f.tolist()}
            for m, e, f in zip(molecules, energies, forces)
        ]
    if regressor.inducing is None:
        mean, std = regressor.predict(molecules, return_std=True)
        std = std.reshape(len(molecules), -1)[:, 0]
    else:
        mean, std = regressor.predict(molecules), np.full(len(molecules), np.nan)
    domain = regressor.domain_scores(molecules)
    return [
        {"id": m.id, "smiles": m.smiles, "source": m.source, "target": regressor.target_, "unit": regressor.unit_,
         "prediction": float(p), "std": None if np.isnan(s) else float(s), "domain": float(d)}
        for m, p, s, d in zip(molecules, mean, std, domain)
    ]


def write_predictions(out: Path, rows: list[dict[str, Any]], model: Path, result: ReadResult) -> None:
    """``out`` as CSV (the rows), JSON (``{"model", "predictions", "failures"}``) or extended
    xyz (each molecule with its predicted energy and forces, ``id`` in its info), by its suffix."""
    kind = OUT_FORMATS[out.suffix.lower()]
    if kind == "csv":
        atomic_write_text(out, pd.DataFrame(rows, columns=COLUMNS).to_csv(index=False))
    elif kind == "extxyz":
        frames = []
        for molecule, row in zip(result.molecules, rows):
            atoms = molecule_to_atoms(molecule)
            atoms.info["id"] = str(row["id"])
            atoms.calc = SinglePointCalculator(atoms, energy=row["prediction"], forces=np.asarray(row["forces"]))
            frames.append(atoms)
        write_labelled_frames(out, frames)
    else:
        failures = [f.to_dict() for f in result.failures]
        atomic_write_json(out, jsonable({"model": str(model), "predictions": rows, "failures": failures}))


def print_predictions(rows: list[dict[str, Any]]) -> None:
    """The prediction rows as a table on stdout."""
    table = Table(title="Predictions")
    for column in ("id", "SMILES", "target", "unit", "prediction", "std", "domain"):
        table.add_column(column, justify="right" if column in ("prediction", "std", "domain") else "left")
    for row in rows:
        std = "-" if row["std"] is None else f"{row['std']:.4g}"
        domain = "-" if row["domain"] is None else f"{row['domain']:.3g}" + (" outside" if row["domain"] > 1 else "")
        table.add_row(*cells(row["id"], row["smiles"] or "-", row["target"] or "-", row["unit"] or "-",
                             f"{row['prediction']:.6g}", std, domain))
    stdout().print(table)
    if any(row["domain"] is not None and row["domain"] > 1 for row in rows):
        stdout().print("domain > 1: farther from every training environment than 99 % of the training molecules; "
                       "treat the prediction with care")


def predict(
    model: Annotated[Path, typer.Option("--model", help="Model file (molntk fit, molntk run's models/, SO3NTKRegressor.save, "
                                        "SO3ForceFieldRegressor.save).")],
    inputs: Annotated[
        list[str] | None,
        typer.Option("--input", help="Molecule file: .xyz, .extxyz, .sdf, .mol, .smi, or .csv with a 'smiles' column (repeatable).",
                     show_default=False),
    ] = None,
    smiles: Annotated[
        list[str] | None, typer.Option("--smiles", help="A SMILES string (repeatable).", show_default=False)
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the predictions to this .csv or .json file (a force field: .json "
                                  "or .extxyz).", show_default=False)
    ] = None,
    add_hs: Annotated[bool, typer.Option("--add-hs", help="Add missing hydrogens (with coordinates) to SDF/MOL records.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")] = False,
    more: Annotated[
        list[str] | None,
        typer.Argument(metavar="[MORE]...", help="More files (after --input) or SMILES (after --smiles).", show_default=False),
    ] = None,
) -> None:
    """Predict a property of molecules with a saved model; failed items are named with their reason.

    ``--input a.xyz b.sdf`` and ``--smiles CCO CCN`` take several values (or repeat the flag).
    Exit status 0 when every item was predicted, 1 when any failed, 2 for usage errors and
    model files that cannot be used.
    """
    if not inputs and not smiles:
        raise typer.BadParameter("give at least one --input FILE or --smiles", param_hint="--input")
    inputs, smiles = list(inputs or ()), list(smiles or ())
    if more:
        if inputs and smiles:
            raise typer.BadParameter(
                f"with both --input and --smiles, repeat the flag for each item ({more[0]!r} is ambiguous)", param_hint="--smiles"
            )
        inputs, smiles = (inputs + more, smiles) if inputs else (inputs, smiles + more)
    if out is not None:
        problem = file_write_problem(out)
        if problem is None and out.suffix.lower() not in OUT_FORMATS:
            problem = f"has suffix {out.suffix or '(none)'!r}; use .csv or .json (a force field: .json or .extxyz)"
        if problem:
            raise typer.BadParameter(f"{out} {problem}", param_hint="--out")
    regressor = load_model(model)
    if out is not None:
        kind, force_field = OUT_FORMATS[out.suffix.lower()], isinstance(regressor, SO3ForceFieldRegressor)
        allowed = FORCE_FIELD_FORMATS if force_field else ENERGY_FORMATS
        if kind not in allowed:
            what = "a force field (energies and forces)" if force_field else "an energy model"
            raise typer.BadParameter(f"{out}: {model} is {what}; write its predictions to "
                                     f"{' or '.join('.' + k for k in allowed)}", param_hint="--out")
    result = read_inputs(inputs, smiles, list(regressor.training_elements_), add_hs)
    rows = prediction_rows(regressor, result)
    written = out is not None and bool(rows)  # with no prediction an existing file is left as it was
    if written:
        write_predictions(out, rows, model, result)
    if as_json:
        print_json(result.to_dict() | {"target": regressor.target_, "unit": regressor.unit_, "predictions": rows,
                                       "out": str(out) if written else None})
    else:
        if result.failures:
            print_read_result(ReadResult([], result.failures).to_dict() | {"n_molecules": len(result.molecules)})
        if rows:
            print_predictions(rows)
        if out is not None:
            typer.echo(f"{len(rows)} prediction(s) written to {out}" if written else f"no predictions: {out} not written")
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)
