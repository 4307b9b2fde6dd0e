"""Atomic file writes and checksums.

A file is written to a temporary sibling, flushed and fsynced, then renamed over the
target (``os.replace`` is atomic on POSIX and Windows), so a reader never sees a file
written half way and an interrupted write leaves the old file (or none) in place. A set
of files is written into a staging folder and moved into place at the end
(:func:`staged_folder`), so a failure half way leaves the previous set as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def file_mode(target: Path) -> int:
    """The permission bits ``target`` gets from an atomic write: its own when it exists,
    else those of a plain ``open(target, "w")``, 0o666 less the process's umask (a
    temporary file alone would keep mkstemp's owner-only 0o600)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextmanager
def atomic_path(target: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on success rename it onto ``target``.

    Use it for writers that insist on a file name (``numpy.savez``, ``matplotlib``).
    ``suffix`` keeps an extension that such writers look at. The file gets the permission
    bits of :func:`file_mode`.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".tmp{suffix}", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        os.chmod(tmp_path, file_mode(target))
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_write(target: str | os.PathLike[str], write: Callable[[IO[Any]], None], *, binary: bool) -> None:
    """Call ``write(handle)`` on a temporary file and rename it onto ``target``."""
    with atomic_path(target) as tmp:
        with open(tmp, "wb" if binary else "w", encoding=None if binary else "utf-8") as fh:
            write(fh)


def atomic_write_text(target: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``target`` atomically."""
    atomic_write(target, lambda fh: fh.write(text), binary=False)


def atomic_write_bytes(target: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``target`` atomically."""
    atomic_write(target, lambda fh: fh.write(data), binary=True)


def atomic_write_json(target: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``target`` atomically."""
    atomic_write_text(target, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_write_problem(target: str | os.PathLike[str]) -> str | None:
    """Why ``target`` cannot be written as a file, or None when it can: it names a folder,
    or its nearest existing ancestor is not a writable folder (missing folders below that
    one are created by the atomic writers). Checked before work whose result goes there."""
    target = Path(target)
    if target.is_dir():
        return "is a folder, not a file"
    return _ancestor_write_problem(target.parent)


def _ancestor_write_problem(place: Path) -> str | None:
    """Why nothing can be created at ``place``: its nearest existing ancestor (itself when it
    exists) is not a folder or not writable; None when it is a writable folder."""
    while not place.exists():
        place = place.parent
    if not place.is_dir():
        return f"{place} is not a folder"
    if not os.access(place, os.W_OK | os.X_OK):
        return f"the folder {place} is not writable"
    return None


def folder_write_problem(folder: str | os.PathLike[str]) -> str | None:
    """Why files cannot be written into ``folder`` and beside it (where
    :func:`staged_folder` stages them), or None when they can: it exists and is not a folder,
    it or its parent is not writable, or the nearest existing ancestor of a missing one is
    not a writable folder."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        return "exists and is not a folder"
    return _ancestor_write_problem(folder) or _ancestor_write_problem(folder.parent)


@contextmanager
def staged_folder(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a new empty folder beside ``target`` (``.<name>.partial-XXXX``) to write a set of
    result files into; when the block succeeds, move each of its entries into ``target``
    (``os.replace`` per file; a sub-folder replaces the one of the same name whole). On an
    error nothing is moved, so ``target`` keeps exactly what it held; the staging folder is
    removed either way. Entries of ``target`` the set does not name are left alone."""
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        yield stage
        for entry in sorted(stage.iterdir()):
            destination = target / entry.name
            if entry.is_dir() and destination.is_dir():  # the old folder leaves with the staging folder
                os.replace(destination, stage / f".old-{entry.name}")
            os.replace(entry, destination)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
