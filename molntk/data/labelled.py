"""Labelled data sets: molecules with target values, from the user's own files.

:func:`read_labelled` reads one file, its format chosen by suffix:

* ``.xyz``/``.extxyz``: (extended) xyz frames read by ASE; a frame's values are the
  ``key=value`` pairs of its comment line (``atoms.info``) and the scalar results ASE
  files under its calculator (``energy=`` lands there);
* ``.sdf``/``.mol``: records read by RDKit (:func:`~molntk.data.readers.iter_sdf_records`),
  values from their property tags (``> <name>``);
* ``.csv``: a pandas table with a SMILES column (embedded as in
  :func:`~molntk.data.readers.molecule_from_smiles`) or a column of structure-file paths
  (relative to the table's folder; each file holds one molecule), plus value columns;
  an empty cell is a missing value;
* ``.db``: an ASE database (``ase.db``); a row's values are its ``key_value_pairs``, its
  ``data`` entries and its calculator's scalar results;
* ``.npz``: an MD17 or rMD17 trajectory (:func:`~molntk.data.md17.read_md17_npz`); each
  frame's one value is ``energy`` (eV, converted from kcal/mol).

Forces: with ``forces=True`` each molecule also gets its per-atom forces (shape
``(n_atoms, 3)``), in :attr:`LabelledData.forces`: the ``forces`` of an extended xyz frame
(ASE's per-atom ``forces`` column, which ASE's writers use for a calculator's forces) or
of an ASE database row's calculator, in the file's units (eV/Å by ASE's convention), and
the forces of an MD17/rMD17 frame converted from kcal/mol/Å to eV/Å. An item without
forces, or with forces of the wrong shape or not finite, is then a failure; SDF and CSV
files carry no forces.

A value is a target value when it is a real number (a number, or text that parses as
one; booleans are not). Each molecule whose target values are all present, numeric and
finite is kept; any other item becomes a :class:`~molntk.data.readers.ReadFailure` naming
the item and the key, and the rest is still read. A requested target (or split key)
that no item has at all is one :class:`~molntk.errors.InputError` listing the keys the
file has.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import ase.io
import numpy as np
import pandas as pd

from molntk.data.md17 import read_md17_npz
from molntk.data.molecule import Molecule
from molntk.data.readers import (
    DEFAULT_SEED,
    PathLike,
    ReadFailure,
    check_file,
    iter_sdf_records,
    molecule_from_atoms,
    molecule_from_smiles,
    read_file,
)
from molntk.errors import InputError
from molntk.utils.files import atomic_path, sha256_file

#: Suffixes :func:`read_labelled` understands, by format.
LABELLED_SUFFIXES: dict[str, tuple[str, ...]] = {
    "xyz": (".xyz", ".extxyz"),
    "sdf": (".sdf", ".mol"),
    "csv": (".csv",),
    "ase-db": (".db",),
    "md17-npz": (".npz",),
}
#: The formats that can carry per-atom forces.
FORCE_FORMATS = ("xyz", "ase-db", "md17-npz")
#: Values a split key may take.
SPLIT_VALUES = ("train", "test")
#: Columns a CSV table's SMILES column may be called when ``smiles_column`` is not given.
SMILES_NAMES = ("smiles", "SMILES", "Smiles")


@dataclass
class LabelledData:
    """Molecules read from a labelled file, their target values, and a failure per bad item.

    ``targets[name][i]`` is the value of target ``name`` for ``molecules[i]`` (float64);
    ``split[i]`` is ``"train"`` or ``"test"`` when a split key was read, else ``split`` is None;
    ``forces[i]`` (shape ``(n_atoms, 3)``, eV/Å) are the forces on the atoms of
    ``molecules[i]`` when forces were read, else ``forces`` is None.
    """

    source: str
    molecules: list[Molecule] = field(default_factory=list)
    targets: dict[str, np.ndarray] = field(default_factory=dict)
    failures: list[ReadFailure] = field(default_factory=list)
    split: tuple[str, ...] | None = None
    forces: list[np.ndarray] | None = None

    @property
    def ok(self) -> bool:
        """True when no item failed."""
        return not self.failures

    @property
    def elements(self) -> tuple[int, ...]:
        """The atomic numbers present in the molecules, ascending."""
        if not self.molecules:
            return ()
        return tuple(int(z) for z in np.unique(np.concatenate([m.numbers for m in self.molecules])))

    def provenance(self, read_options: Mapping[str, Any]) -> dict[str, Any]:
        """Where the molecules came from, as a model file keeps it: the file (``data_file``),
        its SHA-256 (``data_sha256``), the ``read_options`` it was read with and the number
        of items that could not be used (``read_failures``)."""
        return {"data_file": self.source, "data_sha256": sha256_file(self.source), "read_options": dict(read_options),
                "read_failures": len(self.failures)}


class _Record(NamedTuple):
    """One item of a labelled file: its molecule (or error), its values, how to name it,
    and its per-atom forces when the file has them."""

    item: Molecule | InputError
    values: Mapping[str, Any]
    what: str
    line: int | None = None
    forces: np.ndarray | None = None


def _as_number(value: Any) -> float | None:
    """``value`` as a float when it is a real number (or text, or a one-element array, holding
    one); None otherwise (booleans, other text, empty values)."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, np.ndarray):
        return _as_number(value.item()) if value.size == 1 else None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _calculator_values(atoms: ase.Atoms) -> dict[str, Any]:
    """The scalar results ASE keeps on an ``Atoms``' calculator (``energy``, ``free_energy``, …)."""
    results = getattr(atoms.calc, "results", None) or {}
    return {key: value for key, value in results.items() if np.ndim(value) == 0}


