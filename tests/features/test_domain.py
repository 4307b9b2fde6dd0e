"""Out-of-domain scores (molntk.features.domain) on real QM9 molecules: the nearest distances
against scipy's KD-tree, the calibration of the threshold, and distorted molecules flagged."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import cKDTree

from molntk.data.molecule import Molecule
from molntk.data.splits import standard_split
from molntk.errors import InputError
from molntk.features.domain import EnvironmentDomain
from molntk.features.environments import FeatureConfig, environment_features
from molntk.features.inducing import channel_amplitudes


@pytest.fixture(scope="module")
def split_molecules(qm9):
    """150 training and 60 test molecules of the standard split, and their domain."""
    split = standard_split(len(qm9), 0)
    train, test = qm9.molecules(split.train[:150].tolist()), qm9.molecules(split.test[:60].tolist())
    return train, test, EnvironmentDomain.fit(environment_features(train, FeatureConfig()))


def _amplitudes(molecules):
    feats = environment_features(molecules, FeatureConfig())
    return channel_amplitudes(feats.coeffs.double(), 4).numpy(), feats.centre_numbers.numpy(), feats.molecule_index.numpy()


def test_scores_are_nearest_distances_in_units_of_the_spacing(split_molecules):
    """Score of a test molecule = max over atoms of (KD-tree nearest distance among the training
    environments of its element) / q_e / t; q_e is the median nearest distance to another
    training molecule's environment of element e (KD-tree on the other molecules)."""
    train, test, domain = split_molecules
    amps, numbers, molecules = _amplitudes(train)
    for e in (6, 8):
        rows = numbers == e
        nearest = []
        for mol in np.unique(molecules[rows]):
            own = rows & (molecules == mol)
            nearest += list(cKDTree(amps[rows & ~own]).query(amps[own])[0])
        assert domain.scales[e] == pytest.approx(np.median(nearest), rel=1e-9)
    test_amps, test_numbers, test_molecules = _amplitudes(test[:5])
    expected = np.zeros(5)
    for i in range(len(test_numbers)):
        e = int(test_numbers[i])
        d = cKDTree(amps[numbers == e]).query(test_amps[i])[0] / domain.scales[e]
        expected[test_molecules[i]] = max(expected[test_molecules[i]], d)
    np.testing.assert_allclose(domain.scores(environment_features(test[:5], FeatureConfig())), expected / domain.threshold, rtol=1e-7)


def test_training_molecules_are_in_domain_and_distorted_ones_are_flagged(split_molecules):
    """Training molecules score 0 (their own environments are in the reference); held-out
    molecules of the same split mostly score below 1 (by construction about 1 % of training
    molecules left out score above 1; ≤ 15 % allowed for 60 molecules against 150); the same
    molecules stretched by 30 % or rattled by 0.2 Å (Gaussian) all score above 1."""
    train, test, domain = split_molecules
    assert np.all(domain.scores(environment_features(train[:20], FeatureConfig())) < 1e-3)
    assert np.mean(domain.scores(environment_features(test, FeatureConfig())) > 1) <= 0.15
    rng = np.random.default_rng(0)
    stretched = [Molecule(m.numbers, 1.3 * m.positions, id=m.id) for m in test[:10]]
    rattled = [Molecule(m.numbers, m.positions + rng.normal(scale=0.2, size=m.positions.shape), id=m.id) for m in test[:10]]
    for distorted in (stretched, rattled):
        assert np.all(domain.scores(environment_features(distorted, FeatureConfig())) > 1)


def test_an_element_without_reference_environments_scores_inf(qm9):
    mols = qm9.molecules(range(1, 12))  # no fluorine
    domain = EnvironmentDomain.fit(environment_features(mols, FeatureConfig()))
    hf = Molecule(np.array([9, 1]), np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.92]]), id="HF")
    assert np.isinf(domain.scores(environment_features([hf], FeatureConfig()))[0])
    with pytest.raises(InputError) as err:
        EnvironmentDomain.fit(environment_features(mols[:1], FeatureConfig()))
    assert err.value.source == "reference"
