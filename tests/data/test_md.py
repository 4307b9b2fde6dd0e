"""GFN2-xTB MD data (molntk.data.md, data/md/): the committed ethanol sample reads with energies
and forces and is at the temperature it claims; a tiny tblite run records forces that are
-dE/dx of the xtb energy, and writes what read_labelled reads back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from molntk.data.labelled import read_labelled
from molntk.data.md import MDSettings, md_cache_dir, md_trajectory, write_trajectory, xtb_calculator
from molntk.data.molecule import Molecule
from molntk.errors import InputError

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "md" / "ethanol_sample.extxyz"
#: Boltzmann constant in eV/K.
K_B = 8.617333262e-5


def test_committed_sample_has_energies_and_forces() -> None:
    data = read_labelled(SAMPLE, forces=True)
    manifest = json.loads(SAMPLE.with_suffix(".json").read_text())
    assert data.ok and len(data.molecules) == manifest["n_frames"] == 100
    assert list(data.targets) == ["energy"] and data.forces is not None
    assert all(m.formula == "C2H6O" for m in data.molecules)
    assert [f.shape for f in data.forces] == [(9, 3)] * 100
    assert np.isfinite(data.targets["energy"]).all() and np.isfinite(np.stack(data.forces)).all()
    assert manifest["method"] == "GFN2-xTB" and manifest["settings"]["seed"] == 0
    # A free molecule: the xtb forces on its atoms sum to zero (no external field).
    assert np.abs(np.stack(data.forces).sum(axis=1)).max() < 1e-6
    # Equipartition: at 500 K the mean potential energy above the minimum of a near-harmonic
    # molecule is (3N - 6) k_B T / 2 = 0.45 eV for ethanol; the sample's mean is within 0.15 eV
    # (its standard error is about 0.02 eV), which a wrong temperature or unit would miss.
    settings = manifest["settings"]
    excess = data.targets["energy"] - manifest["relaxed_energy_eV"]
    expected = (3 * 9 - 6) * K_B * settings["temperature"] / 2
    assert excess.min() > 0 and abs(excess.mean() - expected) < 0.15


def test_settings_are_checked_and_cache_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="stride must be at least 1"):
        MDSettings(stride=0)
    with pytest.raises(InputError, match="temperature must be positive"):
        MDSettings(temperature=-1.0)
    assert md_cache_dir(tmp_path) == tmp_path / "md"


def test_tiny_xtb_run_records_minus_the_energy_gradient(tmp_path: Path) -> None:
    """Water, 6 equilibration steps and 3 frames 2 steps apart (under a second). The recorded
    forces of the last frame agree with central finite differences of the xtb energy,
    F ≈ -(E(x + h) - E(x - h)) / 2h with h = 1e-3 Å: the truncation error h² E'''/6 is about
    5e-5 eV/Å here (it shrinks 100-fold at h = 1e-4 Å) and SCF noise of 1e-8 eV adds 1e-5 eV/Å,
    so 2e-4 eV/Å (forces are about 1 eV/Å) passes a correct gradient and fails a wrong sign,
    unit (Hartree/Bohr) or a frame whose forces belong to another geometry."""
    pytest.importorskip("tblite")
    water = Molecule([8, 1, 1], [[0.0, 0.0, 0.0], [0.957, 0.0, 0.0], [-0.24, 0.927, 0.0]], id="water")
    settings = MDSettings(n_equilibration=6, n_frames=3, stride=2, seed=1)
    trajectory = md_trajectory("water", water, settings)
    path = write_trajectory(trajectory, tmp_path)
    manifest = json.loads((tmp_path / "water.json").read_text())
    assert manifest["settings"]["seed"] == 1 and manifest["n_frames"] == 3 and manifest["code"]["tblite"]
    data = read_labelled(path, forces=True)
    assert data.ok and [m.id for m in data.molecules] == ["water#0", "water#1", "water#2"]
    frame = trajectory.frames[-1]
    np.testing.assert_allclose(data.forces[-1], frame.get_forces(), atol=1e-8)
    np.testing.assert_allclose(data.targets["energy"][-1], frame.get_potential_energy(), atol=1e-8)
    assert not np.allclose(data.molecules[0].positions, data.molecules[-1].positions)  # the atoms moved

    calculator = xtb_calculator()

    def energy(positions: np.ndarray) -> float:
        atoms = frame.copy()
        atoms.positions = positions
        atoms.calc = calculator
        return atoms.get_potential_energy()

    assert abs(energy(frame.positions) - frame.get_potential_energy()) < 1e-6
    h = 1e-3
    finite_difference = np.zeros((3, 3))
    for atom in range(3):
        for axis in range(3):
            step = np.zeros((3, 3))
            step[atom, axis] = h
            finite_difference[atom, axis] = -(energy(frame.positions + step) - energy(frame.positions - step)) / (2 * h)
    assert np.abs(frame.get_forces()).max() > 0.05  # a frame away from the minimum
    np.testing.assert_allclose(frame.get_forces(), finite_difference, atol=2e-4)
