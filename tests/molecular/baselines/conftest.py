"""Fixtures of the baseline-kernel tests: real environments, one torch thread."""

from __future__ import annotations

import pytest
import torch

from molntk.features.environments import environment_features
from tests.helpers.baselines import CONFIG


@pytest.fixture(scope="module")
def envs(molecules) -> torch.Tensor:
    """Twelve distinct real environments (every other atom of the first molecules)."""
    return environment_features(molecules, CONFIG).coeffs[::3][:12]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """These tests are many small tensor ops: one thread is fastest, and on a shared machine
    torch's spinning worker threads can make them several times slower."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
