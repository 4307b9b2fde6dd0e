"""Readers for the user's molecules: xyz/extended xyz, SDF/MOL, SMILES, ASE ``Atoms``, PyG ``Data``.

Two ways in:

* Strict readers (:func:`read_xyz`, :func:`read_sdf`, :func:`read_smiles_file`,
  :func:`read_file`, :func:`molecule_from_smiles`, :func:`molecule_from_atoms`) return
  :class:`~molntk.data.molecule.Molecule` objects or raise :class:`~molntk.errors.InputError`
  at the first bad item.
* Batch readers (:func:`read_molecules`, :func:`read_smiles`) never raise for a bad item
  and never skip one silently: each bad item becomes a :class:`ReadFailure` that names the
  input (file, line, SMILES) and the problem, and the items after it are still read.

Molecule ids: the record's own name when the format carries one (SDF ``_Name``, an
``id=`` key in an extended xyz comment line, the name column of a ``.smi`` file);
otherwise ``<file stem>`` for a file holding one molecule and ``<file stem>#<index>``
(0-based) for a file holding several. Plain xyz comment lines are free text and are not
used as ids. A molecule from a SMILES string has the SMILES as its id.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import ase
import ase.io
import numpy as np

from molntk.data.molecule import MAX_Z, Molecule, element_number
from molntk.errors import InputError

if TYPE_CHECKING:  # RDKit is imported where SDF/MOL files and SMILES are read: molntk imports without it
    from rdkit import Chem

#: Seed of the ETKDGv3 embedding of SMILES strings (same seed → same geometry).
DEFAULT_SEED = 0xF00D

#: File types :func:`read_file` and :func:`read_molecules` understand, by suffix.
SUFFIXES = (".xyz", ".extxyz", ".sdf", ".mol", ".smi", ".smiles")

PathLike = str | os.PathLike


def names_molecule_file(text: str) -> bool:
    """Whether a string names a molecule file rather than being a SMILES string: it has a
    suffix of :data:`SUFFIXES` or names an existing path."""
    return os.path.splitext(text)[1].lower() in SUFFIXES or os.path.exists(text)

#: A ``key=`` of the extended xyz comment line that marks a frame as extended xyz.
_EXTXYZ_KEY = re.compile(r"(?:^|\s)(?:Properties|Lattice)=")

#: What the item readers yield: a molecule, or the error that makes one item unusable.
Item = Molecule | InputError


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ReadFailure:
    """One input that could not be read: where it is (``source``, ``line``) and why."""

    source: str
    line: int | None
    problem: str

    @classmethod
    def from_error(cls, error: InputError) -> ReadFailure:
        return cls(source=error.source, line=error.line, problem=error.problem)

    @property
    def message(self) -> str:
        """``source:line: problem`` (or ``source: problem`` without a line)."""
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        return f"{where}: {self.problem}"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "line": self.line, "problem": self.problem, "message": self.message}


@dataclass
class ReadResult:
    """The molecules a batch read, in input order, and a failure for each bad item."""

    molecules: list[Molecule] = field(default_factory=list)
    failures: list[ReadFailure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no item failed."""
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: one line per molecule (no coordinates), every failure."""
        return {
            "ok": self.ok,
            "n_molecules": len(self.molecules),
            "n_failures": len(self.failures),
            "molecules": [
                {"id": m.id, "formula": m.formula, "n_atoms": m.n_atoms, "source": m.source, "smiles": m.smiles}
                for m in self.molecules
            ],
            "failures": [f.to_dict() for f in self.failures],
        }

    def _add(self, item: Item, allowed: frozenset[int] | None) -> None:
        """Record a molecule (after the element-set check) or a failure."""
        if isinstance(item, Molecule) and allowed is not None:
            try:
                item.check_elements(allowed)
            except InputError as error:
                item = error
        if isinstance(item, Molecule):
            self.molecules.append(item)
        else:
            self.failures.append(ReadFailure.from_error(item))


# --------------------------------------------------------------------------- helpers


def check_file(path: PathLike) -> None:
    """:class:`InputError` if ``path`` is missing or a directory."""
    if Path(path).is_dir():
        raise InputError(str(path), "is a directory, not a molecule file")
    if not Path(path).exists():
        raise InputError(str(path), "file not found")


def _read_text(path: PathLike) -> str:
    """The text of a file, or :class:`InputError` if it is missing, a directory, unreadable, empty or binary."""
    source = str(path)
    check_file(path)
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise InputError(source, f"cannot read the file: {error.strerror or error}") from None
    if b"\x00" in data:
        raise InputError(source, "is a binary file, not a text molecule file")
    text = data.decode("utf-8-sig", errors="replace")
    if not text.strip():
        raise InputError(source, "file is empty")
    return text


def _is_count(text: str) -> bool:
    """Whether ``text`` is a non-negative integer written with ASCII digits."""
    return text.isascii() and text.isdigit()


def _item_id(stem: str, index: int, count: int) -> str:
    """Fallback id of item ``index`` of a file with ``count`` items."""
    return stem if count == 1 else f"{stem}#{index}"


def _located(error: InputError, source: str, line: int | None, what: str) -> InputError:
    """Re-state an error about one item of a file as ``source:line: what: problem``."""
    return InputError(source, f"{what}: {error.problem}", line=line)


def _strict(items: Iterable[Item]) -> list[Molecule]:
    """The molecules of ``items``; raise the first error among them."""
    molecules = []
    for item in items:
        if isinstance(item, InputError):
            raise item
        molecules.append(item)
    return molecules


# --------------------------------------------------------------------------- xyz


@dataclass(frozen=True)
class _Frame:
    """One xyz frame: its index, the 1-based line of its atom count, comment and atom lines."""

    index: int
    line: int
    comment: str
    atom_lines: list[str]


def _split_frames(text: str, source: str) -> tuple[list[_Frame], InputError | None]:
    """Cut xyz text into frames; a broken count line or truncated frame ends the file with an error.

    Blank lines between frames and at the end of the file are ignored.
    """
    lines = text.splitlines()
    frames: list[_Frame] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        fields = lines[i].split()
        if len(fields) != 1 or not _is_count(fields[0]):
            hint = ""
            if frames:
                previous = frames[-1]
                hint = (
                    f" (does the atom count {len(previous.atom_lines)} of frame {previous.index}"
                    f" at line {previous.line} match its atom lines?)"
                )
            problem = f"expected the number of atoms of frame {len(frames)}, got {lines[i].strip()!r}{hint}"
            return frames, InputError(source, problem, line=i + 1)
        count = int(fields[0])
        available = max(len(lines) - i - 2, 0)
        if available < count:
            problem = (
                f"truncated frame {len(frames)}: the atom count says {count} atoms "
                f"but the file ends after {available} atom line(s)"
            )
            return frames, InputError(source, problem, line=i + 1)
        frames.append(_Frame(len(frames), i + 1, lines[i + 1], lines[i + 2 : i + 2 + count]))
        i += 2 + count
    return frames, None


def _parse_atom_line(text: str, source: str, line: int) -> tuple[int, list[float]]:
    """Atomic number and coordinates of a plain xyz atom line ``symbol x y z [extra columns]``.

    The element may be a symbol or an atomic number; coordinates may use the Mathematica
    exponent ``*^`` found in the QM9 xyz files.
    """
    fields = text.split()
    if len(fields) < 4:
        raise InputError(source, f"expected 'symbol x y z', got {text.strip()!r}", line=line)
    symbol = fields[0]
    if _is_count(symbol):
        z = int(symbol)
        if not 1 <= z <= MAX_Z:
            raise InputError(source, f"unknown atomic number {z} (elements are 1..{MAX_Z})", line=line)
    else:
        z = element_number(symbol, source=source, line=line)
    xyz = []
    for value in fields[1:4]:
        try:
            number = float(value.replace("*^", "e"))
        except ValueError:
            raise InputError(source, f"non-numeric coordinate {value!r}", line=line) from None
        if not np.isfinite(number):
            raise InputError(source, f"non-finite coordinate {value!r}", line=line)
        xyz.append(number)
    return z, xyz


def _plain_frame(frame: _Frame, source: str, mol_id: str) -> Molecule:
    """Molecule of a plain xyz frame, parsed line by line so that errors name the line."""
    parsed = [_parse_atom_line(text, source, frame.line + 2 + k) for k, text in enumerate(frame.atom_lines)]
    numbers = [z for z, _ in parsed]
    positions = [xyz for _, xyz in parsed]
    try:
        return Molecule(numbers, positions, id=mol_id, source=source)
    except InputError as error:
        raise _located(error, source, frame.line, f"frame {frame.index}") from None


def _extxyz_frame(frame: _Frame, source: str, default_id: str) -> Molecule:
    """Molecule of an extended xyz frame, parsed by ASE (errors name the frame's first line)."""
    text = "\n".join([str(len(frame.atom_lines)), frame.comment, *frame.atom_lines]) + "\n"
    try:
        atoms = ase.io.read(io.StringIO(text), index=0, format="extxyz")
    except KeyError as error:  # ASE looks element symbols up in a dict
        problem = f"frame {frame.index}: unknown element symbol {error.args[0]!r}"
        raise InputError(source, problem, line=frame.line) from None
    except Exception as error:  # ASE's parser raises many types for malformed text
        problem = f"frame {frame.index}: not valid extended xyz ({type(error).__name__}: {error})"
        raise InputError(source, problem, line=frame.line) from None
    try:
        return molecule_from_atoms(atoms, source=source, default_id=default_id)
    except InputError as error:
        raise _located(error, source, frame.line, f"frame {frame.index}") from None


def _iter_xyz(path: PathLike) -> Iterator[Item]:
    """Molecules (or errors) of the frames of a plain or extended xyz file.

    A frame is extended xyz when the file's suffix is ``.extxyz`` or its comment line has a
    ``Properties=`` or ``Lattice=`` key; its atoms are then read by ASE
    (``format="extxyz"``) and an ``id=`` key names the molecule.
    """
    source = str(path)
    text = _read_text(path)
    frames, error = _split_frames(text, source)
    extended_file = Path(path).suffix.lower() == ".extxyz"
    stem = Path(path).stem
    n_frames = len(frames) + (error is not None)
    for frame in frames:
        mol_id = _item_id(stem, frame.index, n_frames)
        try:
            if extended_file or _EXTXYZ_KEY.search(frame.comment):
                yield _extxyz_frame(frame, source, mol_id)
            else:
                yield _plain_frame(frame, source, mol_id)
        except InputError as frame_error:
            yield frame_error
    if error is not None:
        raise error


def read_xyz(path: PathLike) -> list[Molecule]:
    """All frames of a plain or extended xyz file; :class:`InputError` names the first bad line."""
    return _strict(_iter_xyz(path))


# --------------------------------------------------------------------------- RDKit


@contextmanager
def _rdkit_errors() -> Iterator[list[str]]:
    """Keep RDKit's log off stderr; after the block the list holds RDKit's error messages.

    RDKit releases without ``rdBase.CaptureErrorLog`` only silence the log (the list stays empty).
    """
    from rdkit import rdBase
    messages: list[str] = []
    capture = getattr(rdBase, "CaptureErrorLog", None)
    with rdBase.BlockLogs():
        if capture is None:
            yield messages
            return
        with capture() as captured:
            yield messages
    messages.extend(_rdkit_reason_lines(captured.messages))


def _rdkit_reason_lines(log: str) -> list[str]:
    """RDKit log lines without timestamps, repeated notes, the echoed input and its ``~~^`` marker,
    or the ``****``-framed invariant report with its C++ stack trace (its message follows it)."""
    lines: list[str] = []
    in_report = False
    for raw in log.splitlines():
        text = re.sub(r"^\[\d\d:\d\d:\d\d\]\s*", "", raw).strip()
        text = re.sub(r"^(SMILES Parse Error|ERROR):\s*", "", text)
        if text == "****":
            in_report = not in_report
        elif in_report:
            continue
        elif text and set(text) <= {"~", "^"}:
            del lines[-1:]  # the echoed input the marker points into
        elif text and not text.startswith(("Failed parsing SMILES", "moving to the beginning")):
            lines.append(text)
    return lines


def _because(messages: list[str]) -> str:
    """`` (RDKit: ...)`` with RDKit's reasons, or nothing when there are none."""
    return f" (RDKit: {'; '.join(messages).rstrip(':')})" if messages else ""


def _sanitize(mol: Chem.Mol, source: str) -> None:
    """Sanitize ``mol`` in place; :class:`InputError` with RDKit's reason if it is not a valid molecule."""
    from rdkit import Chem
    with _rdkit_errors():
        try:
            Chem.SanitizeMol(mol)
        except ValueError as error:  # Chem.MolSanitizeException and its subclasses
            raise InputError(source, f"invalid molecule ({error})") from None


def _rdkit_arrays(mol: Chem.Mol) -> tuple[np.ndarray, np.ndarray]:
    """Atomic numbers and conformer positions (Å) of an RDKit molecule."""
    numbers = np.array([atom.GetAtomicNum() for atom in mol.GetAtoms()], dtype=np.int64)
    positions = np.array(mol.GetConformer().GetPositions(), dtype=np.float64).reshape(-1, 3)
    return numbers, positions


# --------------------------------------------------------------------------- SDF / MOL


def _coordinates_problem(mol: Chem.Mol, dimension: str) -> str | None:
    """Why a record's coordinates cannot be used as a 3D geometry, or None if they can.

    A record is 3D when RDKit finds 3D coordinates or its header says ``3D``; the header
    keeps a planar molecule written in the z = 0 plane.
    """
    if mol.GetNumConformers() == 0:
        return "has no 3D coordinates (no coordinates at all)"
    positions = mol.GetConformer().GetPositions()
    if mol.GetNumAtoms() > 1 and not np.any(positions):
        return "has no 3D coordinates (all atoms at the origin)"
    if not mol.GetConformer().Is3D() and dimension != "3D":
        return "has no 3D coordinates (a 2D/flat record; give 3D coordinates or its SMILES)"
    return None


def _ctab_molecule(mol: Chem.Mol, header: list[str], *, add_hs: bool, source: str, mol_id: str) -> Molecule:
    """Molecule of one parsed (unsanitized) MOL record; ``InputError`` (problem only) if unusable."""
    from rdkit import Chem
    _sanitize(mol, source)
    if mol.GetNumAtoms() == 0:
        raise InputError(source, "molecule has no atoms")
    dimension = header[1][20:22] if len(header) > 1 else ""
    problem = _coordinates_problem(mol, dimension)
    if problem:
        raise InputError(source, problem)
    if add_hs:
        mol = Chem.AddHs(mol, addCoords=True)
    else:
        implicit = sum(atom.GetNumImplicitHs() for atom in mol.GetAtoms())
        if implicit:
            problem = f"{implicit} hydrogen(s) are implied but have no coordinates"
            raise InputError(source, f"{problem}; read it with add_hs=True to place them")
    numbers, positions = _rdkit_arrays(mol)
    return Molecule(numbers, positions, id=mol_id, source=source)


class SDFRecord(NamedTuple):
    """One SDF/MOL record: its molecule (or the error that makes it unusable), its property
    tags (``> <name>`` data items, as RDKit reads them), ``what`` (``record i ('name')``) and
    the 1-based line where it starts."""

    item: Item
    properties: dict[str, Any]
    what: str
    line: int


def iter_sdf_records(path: PathLike, *, add_hs: bool = False) -> Iterator[SDFRecord]:
    """The records of an SDF or MOL file, in file order, with their property tags.

    Read with ``Chem.SDMolSupplier`` (hydrogens kept); a record RDKit cannot parse, or
    whose molecule is not usable, is an error naming the record's index, name and first line.
    """
    from rdkit import Chem
    source = str(path)
    text = _read_text(path)
    supplier = Chem.SDMolSupplier()
    supplier.SetData(text, removeHs=False, sanitize=False)
    with _rdkit_errors():
        n_records = len(supplier)
    if n_records == 0:  # RDKit finds no record in text shorter than a MOL header
        raise InputError(source, "no MOL record found (too short for a MOL header and counts line)")
    stem = Path(path).stem
    line = 1
    for index in range(n_records):
        with _rdkit_errors() as messages:
            mol = supplier[index]
        record = supplier.GetItemText(index)
        header = record.splitlines()
        name = header[0].strip() if header and header[0].strip() != "$$$$" else ""
        what = f"record {index}" + (f" ({name!r})" if name else "")
        mol_id = name or _item_id(stem, index, n_records)
        properties = {} if mol is None else mol.GetPropsAsDict()
        try:
            if mol is None:
                raise InputError(source, f"RDKit cannot parse it{_because(messages)}")
            item: Item = _ctab_molecule(mol, header, add_hs=add_hs, source=source, mol_id=mol_id)
        except InputError as error:
            item = _located(error, source, line, what)
        yield SDFRecord(item, properties, what, line)
        line += record.count("\n")


def _iter_sdf(path: PathLike, *, add_hs: bool) -> Iterator[Item]:
    """Molecules (or errors) of the records of an SDF or MOL file (:func:`iter_sdf_records`)."""
    for record in iter_sdf_records(path, add_hs=add_hs):
        yield record.item


def read_sdf(path: PathLike, *, add_hs: bool = False) -> list[Molecule]:
    """All records of an SDF (or MOL) file as molecules with their hydrogens and 3D coordinates.

    A record without 3D coordinates is rejected. Hydrogens implied by valence but absent
    from the file are an error unless ``add_hs=True``, which places them with
    ``Chem.AddHs(mol, addCoords=True)``. Raises :class:`InputError` at the first bad record.
    """
    return _strict(_iter_sdf(path, add_hs=add_hs))


# --------------------------------------------------------------------------- SMILES


def _embed_smiles(smiles: str, seed: int) -> Chem.Mol:
    """Parse, add hydrogens, embed (ETKDGv3, ``seed``) and optimise; errors have the SMILES as source.

    Embedding is retried once from random coordinates when ETKDG fails. The geometry is
    optimised with MMFF94; when MMFF has no parameters for the molecule, with UFF; when
    neither has, the ETKDG geometry is kept. A SMILES of several disconnected fragments
    (``CCO.O``) is rejected: their relative placement would be arbitrary.
    """
    from rdkit import Chem
    from rdkit.Chem import AllChem
    if not smiles.strip():
        raise InputError(repr(smiles), "empty SMILES")
    with _rdkit_errors() as messages:
        mol = Chem.MolFromSmiles(smiles, sanitize=False)
    if mol is None:
        raise InputError(smiles, f"cannot parse SMILES{_because(messages)}")
    _sanitize(mol, smiles)
    if mol.GetNumAtoms() == 0:
        raise InputError(smiles, "molecule has no atoms")
    fragments = Chem.GetMolFrags(mol, asMols=True, sanitizeFrags=False)
    if len(fragments) > 1:
        parts = ", ".join(Chem.MolToSmiles(fragment) for fragment in fragments)
        problem = f"has {len(fragments)} disconnected fragments ({parts}); give one molecule per SMILES"
        raise InputError(smiles, problem)
    mol = Chem.AddHs(mol)
    params = AllChem.ETKDGv3()
    params.randomSeed = seed
    with _rdkit_errors():
        status = AllChem.EmbedMolecule(mol, params)
        if status != 0:
            params.useRandomCoords = True
            status = AllChem.EmbedMolecule(mol, params)
    if status != 0:
        raise InputError(smiles, f"3D embedding failed (RDKit ETKDGv3, seed {seed:#x})")
    with _rdkit_errors():
        if AllChem.MMFFHasAllMoleculeParams(mol):
            AllChem.MMFFOptimizeMolecule(mol, maxIters=2000)
        elif AllChem.UFFHasAllMoleculeParams(mol):
            AllChem.UFFOptimizeMolecule(mol, maxIters=2000)
    return mol


def molecule_from_smiles(smiles: str, *, mol_id: str | None = None, seed: int = DEFAULT_SEED) -> Molecule:
    """A 3D molecule (hydrogens included) embedded from a SMILES string.

    RDKit parses the SMILES, adds hydrogens, embeds it with ETKDGv3 (``seed``, default
    ``0xf00d``; same seed and RDKit version → same geometry) and optimises it with MMFF94
    (UFF if MMFF has no parameters for it). The SMILES is the molecule's source, and its
    id unless ``mol_id`` is given. :class:`InputError` (source: the SMILES) if it cannot be
    parsed, is not one connected molecule, or cannot be embedded.
    """
    smiles = smiles.strip()
    mol = _embed_smiles(smiles, seed)
    numbers, positions = _rdkit_arrays(mol)
    return Molecule(numbers, positions, id=mol_id or smiles, smiles=smiles, source=smiles)


def _smiles_entries(text: str) -> Iterator[tuple[int, str, str | None]]:
    """``(line, smiles, name or None)`` of each entry of ``.smi`` text.

    Blank lines and lines starting with ``#`` are skipped (``#`` inside a SMILES is a
    triple bond, so only whole-line comments exist); so is a first line whose first
    column is the header ``smiles``.
    """
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = stripped.split(None, 1)
        if number == 1 and fields[0].lower() == "smiles":
            continue
        yield number, fields[0], (fields[1].strip() if len(fields) > 1 else None)


def _iter_smiles_file(path: PathLike, *, seed: int) -> Iterator[Item]:
    """Molecules (or errors naming the line) of a ``.smi``/``.smiles`` file."""
    source = str(path)
    entries = list(_smiles_entries(_read_text(path)))
    stem = Path(path).stem
    for index, (line, smiles, name) in enumerate(entries):
        try:
            mol = _embed_smiles(smiles, seed)
            numbers, positions = _rdkit_arrays(mol)
            mol_id = name or _item_id(stem, index, len(entries))
            yield Molecule(numbers, positions, id=mol_id, smiles=smiles, source=source)
        except InputError as error:
            yield _located(error, source, line, f"SMILES {smiles!r}")


def read_smiles_file(path: PathLike, *, seed: int = DEFAULT_SEED) -> list[Molecule]:
    """Molecules of a SMILES file: one ``SMILES [name]`` per line, ``#`` comment lines.

    Each SMILES is embedded as in :func:`molecule_from_smiles`. Raises
    :class:`InputError` naming the file and line of the first bad entry.
    """
    return _strict(_iter_smiles_file(path, seed=seed))


# --------------------------------------------------------------------------- ASE


def molecule_from_atoms(atoms: ase.Atoms, *, source: str = "atoms", default_id: str | None = None) -> Molecule:
    """Molecule of an ASE ``Atoms`` object (its cell and periodicity are ignored).

    The id is ``atoms.info["id"]`` when present, else ``default_id``; the SMILES is
    ``atoms.info["smiles"]`` when present.
    """
    mol_id = atoms.info.get("id", default_id)
    smiles = atoms.info.get("smiles")
    return Molecule(
        np.asarray(atoms.numbers),
        np.asarray(atoms.positions),
        id=None if mol_id is None else str(mol_id),
        smiles=None if smiles is None else str(smiles),
        source=source,
    )


def molecule_to_atoms(mol: Molecule) -> ase.Atoms:
    """ASE ``Atoms`` of a molecule (no cell, not periodic); id and SMILES go to ``atoms.info``."""
    atoms = ase.Atoms(numbers=np.array(mol.numbers), positions=np.array(mol.positions))
    if mol.id is not None:
        atoms.info["id"] = mol.id
    if mol.smiles is not None:
        atoms.info["smiles"] = mol.smiles
    return atoms


# --------------------------------------------------------------------------- dispatch


def _iter_file(path: PathLike, *, add_hs: bool, seed: int) -> Iterator[Item]:
    """Molecules (or errors) of a file of any type in :data:`SUFFIXES`, chosen by its suffix."""
    suffix = Path(path).suffix.lower()
    if suffix in (".xyz", ".extxyz"):
        yield from _iter_xyz(path)
    elif suffix in (".sdf", ".mol"):
        yield from _iter_sdf(path, add_hs=add_hs)
    elif suffix in (".smi", ".smiles"):
        yield from _iter_smiles_file(path, seed=seed)
    else:
        check_file(path)
        problem = f"unknown file type {suffix or '(no suffix)'!r}; expected one of {', '.join(SUFFIXES)}"
        raise InputError(str(path), problem)


def read_file(path: PathLike, *, add_hs: bool = False, seed: int = DEFAULT_SEED) -> list[Molecule]:
    """All molecules of one file, its reader chosen by suffix (:data:`SUFFIXES`).

    ``add_hs`` applies to SDF/MOL, ``seed`` to SMILES files. Raises :class:`InputError`
    at the first bad item.
    """
    return _strict(_iter_file(path, add_hs=add_hs, seed=seed))


def _iter_input(item: Any, index: int, *, add_hs: bool, seed: int) -> Iterator[Item]:
    """Molecules (or errors) of one batch input: a path, ``Molecule``, ASE ``Atoms`` or PyG ``Data``.

    An error that ends a file early (a broken frame structure, an unreadable file) is
    yielded after the molecules read before it.
    """
    try:
        if isinstance(item, (str, os.PathLike)):
            yield from _iter_file(item, add_hs=add_hs, seed=seed)
        elif isinstance(item, Molecule):
            yield item
        elif isinstance(item, ase.Atoms):
            yield molecule_from_atoms(item, source=f"atoms[{index}]")
        elif type(item).__module__.startswith("torch_geometric"):
            from molntk.data.pyg import molecule_from_pyg

            yield molecule_from_pyg(item, source=f"data[{index}]")
        else:
            expected = "a file path, Molecule, ase.Atoms or torch_geometric Data"
            yield InputError(f"inputs[{index}]", f"cannot read a {type(item).__name__}: expected {expected}")
    except InputError as error:
        yield error


def read_molecules(
    inputs: Iterable[Any],
    *,
    add_hs: bool = False,
    seed: int = DEFAULT_SEED,
    allowed_elements: Iterable[int] | None = None,
) -> ReadResult:
    """Read a batch of inputs; every bad item becomes a failure and the rest are still read.

    ``inputs`` holds file paths (reader by suffix: :data:`SUFFIXES`), ``Molecule``,
    ``ase.Atoms`` or torch-geometric ``Data`` objects (fields ``z``, ``pos``).
    ``add_hs`` adds missing hydrogens to SDF/MOL records, ``seed`` seeds SMILES
    embedding, and a molecule with an element outside ``allowed_elements`` (atomic
    numbers) is a failure.
    """
    allowed = None if allowed_elements is None else frozenset(int(z) for z in allowed_elements)
    result = ReadResult()
    for index, item in enumerate(inputs):
        for got in _iter_input(item, index, add_hs=add_hs, seed=seed):
            result._add(got, allowed)
    return result


def read_smiles(
    smiles: Iterable[str], *, seed: int = DEFAULT_SEED, allowed_elements: Iterable[int] | None = None
) -> ReadResult:
    """Embed a batch of SMILES strings (see :func:`molecule_from_smiles`); bad ones become failures.

    A failure's source is the SMILES (``smiles[i]`` for an item that is not a string, such
    as a missing value from a table); molecules outside ``allowed_elements`` are failures.
    """
    allowed = None if allowed_elements is None else frozenset(int(z) for z in allowed_elements)
    result = ReadResult()
    for index, text in enumerate(smiles):
        try:
            if not isinstance(text, str):
                raise InputError(f"smiles[{index}]", f"not a SMILES string: {text!r}")
            item: Item = molecule_from_smiles(text, seed=seed)
        except InputError as error:
            item = error
        result._add(item, allowed)
    return result
