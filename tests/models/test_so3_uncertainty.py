"""Calibrated standard deviations of ``SO3NTKRegressor`` on real QM9 molecules, in the
degenerate cases of issue 15 (2 training molecules; copies of one molecule) and on the
session's fitted estimator."""

from __future__ import annotations

import numpy as np
import pytest

from molntk.models.so3_ntk import SO3NTKRegressor
from molntk.regression.calibration import UncalibratedWarning

#: A coarse grid, as the session's fitted estimator (tests/conftest.py).
SMALL = {"grid_band_limit": 2, "psd_rtol": 1e-4}


@pytest.fixture(scope="module")
def chno(qm9):
    """QM9 molecules 0–119 with C, H, N and O, and their U0 (meV)."""
    mols = qm9.molecules(range(120))
    y = np.asarray(qm9.target("u0_atom")[:120])
    keep = [i for i, m in enumerate(mols) if set(m.numbers.tolist()) == {1, 6, 7, 8}]
    return [mols[i] for i in keep], y[keep]


def test_two_training_molecules_give_stds_of_the_size_of_the_errors(chno):
    """Issue 15: 2e-8 meV stds for 15,000 meV errors. The dressed-atom model fits two molecules
    exactly, so the kernel's own residuals are 0; the whole-model leave-one-out (dressed atoms
    refitted without each molecule) measures the error. Median |z| within a factor 5 of a
    Gaussian's 0.67 (two molecules give one amplitude estimate from two residuals)."""
    mols, y = chno
    model = SO3NTKRegressor(**SMALL).fit(mols[:2], y[:2])
    mean, std = model.predict(mols[2:8], return_std=True)
    z = np.abs(mean - y[2:8]) / std
    assert np.abs(mean - y[2:8]).min() > 100.0  # the errors are large, as in the issue
    assert 0.67 / 5 < np.median(z) < 0.67 * 5


def test_copies_of_one_molecule_give_an_unknown_std_not_a_confident_one(chno):
    """Issue 15: 10 identical molecules gave 7–9 meV for 21,000 meV errors. Every leave-one-out
    prediction is then exact, so the data hold no error scale: the std is inf with an
    UncalibratedWarning."""
    mols, y = chno
    with pytest.warns(UncalibratedWarning):
        model = SO3NTKRegressor(**SMALL).fit([mols[0]] * 10, np.full(10, y[0]))
    _, std = model.predict(mols[2:4], return_std=True)
    assert np.all(np.isinf(std))


def test_std_of_y_exceeds_std_of_f_by_the_fitted_noise(fitted_so3):
    """std_y² − std_f² = σ² σ_f² λ (the noise variance in target units) for every molecule."""
    model, mols, _ = fitted_so3
    _, std_y = model.predict(mols[30:34], return_std=True)
    _, std_f = model.predict(mols[30:34], return_std=True, std_of="f")
    reg = model.regressor_
    noise = reg.target_scale_[0] ** 2 * reg.amplitude_[0] * reg.reg_
    np.testing.assert_allclose(std_y**2 - std_f**2, noise, rtol=1e-6)
    assert np.all(std_f > 0)


def test_domain_scores_flag_distorted_molecules_not_training_ones(fitted_so3):
    """The estimator's out-of-domain scores (molntk.features.domain on its training molecules):
    training molecules score ≈ 0; the same molecules with every bond 1.5 times as long score
    above 1. (30 small, diverse training molecules cover little: left out, they lie far from
    each other, so the threshold is wide and a 0.3 Å rattle still passes for some.)"""
    from molntk.data.molecule import Molecule

    model, mols, _ = fitted_so3
    stretched = [Molecule(m.numbers, 1.5 * m.positions, id=m.id) for m in mols[:10]]
    assert np.all(model.domain_scores(mols[:10]) < 1e-3)
    assert np.all(model.domain_scores(stretched) > 1)
    assert model.domain_.threshold > 0
