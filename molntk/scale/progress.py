"""Progress of a block computation: a callback ``progress(done, total)`` and a rich bar.

The engine calls ``progress(done, total)`` after every block (cached blocks count at once),
so any callback works; :func:`rich_progress` gives one that draws a rich progress bar with
the elapsed time and the ETA (rich's estimate from the recent block rate).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

ProgressCallback = Callable[[int, int], None]


@contextmanager
def rich_progress(description: str = "kernel blocks", *, transient: bool = False) -> Iterator[ProgressCallback]:
    """``with rich_progress() as cb: kernel_matrices(..., progress=cb)`` shows a bar with ETA."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, transient=transient) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
