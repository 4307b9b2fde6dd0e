"""QM9 offline: all 130,831 molecules of the ``qm9pack`` package, parsed once and cached.

Source: the CSV files ``qm9pack/data/qm9_part{1,2,3}.csv`` (B3LYP/6-31G(2df,p)
geometries in Å and properties in the units of the original QM9 release). The package
itself is never imported (its ``__init__`` needs ``pkg_resources``); only its data
folder is located.

:func:`load_qm9` parses the CSVs into flat arrays (:class:`QM9`) and caches them as one
``.npz`` file with a JSON manifest (format version, SHA-256 of the ``.npz``, sizes of
the source CSVs) in ``<cache>/qm9/``, where ``<cache>`` is the ``cache_dir`` argument,
else ``$MOLNTK_CACHE_DIR``, else ``platformdirs.user_cache_dir("molntk")``. A cache
whose checksum, format or sources do not match is rebuilt with a warning, never used.
A file lock makes concurrent processes build the cache once.

Targets (:data:`QM9_TARGETS`) are converted on parsing: energies to meV
(1 Ha = :data:`HARTREE_TO_MEV` meV), the others kept in their QM9 units. The
atomization energies ``u0_atom``, ``u_atom``, ``h_atom`` and ``g_atom`` are
``(E − Σ_atoms E_ref(Z)) × HARTREE_TO_MEV`` with the same B3LYP/6-31G(2df,p) free-atom
references :data:`ATOM_REFERENCE_HARTREE` (the 0 K ones) for U0, U, H and G alike.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import time
import warnings
import zipfile
import numbers as _numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pandas as pd
import platformdirs
from filelock import FileLock, Timeout

from molntk.data.molecule import MAX_Z, Molecule, element_number
from molntk.data.splits import QM9_N_TRAIN, QM9_N_VALID, standard_split
from molntk.errors import CacheError, InputError
from molntk.utils.files import atomic_path, atomic_write_json, sha256_file

logger = logging.getLogger(__name__)

#: QM9's elements H, C, N, O, F.
QM9_ELEMENTS: tuple[int, ...] = (1, 6, 7, 8, 9)
#: Largest molecule of QM9 (atoms): the reference's per-atom-index layout.
QM9_MAX_ATOMS = 29

#: CODATA 2018: 1 Hartree = 27.211386245988 eV.
HARTREE_TO_MEV = 27211.386245988

#: B3LYP/6-31G(2df,p) energies (Hartree) of the free atoms, by atomic number: the U0
#: references of the QM9 release (H, C, N, O, F).
ATOM_REFERENCE_HARTREE: dict[int, float] = {
    1: -0.500273,
    6: -37.846772,
    7: -54.583861,
    8: -75.064579,
    9: -99.718730,
}

#: Version of the cache layout and of the target conversions; a cache with another
#: version is rebuilt.
CACHE_FORMAT = 1
#: Environment variable that overrides the user cache directory.
CACHE_ENV = "MOLNTK_CACHE_DIR"
#: Seconds a process waits for another one to finish building the cache.
LOCK_TIMEOUT_S = 600.0

_SOURCE_FILES = ("qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv")
_CACHE_NAME = "qm9"


@dataclass(frozen=True)
class Target:
    """One QM9 property: ``value[unit] = scale × (column − atom references)``.

    ``column`` is the qm9pack CSV column (in QM9 units: Debye, bohr³, Hartree, bohr²,
    cal/(mol K)); ``scale`` converts it to ``unit``. For an atomization target the
    molecule's summed free-atom energies (:data:`ATOM_REFERENCE_HARTREE`) are
    subtracted from the column before scaling.
    """

    name: str
    unit: str
    column: str
    scale: float
    description: str
    atomization: bool = False


def _targets(*targets: Target) -> dict[str, Target]:
    return {t.name: t for t in targets}


#: The QM9 targets, in the order of PyG's ``QM9.y`` columns 0-15. ``u0_atom``,
#: ``u_atom``, ``h_atom`` and ``g_atom`` (E − Σ atom references) all subtract the same
#: U0 (0 K) atom references of :data:`ATOM_REFERENCE_HARTREE`; the QM9 release also
#: lists 298.15 K atom energies for U, H and G, which are not used here, so ``u_atom``,
#: ``h_atom`` and ``g_atom`` differ from atomization energies built with those by a sum
#: over the atoms of per-element constants. Methane (QM9 index 1): U0 = −40.47893 Ha →
#: u0_atom = (−40.47893 − (−37.846772 − 4 × 0.500273)) × 27211.386 ≈ −17,172 meV.
QM9_TARGETS: dict[str, Target] = _targets(
    Target("mu", "D", "Dipole_debye", 1.0, "dipole moment"),
    Target("alpha", "a0^3", "Polarizability_bohr3", 1.0, "isotropic polarizability"),
    Target("homo", "meV", "HOMO_au", HARTREE_TO_MEV, "HOMO energy"),
    Target("lumo", "meV", "LUMO_au", HARTREE_TO_MEV, "LUMO energy"),
    Target("gap", "meV", "HOMO_LUMO_gap_au", HARTREE_TO_MEV, "HOMO-LUMO gap"),
    Target("r2", "a0^2", "R2_bohr2", 1.0, "electronic spatial extent <R^2>"),
    Target("zpve", "meV", "ZPVE_au", HARTREE_TO_MEV, "zero-point vibrational energy"),
    Target("u0", "meV", "InternalEnergy_0K_au", HARTREE_TO_MEV, "internal energy at 0 K"),
    Target("u", "meV", "InternalEnergy_298K_au", HARTREE_TO_MEV, "internal energy at 298.15 K"),
    Target("h", "meV", "Enthalphy_298K_au", HARTREE_TO_MEV, "enthalpy at 298.15 K"),
    Target("g", "meV", "GibbsFreeEnergy_298K_au", HARTREE_TO_MEV, "free energy at 298.15 K"),
    Target("cv", "cal/(mol K)", "Heatcapacity_Cv_cal_mol_K", 1.0, "heat capacity at 298.15 K"),
    Target("u0_atom", "meV", "InternalEnergy_0K_au", HARTREE_TO_MEV, "atomization energy at 0 K", True),
    Target("u_atom", "meV", "InternalEnergy_298K_au", HARTREE_TO_MEV, "atomization energy at 298.15 K", True),
    Target("h_atom", "meV", "Enthalphy_298K_au", HARTREE_TO_MEV, "atomization enthalpy at 298.15 K", True),
    Target("g_atom", "meV", "GibbsFreeEnergy_298K_au", HARTREE_TO_MEV, "atomization free energy at 298.15 K", True),
)

#: The 12 targets of the usual QM9 benchmark tables.
QM9_STANDARD_TARGETS: tuple[str, ...] = ("mu", "alpha", "homo", "lumo", "gap", "r2", "zpve", "u0", "u", "h", "g", "cv")


def _readonly(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class QM9:
    """QM9 molecules as flat arrays; molecule ``i`` owns atoms ``offsets[i]:offsets[i+1]``.

    ``numbers`` (int64, total atoms) and ``positions`` (float64 Å, (total atoms, 3)) hold
    all atoms back to back; ``index`` is the QM9 index (1..133,885, molecule id
    ``gdb_<index>``); ``targets`` (float64, (n, len(target_names))) holds the properties
    in the units of :data:`QM9_TARGETS`. The arrays are made read-only on construction
    (the instance takes them over). ``source`` names the data in error messages.
    """

    numbers: np.ndarray
    positions: np.ndarray
    offsets: np.ndarray
    index: np.ndarray
    smiles: np.ndarray
    targets: np.ndarray
    target_names: tuple[str, ...]
    source: str = "qm9"

    def __post_init__(self) -> None:
        fields = {
            "numbers": np.ascontiguousarray(self.numbers, dtype=np.int64),
            "positions": np.ascontiguousarray(self.positions, dtype=np.float64),
            "offsets": np.ascontiguousarray(self.offsets, dtype=np.int64),
            "index": np.ascontiguousarray(self.index, dtype=np.int64),
            "smiles": np.asarray(self.smiles, dtype=str),
            "targets": np.ascontiguousarray(self.targets, dtype=np.float64),
        }
        for name, array in fields.items():
            object.__setattr__(self, name, _readonly(array))
        object.__setattr__(self, "target_names", tuple(str(t) for t in self.target_names))
        self._check_shapes()

    def _check_shapes(self) -> None:
        n, offsets = self.index.size, self.offsets
        problems = []
        if offsets.shape != (n + 1,) or offsets[0] != 0 or np.any(np.diff(offsets) < 1):
            problems.append(f"offsets must rise from 0 by at least 1 for each of the {n} molecules")
        elif offsets[-1] != self.numbers.size or self.positions.shape != (self.numbers.size, 3):
            problems.append(
                f"offsets end at {offsets[-1]} but there are {self.numbers.size} atomic numbers "
                f"and positions of shape {self.positions.shape}"
            )
        if self.smiles.shape != (n,):
            problems.append(f"{self.smiles.shape} SMILES for {n} molecules")
        if self.targets.shape != (n, len(self.target_names)):
            problems.append(f"targets have shape {self.targets.shape}, expected ({n}, {len(self.target_names)})")
        if problems:
            raise InputError(self.source, "; ".join(problems))

    def __len__(self) -> int:
        return int(self.index.size)

    @property
    def n_atoms(self) -> np.ndarray:
        """Number of atoms of each molecule, shape (n,)."""
        return np.diff(self.offsets)

    def molecule(self, i: int) -> Molecule:
        """Molecule at position ``i`` (0-based, not the QM9 index) as a validated :class:`Molecule`."""
        if isinstance(i, bool) or not isinstance(i, _numbers.Integral):
            raise TypeError(f"{self.source}: molecule position must be an integer, got {i!r}")
        if not -len(self) <= i < len(self):
            raise IndexError(f"{self.source}: molecule position {i} out of range for {len(self)} molecules")
        i = int(i) % len(self)
        atoms = slice(self.offsets[i], self.offsets[i + 1])
        return Molecule(
            self.numbers[atoms],
            self.positions[atoms],
            id=f"gdb_{self.index[i]}",
            smiles=str(self.smiles[i]),
            source=self.source,
        )

    def molecules(self, indices: Iterable[int] | None = None) -> list[Molecule]:
        """Molecules at the given positions (all of them when ``indices`` is None)."""
        positions = range(len(self)) if indices is None else self._positions(indices)
        return [self.molecule(i) for i in positions]

    def target(self, name: str) -> np.ndarray:
        """Values of one target (read-only, shape (n,)), in the unit ``QM9_TARGETS[name].unit``."""
        if name not in self.target_names:
            raise InputError(f"target {name!r}", f"unknown QM9 target; known: {', '.join(self.target_names)}")
        return self.targets[:, self.target_names.index(name)]

    def subset(self, indices: Iterable[int]) -> QM9:
        """New :class:`QM9` with the molecules at ``indices`` (positions, in that order)."""
        chosen = self._positions(indices)
        counts = self.n_atoms[chosen]
        offsets = np.zeros(chosen.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        # Atom j of the subset is atom j - offsets[k] + self.offsets[chosen[k]] of the original.
        atoms = np.arange(offsets[-1]) + np.repeat(self.offsets[chosen] - offsets[:-1], counts)
        return QM9(
            numbers=self.numbers[atoms],
            positions=self.positions[atoms],
            offsets=offsets,
            index=self.index[chosen],
            smiles=self.smiles[chosen],
            targets=self.targets[chosen],
            target_names=self.target_names,
            source=self.source,
        )

    def positions_of(self, qm9_indices: Sequence[int]) -> np.ndarray:
        """Positions of the molecules with the given QM9 indices (1 = methane), shape (k,)."""
        wanted = np.asarray(qm9_indices, dtype=np.int64).reshape(-1)
        order = np.argsort(self.index, kind="stable")
        found = np.minimum(np.searchsorted(self.index[order], wanted), max(len(self) - 1, 0))
        missing = wanted[self.index[order][found] != wanted] if len(self) else wanted
        if missing.size:
            raise InputError("QM9 index", f"{int(missing[0])} is not in {self.source} ({len(self)} molecules)")
        return order[found]

    def _positions(self, indices: Iterable[int]) -> np.ndarray:
        chosen = np.asarray(indices if isinstance(indices, np.ndarray) else list(indices))
        if chosen.size == 0:
            return np.zeros(0, dtype=np.int64)
        if chosen.ndim != 1 or chosen.dtype.kind not in "iu":
            raise InputError("molecule positions", f"must be a 1-d integer array, got dtype {chosen.dtype} and shape {chosen.shape}")
        bad = chosen[(chosen < 0) | (chosen >= len(self))]
        if bad.size:
            raise InputError("molecule positions", f"position {int(bad[0])} out of range for {len(self)} molecules")
        return chosen.astype(np.int64)


# --------------------------------------------------------------------------- sources


def qm9pack_data_dir() -> Path:
    """The ``data`` folder of the installed ``qm9pack`` package, found without importing it."""
    spec = find_spec("qm9pack")
    if spec is None or not spec.submodule_search_locations:
        raise CacheError("QM9 source data not found: the package 'qm9pack' is not installed (pip install qm9pack)")
    data_dir = Path(list(spec.submodule_search_locations)[0]) / "data"
    missing = [name for name in _SOURCE_FILES if not (data_dir / name).is_file()]
    if missing:
        raise CacheError(f"QM9 source data incomplete: {', '.join(missing)} missing in {data_dir}; reinstall qm9pack")
    return data_dir


def _source_sizes(data_dir: Path) -> dict[str, int]:
    return {name: (data_dir / name).stat().st_size for name in _SOURCE_FILES}


# --------------------------------------------------------------------------- parsing

_STRIP_BRACKETS = str.maketrans("", "", "[]")
_STRIP_ELEMENT_LIST = str.maketrans("", "", "[]' ")
_INDEX_COLUMNS = ("Index", "SMILES", "N_atoms", "Elements", "XYZ_Ang")


def _first_bad_row(path: Path, index: np.ndarray, bad: np.ndarray, problem: str) -> InputError:
    """InputError naming the CSV line (header = line 1) and QM9 index of the first ``bad`` row."""
    row = int(np.flatnonzero(bad)[0])
    return InputError(str(path), f"molecule {int(index[row])}: {problem}", line=row + 2)


def _parse_numbers(path: Path, frame: pd.DataFrame, n_atoms: np.ndarray) -> np.ndarray:
    """Atomic numbers from the ``Elements`` column (``"['C','H',...]"``), concatenated."""
    column = frame["Elements"]
    counts = column.str.count(",").to_numpy() + 1
    if np.any(counts != n_atoms):
        raise _first_bad_row(path, frame["Index"].to_numpy(), counts != n_atoms, "element count differs from N_atoms")
    symbols = np.array(",".join(column.tolist()).translate(_STRIP_ELEMENT_LIST).split(","))
    unique, inverse = np.unique(symbols, return_inverse=True)
    inverse = inverse.reshape(-1)
    z_of_unique = np.zeros(unique.size, dtype=np.int64)
    for k, symbol in enumerate(unique.tolist()):
        try:
            z_of_unique[k] = element_number(symbol)
        except InputError as exc:
            row = np.searchsorted(np.cumsum(n_atoms), np.argmax(inverse == k), side="right")
            raise _first_bad_row(path, frame["Index"].to_numpy(), np.arange(n_atoms.size) == row, exc.problem) from None
    return z_of_unique[inverse]


def _parse_positions(path: Path, frame: pd.DataFrame, n_atoms: np.ndarray) -> np.ndarray:
    """Positions (Å) from the ``XYZ_Ang`` column (``"[[x,y,z],...]"``), shape (total atoms, 3).

    All rows are joined and parsed by one ``np.fromstring`` call; the per-row count of
    numbers (commas + 1 = 3 × N_atoms) is checked first so that the atoms stay aligned.
    """
    column = frame["XYZ_Ang"]
    counts = column.str.count(",").to_numpy() + 1
    if np.any(counts != 3 * n_atoms):
        raise _first_bad_row(path, frame["Index"].to_numpy(), counts != 3 * n_atoms, "coordinate count is not 3 × N_atoms")
    text = ",".join(column.tolist()).translate(_STRIP_BRACKETS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warns (instead of failing) on unparsable text
        try:
            values = np.fromstring(text, dtype=np.float64, sep=",")
        except (DeprecationWarning, ValueError) as exc:
            raise InputError(str(path), f"unreadable XYZ_Ang coordinates ({exc})") from None
    if values.size != 3 * n_atoms.sum() or not np.isfinite(values).all():
        raise InputError(str(path), "XYZ_Ang coordinates are incomplete or not finite")
    return values.reshape(-1, 3)


def _read_part(path: Path) -> dict[str, np.ndarray]:
    """Arrays of one qm9pack CSV: numbers, positions, n_atoms, index, smiles, raw target columns."""
    columns = list(_INDEX_COLUMNS) + sorted({t.column for t in QM9_TARGETS.values()})
    text_columns = {"SMILES": str, "Elements": str, "XYZ_Ang": str}
    try:
        frame = pd.read_csv(path, usecols=columns, dtype=text_columns)
    except (ValueError, pd.errors.ParserError) as exc:
        raise InputError(str(path), f"not a qm9pack QM9 table ({exc})") from None
    if frame[list(_INDEX_COLUMNS)].isna().any().any():
        raise InputError(str(path), "empty Index/SMILES/N_atoms/Elements/XYZ_Ang fields")
    n_atoms = frame["N_atoms"].to_numpy(dtype=np.int64)
    if np.any(n_atoms < 1):
        raise _first_bad_row(path, frame["Index"].to_numpy(), n_atoms < 1, "N_atoms must be at least 1")
    part = {
        "numbers": _parse_numbers(path, frame, n_atoms),
        "positions": _parse_positions(path, frame, n_atoms),
        "n_atoms": n_atoms,
        "index": frame["Index"].to_numpy(dtype=np.int64),
        "smiles": np.array(frame["SMILES"].tolist(), dtype=str),
    }
    for column in columns[len(_INDEX_COLUMNS) :]:
        part[column] = frame[column].to_numpy(dtype=np.float64)
    return part


def atom_reference_sum(numbers: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Σ over each molecule's atoms of :data:`ATOM_REFERENCE_HARTREE` (Hartree), shape (n,)."""
    table = np.full(MAX_Z + 1, np.nan)
    for z, energy in ATOM_REFERENCE_HARTREE.items():
        table[z] = energy
    per_atom = table[numbers]
    if np.isnan(per_atom).any():
        z = int(numbers[np.isnan(per_atom)][0])
        raise InputError("QM9 atoms", f"no atom reference energy for atomic number {z} (only H, C, N, O, F)")
    return np.add.reduceat(per_atom, offsets[:-1])


