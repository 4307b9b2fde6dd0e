"""The fits of ``task: md-force-field`` kept on disk as each finishes, so a killed run resumes.

A record is stored as ``<output>/fit_cache/<key>.json`` with

    key = sha256(json{frames: SHA-256 of the frames' file, energy key and unit, split seed,
                      n_test, model name, the estimator's parameters, n_train, molntk version})

the content that determines it; written atomically (whole or absent). A rerun of the same
config finds the records of the fits it already made and fits only the rest; a record
whose file is unreadable is fitted again. An SO(3) force field is also stored as soon as it
is fitted, before its predictions, as ``<key>.molntk.npz`` (its model file, with the fit's
seconds in its provenance): a run killed while predicting (half an hour for 1,000 aspirin
test frames) predicts again without fitting again. Its ``fit_seconds`` and ``predict_seconds`` are
those of the run that made it. The key names the molntk version, not the code: whoever
changes the code between runs of one version deletes ``fit_cache/`` (as ``kernel_cache/`` of
the QM9 task, :mod:`molntk.scale.cache`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from molntk._version import __version__
from molntk.errors import ModelFileError
from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.models.model_files import MODEL_SUFFIX
from molntk.pipelines.files import jsonable
from molntk.utils.files import atomic_write_json

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
