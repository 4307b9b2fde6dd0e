"""Progress reports: the block engine's ``progress(done, total)`` and a job's labelled ``progress(label, done, total)``.

The engine calls a :data:`ProgressCallback` ``progress(done, total)`` after every block
(cached blocks count at once). A pipeline computing several kernels reports to a
:class:`Progress`, ``progress(label, done, total)``, one label per kernel;
:func:`labelled` turns it into the engine's callback for one label. How progress is shown
(a bar on a terminal, lines in a log) is the business of :mod:`molntk.cli.progress`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

ProgressCallback = Callable[[int, int], None]


class Progress(Protocol):
    """Receiver of a job's progress: ``done`` of ``total`` steps of the part named ``label``."""

    def __call__(self, label: str, done: int, total: int) -> None: ...


def labelled(progress: Progress | None, label: str) -> ProgressCallback | None:
    """The engine callback ``(done, total) -> progress(label, done, total)`` (None without ``progress``)."""
    if progress is None:
        return None

    def report(done: int, total: int) -> None:
        progress(label, done, total)

    return report