def _target_table(columns: dict[str, np.ndarray], numbers: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Targets (n, len(QM9_TARGETS)) in the units of :data:`QM9_TARGETS`."""
    reference = atom_reference_sum(numbers, offsets)
    table = np.empty((offsets.size - 1, len(QM9_TARGETS)))
    for k, target in enumerate(QM9_TARGETS.values()):
        raw = columns[target.column] - reference if target.atomization else columns[target.column]
        table[:, k] = target.scale * raw
    return table


def parse_qm9pack(data_dir: Path) -> QM9:
    """Parse the three qm9pack CSV files into a :class:`QM9` (a few seconds; no cache)."""
    parts = [_read_part(data_dir / name) for name in _SOURCE_FILES]
    joined = {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}
    index = joined["index"]
    if np.any(np.diff(index) <= 0):
        raise InputError(str(data_dir), "QM9 indices are not strictly increasing across qm9_part1..3.csv")
    offsets = np.concatenate([[0], np.cumsum(joined["n_atoms"])])
    return QM9(
        numbers=joined["numbers"],
        positions=joined["positions"],
        offsets=offsets,
        index=index,
        smiles=joined["smiles"],
        targets=_target_table(joined, joined["numbers"], offsets),
        target_names=tuple(QM9_TARGETS),
        source="qm9pack",
    )


# --------------------------------------------------------------------------- cache


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The molntk cache: ``cache_dir``, else ``$MOLNTK_CACHE_DIR``, else the user cache folder."""
    root = cache_dir if cache_dir is not None else os.environ.get(CACHE_ENV) or platformdirs.user_cache_dir("molntk")
    return Path(root).expanduser()


def qm9_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Folder of the QM9 cache: ``<cache_root(cache_dir)>/qm9``."""
    return cache_root(cache_dir) / _CACHE_NAME


def _cache_paths(directory: Path) -> tuple[Path, Path]:
    return directory / f"{_CACHE_NAME}.npz", directory / f"{_CACHE_NAME}.json"


def _expected_manifest(sources: dict[str, int]) -> dict:
    """The manifest fields a usable cache must share with the current code and sources."""
    return {"format": CACHE_FORMAT, "sources": sources, "targets": list(QM9_TARGETS)}


def _read_cache(directory: Path, sources: dict[str, int]) -> tuple[QM9 | None, str | None]:
    """``(data, None)`` for a valid cache, ``(None, problem)`` for a damaged one, ``(None, None)`` if absent."""
    data_path, manifest_path = _cache_paths(directory)
    if not data_path.exists() and not manifest_path.exists():
        return None, None
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        raw = data_path.read_bytes()
    except (OSError, ValueError) as exc:
        return None, f"unreadable cache ({exc})"
    expected = _expected_manifest(sources)
    stale = [key for key, value in expected.items() if manifest.get(key) != value]
    if stale:
        return None, f"manifest does not match this molntk/qm9pack ({', '.join(stale)})"
    if len(raw) != manifest.get("size") or hashlib.sha256(raw).hexdigest() != manifest.get("sha256"):
        return None, "checksum mismatch (truncated or damaged file)"
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
        return _from_arrays(arrays), None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        return None, f"unreadable cache ({exc})"


def _to_arrays(data: QM9) -> dict[str, np.ndarray]:
    return {
        "numbers": data.numbers.astype(np.int8),
        "positions": data.positions,
        "offsets": data.offsets,
        "index": data.index,
        "smiles": data.smiles,
        "targets": data.targets,
        "target_names": np.array(data.target_names),
    }


def _from_arrays(arrays: dict[str, np.ndarray]) -> QM9:
    return QM9(
        numbers=arrays["numbers"],
        positions=arrays["positions"],
        offsets=arrays["offsets"],
        index=arrays["index"],
        smiles=arrays["smiles"],
        targets=arrays["targets"],
        target_names=tuple(arrays["target_names"].tolist()),
        source="qm9pack",
    )


def _write_cache(directory: Path, data: QM9, sources: dict[str, int]) -> None:
    """Write the ``.npz`` and then its manifest, each atomically."""
    data_path, manifest_path = _cache_paths(directory)
    with atomic_path(data_path, suffix=".npz") as tmp:
        np.savez(tmp, **_to_arrays(data))
        digest, size = sha256_file(tmp), tmp.stat().st_size
    manifest = {**_expected_manifest(sources), "file": data_path.name, "size": size, "sha256": digest, "n_molecules": len(data)}
    atomic_write_json(manifest_path, manifest)


def load_qm9(cache_dir: str | os.PathLike[str] | None = None, *, rebuild: bool = False) -> QM9:
    """All 130,831 QM9 molecules with their targets, from the cache (built on first use).

    ``cache_dir`` overrides ``$MOLNTK_CACHE_DIR`` and the user cache directory;
    ``rebuild=True`` parses the CSVs again even if the cache is valid. Raises
    :class:`CacheError` if qm9pack is missing or another process holds the build lock
    for longer than :data:`LOCK_TIMEOUT_S`.
    """
    data_dir = qm9pack_data_dir()
    sources = _source_sizes(data_dir)
    directory = qm9_cache_dir(cache_dir)
    if not rebuild:  # fast path without the lock: the files are only ever replaced atomically
        data, _ = _read_cache(directory, sources)
        if data is not None:
            return data
    directory.mkdir(parents=True, exist_ok=True)
    lock_path = directory / f"{_CACHE_NAME}.lock"
    try:
        with FileLock(lock_path, timeout=LOCK_TIMEOUT_S):
            if not rebuild:
                data, problem = _read_cache(directory, sources)  # another process may have built it
                if data is not None:
                    return data
                if problem is not None:
                    warnings.warn(f"QM9 cache in {directory}: {problem}; rebuilding it", stacklevel=2)
            start = time.perf_counter()
            data = parse_qm9pack(data_dir)
            _write_cache(directory, data, sources)
            logger.info("built QM9 cache in %s (%.1f s)", directory, time.perf_counter() - start)
            return data
    except Timeout:
        raise CacheError(f"QM9 cache lock {lock_path} held by another process for over {LOCK_TIMEOUT_S:.0f} s") from None


def qm9_summary(data: QM9, seed: int = 0) -> dict:
    """JSON-serialisable overview: molecule/atom counts, per-target statistics, split sizes.

    Per target: ``unit``, ``count`` (finite values), ``mean``, ``std`` (population,
    ddof = 0), ``min``, ``max``. ``split`` holds the sizes of :func:`standard_split`
    with ``seed`` (110,000 / 10,000 / rest), or None when there are fewer molecules
    than the standard training and validation sets need.
    """
    stats = {}
    for k, name in enumerate(data.target_names):
        values = data.targets[:, k]
        values = values[np.isfinite(values)]
        target = QM9_TARGETS.get(name)
        stats[name] = {
            "unit": target.unit if target else None,
            "count": int(values.size),
            **{stat: float(getattr(np, stat)(values)) if values.size else None for stat in ("mean", "std", "min", "max")},
        }
    fits = len(data) >= QM9_N_TRAIN + QM9_N_VALID
    return {
        "n_molecules": len(data),
        "n_atoms": int(data.numbers.size),
        "targets": stats,
        "split": {"seed": seed, **standard_split(len(data), seed).sizes()} if fits else None,
    }

