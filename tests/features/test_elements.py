"""Neighbour-element similarity (molntk.features.elements): the periodic table's coordinates,
S and its square root, and what the mixed feature maps do to channel inner products."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from molntk.data.molecule import Molecule
from molntk.features.elements import element_mixing, element_similarity, mix_elements, period_and_group
from molntk.features.environments import FeatureConfig, environment_features

#: (Z, period, group) from the IUPAC periodic table, f-block elements in group 3.
TABLE = [(1, 1, 1), (2, 1, 18), (3, 2, 1), (6, 2, 14), (7, 2, 15), (8, 2, 16), (9, 2, 17), (10, 2, 18),
         (11, 3, 1), (13, 3, 13), (16, 3, 16), (17, 3, 17), (19, 4, 1), (21, 4, 3), (26, 4, 8), (29, 4, 11),
         (35, 4, 17), (47, 5, 11), (53, 5, 17), (55, 6, 1), (57, 6, 3), (71, 6, 3), (72, 6, 4), (78, 6, 10),
         (86, 6, 18), (87, 7, 1), (92, 7, 3), (118, 7, 18)]


@pytest.mark.parametrize(("z", "period", "group"), TABLE)
def test_period_and_group(z, period, group):
    assert period_and_group(z) == (period, group)


@pytest.mark.parametrize("z", [0, 119, -3])
def test_not_an_atomic_number(z):
    with pytest.raises(ValueError, match="atomic number"):
        period_and_group(z)


def test_similarity_of_qm9_elements():
    """C, N, O, F lie in one period: S = κ^{Δg²} with κ = exp(−1/(2w²)); H against C is
    exp(−(1 + 13²)/(2w²)); the square root squares back to S and is symmetric."""
    w = 1.5
    kappa = np.exp(-1 / (2 * w**2))
    s = element_similarity((1, 6, 7, 8, 9), w)
    heavy = np.array([6, 7, 8, 9])
    np.testing.assert_allclose(s[1:, 1:], kappa ** ((heavy[:, None] - heavy[None, :]) ** 2), rtol=1e-14)
    assert s[0, 1] == pytest.approx(np.exp(-170 / (2 * w**2)), rel=1e-14)
    a = element_mixing((1, 6, 7, 8, 9), w)
    np.testing.assert_allclose(a, a.T, atol=0)
    np.testing.assert_allclose(a @ a, s, atol=1e-14)


def test_mix_elements_along_any_axis():
    """Σ_e' A_ee' t[…, e', …] on axis 1 of a 4-axis tensor equals the explicit einsum."""
    a = element_mixing((1, 6, 8), 2.0)
    t = torch.randn(5, 3, 4, 2, dtype=torch.float64)
    np.testing.assert_allclose(mix_elements(t, a, 1).numpy(), np.einsum("ef,afkl->aekl", a, t.numpy()), atol=1e-14)
    assert mix_elements(t, None, 1) is t


def test_mixed_maps_overlap_neighbours_of_close_elements():
    """A carbon neighbour and a nitrogen neighbour at the same place: unmixed, their channel
    inner product is 0; mixed, it is S_CN times that of two carbon neighbours (the inner product
    Σ_c f_c g_c becomes Σ S_ee' f_e g_e'), and the self inner products stay those of the
    unmixed maps (S_ee = 1, no other element present)."""
    place = np.array([[0.0, 0.0, 0.0], [0.6, 0.8, 0.9]])
    carbon, nitrogen = (Molecule(np.array([1, z]), place) for z in (6, 7))
    plain = FeatureConfig(elements=(1, 6, 7, 8, 9))
    mixed = dataclasses.replace(plain, element_width=1.5)

    def hydrogen_env(config, molecule):
        return environment_features([molecule], config).coeffs[0].numpy()  # the environment of atom 0 (H)

    cc = np.sum(hydrogen_env(plain, carbon) ** 2)
    assert cc > 0
    assert np.sum(hydrogen_env(plain, carbon) * hydrogen_env(plain, nitrogen)) == 0
    s_cn = element_similarity((6, 7), 1.5)[0, 1]
    assert np.sum(hydrogen_env(mixed, carbon) * hydrogen_env(mixed, nitrogen)) == pytest.approx(s_cn * cc, rel=1e-12)
    assert np.sum(hydrogen_env(mixed, carbon) ** 2) == pytest.approx(cc, rel=1e-12)


@pytest.mark.parametrize("width", [0, -1.0, float("nan"), "wide"])
def test_bad_width_names_the_key(width):
    with pytest.raises(ValueError, match="element_width"):
        FeatureConfig(element_width=width)


def test_width_survives_the_dict_round_trip():
    config = FeatureConfig(element_width=2.0)
    assert FeatureConfig.from_dict(config.to_dict()) == config
    assert FeatureConfig.from_dict(FeatureConfig().to_dict()).element_width is None
