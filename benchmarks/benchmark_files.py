"""A benchmark's files: arrays it caches between runs and the records it commits.

- :func:`cached`: an array computed once and read back on later runs (kernel matrices);
- :func:`merge_records`: new records merged into a committed JSON list, replacing the old
  records with the same key and keeping the rest (so runs of other settings side by side
  keep each other's), written atomically.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import numpy as np

from molntk.utils.files import atomic_write_text


def cached(path: Path, compute: Callable[[], np.ndarray]) -> tuple[np.ndarray, float | None]:
    """The array at ``path``, else ``compute()`` saved there; and the seconds it took (None: read)."""
    if path.exists():
        return np.load(path), None
    start = time.perf_counter()
    value = compute()
    seconds = time.perf_counter() - start
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, value)
    return value, seconds


def merge_records(path: Path, new: list[dict[str, Any]], key: Callable[[dict[str, Any]], Hashable]) -> None:
    """Write the records at ``path`` (a JSON list; none when absent) without those whose
    ``key`` one of ``new`` has, followed by ``new``; read just before writing."""
    keys = {key(r) for r in new}
    old = json.loads(path.read_text()) if path.exists() else []
    atomic_write_text(path, json.dumps([r for r in old if key(r) not in keys] + new, indent=1, ensure_ascii=False) + "\n")
