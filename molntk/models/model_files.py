"""Model files of molntk's estimators: one ``.npz`` archive of plain arrays, read with
``allow_pickle=False`` (no code is ever unpickled), whose ``metadata`` array holds JSON (the
format name and version, the estimator's parameters, …).

The pieces every model file shares live here: reading and writing the archive atomically,
checking its format and version, the molecules (``numbers``, ``positions``, ``n_atoms``;
ids in the metadata) and the dressed-atom model (``dressed_atom_coef``,
``dressed_atom_intercept``, absent when the model has none). Each estimator adds its fitted
state (:meth:`~molntk.models.so3_ntk.SO3NTKRegressor.save`,
:meth:`~molntk.models.force_field.SO3ForceFieldRegressor.save`).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from molntk._version import __version__
from molntk.data.molecule import Molecule
from molntk.errors import InputError, ModelFileError
from molntk.regression.dressed_atom import DressedAtomModel
from molntk.utils.files import atomic_path

T = TypeVar("T")

#: Suffix of a model file (``<target>.molntk.npz`` where a command writes one per target).
MODEL_SUFFIX = ".molntk.npz"
#: How files that hold pickled objects begin: a pickle (protocol ≥ 2), a ``.npy`` of objects.
PICKLED_MAGIC = (b"\x80", b"\x93NUMPY")
PICKLED_REASON = "it holds pickled objects, which model files never do"


def _starts_with(path: Path, magic: bytes) -> bool:
    """Whether the file at ``path`` begins with ``magic``."""
    with open(path, "rb") as fh:
        return fh.read(len(magic)) == magic


def optional_text(meta: dict[str, Any], key: str) -> str | None:
    """``meta[key]``: a string, or None when absent (files from before it was written)."""
    value = meta.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"metadata {key!r} is a {type(value).__name__}, not a string")
    return value


@contextmanager
def _opened_archive(path: Path) -> Iterator[np.lib.npyio.NpzFile]:
    """The ``.npz`` archive at ``path``, opened without pickles; a :class:`ModelFileError`
    naming ``path`` when it is not one, or when a member read inside the block holds objects
    (numpy refuses to unpickle them without ``allow_pickle``)."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ModelFileError(str(path), "file not found") from None
    except EOFError:
        raise ModelFileError(str(path), "not a molntk model file (the file is empty)") from None
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        if "allow_pickle" not in str(err):  # numpy's advice comes for every file that is no archive
            reason = str(err)
        elif any(_starts_with(path, magic) for magic in PICKLED_MAGIC):
            reason = PICKLED_REASON
        else:
            reason = "not a .npz archive"
        raise ModelFileError(str(path), f"not a molntk model file ({reason})") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise ModelFileError(str(path), "not a molntk model file (a single numpy array, not a model archive)")
    try:
        with loaded as archive:
            yield archive
    except ValueError as err:
        if "allow_pickle" not in str(err):
            raise
        raise ModelFileError(str(path), f"not a molntk model file ({PICKLED_REASON})") from None
    except (OSError, zipfile.BadZipFile, EOFError) as err:  # a member cut short or corrupted
        raise ModelFileError(str(path), f"damaged model file ({err})") from None


def _archive_metadata(path: Path, archive: np.lib.npyio.NpzFile) -> dict[str, Any]:
    """The JSON object in the archive's ``metadata`` member; ModelFileError naming ``path``
    when it is missing or not a JSON object."""
    if "metadata" not in archive.files:
        raise ModelFileError(str(path), "not a molntk model file (no metadata)")
    try:
        meta = json.loads(archive["metadata"].tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelFileError(str(path), f"damaged model file (metadata is not JSON: {err})") from None
    if not isinstance(meta, dict):
        raise ModelFileError(str(path), "damaged model file (metadata is not a JSON object)")
    return meta


def read_model_metadata(path: Path) -> dict[str, Any]:
    """The JSON metadata of a model file, without reading its other arrays; ModelFileError
    naming ``path`` when it is not such a file."""
    with _opened_archive(path) as archive:
        return _archive_metadata(path, archive)


def read_model_archive(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and the JSON metadata of a model file (``numpy.savez``, no pickles);
    :class:`ModelFileError` naming ``path`` when it is not such a file."""
    with _opened_archive(path) as archive:
        meta = _archive_metadata(path, archive)
        arrays = {key: archive[key] for key in archive.files if key != "metadata"}
    return arrays, meta


def write_model_archive(path: str | Path, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` and ``meta`` (as the JSON ``metadata`` array) to ``path`` atomically."""
    path = Path(path)
    payload = {**arrays, "metadata": np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)}
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, **payload)
    return path


