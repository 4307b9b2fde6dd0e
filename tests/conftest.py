"""Shared test fixtures.

The whole session (all xdist workers) uses one temporary molntk cache directory, so the
tests never touch the user's cache and the QM9 cache is built once per session: the
first worker builds it under the cache's file lock while the other waits.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from molntk.data.molecule import Molecule
from molntk.data.qm9 import CACHE_ENV, QM9, load_qm9
from molntk.models.so3_ntk import SO3NTKRegressor


@pytest.fixture(scope="session", autouse=True)
def molntk_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``$MOLNTK_CACHE_DIR`` for the session: one directory shared by all xdist workers."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    cache = shared / "molntk-cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(cache))
        yield cache


@pytest.fixture(scope="session")
def qm9(molntk_cache_dir: Path) -> QM9:
    """All of QM9 (qm9pack), through the session's cache."""
    return load_qm9()


@pytest.fixture(scope="session")
def fitted_so3(qm9: QM9) -> tuple[SO3NTKRegressor, list[Molecule], np.ndarray]:
    """An SO(3) NTK estimator fitted on QM9 molecules 1–30 (U0), with molecules 1–40 and
    their targets (31–40 are its test set); shared by the estimator and predict tests."""
    mols = qm9.molecules(range(1, 41))
    y = np.asarray(qm9.target("u0_atom")[1:41])
    return SO3NTKRegressor(grid_band_limit=2, psd_rtol=1e-4).fit(mols[:30], y[:30]), mols, y


@pytest.fixture(scope="session")
def tiles() -> Path:
    """The 9 real NCT-CRC-HE tiles: $MOLNTK_SHARED_DATA/nct_crc_he_samples, else the
    project's shared/data beside the repository (skipped, and said so, when neither exists)."""
    env = os.environ.get("MOLNTK_SHARED_DATA")
    root = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    folder = root / "nct_crc_he_samples"
    if not folder.is_dir():
        pytest.skip(f"NCT-CRC-HE samples not found at {folder} (set MOLNTK_SHARED_DATA)")
    return folder


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Run a test with one torch thread: its tensors are tiny, so OpenMP start-up would
    dominate (and two xdist workers would oversubscribe the cores); restored afterwards."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
