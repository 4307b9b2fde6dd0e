"""Δ-learning on a physical baseline (molntk.models.delta, ``SO3NTKRegressor(baseline=...)``):
predictions are the baseline plus the NTK model of the residual, forces are the derivative of
that energy, model files keep the baseline, and bad baselines, units and SCF failures are
InputErrors naming them.

Models: the estimator's network on the coarse Lebedev grid of band limit 2 (fast), fitted on
20 QM9 molecules, exact and sparse (40 inducing environments); GFN2-xTB single points take
≈ 10 ms per molecule.
"""

from __future__ import annotations

import numpy as np
import pytest
from ase.optimize import BFGS

from molntk.data.molecule import Molecule
from molntk.data.readers import molecule_to_atoms
from molntk.errors import InputError, ModelFileError
from molntk.models import delta
from molntk.models.calculator import MolntkCalculator
from molntk.models.so3_ntk import SO3NTKRegressor
from tests.helpers.forces import central_difference_forces

pytest.importorskip("tblite", reason="the GFN2-xTB baseline needs tblite (pip install \"molntk[md]\")")
pytestmark = pytest.mark.usefixtures("one_thread")

COARSE = {"grid_band_limit": 2, "psd_rtol": 1e-4}
MODES = {"exact": {}, "sparse": {"inducing": 40}}


@pytest.fixture(scope="module")
def data(qm9):
    """QM9 rows 1–30 and their U0 (meV): the first 20 train, the others are held out."""
    return qm9.molecules(range(1, 31)), np.asarray(qm9.target("u0_atom")[1:31])


@pytest.fixture(scope="module", params=sorted(MODES))
def model(request, data) -> SO3NTKRegressor:
    mols, y = data
    return SO3NTKRegressor(baseline="gfn2-xtb", **COARSE, **MODES[request.param]).fit(mols[:20], y[:20], unit="meV")


def rattled(molecule: Molecule, sigma: float = 0.05, seed: int = 0) -> Molecule:
    """The molecule with N(0, σ²) Å added to every coordinate."""
    noise = np.random.default_rng(seed).normal(0.0, sigma, molecule.positions.shape)
    return Molecule(molecule.numbers, molecule.positions + noise, id=molecule.id)


def test_prediction_is_the_baseline_plus_the_ntk_model_of_the_residual(model, data):
    """E = E_xTB + E_NTK, E_NTK the same estimator without baseline fitted to y − E_xTB (meV)."""
    mols, y = data
    xtb_train = delta.baseline_results("gfn2-xtb", mols[:20], "meV").energies
    xtb_test = delta.baseline_results("gfn2-xtb", mols[20:], "meV")
    energies = np.array([delta.xtb_single_point(m)[0] for m in mols[20:]])
    np.testing.assert_allclose(xtb_test.energies, energies * 1000, rtol=1e-14)  # eV → meV
    plain = SO3NTKRegressor(**COARSE, **MODES["sparse" if model.inducing else "exact"]).fit(mols[:20], y[:20] - xtb_train)
    np.testing.assert_allclose(model.predict(mols[20:]), xtb_test.energies + plain.predict(mols[20:]), rtol=1e-12)
    assert model.unit_ == "meV" and model.get_params()["baseline"] == "gfn2-xtb"


def test_precomputed_baseline_energies_give_the_same_model(model, data):
    """``fit(..., baseline_energies=E_B)`` (a cache) fits the same model as computing E_B."""
    mols, y = data
    xtb_train = delta.baseline_results("gfn2-xtb", mols[:20], "meV").energies
    cached = SO3NTKRegressor(**model.get_params()).fit(mols[:20], y[:20], unit="meV", baseline_energies=xtb_train)
    np.testing.assert_array_equal(cached.predict(mols[20:23]), model.predict(mols[20:23]))


def test_forces_are_central_differences_of_the_energy(model, data):
    """F = F_xTB + F_NTK against (E(r − h e) − E(r + h e)) / 2h of ``predict`` for every
    coordinate of a held-out molecule (5 atoms) rattled by 0.05 Å, h = 1e-4 Å. xTB's analytic
    gradient assumes an exactly converged SCF: at tblite's accuracy 0.01 it agrees with
    differences of its own energy to ≈ 5e-6 of max |F| near equilibrium (|F| ≈ 0.6 eV/Å), and
    to 6e-8 here (|F| ≈ 25 eV/Å), as does the Δ-model (measured, exact and sparse); bound 1e-6.
    A missing baseline or NTK term is an O(1) error."""
    mols, _ = data
    mol = rattled(mols[25])
    (forces,) = model.predict_forces([mol])
    numeric = central_difference_forces(model.predict, mol, h=1e-4)
    scale = np.abs(forces).max()
    assert scale > 1000  # meV/Å: far from a stationary point
    assert np.abs(forces - numeric).max() / scale < 1e-6


