"""The ASE calculator (molntk.models.calculator): units, results, errors, and a BFGS run."""

from __future__ import annotations

import numpy as np
import pytest
from ase import units
from ase.optimize import BFGS

from molntk.data.readers import molecule_to_atoms
from molntk.errors import InputError
from molntk.models.calculator import EV_PER_UNIT, MolntkCalculator
from molntk.models.so3_ntk import SO3NTKRegressor

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models(qm9):
    mols = qm9.molecules(range(1, 41))
    y = np.asarray(qm9.target("u0_atom")[1:41])
    exact = SO3NTKRegressor(grid_band_limit=2, psd_rtol=1e-4).fit(mols[:30], y[:30])
    sparse = SO3NTKRegressor(grid_band_limit=2, psd_rtol=1e-4, inducing=60).fit(mols[:30], y[:30])
    return exact, sparse, mols


def test_energy_forces_and_std_in_ev(models):
    """meV model: E[eV] = predict / 1000, F[eV/Å] = predict_forces / 1000, energy_std = std / 1000."""
    exact, _, mols = models
    mol = mols[35]
    atoms = molecule_to_atoms(mol)
    atoms.calc = MolntkCalculator(exact)
    mean, std = exact.predict([mol], return_std=True)
    np.testing.assert_allclose(atoms.get_potential_energy(), mean[0] / 1000, rtol=1e-11)
    np.testing.assert_allclose(atoms.get_forces(), exact.predict_forces([mol])[0] / 1000, rtol=1e-11, atol=1e-15)
    np.testing.assert_allclose(atoms.calc.results["energy_std"], std[0] / 1000, rtol=1e-11)


def test_units_follow_ase(models):
    """Hartree and kcal/mol models: the same numbers scaled by ase.units' factors; a model's
    declared ``unit_`` wins over the default and must agree with an explicit unit."""
    exact, sparse, mols = models
    assert EV_PER_UNIT["Hartree"] == units.Hartree and EV_PER_UNIT["kcal/mol"] == pytest.approx(0.0433641, rel=1e-5)
    atoms = molecule_to_atoms(mols[33])
    atoms.calc = MolntkCalculator(sparse, unit="Hartree")
    np.testing.assert_allclose(atoms.get_potential_energy(), sparse.predict([mols[33]])[0] * units.Hartree, rtol=1e-11)
    assert "energy_std" not in atoms.calc.results  # a sparse model has no variance
    sparse.unit_ = "kcal/mol"
    try:
        assert MolntkCalculator(sparse).unit == "kcal/mol"
        with pytest.raises(InputError, match="unit: 'meV' given, but the model's target is in 'kcal/mol'"):
            MolntkCalculator(sparse, unit="meV")
    finally:
        del sparse.unit_


def test_refuses_what_is_not_an_energy_model(models):
    exact, _, mols = models
    with pytest.raises(InputError, match="unit: 'D' is not an energy unit"):
        MolntkCalculator(exact, unit="D")
    with pytest.raises(InputError, match="needs a fitted model"):
        MolntkCalculator(SO3NTKRegressor())
    atoms = molecule_to_atoms(mols[33])
    atoms.pbc = True
    atoms.cell = [10.0, 10.0, 10.0]
    atoms.calc = MolntkCalculator(exact)
    with pytest.raises(InputError, match="periodic cells are not supported"):
        atoms.get_potential_energy()


def test_bfgs_lowers_the_model_energy_to_a_stationary_point(models):
    """BFGS under the calculator converges (max |F| < 0.05 eV/Å) and lowers the model's energy."""
    _, sparse, mols = models
    atoms = molecule_to_atoms(mols[32])
    atoms.positions += np.random.default_rng(0).normal(0.0, 0.05, atoms.positions.shape)
    atoms.calc = MolntkCalculator(sparse)
    start = atoms.get_potential_energy()
    assert BFGS(atoms, maxstep=0.1, logfile=None).run(fmax=0.05, steps=200)
    assert atoms.get_potential_energy() < start
    assert np.abs(atoms.get_forces()).max() < 0.05
