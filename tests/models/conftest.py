"""Fixtures of the force-field tests: the committed GFN2-xTB MD sample and one BLAS thread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from molntk.data.labelled import read_labelled

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "md" / "ethanol_sample.extxyz"


@pytest.fixture
def one_blas_thread() -> Iterator[None]:
    """One BLAS thread: the (N + 3Σn)-row matrices are small and the cores are shared."""
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def sample() -> tuple[list, np.ndarray, list[np.ndarray]]:
    """The 100 ethanol frames of data/md/ethanol_sample.extxyz: molecules, energies (eV), forces (eV/Å)."""
    data = read_labelled(SAMPLE, "energy", forces=True)
    return data.molecules, np.asarray(data.targets["energy"]), data.forces
