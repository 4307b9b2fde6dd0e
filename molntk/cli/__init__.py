"""Command-line interface ``molntk`` (entry point ``molntk.cli:app``).

Commands: ``info``, ``data qm9``, ``data read``, ``config show``, ``config validate``,
``run``, ``fit``, ``predict``. See :mod:`molntk.cli.main`.
"""

from molntk.cli.main import app

__all__ = ["app"]