def _atoms_forces(atoms: ase.Atoms) -> np.ndarray | None:
    """The forces ASE holds for ``atoms``: its calculator's ``forces`` result, else a per-atom
    ``forces`` array; None when there are none."""
    results = getattr(atoms.calc, "results", None) or {}
    if "forces" in results:
        return results["forces"]
    return atoms.arrays.get("forces")


# --------------------------------------------------------------------------- formats


def _xyz_records(path: Path) -> Iterator[_Record]:
    """Frames of an (extended) xyz file read by ASE; a frame ASE cannot parse ends the file."""
    source = str(path)
    frames: list[ase.Atoms] = []
    error: Exception | None = None
    reader = ase.io.iread(source, index=":", format="extxyz")
    while True:
        try:
            frames.append(next(reader))
        except StopIteration:
            break
        except Exception as err:  # ASE's parser raises many types for malformed text
            error = err
            break
    count = len(frames) + (error is not None)
    for index, atoms in enumerate(frames):
        what = f"frame {index}"
        default_id = path.stem if count == 1 else f"{path.stem}#{index}"
        try:
            item: Molecule | InputError = molecule_from_atoms(atoms, source=source, default_id=default_id)
        except InputError as err:
            item = InputError(source, f"{what}: {err.problem}")
        yield _Record(item, {**atoms.info, **_calculator_values(atoms)}, what, forces=_atoms_forces(atoms))
    if error is not None:
        problem = f"frame {len(frames)} and after: not valid (extended) xyz ({type(error).__name__}: {error})"
        yield _Record(InputError(source, problem), {}, f"frame {len(frames)}")


def _sdf_records(path: Path, add_hs: bool) -> Iterator[_Record]:
    """Records of an SDF/MOL file with their property tags."""
    for record in iter_sdf_records(path, add_hs=add_hs):
        yield _Record(record.item, record.properties, record.what, record.line)


