"""Fixtures of the molecular-kernel tests: small QM9 molecules (test_so3.py has its own)."""

from __future__ import annotations

import pytest

from molntk.data.molecule import Molecule


@pytest.fixture(scope="module")
def molecules(qm9) -> list[Molecule]:
    """Nine small QM9 molecules (H, C, N, O; 3–9 atoms)."""
    return qm9.molecules(range(0, 9))