def test_model_file_keeps_the_baseline(model, data, tmp_path):
    """A loaded Δ-model adds the baseline back: the same energies and forces."""
    mols, _ = data
    loaded = SO3NTKRegressor.load(model.save(tmp_path / "delta.molntk.npz"))
    assert loaded.baseline == "gfn2-xtb" and loaded.unit_ == "meV"
    np.testing.assert_allclose(loaded.predict(mols[20:24]), model.predict(mols[20:24]), rtol=1e-12)
    np.testing.assert_allclose(loaded.predict_forces(mols[20:21])[0], model.predict_forces(mols[20:21])[0], rtol=1e-10, atol=1e-9)


def test_calculator_relaxes_on_the_delta_model(model, data):
    """The ASE calculator gives E and F of the Δ-model in eV and eV/Å, and BFGS lowers E."""
    mols, _ = data
    atoms = molecule_to_atoms(rattled(mols[22], sigma=0.1))
    atoms.calc = MolntkCalculator(model, std=False)
    (energy,), (forces,) = model.predict_forces([rattled(mols[22], sigma=0.1)], return_energy=True)
    np.testing.assert_allclose(atoms.get_potential_energy(), energy / 1000, rtol=1e-12)
    np.testing.assert_allclose(atoms.get_forces(), forces / 1000, rtol=1e-10, atol=1e-12)
    BFGS(atoms, logfile=None).run(fmax=0.5, steps=10)
    assert atoms.get_potential_energy() < energy / 1000


def test_bad_baselines_units_and_files_are_named(data, tmp_path):
    mols, y = data
    with pytest.raises(InputError, match="baseline: unknown baseline 'dft'; choose one of gfn2-xtb"):
        SO3NTKRegressor(baseline="dft", **COARSE).fit(mols[:5], y[:5], unit="meV")
    with pytest.raises(InputError, match="unit: None is not an energy unit.*needs its target's energy unit"):
        SO3NTKRegressor(baseline="gfn2-xtb", **COARSE).fit(mols[:5], y[:5])
    with pytest.raises(InputError, match="unit: 'D' is not an energy unit"):
        SO3NTKRegressor(baseline="gfn2-xtb", **COARSE).fit(mols[:5], y[:5], unit="D")
    with pytest.raises(InputError, match=r"y: a model with a baseline learns one energy per molecule, shape \(n,\)"):
        SO3NTKRegressor(baseline="gfn2-xtb", **COARSE).fit(mols[:5], np.stack([y[:5], y[:5]], 1), unit="meV")
    with pytest.raises(InputError, match=r"baseline_energies: has shape \(4,\) for 5 molecules"):
        SO3NTKRegressor(baseline="gfn2-xtb", **COARSE).fit(mols[:5], y[:5], unit="meV", baseline_energies=np.zeros(4))
    with pytest.raises(InputError, match="baseline_energies: given, but the model has no baseline"):
        SO3NTKRegressor(**COARSE).fit(mols[:5], y[:5], baseline_energies=np.zeros(5))
    fitted = SO3NTKRegressor(baseline="gfn2-xtb", **COARSE).fit(mols[:5], y[:5], unit="meV")
    fitted.baseline = "dft"  # a file from a newer molntk, or edited
    with pytest.raises(ModelFileError, match="damaged model file.*unknown baseline 'dft'"):
        SO3NTKRegressor.load(fitted.save(tmp_path / "bad.molntk.npz"))


def test_scf_failure_names_the_molecule(monkeypatch):
    """tblite's RuntimeError (here: an SCF allowed one iteration) is an InputError naming the molecule."""
    from tblite.interface import Calculator

    real_set = Calculator.set

    def one_iteration(self, key, value):
        real_set(self, key, value)
        if key == "verbosity":
            real_set(self, "max-iter", 1)

    monkeypatch.setattr(Calculator, "set", one_iteration)
    water = Molecule(np.array([8, 1, 1]), np.array([[0.0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]]), id="water-1")
    with pytest.raises(InputError, match=r"water-1.*GFN2-xTB failed \(H2O\): SCF not converged"):
        delta.xtb_single_point(water)


def test_missing_tblite_is_named(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tblite(name, *args, **kwargs):
        if name.startswith("tblite"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tblite)
    with pytest.raises(InputError, match="baseline: 'gfn2-xtb' needs tblite: pip install"):
        delta.xtb_single_point(Molecule(np.array([1, 1]), np.array([[0.0, 0, 0], [0.74, 0, 0]])))
