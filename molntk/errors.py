"""Error types of molntk.

Every error raised because of a user's input names the input (file, line, SMILES,
configuration key) and says what is wrong with it, so that a batch job can report
the item and go on with the rest.
"""

from __future__ import annotations


class MolntkError(Exception):
    """Base class of all errors raised deliberately by molntk."""


class InputError(MolntkError, ValueError):
    """A molecule, file or value given by the user cannot be used.

    ``source`` names the input (a path, ``path:line``, a SMILES string, ``atoms[3]``),
    ``problem`` says what is wrong with it.
    """

    def __init__(self, source: str, problem: str, *, line: int | None = None) -> None:
        self.source = str(source)
        self.problem = problem
        self.line = line
        where = f"{self.source}:{line}" if line is not None else self.source
        super().__init__(f"{where}: {problem}")

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line is not None else self.source


class ModelFileError(InputError):
    """A model file is missing, damaged, or not a molntk model (``source`` names the file).

    The command line treats it as a usage error (exit status 2): no molecule can be
    predicted without the model."""


class OutputError(MolntkError):
    """A result file or folder cannot be written (not a folder, not writable); found before any work."""


class ConfigError(MolntkError, ValueError):
    """A configuration file or override is invalid (unknown key, wrong type, impossible value)."""


class CacheError(MolntkError):
    """A cache file is missing, damaged, or was written by an incompatible version."""
