"""Progress shown while a command runs, on stderr: rich bars on a terminal, plain lines in logs.

- :func:`job_progress`: the :class:`~molntk.scale.progress.Progress` handed to a task's
  ``run``: one transient bar per label when stderr is a terminal, else :class:`ProgressLines`
  (batch logs);
- :class:`ProgressLines`: per label, a line at its first step, at most one every ``every``
  seconds after that and one when it is done, with the elapsed time and the ETA;
- :func:`rich_progress`: a single bar for the block engine's ``progress(done, total)``
  (``kernel_matrices(..., progress=bar)``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress as RichProgress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from molntk.cli.output import stderr
from molntk.scale.progress import Progress, ProgressCallback


class ProgressLines:
    """Progress as plain lines for logs: for each label, a line at its first block, at most
    one every ``every`` seconds after that, and one when it is done, with the blocks done,
    the seconds since the job started and since the label's first report, and the ETA at
    the label's mean rate so far (blocks of one label cost about the same):
    ETA = (total − done) / rate, rate = (blocks since the first report) / (seconds since it)."""

    def __init__(self, write: Callable[[str], None], every: float = 30.0) -> None:
        self.write, self.every = write, every
        self.start = time.perf_counter()
        self.first: dict[str, tuple[float, int]] = {}
        self.last: dict[str, float] = {}

    def __call__(self, label: str, done: int, total: int) -> None:
        now = time.perf_counter()
        began, done_then = self.first.setdefault(label, (now, done))
        if done < total and label in self.last and now - self.last[label] < self.every:
            return
        self.last[label] = now
        rate = (done - done_then) / (now - began) if now > began and done > done_then else 0.0
        eta = f", ETA {(total - done) / rate:.0f} s" if 0 < rate and done < total else ""
        self.write(f"{label}: {done}/{total} blocks, {now - began:.0f} s ({now - self.start:.0f} s into the job){eta}")


@contextmanager
def job_progress() -> Iterator[Progress]:
    """A job's progress on stderr for a ``with`` block: a transient bar per label on a
    terminal (label, bar, blocks done, elapsed, remaining), else :class:`ProgressLines`."""
    console = stderr()
    if not console.is_terminal:
        yield ProgressLines(lambda line: console.print(line, soft_wrap=True, markup=False, highlight=False))
        return
    columns = (TextColumn("{task.description:<18}"), BarColumn(), TextColumn("{task.completed}/{task.total} blocks"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with RichProgress(*columns, console=console, transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def draw(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total)
            bar.update(tasks[label], completed=done)

        yield draw


@contextmanager
def rich_progress(description: str = "kernel blocks", *, transient: bool = False) -> Iterator[ProgressCallback]:
    """``with rich_progress() as cb: kernel_matrices(..., progress=cb)`` shows a bar with ETA."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with RichProgress(*columns, transient=transient) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
