"""The sGDML baseline (molntk/models/sgdml_baseline.py) on the committed ethanol sample."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from molntk.data.labelled import read_labelled
from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.models.sgdml_baseline import SGDMLForceField

pytest.importorskip("sgdml", reason="the sGDML baseline needs the optional package sgdml (molntk[md])")

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "md" / "ethanol_sample.extxyz"


@pytest.fixture(scope="module")
def frames():
    data = read_labelled(SAMPLE, ["energy"], forces=True)
    return data.molecules, np.asarray(data.targets["energy"]), data.forces


#: Every fifth frame (50 fs apart) trains; the others test.
TRAIN = np.arange(0, 100, 5)
TEST = np.setdiff1d(np.arange(100), TRAIN)


@pytest.fixture(scope="module")
def fitted(frames):
    molecules, energies, forces = frames
    return SGDMLForceField(sigmas=(5.0, 20.0, 80.0)).fit([molecules[i] for i in TRAIN], energies[TRAIN],
                                                          [forces[i] for i in TRAIN])


def test_sigma_is_the_lowest_validation_criterion_and_the_edge_flag_says_where_it_lies(fitted):
    assert set(fitted.search_) == {5.0, 20.0, 80.0}
    assert fitted.search_[fitted.sigma_] == min(fitted.search_.values())
    assert fitted.sigma_at_grid_edge_ == (fitted.sigma_ in (5.0, 80.0))


def test_forces_are_minus_the_gradient_of_the_predicted_energy(fitted, frames):
    """Central differences of the predicted energy (h = 1e-4 Å: the error h²·E''' ≈ 1e-8 eV/Å
    for curvatures of eV/Å³ is far below the 1e-5 eV/Å tolerance; float64 round-off of the
    ≈ 300 eV energies, 1e-13 · 300 / 1e-4 ≈ 3e-7 eV/Å, too)."""
    molecule = frames[0][30]
    forces = fitted.predict_forces([molecule])[0]
    h, numeric = 1e-4, np.zeros_like(forces)
    for a in range(molecule.n_atoms):
        for d in range(3):
            shifted = []
            for sign in (1, -1):
                positions = molecule.positions.copy()
                positions[a, d] += sign * h
                shifted.append(Molecule(molecule.numbers, positions))
            e_plus, e_minus = fitted.predict(shifted)
            numeric[a, d] = -(e_plus - e_minus) / (2 * h)
    np.testing.assert_allclose(forces, numeric, atol=1e-5)


def test_it_predicts_held_out_frames_better_than_their_mean(fitted, frames):
    molecules, energies, forces = frames
    e, f = fitted.predict_forces([molecules[i] for i in TEST], return_energy=True)
    true_f = np.stack([forces[i] for i in TEST])
    assert np.abs(e - energies[TEST]).mean() < 0.5 * np.abs(energies[TEST] - energies[TRAIN].mean()).mean()
    assert np.abs(np.stack(f) - true_f).mean() < 0.5 * np.abs(true_f).mean()


def test_frames_of_another_molecule_or_atom_order_are_refused(fitted, frames):
    molecule = frames[0][0]
    swapped = Molecule(molecule.numbers[::-1].copy(), molecule.positions[::-1].copy())
    with pytest.raises(InputError, match=r"X\[0\].*one molecule"):
        fitted.predict([swapped])
    with pytest.raises(InputError, match="before fit"):
        SGDMLForceField().predict([molecule])
    with pytest.raises(InputError, match="sigmas"):
        SGDMLForceField(sigmas=(-1.0,)).fit(frames[0][:5], frames[1][:5], frames[2][:5])


def test_max_memory_gb_is_the_packages_limit_while_it_trains_and_is_restored(frames, monkeypatch):
    """``max_memory_gb`` is the limit the package plans its solver for (it takes its iterative
    solver when its analytic one needs more) during each training call, and the one trainer's
    own limit (the machine's memory) comes back after it; 0 GB is refused by name."""
    from molntk.models.sgdml_baseline import _sgdml

    trainer = _sgdml()[0]
    machine, seen = trainer._max_memory, []
    train = type(trainer).train

    def recording(task, *args, **kwargs):
        seen.append(trainer._max_memory)
        return train(trainer, task, *args, **kwargs)

    monkeypatch.setattr(trainer, "train", recording)
    molecules, energies, forces = frames
    args = ([molecules[i] for i in TRAIN], energies[TRAIN], [forces[i] for i in TRAIN])
    SGDMLForceField(sigmas=(20.0,), max_memory_gb=1).fit(*args)
    SGDMLForceField(sigmas=(20.0,)).fit(*args)
    assert seen == [1, machine] and trainer._max_memory == machine >= 1
    with pytest.raises(InputError, match="max_memory_gb"):
        SGDMLForceField(max_memory_gb=0).fit(*args)
