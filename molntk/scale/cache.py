"""On-disk cache of kernel blocks, safe against interruption and damage.

Layout: ``<cache_dir>/<run key>/<block key>.npz`` with

    run key   = sha256(json{kernel: block_kernel.cache_key(), molntk: version})
    block key = sha256(run key, item keys of the rows, "|" + item keys of the cols or "symmetric")

with ``item keys`` = ``block_kernel.item_keys()``, a content digest of each molecule, so a
block is identified by the content that determines it: the kernel and model config, the
molecules of the block, in order, and the code version; not by the molecule set or the
block's position in it (a learning curve extended by larger sizes finds every block of the
shorter run: blocks are cut at each size, so its blocks group the same molecules; a size
added below the largest cuts the blocks between it and the next size differently, and
those are computed again). Each block file holds the named matrices plus ``__sha256__``,
the SHA-256 of (name, dtype, shape, bytes) of every matrix in name order. Files are
written to a temporary sibling and renamed (:func:`molntk.utils.files.atomic_path`), so a
killed run leaves whole blocks or none; on read the checksum is recomputed, and an
unreadable or mismatching file is reported by a :class:`DamagedBlockWarning` and treated
as missing (the engine recomputes and rewrites it). ``manifest.json`` in the run directory
records the key material for people.
"""

from __future__ import annotations

import hashlib
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np

from molntk._version import __version__
from molntk.utils.files import atomic_path, atomic_write_json

CHECKSUM = "__sha256__"
#: Name of the 0-d entry holding the seconds a block took to compute (written by the engine).
SECONDS = "__seconds__"


class DamagedBlockWarning(UserWarning):
    """A cached block failed to load or its checksum did not match; it is recomputed."""


def arrays_checksum(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over (name, dtype, shape, C-order bytes) of each array, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def run_key(kernel_key: str) -> str:
    """Hash of the kernel's cache key and the molntk version (the run directory's name)."""
    return hashlib.sha256(json.dumps({"kernel": kernel_key, "molntk": __version__}).encode()).hexdigest()


class BlockCache:
    """Blocks of one kernel (``kernel_key``: its ``cache_key()``; ``item_keys``: its
    ``item_keys()``, (n_molecules, k) uint8 content digests) under ``directory``."""

    def __init__(self, directory: str | Path, kernel_key: str, item_keys: np.ndarray) -> None:
        item_keys = np.asarray(item_keys)
        if item_keys.ndim != 2 or item_keys.dtype != np.uint8:
            raise ValueError(f"item_keys must be an (n_molecules, k) uint8 array, got {item_keys.dtype} {item_keys.shape}")
        self.item_keys = item_keys
        self.run_key = run_key(kernel_key)
        self.directory = Path(directory) / self.run_key[:32]
        self.directory.mkdir(parents=True, exist_ok=True)
        manifest = self.directory / "manifest.json"
        if not manifest.exists():
            atomic_write_json(manifest, {"kernel_key": kernel_key, "molntk": __version__, "run_key": self.run_key})

    def block_key(self, rows: np.ndarray, cols: np.ndarray | None) -> str:
        """sha256(run key, the rows' item keys, "symmetric" or "|" + the cols' item keys)."""
        h = hashlib.sha256(self.run_key.encode())
        h.update(np.ascontiguousarray(self.item_keys[rows]).tobytes())
        h.update(b"symmetric" if cols is None else b"|" + np.ascontiguousarray(self.item_keys[cols]).tobytes())
        return h.hexdigest()

    def path(self, rows: np.ndarray, cols: np.ndarray | None) -> Path:
        return self.directory / f"{self.block_key(rows, cols)[:40]}.npz"

    def load(self, rows: np.ndarray, cols: np.ndarray | None) -> dict[str, np.ndarray] | None:
        """The cached block, or None when absent or damaged (with a DamagedBlockWarning)."""
        path = self.path(rows, cols)
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: data[name] for name in data.files}
            stored = str(arrays.pop(CHECKSUM))
            if stored != arrays_checksum(arrays):
                raise ValueError("checksum mismatch")
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
            warnings.warn(f"cached kernel block {path} is damaged ({err}); recomputing it", DamagedBlockWarning, stacklevel=2)
            return None
        return arrays

    def store(self, rows: np.ndarray, cols: np.ndarray | None, arrays: dict[str, np.ndarray]) -> Path:
        """Write a block atomically with its checksum; returns its path."""
        if CHECKSUM in arrays:
            raise ValueError(f"block matrices must not be named {CHECKSUM!r}")
        path = self.path(rows, cols)
        with atomic_path(path, suffix=".npz") as tmp:
            np.savez(tmp, **arrays, **{CHECKSUM: np.array(arrays_checksum(arrays))})
        return path
