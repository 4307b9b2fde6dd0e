"""MD17 and rMD17 ``.npz`` trajectories (molntk.data.md17, and read_labelled on them): tiny
files of both layouts written here, units converted from kcal/mol to eV, shapes, and bad
files named with their key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from molntk.data.labelled import read_labelled
from molntk.data.md17 import read_md17_npz
from molntk.errors import InputError

#: 1 kcal/mol in eV (4184 J/mol over e N_A, exact SI values): written out here, not imported.
KCAL_MOL_EV = 4184.0 / (1.602176634e-19 * 6.02214076e23)

Z = np.array([8, 1, 1])
R = np.array([[[0.0, 0.0, 0.0], [0.957, 0.0, 0.0], [-0.24, 0.927, 0.0]],
              [[0.0, 0.0, 0.01], [0.95, 0.02, 0.0], [-0.25, 0.93, 0.0]]])
E = np.array([-47870.1, -47869.5])  # kcal/mol
F = np.arange(18, dtype=float).reshape(2, 3, 3) - 8.5  # kcal/mol/Å


def _md17(path: Path, **replace: np.ndarray) -> Path:
    arrays = {"z": Z, "R": R, "E": E[:, None], "F": F, "name": np.array("water"), "theory": np.array("test")}
    arrays.update(replace)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def _rmd17(path: Path, **replace: np.ndarray) -> Path:
    arrays = {"nuclear_charges": Z, "coords": R, "energies": E, "forces": F, "old_indices": np.array([7, 9]),
              "old_energies": E + 1.0, "old_forces": F + 1.0}
    arrays.update(replace)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


@pytest.mark.parametrize("write, layout", [(_md17, "MD17"), (_rmd17, "rMD17")])
def test_both_layouts_in_ev_and_ev_per_angstrom(tmp_path: Path, write, layout: str) -> None:
    frames = read_md17_npz(write(tmp_path / "water.npz"))
    assert frames.layout == layout and len(frames) == 2
    assert frames.numbers.tolist() == [8, 1, 1]
    assert frames.positions.shape == (2, 3, 3) and frames.forces.shape == (2, 3, 3) and frames.energies.shape == (2,)
    np.testing.assert_allclose(frames.energies, E * KCAL_MOL_EV, rtol=1e-9)
    np.testing.assert_allclose(frames.forces, F * KCAL_MOL_EV, rtol=1e-9)
    np.testing.assert_array_equal(frames.positions, R)
    assert abs(frames.energies[0] - (-2075.9)) < 0.1  # -47870.1 kcal/mol ≈ -2075.9 eV


@pytest.mark.parametrize("write", [_md17, _rmd17])
def test_read_labelled_gives_energy_and_forces(tmp_path: Path, write) -> None:
    data = read_labelled(write(tmp_path / "water.npz"), forces=True)
    assert data.ok and list(data.targets) == ["energy"]
    assert [m.id for m in data.molecules] == ["water#0", "water#1"]
    np.testing.assert_allclose(data.targets["energy"], E * KCAL_MOL_EV, rtol=1e-9)
    assert data.forces is not None and len(data.forces) == 2
    np.testing.assert_allclose(data.forces[1], F[1] * KCAL_MOL_EV, rtol=1e-9)
    np.testing.assert_array_equal(data.molecules[1].positions, R[1])
    assert read_labelled(tmp_path / "water.npz").forces is None


def test_sgdml_units_are_honoured(tmp_path: Path) -> None:
    frames = read_md17_npz(_md17(tmp_path / "ev.npz", e_unit=np.array("eV"), r_unit=np.array("Ang")))
    np.testing.assert_allclose(frames.energies, E)
    np.testing.assert_allclose(frames.forces, F)
    bohr = read_md17_npz(_md17(tmp_path / "bohr.npz", e_unit=np.array("Ha"), r_unit=np.array("bohr")))
    np.testing.assert_allclose(bohr.positions, R * 0.529177210903, rtol=1e-6)
    np.testing.assert_allclose(bohr.forces, F * 27.211386245988 / 0.529177210903, rtol=1e-6)
    with pytest.raises(InputError, match=r"key 'e_unit': unknown unit 'furlong'"):
        read_md17_npz(_md17(tmp_path / "odd.npz", e_unit=np.array("furlong")))


def test_missing_key_names_file_and_key(tmp_path: Path) -> None:
    path = _md17(tmp_path / "noforces.npz", F=None)
    with pytest.raises(InputError, match=r"noforces\.npz: no key 'F', which the MD17 layout needs; its keys: z, R, E"):
        read_labelled(path)
    path = _rmd17(tmp_path / "noenergy.npz", energies=None)
    with pytest.raises(InputError, match=r"noenergy\.npz: no key 'energies', which the rMD17 layout needs"):
        read_md17_npz(path)
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(InputError, match=r"other\.npz: not an MD17 or rMD17 file: .* its keys: a"):
        read_md17_npz(tmp_path / "other.npz")


def test_wrong_shapes_and_types_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"key 'F' \(forces, frames × atoms × 3\) has shape \(2, 2, 3\), expected \(2, 3, 3\)"):
        read_md17_npz(_md17(tmp_path / "a.npz", F=F[:, :2]))
    with pytest.raises(InputError, match=r"key 'energies' \(energies, one per frame\) has shape \(3,\), expected \(2,\)"):
        read_md17_npz(_rmd17(tmp_path / "b.npz", energies=np.zeros(3)))
    with pytest.raises(InputError, match=r"key 'z' \(atomic numbers\) must be a 1-d array of whole numbers"):
        read_md17_npz(_md17(tmp_path / "c.npz", z=np.array([8.5, 1, 1])))
    with pytest.raises(InputError, match=r"key 'R': not a real numeric array"):
        read_md17_npz(_md17(tmp_path / "d.npz", R=np.array(["x"])))
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(InputError, match=r"text\.npz: not a readable \.npz file"):
        read_md17_npz(tmp_path / "text.npz")


def test_bad_frame_is_a_failure_and_the_rest_is_read(tmp_path: Path) -> None:
    forces = F.copy()
    forces[0, 2, 1] = np.nan
    data = read_labelled(_rmd17(tmp_path / "nan.npz", forces=forces), forces=True)
    assert [m.id for m in data.molecules] == ["nan#1"]
    assert [f.message for f in data.failures] == [f"{tmp_path / 'nan.npz'}: frame 0 (nan#0): forces on atom 2 are not finite: "
                                                      f"{[-2.5 * KCAL_MOL_EV, np.nan, -0.5 * KCAL_MOL_EV]}"]
    energies = E.copy()
    energies[1] = np.inf
    data = read_labelled(_md17(tmp_path / "inf.npz", E=energies), "energy")
    assert len(data.molecules) == 1 and data.failures[0].problem == "frame 1 (inf#1): target 'energy' is not finite: inf"
