"""MD17 and rMD17 trajectory files (``.npz``): geometries, energies and forces, converted to eV and eV/Å.

Two layouts, told apart by their keys:

* **MD17** (sGDML's files, ``md17_<molecule>.npz``; Chmiela et al., *Sci. Adv.* 3, e1603015,
  2017): ``z`` (N,) atomic numbers, ``R`` (n, N, 3) positions, ``E`` (n, 1) or (n,)
  energies, ``F`` (n, N, 3) forces; energies in kcal/mol, lengths in Å, forces in kcal/mol/Å.
  Newer sGDML files state their units in ``e_unit`` and ``r_unit`` (forces are in
  ``e_unit``/``r_unit``); those are honoured (:data:`ENERGY_UNITS`, :data:`LENGTH_UNITS`).
* **rMD17** (``rmd17_<molecule>.npz``; Christensen and von Lilienfeld, *Mach. Learn.: Sci.
  Technol.* 1, 045018, 2020): ``nuclear_charges`` (N,), ``coords`` (n, N, 3) Å,
  ``energies`` (n,) kcal/mol, ``forces`` (n, N, 3) kcal/mol/Å. The keys ``old_indices``,
  ``old_energies`` and ``old_forces`` (the MD17 frame and its values) are not read.

:func:`read_md17_npz` returns every frame in eV and eV/Å (1 kcal/mol =
:data:`KCAL_PER_MOL_TO_EV` = 4184 J / (e N_A) = 0.0433641 eV), the units of extended xyz
files written by ASE. A missing
key or an array of the wrong shape is an :class:`~molntk.errors.InputError` naming the file
and the key; values are not checked here (:func:`~molntk.data.labelled.read_labelled` turns a
frame with non-finite values into a failure and reads the rest).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from molntk.data.qm9 import HARTREE_TO_MEV
from molntk.data.readers import PathLike, check_file
from molntk.errors import InputError

#: 1 kJ/mol in eV: 1000 J / (e N_A), exact with the SI values of e and N_A (2019).
KJ_PER_MOL_TO_EV = 1000.0 / (1.602176634e-19 * 6.02214076e23)
#: 1 kcal/mol = 4.184 kJ/mol = 0.0433641 eV.
KCAL_PER_MOL_TO_EV = 4.184 * KJ_PER_MOL_TO_EV
#: 1 Bohr in Å (CODATA 2018).
BOHR_TO_ANGSTROM = 0.529177210903

#: Energy units an sGDML file may name in ``e_unit``, in eV (lower case, spaces removed).
ENERGY_UNITS: dict[str, float] = {
    "kcal/mol": KCAL_PER_MOL_TO_EV,
    "kj/mol": KJ_PER_MOL_TO_EV,
    "ev": 1.0,
    "mev": 1e-3,
    "ha": HARTREE_TO_MEV / 1000.0,
    "hartree": HARTREE_TO_MEV / 1000.0,
}
#: Length units an sGDML file may name in ``r_unit``, in Å.
LENGTH_UNITS: dict[str, float] = {"ang": 1.0, "angstrom": 1.0, "å": 1.0, "a": 1.0, "bohr": BOHR_TO_ANGSTROM, "nm": 10.0}

#: The keys of each layout: atomic numbers, positions, energies, forces.
LAYOUTS: dict[str, tuple[str, str, str, str]] = {
    "MD17": ("z", "R", "E", "F"),
    "rMD17": ("nuclear_charges", "coords", "energies", "forces"),
}


@dataclass(frozen=True)
class ForceFrames:
    """The frames of one trajectory file: ``numbers`` (N,), ``positions`` (n, N, 3) Å,
    ``energies`` (n,) eV, ``forces`` (n, N, 3) eV/Å; ``layout`` is ``"MD17"`` or ``"rMD17"``."""

    source: str
    layout: str
    numbers: np.ndarray
    positions: np.ndarray
    energies: np.ndarray
    forces: np.ndarray

    def __len__(self) -> int:
        return len(self.energies)


def _unit(archive: np.lib.npyio.NpzFile, key: str, table: dict[str, float], default: str, source: str) -> float:
    """The factor of the unit named by ``archive[key]`` (``default`` when absent) in ``table``."""
    if key not in archive.files:
        return table[default]
    name = str(np.asarray(archive[key]).reshape(-1)[0]).replace(" ", "").lower()
    if name not in table:
        raise InputError(source, f"key {key!r}: unknown unit {name!r}; known: {', '.join(table)}")
    return table[name]


def _array(archive: np.lib.npyio.NpzFile, key: str, layout: str, source: str) -> np.ndarray:
    """``archive[key]`` as a numeric array; InputError naming the key when it is missing or not numeric."""
    if key not in archive.files:
        raise InputError(source, f"no key {key!r}, which the {layout} layout needs; its keys: {', '.join(archive.files)}")
    try:
        array = archive[key]
    except ValueError as err:  # an object array needs allow_pickle, which a data file must not
        raise InputError(source, f"key {key!r}: not a numeric array ({err})") from None
    if not (np.issubdtype(array.dtype, np.number) and not np.issubdtype(array.dtype, np.complexfloating)):
        raise InputError(source, f"key {key!r}: not a real numeric array (dtype {array.dtype})")
    return array


def _check_shape(source: str, key: str, array: np.ndarray, expected: tuple[int, ...], meaning: str) -> None:
    if array.shape != expected:
        raise InputError(source, f"key {key!r} ({meaning}) has shape {array.shape}, expected {expected}")


def npz_layout(path: PathLike, files: list[str]) -> str:
    """``"MD17"`` or ``"rMD17"`` by the keys ``files`` of an archive; InputError listing them otherwise."""
    for layout, keys in LAYOUTS.items():
        if keys[1] in files:
            return layout
    expected = " or ".join(f"{layout} ({', '.join(keys)})" for layout, keys in LAYOUTS.items())
    raise InputError(str(path), f"not an MD17 or rMD17 file: expected the keys of {expected}; its keys: {', '.join(files) or 'none'}")


def read_md17_npz(path: PathLike) -> ForceFrames:
    """All frames of an MD17 or rMD17 ``.npz`` file in Å, eV and eV/Å (module docstring)."""
    source = str(path)
    check_file(path)
    try:
        archive = np.load(Path(path), allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise InputError(source, f"not a readable .npz file ({err})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise InputError(source, "holds a single array, not an .npz archive of named arrays")
    with archive:
        layout = npz_layout(path, archive.files)
        z_key, r_key, e_key, f_key = LAYOUTS[layout]
        numbers, positions, energies, forces = (_array(archive, key, layout, source) for key in LAYOUTS[layout])
        energy_unit = _unit(archive, "e_unit", ENERGY_UNITS, "kcal/mol", source)
        length_unit = _unit(archive, "r_unit", LENGTH_UNITS, "ang", source)
    if numbers.ndim != 1 or not np.array_equal(numbers, np.round(numbers)):
        raise InputError(source, f"key {z_key!r} (atomic numbers) must be a 1-d array of whole numbers, "
                                 f"got shape {numbers.shape}, dtype {numbers.dtype}")
    n_atoms = numbers.shape[0]
    n_frames = positions.shape[0] if positions.ndim == 3 else -1
    _check_shape(source, r_key, positions, (max(n_frames, 0), n_atoms, 3), "positions, frames × atoms × 3")
    if energies.ndim == 2 and energies.shape[1:] == (1,):
        energies = energies[:, 0]
    _check_shape(source, e_key, energies, (n_frames,), "energies, one per frame")
    _check_shape(source, f_key, forces, (n_frames, n_atoms, 3), "forces, frames × atoms × 3")
    return ForceFrames(
        source=source,
        layout=layout,
        numbers=numbers.astype(np.int64),
        positions=positions.astype(np.float64) * length_unit,
        energies=energies.astype(np.float64) * energy_unit,
        forces=forces.astype(np.float64) * (energy_unit / length_unit),
    )
