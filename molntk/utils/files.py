"""Atomic file writes and checksums.

A file is written to a temporary sibling, flushed and fsynced, then renamed over the
target (``os.replace`` is atomic on POSIX and Windows), so a reader never sees a file
written half way and an interrupted write leaves the old file (or none) in place.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


@contextmanager
def atomic_path(target: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on success rename it onto ``target``.

    Use it for writers that insist on a file name (``numpy.savez``, ``matplotlib``).
    ``suffix`` keeps an extension that such writers look at.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".tmp{suffix}", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
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
    parent = target.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"the folder {parent} is not writable"
    return None