def check_format(path: Path, meta: dict[str, Any], name: str, version: int, what: str) -> None:
    """ModelFileError naming ``path`` unless the metadata says format ``name``, ``version``."""
    if meta.get("format") != name:
        raise ModelFileError(str(path), f"not a molntk {what} (format {meta.get('format')!r})")
    if meta.get("version") != version:
        raise ModelFileError(str(path), f"model format version {meta.get('version')} is not supported (expected {version})")


def load_model_file(path: str | Path, name: str, version: int, what: str,
                    build: Callable[[Path, dict[str, np.ndarray], dict[str, Any]], T]) -> T:
    """The model that ``build(path, arrays, metadata)`` makes of the file at ``path``, after
    :func:`read_model_archive` and :func:`check_format`. A file that is not such a model
    (missing, damaged, another format, arrays or metadata missing or of the wrong kind, a
    parameter the estimator rejects) is a :class:`ModelFileError` naming it and the problem."""
    path = Path(path)
    arrays, meta = read_model_archive(path)
    check_format(path, meta, name, version, what)
    try:
        return build(path, arrays, meta)
    except ModelFileError:
        raise
    except InputError as err:  # a parameter of the file that the estimator rejects
        raise ModelFileError(str(path), f"damaged model file ({err})") from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
        missing = f"missing {err}" if isinstance(err, KeyError) else f"{type(err).__name__}: {err}"
        raise ModelFileError(str(path), f"damaged model file ({missing})") from None


def training_provenance(n_train: int, provenance: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a model file says of its training set: ``n_train``, the ``molntk`` version and
    ``created`` (UTC, to the second), updated by the caller's JSON-ready ``provenance``."""
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {"n_train": n_train, "molntk": __version__, "created": created, **(provenance or {})}


def provenance_from_meta(path: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """The ``provenance`` object of a model file's metadata ({} for files written before it
    was kept); ModelFileError naming ``path`` when it is not a JSON object."""
    provenance = meta.get("provenance") or {}
    if not isinstance(provenance, dict):
        raise ModelFileError(str(path), f"damaged model file (provenance is a {type(provenance).__name__}, not a JSON object)")
    return provenance


def molecule_arrays(molecules: Sequence[Molecule]) -> dict[str, np.ndarray]:
    """The atoms of ``molecules`` as three arrays: ``numbers`` and ``positions`` of every atom
    in order, ``n_atoms`` per molecule (their ids go into the metadata)."""
    return {"numbers": np.concatenate([m.numbers for m in molecules]).astype(np.int64),
            "positions": np.concatenate([m.positions for m in molecules]).astype(np.float64),
            "n_atoms": np.array([m.n_atoms for m in molecules], dtype=np.int64)}


def molecules_from_arrays(arrays: dict[str, np.ndarray], ids: Sequence[Any]) -> list[Molecule]:
    """The molecules that :func:`molecule_arrays` wrote, with their ``ids``."""
    ends = np.cumsum(arrays["n_atoms"])
    return [Molecule(arrays["numbers"][e - n : e], arrays["positions"][e - n : e], id=mol_id)
            for e, n, mol_id in zip(ends, arrays["n_atoms"], ids, strict=True)]


def dressed_atom_arrays(model: DressedAtomModel | None) -> dict[str, np.ndarray]:
    """The dressed-atom model's coefficients and intercept (nothing for None)."""
    if model is None:
        return {}
    return {"dressed_atom_coef": np.asarray(model.coef_), "dressed_atom_intercept": np.asarray(model.intercept_)}


def dressed_atom_from_arrays(arrays: dict[str, np.ndarray]) -> DressedAtomModel | None:
    """The dressed-atom model :func:`dressed_atom_arrays` wrote, or None when it wrote none."""
    if "dressed_atom_coef" not in arrays:
        return None
    model = DressedAtomModel()
    model.coef_, model.intercept_ = arrays["dressed_atom_coef"], arrays["dressed_atom_intercept"]
    return model
