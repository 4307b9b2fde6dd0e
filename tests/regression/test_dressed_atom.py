"""The dressed-atom baseline (molntk.regression.dressed_atom): per-element weights, element
counts, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.regression import DressedAtomModel, element_counts


def test_dressed_atom_model_recovers_per_element_weights():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 10, size=(60, 5))
    weights = np.array([[-0.5, 2.0], [-37.8, 1.0], [-54.6, 0.5], [-75.1, -3.0], [-99.7, 7.0]])
    y = counts @ weights
    model = DressedAtomModel().fit(counts, y)
    np.testing.assert_allclose(model.coef_, weights, rtol=1e-9)
    np.testing.assert_allclose(model.residual(counts, y), 0.0, atol=1e-10 * np.max(np.abs(y)))  # ridge bias ~ 1e-12 · κ²
    with_intercept = DressedAtomModel(intercept=True).fit(counts, y[:, 0] + 12.5)
    np.testing.assert_allclose(with_intercept.coef_, weights[:, 0], rtol=1e-9)
    assert float(with_intercept.intercept_) == pytest.approx(12.5, rel=1e-9)
    assert with_intercept.predict(counts[:3]).shape == (3,)
    # an element absent from the training data gets weight 0 instead of a singular solve
    counts[:, 4] = 0
    np.testing.assert_allclose(DressedAtomModel().fit(counts, counts @ weights[:, 0]).coef_[4], 0.0, atol=1e-12)


def test_element_counts_from_molecules():
    water = Molecule(numbers=[8, 1, 1], positions=[[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]], id="water")
    methane = Molecule(
        numbers=[6, 1, 1, 1, 1], positions=[[0, 0, 0], [0.63, 0.63, 0.63], [-0.63, -0.63, 0.63], [-0.63, 0.63, -0.63], [0.63, -0.63, -0.63]], id="methane"
    )
    counts = element_counts([water, methane], ["H", "C", 8])
    np.testing.assert_array_equal(counts, [[2, 0, 1], [4, 1, 0]])
    with pytest.raises(InputError, match="not in elements") as err:
        element_counts([water], [1, 6])
    assert "water" in err.value.source
    with pytest.raises(InputError) as err:
        element_counts([water], [1, 1, 8])
    assert err.value.source == "elements"


def test_dressed_atom_bad_input():
    with pytest.raises(InputError) as err:
        DressedAtomModel().fit(-np.ones((3, 2)), np.zeros(3))
    assert err.value.source == "counts"
    with pytest.raises(InputError) as err:
        DressedAtomModel().fit(np.ones((3, 2)), np.zeros(4))
    assert err.value.source == "y"
    model = DressedAtomModel().fit(np.eye(3), np.arange(3.0))
    with pytest.raises(InputError) as err:
        model.predict(np.ones((2, 4)))
    assert err.value.source == "counts"
