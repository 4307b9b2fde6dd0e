"""Forces of fitted SO(3) NTK energy models (``SO3NTKRegressor.predict_forces``,
molntk.models.forces) on real QM9 molecules: central finite differences of ``predict``,
symmetries, cutoffs, the cached reference state, and errors.

Models: the estimator's defaults (8 Gaussians to 3 Å, ``lift:3 erf pool dense``, Lebedev
grid of band limit 5) fitted on 30 QM9 molecules, exact and sparse (60 inducing
environments); each fit and force evaluation takes well under a second.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.models import so3_recipe
from molntk.models.so3_ntk import SO3NTKRegressor
from tests.helpers.forces import central_difference_forces

pytestmark = pytest.mark.usefixtures("one_thread")

MODES = {"exact": {}, "sparse": {"inducing": 60}}


@pytest.fixture(scope="module")
def data(qm9):
    mols = qm9.molecules(range(1, 41))
    return mols, np.asarray(qm9.target("u0_atom")[1:41])


@pytest.fixture(scope="module", params=sorted(MODES))
def model(request, data) -> SO3NTKRegressor:
    mols, y = data
    return SO3NTKRegressor(**MODES[request.param]).fit(mols[:30], y[:30])


def moved(molecule: Molecule, positions: np.ndarray) -> Molecule:
    return Molecule(molecule.numbers, positions, id=molecule.id)


def test_forces_are_central_differences_of_the_predicted_energy(model, data):
    """F = −∂E/∂r against (E(r − h e) − E(r + h e)) / 2h of ``predict`` for every coordinate of
    two held-out molecules (12 and 7 atoms), h = 1e-4 Å. The difference quotient's error is
    h²/6 |∂³E| (truncation: E varies on the ≈ 0.3 Å scale of the radial Gaussians, so
    ≲ 1e-7 |F|) plus ε |E| / h from rounding (1e-16 · 3e4 meV / 1e-4 Å = 3e-8 meV/Å against
    |F| ~ 1e3 meV/Å); measured ≈ 1e-8 relative to max |F|, so 1e-6 (the target of issue 15)
    has two orders of margin, while a missing or wrong term of the chain rule is an O(1) error."""
    mols, _ = data
    for mol in (mols[38], mols[32]):
        (forces,) = model.predict_forces([mol])
        numeric = central_difference_forces(model.predict, mol, h=1e-4)
        scale = np.abs(forces).max()
        assert forces.shape == (mol.n_atoms, 3) and scale > 10  # meV/Å: far from a stationary point
        assert np.abs(forces - numeric).max() / scale < 1e-6


def test_energy_of_the_force_pass_is_the_prediction(model, data):
    """``return_energy``: the energies of the same autograd pass, equal to ``predict`` (whose
    fused activation pass differs from torch's formulas by a few ulp, amplified by the
    regression weights: measured ≤ 2e-8 meV on energies of ≈ 3e4 meV)."""
    mols, _ = data
    energies, forces = model.predict_forces(mols[30:34], return_energy=True)
    np.testing.assert_allclose(energies, model.predict(mols[30:34]), rtol=1e-11, atol=0)
    assert [f.shape for f in forces] == [(m.n_atoms, 3) for m in mols[30:34]]


def test_forces_rotate_with_the_molecule(model, data):
    """F(R·r) = R·F(r) to the accuracy of the SO(3) quadrature, which leaves the kernel (and so
    E) invariant only approximately. On the default Lebedev grid of band limit 5 measured:
    |E(R·r) − E(r)| ≤ 2e-3 meV and max |F(R·r) − R F(r)| / max |F| ≤ 1.1e-5 over three
    molecules (exact and sparse); on a grid of band limit 2 the same errors are 30–80 meV and
    7–10 % (asserted too: the error is the quadrature's, and shrinks as the grid is refined).
    Bound 1e-4: ten times the largest measured."""
    mols, y = data
    rot = Rotation.random(random_state=0).as_matrix()
    coarse = SO3NTKRegressor(grid_band_limit=2, psd_rtol=1e-4, **MODES["sparse" if model.inducing else "exact"]).fit(mols[:30], y[:30])
    for mol in (mols[32], mols[35], mols[38]):
        turned = moved(mol, mol.positions @ rot.T)
        for fitted, low, high in ((model, 0, 1e-4), (coarse, 1e-2, 0.5)):
            (forces,), (turned_forces,) = fitted.predict_forces([mol]), fitted.predict_forces([turned])
            error = np.abs(turned_forces - forces @ rot.T).max() / np.abs(forces).max()
            assert low < error < high


def test_forces_sum_to_zero_and_ignore_translations(model, data):
    """E depends on the positions only through r_b − r_a (feature maps of neighbour vectors),
    so Σ_a F_a = 0 exactly in exact arithmetic, and translating the molecule changes nothing:
    both to rounding (measured |Σ F| ≤ 3e-16 max |F|; bound 1e-12)."""
    mols, _ = data
    mol = mols[38]
    (forces,) = model.predict_forces([mol])
    (shifted,) = model.predict_forces([moved(mol, mol.positions + np.array([3.0, -7.0, 12.5]))])
    scale = np.abs(forces).max()
    assert np.abs(forces.sum(axis=0)).max() < 1e-12 * scale
    assert np.abs(shifted - forces).max() < 1e-12 * scale


def test_an_atom_beyond_every_cutoff_feels_no_force(model, data):
    """An H atom 50 Å from the molecule (cutoff 3 Å) is in no environment, and its own
    environment is empty whatever the positions: its force is exactly zero, and the other
    atoms' forces are those of the molecule without it (to rounding)."""
    mols, _ = data
    mol = mols[35]
    far = Molecule(np.append(mol.numbers, 1), np.vstack([mol.positions, [50.0, 0.0, 0.0]]))
    (alone,), (with_far,) = model.predict_forces([mol]), model.predict_forces([far])
    assert np.array_equal(with_far[-1], np.zeros(3))
    np.testing.assert_allclose(with_far[:-1], alone, rtol=0, atol=1e-12 * np.abs(alone).max())


def test_predictions_reuse_the_reference_features(data, monkeypatch):
    """The training molecules' feature maps are computed once, at fit or (for a loaded model)
    at its first prediction; later predictions and forces featurize only their queries. A
    refit replaces them."""
    mols, y = data
    featurized = []
    real = so3_recipe.environment_features

    def counting(molecules, *args, **kwargs):
        featurized.append(len(molecules))
        return real(molecules, *args, **kwargs)

    monkeypatch.setattr(so3_recipe, "environment_features", counting)
    model = SO3NTKRegressor(grid_band_limit=2, psd_rtol=1e-4).fit(mols[:20], y[:20])
    assert featurized == [20]
    first = model.predict(mols[30:33])
    model.predict_forces(mols[30:32])
    assert featurized == [20, 3]  # forces featurize their query themselves (positions as a tensor)
    np.testing.assert_array_equal(model.predict(mols[30:33]), first)
    model.fit(mols[:25], y[:25])
    assert featurized == [20, 3, 3, 25]
    assert not np.allclose(model.predict(mols[30:33]), first)


def test_reference_is_rebuilt_for_a_loaded_model_and_after_set_params(data, tmp_path):
    mols, y = data
    model = SO3NTKRegressor(grid_band_limit=2, psd_rtol=1e-4).fit(mols[:20], y[:20])
    loaded = SO3NTKRegressor.load(model.save(tmp_path / "m.npz"))
    np.testing.assert_allclose(loaded.predict_forces(mols[30:31])[0], model.predict_forces(mols[30:31])[0], rtol=1e-12, atol=0)
    (kernel,), _ = model._reference()  # one network: one kernel
    assert model._reference()[0][0] is kernel
    model.set_params(block_size=32)  # the same model, computed in other blocks: a new kernel
    assert model._reference()[0][0] is not kernel and model._reference()[0][0].block_size == 32


def test_force_errors_name_the_problem(data):
    mols, y = data
    with pytest.raises(InputError, match="predict_forces called before fit"):
        SO3NTKRegressor().predict_forces(mols[:1])
    two = SO3NTKRegressor(grid_band_limit=2, psd_rtol=1e-4).fit(mols[:20], np.stack([y[:20], y[:20] * 2], axis=1))
    with pytest.raises(InputError, match="one energy target"):
        two.predict_forces(mols[30:31])
    model = SO3NTKRegressor(grid_band_limit=2, psd_rtol=1e-4).fit(mols[:20], y[:20])
    with pytest.raises(InputError, match="elements of the training molecules"):
        model.predict_forces([Molecule(np.array([6, 16]), np.array([[0.0, 0, 0], [1.8, 0, 0]]))])
    model.set_params(pairing="atom-index")  # the reference comparison's padded layout
    with pytest.raises(InputError, match="'atom-index'.*no forces"):
        model.predict_forces(mols[30:31])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_forces_match_cpu(data):
    mols, y = data
    cpu = SO3NTKRegressor(inducing=60).fit(mols[:30], y[:30])
    gpu = SO3NTKRegressor(inducing=60, device="cuda").fit(mols[:30], y[:30])
    for f_cpu, f_gpu in zip(cpu.predict_forces(mols[30:33]), gpu.predict_forces(mols[30:33])):
        np.testing.assert_allclose(f_gpu, f_cpu, rtol=0, atol=1e-8 * np.abs(f_cpu).max())