def _table_molecule(row: Mapping[str, Any], what: str, line: int, source: str, folder: Path, *,
                    smiles_column: str | None, structure_column: str, add_hs: bool, seed: int) -> Molecule:
    """The molecule of one table row: its SMILES embedded, or its structure file read."""
    column = smiles_column or structure_column
    value = row.get(column)
    if not isinstance(value, str) or not value.strip():
        kind = "SMILES" if smiles_column else "structure file"
        raise InputError(source, f"{what}: no {kind} in column {column!r}", line=line)
    if smiles_column:
        try:
            return molecule_from_smiles(value, seed=seed)
        except InputError as err:
            raise InputError(source, f"{what}: SMILES {value!r}: {err.problem}", line=line) from None
    file = folder / value.strip()
    try:
        found = read_file(file, add_hs=add_hs, seed=seed)
    except InputError as err:
        raise InputError(source, f"{what}: {err}", line=line) from None
    if len(found) != 1:
        problem = f"{what}: structure file {str(file)!r} holds {len(found)} molecules, expected one"
        raise InputError(source, problem, line=line)
    return found[0]


def _csv_records(path: Path, *, smiles_column: str | None, structure_column: str | None, add_hs: bool,
                 seed: int) -> tuple[Iterator[_Record], tuple[str, ...]]:
    """Rows of a CSV table (pandas) and the columns that hold structures, not values."""
    source = str(path)
    try:
        table = pd.read_csv(path)
    except (ValueError, OSError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise InputError(source, f"not a readable CSV table ({err})") from None
    columns = [str(c) for c in table.columns]
    if smiles_column and structure_column:
        raise InputError(source, "give smiles_column or structure_column, not both")
    if not smiles_column and not structure_column:
        smiles_column = next((name for name in SMILES_NAMES if name in columns), None)
        if smiles_column is None:
            raise InputError(source, "no SMILES column (named 'smiles') and no structure_column given; "
                                     f"columns: {', '.join(columns)}")
    for given in (smiles_column, structure_column):
        if given and given not in columns:
            raise InputError(source, f"no column {given!r}; columns: {', '.join(columns)}")
    folder = path.parent

    def records() -> Iterator[_Record]:
        for index, row in enumerate(table.to_dict("records")):
            values = {str(k): v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}
            what = f"row {index}"
            try:
                item: Molecule | InputError = _table_molecule(
                    values, what, index + 2, source, folder, smiles_column=smiles_column,
                    structure_column=structure_column or "", add_hs=add_hs, seed=seed)
            except InputError as err:
                item = err
            yield _Record(item, values, what, index + 2)

    return records(), tuple(c for c in (smiles_column, structure_column) if c)


def _db_records(path: Path) -> Iterator[_Record]:
    """Rows of an ASE database: ``key_value_pairs``, ``data`` and calculator results."""
    import ase.db

    source = str(path)
    try:
        database = ase.db.connect(source, type="db", create_indices=False)
        rows = list(database.select())
    except Exception as err:  # sqlite3 and ASE raise several types for a file that is no database
        raise InputError(source, f"not a readable ASE database ({type(err).__name__}: {err})") from None
    for row in rows:
        what = f"row id {row.id}"
        atoms = row.toatoms()
        values = {**_calculator_values(atoms), **dict(row.get("data", {})), **row.key_value_pairs}
        try:
            item: Molecule | InputError = molecule_from_atoms(atoms, source=source, default_id=f"{path.stem}#{row.id}")
        except InputError as err:
            item = InputError(source, f"{what}: {err.problem}")
        yield _Record(item, values, what, forces=_atoms_forces(atoms))


def _npz_records(path: Path) -> Iterator[_Record]:
    """Frames of an MD17/rMD17 trajectory: ``energy`` (eV) and forces (eV/Å) of each."""
    frames = read_md17_npz(path)
    source = str(path)
    for index in range(len(frames)):
        what = f"frame {index}"
        try:
            item: Molecule | InputError = Molecule(frames.numbers, frames.positions[index],
                                                   id=f"{path.stem}#{index}", source=source)
        except InputError as err:
            item = InputError(source, f"{what}: {err.problem}")
        yield _Record(item, {"energy": float(frames.energies[index])}, what, forces=frames.forces[index])


def labelled_format(path: PathLike) -> str:
    """The format of a labelled file by its suffix (:data:`LABELLED_SUFFIXES`)."""
    suffix = Path(path).suffix.lower()
    for name, suffixes in LABELLED_SUFFIXES.items():
        if suffix in suffixes:
            return name
    known = ", ".join(s for suffixes in LABELLED_SUFFIXES.values() for s in suffixes)
    raise InputError(str(path), f"unknown labelled-data file type {suffix or '(no suffix)'!r}; expected one of {known}")


# --------------------------------------------------------------------------- collection


def _available(records: Sequence[_Record], structure_keys: Iterable[str]) -> list[str]:
    """Every value key of the records, in order of first appearance, without structure columns."""
    skip = set(structure_keys)
    seen: dict[str, None] = {}
    for record in records:
        seen.update((key, None) for key in record.values if key not in skip)
    return list(seen)


def _check_keys(source: str, wanted: Sequence[str], available: Sequence[str], what: str) -> None:
    """One InputError naming every wanted key the file lacks, with the keys it has."""
    missing = [key for key in wanted if key not in available]
    if missing:
        have = ", ".join(available) or "none"
        raise InputError(source, f"no {what} {', '.join(repr(k) for k in missing)} in the file; its keys: {have}")


def _record_forces(record: _Record, molecule: Molecule, source: str, what: str) -> np.ndarray:
    """The forces of a record as a float64 ``(n_atoms, 3)`` array; InputError when it has none,
    or they have the wrong shape or are not finite."""
    if record.forces is None:
        raise InputError(source, f"{what}: no forces", line=record.line)
    try:
        forces = np.array(record.forces, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(source, f"{what}: forces are not numbers", line=record.line) from None
    if forces.shape != (molecule.n_atoms, 3):
        problem = f"forces have shape {forces.shape}, expected ({molecule.n_atoms}, 3) for {molecule.n_atoms} atoms"
        raise InputError(source, f"{what}: {problem}", line=record.line)
    if not np.isfinite(forces).all():
        atom = int(np.flatnonzero(~np.isfinite(forces).all(axis=1))[0])
        raise InputError(source, f"{what}: forces on atom {atom} are not finite: {forces[atom].tolist()}", line=record.line)
    return forces


def _labelled_item(record: _Record, source: str, targets: Sequence[str], id_key: str | None,
                   split_key: str | None, forces: bool) -> tuple[Molecule, list[float], str | None, np.ndarray | None]:
    """The molecule, target values, split and forces (when ``forces``) of one good record;
    InputError naming the key otherwise."""
    if isinstance(record.item, InputError):
        raise record.item
    molecule = record.item
    what = record.what if molecule.id is None or molecule.id in record.what else f"{record.what} ({molecule.id})"
    values: list[float] = []
    for name in targets:
        raw = record.values.get(name)
        value = _as_number(raw)
        if raw is None:
            problem = f"no value for target {name!r}"
        elif value is None:
            problem = f"target {name!r} is not a number: {raw!r}"
        elif not math.isfinite(value):
            problem = f"target {name!r} is not finite: {raw!r}"
        else:
            values.append(value)
            continue
        raise InputError(source, f"{what}: {problem}", line=record.line)
    split = None
    if split_key is not None:
        split = str(record.values.get(split_key, "")).strip().lower()
        if split not in SPLIT_VALUES:
            problem = f"split key {split_key!r} is {record.values.get(split_key)!r}, expected 'train' or 'test'"
            raise InputError(source, f"{what}: {problem}", line=record.line)
    if id_key is not None:
        if record.values.get(id_key) is None:
            raise InputError(source, f"{what}: no value for id key {id_key!r}", line=record.line)
        molecule = dataclasses.replace(molecule, id=str(record.values[id_key]))
    return molecule, values, split, _record_forces(record, molecule, source, what) if forces else None


def read_labelled(
    path: PathLike,
    targets: str | Sequence[str] | None = None,
    *,
    smiles_column: str | None = None,
    structure_column: str | None = None,
    id_column: str | None = None,
    split_key: str | None = None,
    add_hs: bool = False,
    seed: int = DEFAULT_SEED,
    forces: bool = False,
) -> LabelledData:
    """Molecules and target values of a labelled file (module docstring for the formats).

    ``targets``: the value keys to read (None: every key with a numeric value in some
    item). ``smiles_column``/``structure_column`` (CSV only): the column of SMILES (default:
    one named ``smiles``) or of structure-file paths. ``id_column``: the key whose value
    names each molecule (default: the reader's ids). ``split_key``: a key whose values
    (``train``/``test``) give a split, kept in :attr:`LabelledData.split`. ``add_hs``:
    place missing hydrogens of SDF/MOL records; ``seed``: SMILES embedding. ``forces``: read
    each molecule's per-atom forces into :attr:`LabelledData.forces` (extended xyz, ASE
    database and MD17/rMD17 ``.npz`` files; module docstring).
    """
    source = str(path)
    path = Path(path)
    kind = labelled_format(path)
    check_file(path)
    if kind != "csv" and (smiles_column or structure_column):
        raise InputError(source, "smiles_column and structure_column apply to CSV tables only")
    if forces and kind not in FORCE_FORMATS:
        raise InputError(source, "forces=True needs a file with per-atom forces: extended xyz, an ASE database "
                                 "or an MD17/rMD17 .npz file")
    structure_keys: tuple[str, ...] = ()
    if kind == "xyz":
        records = list(_xyz_records(path))
    elif kind == "sdf":
        records = list(_sdf_records(path, add_hs))
    elif kind == "csv":
        rows, structure_keys = _csv_records(path, smiles_column=smiles_column, structure_column=structure_column,
                                            add_hs=add_hs, seed=seed)
        records = list(rows)
    elif kind == "ase-db":
        records = list(_db_records(path))
    else:
        records = list(_npz_records(path))
    available = _available(records, structure_keys)
    if targets is None:
        skip = {id_column, split_key}
        wanted = [key for key in available if key not in skip
                  and any(_as_number(r.values.get(key)) is not None for r in records)]
    else:
        wanted = [targets] if isinstance(targets, str) else list(dict.fromkeys(targets))
    _check_keys(source, wanted, available, "target key(s)")
    _check_keys(source, [key for key in (split_key, id_column) if key], available, "key(s)")
    return _collect(source, records, wanted, id_column, split_key, forces)


def _collect(source: str, records: Iterable[_Record], targets: Sequence[str], id_key: str | None,
             split_key: str | None, forces: bool) -> LabelledData:
    """The good records' molecules, values, splits and forces; a failure for each bad one."""
    data = LabelledData(source, forces=[] if forces else None)
    values: list[list[float]] = []
    splits: list[str] = []
    for record in records:
        try:
            molecule, row, split, atom_forces = _labelled_item(record, source, targets, id_key, split_key, forces)
        except InputError as err:
            data.failures.append(ReadFailure.from_error(err))
            continue
        data.molecules.append(molecule)
        values.append(row)
        if split is not None:
            splits.append(split)
        if data.forces is not None:
            data.forces.append(atom_forces)
    table = np.array(values, dtype=np.float64).reshape(len(values), len(targets))
    data.targets = {name: table[:, k].copy() for k, name in enumerate(targets)}
    data.split = tuple(splits) if split_key is not None else None
    return data


def write_labelled_frames(path: PathLike, frames: Sequence[ase.Atoms]) -> None:
    """Write ``frames`` (ASE ``Atoms`` with a calculator's ``energy`` and per-atom ``forces``,
    ``info`` such as ``id`` on the comment line) to ``path`` as extended xyz, atomically: the
    format :func:`read_labelled` reads back with ``forces=True``."""
    with atomic_path(path, suffix=".extxyz") as tmp:
        ase.io.write(tmp, list(frames), format="extxyz")
