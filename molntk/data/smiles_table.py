"""CSV tables of SMILES: a ``smiles`` column (any case) and an optional ``id`` column.

    id,smiles
    ethanol,CCO
    pyridine,C1=CC=CN=C1

Each SMILES is embedded as :func:`~molntk.data.readers.molecule_from_smiles` does (RDKit:
hydrogens added, ETKDGv3 with a fixed seed, MMFF94); a row that cannot be used (empty
cell, bad SMILES, element outside ``allowed_elements``) is a failure naming the file and
its line (the header is line 1), and the other rows are still read. A table without a
``smiles`` column, or one that cannot be read as CSV, is one failure naming the file.
Ids are the ``id`` column's, else ``<file stem>#<row>``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from molntk.data.readers import DEFAULT_SEED, ReadFailure, ReadResult, molecule_from_smiles
from molntk.errors import InputError

#: File suffix of SMILES tables.
TABLE_SUFFIX = ".csv"


def smiles_column(columns: Iterable[str], source: str) -> tuple[str, str | None]:
    """The names of the ``smiles`` column and the ``id`` column (None when absent), any
    case; :class:`InputError` naming ``source`` and the columns when there is no ``smiles``."""
    by_lower = {str(c).strip().lower(): str(c) for c in columns}
    if "smiles" not in by_lower:
        found = ", ".join(repr(str(c)) for c in columns) or "none"
        raise InputError(source, f"no 'smiles' column in the table (columns: {found})")
    return by_lower["smiles"], by_lower.get("id")


def read_smiles_table(path: str | os.PathLike[str], *, seed: int = DEFAULT_SEED,
                      allowed_elements: Iterable[int] | None = None) -> ReadResult:
    """The molecules of a CSV table of SMILES and a failure for each bad row (module docstring)."""
    source = str(path)
    result = ReadResult()
    try:
        if Path(path).is_dir():
            raise InputError(source, "is a directory, not a table of SMILES")
        if not Path(path).exists():
            raise InputError(source, "file not found")
        try:
            table = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=True)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as err:
            raise InputError(source, f"cannot read the file as a CSV table ({str(err).strip() or type(err).__name__})") from None
        smiles_key, id_key = smiles_column(table.columns, source)
    except InputError as error:
        result.failures.append(ReadFailure.from_error(error))
        return result
    allowed = None if allowed_elements is None else tuple(int(z) for z in allowed_elements)
    stem = Path(path).stem
    for row, (smiles, mol_id) in enumerate(zip(table[smiles_key], table[id_key] if id_key else [""] * len(table))):
        line = row + 2  # the header is line 1
        try:
            if not smiles.strip():
                raise InputError(source, "empty SMILES cell")
            embedded = molecule_from_smiles(smiles, mol_id=mol_id.strip() or f"{stem}#{row}", seed=seed)
            molecule = dataclasses.replace(embedded, source=source)
            if allowed is not None:
                molecule.check_elements(allowed)
        except InputError as error:
            problem = f"SMILES {smiles!r}: {error.problem}" if smiles.strip() else error.problem
            result.failures.append(ReadFailure(source, line, problem))
            continue
        result.molecules.append(molecule)
    return result
