"""The fits of ``task: md-force-field`` kept on disk as each finishes, so a killed run resumes.

A record is stored as ``<output>/fit_cache/<key>.json`` with

    key = sha256(json{frames: SHA-256 of the frames' file, energy key and unit, split seed,
                      n_test, model name, the estimator's parameters, n_train, molntk version})

the content that determines it; written atomically (whole or absent). A rerun of the same
config finds the records of the fits it already made and fits only the rest; a record
whose file is unreadable is fitted again. An SO(3) force field is also stored as soon as it
is fitted, before its predictions, as ``<key>.molntk.npz`` (its model file, with the fit's
seconds in its provenance): a run killed while predicting predicts again without fitting
again. Its predictions are stored too, a batch of :data:`~molntk.models.force_field.QUERY_BATCH`
test frames at a time, as ``<key>.predictions/<model file's SHA-256>/<start>-<stop>.npz``
(:func:`predict_stored`): a run killed while predicting (78 minutes for 1,000 aspirin test
frames against 1,000 training frames on two threads, measured) predicts only the batches it
lacks. Its ``fit_seconds`` are those of the run that fitted it, its ``predict_seconds`` the
sum over the batches of the runs that predicted them. The key names the molntk version, not the code: whoever
changes the code between runs of one version deletes ``fit_cache/`` (as ``kernel_cache/`` of
the QM9 task, :mod:`molntk.scale.cache`).
"""

from __future__ import annotations

import hashlib
import json
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from molntk._version import __version__
from molntk.data.molecule import Molecule
from molntk.errors import ModelFileError
from molntk.models.force_field import QUERY_BATCH, SO3ForceFieldRegressor
from molntk.models.model_files import MODEL_SUFFIX
from molntk.pipelines.files import jsonable
from molntk.scale.progress import ProgressCallback
from molntk.utils.files import atomic_path, atomic_write_json, sha256_file

#: The folder of the stored fits inside the output folder.
FOLDER = "fit_cache"
#: The folder inside the output folder where exact force fields store their joint kernels'
#: rows as they are computed (a killed fit resumes from them).
KERNEL_FOLDER = "kernel_cache"


class FitStore:
    """Records of the fits of one run's frames (``frames_sha256``: the SHA-256 of their file)
    and split (``base``: the key material they share) under ``folder``; ``folder=None``
    stores nothing (``cache: false``)."""

    def __init__(self, folder: Path | None, frames_sha256: str, base: dict[str, Any]) -> None:
        self.folder = folder
        self.base = {**base, "frames_sha256": frames_sha256, "molntk": __version__} if folder else base

    def _path(self, folder: Path, model: str, params: dict[str, Any], n_train: int) -> Path:
        material = json.dumps(jsonable({**self.base, "model": model, "params": params, "n_train": n_train}),
                              sort_keys=True)
        return folder / f"{hashlib.sha256(material.encode()).hexdigest()[:40]}.json"

    def model_file(self, model: str, params: dict[str, Any], n_train: int) -> Path | None:
        """Where this fit's fitted force field is kept (None without a store)."""
        if self.folder is None:
            return None
        return self._path(self.folder, model, params, n_train).with_suffix(MODEL_SUFFIX)

    def load(self, model: str, params: dict[str, Any], n_train: int) -> dict[str, Any] | None:
        """The stored record of this fit, or None (none stored, unreadable, or no store)."""
        if self.folder is None:
            return None
        try:
            return json.loads(self._path(self.folder, model, params, n_train).read_text())
        except (OSError, ValueError):
            return None

    def save(self, model: str, params: dict[str, Any], n_train: int, record: dict[str, Any]) -> None:
        """Store ``record`` atomically (nothing without a store)."""
        if self.folder is not None:
            atomic_write_json(self._path(self.folder, model, params, n_train), jsonable(record))


def load_fitted(path: Path | None) -> tuple[SO3ForceFieldRegressor, float] | None:
    """The force field stored at ``path`` by :func:`save_fitted` and its fit's seconds, or None
    (no path, no file, or a file that is not such a model)."""
    if path is None or not path.is_file():
        return None
    try:
        model = SO3ForceFieldRegressor.load(path)
    except ModelFileError:
        return None
    seconds = model.provenance_.get("fit_seconds")
    return None if seconds is None else (model, float(seconds))


def save_fitted(path: Path | None, model: SO3ForceFieldRegressor, fit_seconds: float) -> None:
    """Store the fitted ``model`` at ``path`` (atomically; nothing without a path), its fit's
    seconds added to its provenance."""
    if path is not None:
        model.provenance_ = {**model.provenance_, "fit_seconds": fit_seconds}
        model.save(path)


def predict_stored(model: SO3ForceFieldRegressor, molecules: list[Molecule], model_file: Path | None,
                   progress: ProgressCallback | None = None) -> tuple[np.ndarray, list[np.ndarray], float]:
    """Energies (n,), forces (a list of (n_atoms, 3)) of ``molecules`` by ``model.predict_forces``
    and the seconds it took, a batch of :data:`QUERY_BATCH` molecules at a time. With the
    ``model_file`` the model is stored in, each batch is kept as
    ``<model_file minus its suffix>.predictions/<the file's SHA-256, 16 hex>/<start>-<stop>.npz``
    (energies, forces stacked (Σ n_atoms, 3), seconds; written atomically) and read back
    instead of predicted, so a killed run predicts only the batches it lacks; a batch whose
    file is unreadable or of the wrong shape is predicted again. ``progress(done, total)``:
    batches done."""
    folder = None
    if model_file is not None:
        folder = model_file.with_name(model_file.name.removesuffix(MODEL_SUFFIX) + ".predictions") / sha256_file(model_file)[:16]
    starts = range(0, len(molecules), QUERY_BATCH)
    energies, forces, seconds = [], [], 0.0
    for done, start in enumerate(starts, 1):
        batch = molecules[start : start + QUERY_BATCH]
        path = None if folder is None else folder / f"{start}-{start + len(batch)}.npz"
        stored = _stored_batch(path, [m.n_atoms for m in batch])
        if stored is None:
            tic = time.perf_counter()
            e, f = model.predict_forces(batch, return_energy=True)
            stored = (np.asarray(e, dtype=np.float64), [np.asarray(x, dtype=np.float64) for x in f],
                      time.perf_counter() - tic)
            if path is not None:
                with atomic_path(path, suffix=".npz") as tmp:
                    np.savez(tmp, energies=stored[0], forces=np.concatenate(stored[1]), seconds=stored[2])
        energies.append(stored[0])
        forces += stored[1]
        seconds += stored[2]
        if progress is not None:
            progress(done, len(starts))
    return np.concatenate(energies), forces, seconds


def _stored_batch(path: Path | None, n_atoms: list[int]) -> tuple[np.ndarray, list[np.ndarray], float] | None:
    """The batch :func:`predict_stored` kept at ``path`` for molecules of ``n_atoms`` atoms, or
    None (no path, no file, unreadable, or shapes that do not fit)."""
    if path is None or not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            energies, forces, seconds = data["energies"], data["forces"], float(data["seconds"])
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    if energies.shape != (len(n_atoms),) or forces.shape != (sum(n_atoms), 3):
        return None
    return energies, np.split(forces, np.cumsum(n_atoms)[:-1]), seconds
