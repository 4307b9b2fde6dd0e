"""DFT labels by PySCF (molntk.data.dft, data/md/label_with_dft.py): energies in eV equal PySCF's
in Hartree, forces are minus the energy's derivative in eV/Å, a batch reports the frames that fail
and goes on, bad settings are refused before any SCF, and the committed PBE/def2-SVP sample
labels the GFN2-xTB ethanol sample's geometries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ase
import ase.io
import numpy as np
import pytest

from molntk.data.labelled import read_labelled
from molntk.errors import InputError

pytest.importorskip("pyscf")
from pyscf import dft, gto  # noqa: E402

from molntk.data.dft import DFTSettings, PySCFCalculator, label_frames, write_labels  # noqa: E402

MD = Path(__file__).resolve().parents[2] / "data" / "md"
#: CODATA 2014 (ASE's units): eV per Hartree and Å per Bohr, written out so that a wrong
#: constant inside the calculator cannot cancel against the same one here.
HARTREE_EV = 27.211386024367243
BOHR_ANGSTROM = 0.5291772105638411
#: A small basis keeps each SCF of water well under a second.
FAST = DFTSettings(basis="sto-3g", conv_tol=1e-12)


def _water(shift: float = 0.0, frame_id: str | None = None) -> ase.Atoms:
    atoms = ase.Atoms([8, 1, 1], [[0.0, 0.0, 0.0], [0.957 + shift, 0.0, 0.0], [-0.24, 0.927, 0.0]])
    if frame_id is not None:
        atoms.info["id"] = frame_id
    return atoms


def _hydroxyl(frame_id: str) -> ase.Atoms:
    """OH: 9 electrons, which a closed-shell (spin 0) calculation refuses."""
    return ase.Atoms([8, 1], [[0.0, 0.0, 0.0], [0.97, 0.0, 0.0]], info={"id": frame_id})


def test_energy_is_pyscfs_in_ev_and_forces_are_minus_its_derivative() -> None:
    """The energy equals PySCF's own RKS/PBE energy times the Hartree (1e-9 eV: both converge
    the SCF to 1e-12 Hartree), the forces its gradient with the grid's response in eV/Å. They
    agree with central differences of the calculator's energies, −(E(x + h) − E(x − h)) / 2h
    with h = 1e-3 Å, on four coordinates: measured on this water geometry the largest
    difference is 7.6e-5 eV/Å (forces up to 4.9 eV/Å) and 1.9e-5 at h = 5e-4 Å, the h²
    truncation alone; 2e-4 eV/Å passes that and fails a wrong sign or a gradient left in
    Hartree/Bohr (errors of eV/Å). With the grid's response the forces of the free molecule sum
    to zero (2e-13 measured); PySCF's gradient without it sums to 5e-5 eV/Å here (and is off by
    up to 2.6e-3 eV/Å on ethanol), which the last check fails."""
    calculator = PySCFCalculator(FAST)
    water = _water()
    water.calc = calculator
    energy, forces = water.get_potential_energy(), water.get_forces().copy()

    mole = gto.M(atom=[("O", (0.0, 0.0, 0.0)), ("H", (0.957, 0.0, 0.0)), ("H", (-0.24, 0.927, 0.0))],
                 basis="sto-3g", unit="Angstrom", verbose=0)
    scf = dft.RKS(mole).density_fit()
    scf.xc, scf.conv_tol = "PBE", 1e-12
    assert energy == pytest.approx(scf.kernel() * HARTREE_EV, abs=1e-9)
    gradients = scf.nuc_grad_method()
    gradients.grid_response = True
    gradient = gradients.kernel()
    np.testing.assert_allclose(forces, -gradient * HARTREE_EV / BOHR_ANGSTROM, atol=1e-8)

    h = 1e-3
    for atom, axis in [(0, 0), (1, 0), (2, 1), (2, 2)]:
        displaced = []
        for sign in (1.0, -1.0):
            atoms = _water()
            atoms.positions[atom, axis] += sign * h
            atoms.calc = calculator
            displaced.append(atoms.get_potential_energy())
        assert abs(forces[atom, axis] + (displaced[0] - displaced[1]) / (2 * h)) < 2e-4, (atom, axis)
    assert np.abs(forces).max() > 1.0  # a geometry off the minimum: the check above is not vacuous
    assert np.abs(forces.sum(axis=0)).max() < 1e-9


def test_a_batch_reports_the_frame_that_fails_and_labels_the_rest(tmp_path: Path) -> None:
    """Three water frames and a hydroxyl radical (9 electrons, not closed-shell) between them: the
    radical is named with the reason, the waters are labelled, and the file written reads back
    with the same energies and forces; the manifest names the source file's digest and the failure."""
    hydroxyl = _hydroxyl("hydroxyl")
    frames = [_water(0.0, "w0"), hydroxyl, _water(0.02, "w1"), _water(-0.02, "w2")]
    calls: list[tuple[int, int]] = []
    labelled = label_frames(frames, FAST, progress=lambda done, total: calls.append((done, total)))
    assert [f.info["id"] for f in labelled.frames] == ["w0", "w1", "w2"]
    assert list(labelled.failed) == ["hydroxyl"] and "9 electrons" in labelled.failed["hydroxyl"]
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]
    energies = [f.get_potential_energy() for f in labelled.frames]
    assert len(set(energies)) == 3  # three geometries, three energies

    source = tmp_path / "frames.extxyz"
    ase.io.write(source, frames, format="extxyz")
    path = write_labels(labelled, FAST, tmp_path / "out", "water_pbe", source)
    data = read_labelled(path, "energy", forces=True)
    assert data.ok and [m.id for m in data.molecules] == ["w0", "w1", "w2"]
    np.testing.assert_allclose(data.targets["energy"], energies, rtol=1e-12)
    np.testing.assert_allclose(np.stack(data.forces), np.stack([f.get_forces() for f in labelled.frames]), atol=1e-7)
    manifest = json.loads((tmp_path / "out" / "water_pbe.json").read_text())
    assert manifest["method"] == "PBE/sto-3g" and manifest["n_frames"] == 3
    assert manifest["failed"] == labelled.failed and len(manifest["source"]["sha256"]) == 64


def test_bad_settings_are_refused_before_any_scf() -> None:
    with pytest.raises(InputError, match="xc 'PBEX'"):
        PySCFCalculator(DFTSettings(xc="PBEX"))
    with pytest.raises(InputError, match="basis 'def2-XYZ'"):
        label_frames([_water()], DFTSettings(basis="def2-XYZ"))
    with pytest.raises(InputError, match="grid_level"):
        DFTSettings(grid_level=12)
    with pytest.raises(InputError, match="spin"):
        DFTSettings(spin=-1)
    # Not converged in one iteration: the frame is named, not labelled.
    labelled = label_frames([_water(0.0, "w0")], DFTSettings(basis="sto-3g", max_cycle=1))
    assert labelled.frames == [] and "did not converge" in labelled.failed["w0"]


def test_committed_dft_sample_labels_the_xtb_samples_geometries() -> None:
    """`ethanol_sample_pbe.extxyz` holds the geometries of the GFN2-xTB sample, in order, with
    PBE/def2-SVP energies and forces: a free molecule's forces sum to zero (to the file's eight
    decimals), and the DFT and xtb forces of the same frames agree in direction (correlation
    of the 2,700 components 0.93 measured; labels of other frames would give about 0 ± 0.02,
    so 0.5 fails a shuffled or misaligned file)."""
    xtb = read_labelled(MD / "ethanol_sample.extxyz", "energy", forces=True)
    pbe = read_labelled(MD / "ethanol_sample_pbe.extxyz", "energy", forces=True)
    manifest = json.loads((MD / "ethanol_sample_pbe.json").read_text())
    assert pbe.ok and len(pbe.molecules) == manifest["n_frames"] == len(xtb.molecules) == 100
    assert manifest["method"] == "PBE/def2-SVP" and manifest["failed"] == {}
    assert manifest["settings"]["grid_response"] is True
    assert [m.id for m in pbe.molecules] == [m.id for m in xtb.molecules]
    for a, b in zip(pbe.molecules, xtb.molecules):
        np.testing.assert_allclose(a.positions, b.positions, atol=1e-7)
    assert np.abs(np.stack(pbe.forces).sum(axis=1)).max() < 1e-6
    correlation = np.corrcoef(np.stack(pbe.forces).ravel(), np.stack(xtb.forces).ravel())[0, 1]
    assert correlation > 0.5


def test_the_script_labels_a_file_names_failed_frames_and_refuses_bad_input(tmp_path: Path) -> None:
    """`data/md/label_with_dft.py` on two waters and a hydroxyl radical: writes the two waters with
    a manifest, names the radical on stderr and exits 1; a missing file or an unknown functional
    exits 2 with an error that names it, and writes nothing."""
    source = tmp_path / "frames.extxyz"
    frames = [_water(0.0, "w0"), _hydroxyl("oh"),
              _water(0.02, "w1")]
    ase.io.write(source, frames, format="extxyz")
    script = [sys.executable, str(MD / "label_with_dft.py")]
    done = subprocess.run([*script, str(source), "--out", str(tmp_path / "out"), "--name", "w", "--basis", "sto-3g"],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 1 and "failed: oh:" in done.stderr and "2 of 3 frames" in done.stdout
    assert [m.id for m in read_labelled(tmp_path / "out" / "w.extxyz", "energy", forces=True).molecules] == ["w0", "w1"]

    for argv, named in [([str(tmp_path / "missing.extxyz")], "missing.extxyz: file not found"),
                        ([str(source), "--xc", "PBEX"], "xc 'PBEX'")]:
        done = subprocess.run([*script, *argv, "--out", str(tmp_path / "bad"), "--name", "b"],
                              capture_output=True, text=True)
        assert done.returncode == 2 and named in done.stderr, done.stderr
    assert not (tmp_path / "bad").exists()


def test_worker_processes_give_the_labels_of_one_process_in_input_order() -> None:
    """Four frames, a radical third, labelled in 2 spawned processes (one PySCF thread each) and in
    this one: the same frames in input order, the radical named, and the same energies and forces.
    Each SCF starts from PySCF's own guess and converges to 1e-12 Hartree, so only the order of
    floating-point sums differs between the runs; 1e-8 eV and 1e-6 eV/Å pass that (measured:
    1.4e-12 eV and 3.1e-10 eV/Å on two of these waters) and fail frames paired with the wrong labels (the geometries
    differ by 0.02 Å: energies by ~1e-2 eV)."""
    frames = [_water(0.0, "w0"), _water(0.02, "w1"),
              _hydroxyl("oh"), _water(-0.02, "w2")]
    calls: list[tuple[int, int]] = []
    parallel = label_frames(frames, FAST, workers=2, progress=lambda done, total: calls.append((done, total)))
    serial = label_frames(frames, FAST)
    assert [f.info["id"] for f in parallel.frames] == ["w0", "w1", "w2"] and list(parallel.failed) == ["oh"]
    assert parallel.failed == serial.failed and parallel.workers == 2
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]
    np.testing.assert_allclose([f.get_potential_energy() for f in parallel.frames],
                               [f.get_potential_energy() for f in serial.frames], rtol=0, atol=1e-8)
    np.testing.assert_allclose(np.stack([f.get_forces() for f in parallel.frames]),
                               np.stack([f.get_forces() for f in serial.frames]), rtol=0, atol=1e-6)
    assert parallel.timings["cpu_s"] > 0
    with pytest.raises(InputError, match="workers: must be at least 1"):
        label_frames(frames, FAST, workers=0)


def test_the_script_labels_a_slice_of_the_file_in_worker_processes(tmp_path: Path) -> None:
    """`--frames 1:3 --workers 2` on three waters without ids: frames 1 and 2 are labelled, named by
    their place in the file, and the manifest records the slice and the workers; a slice with no
    frames and a malformed one exit 2 with an error that names them."""
    source = tmp_path / "frames.extxyz"
    ase.io.write(source, [_water(0.0), _water(0.02), _water(-0.02)], format="extxyz")
    script = [sys.executable, str(MD / "label_with_dft.py"), str(source), "--basis", "sto-3g"]
    done = subprocess.run([*script, "--frames", "1:3", "--workers", "2", "--out", str(tmp_path / "out"), "--name", "w"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    labelled = read_labelled(tmp_path / "out" / "w.extxyz", "energy", forces=True)
    assert [m.id for m in labelled.molecules] == ["frames.extxyz#1", "frames.extxyz#2"]
    np.testing.assert_allclose(labelled.molecules[0].positions, _water(0.02).positions, atol=1e-8)
    manifest = json.loads((tmp_path / "out" / "w.json").read_text())
    assert manifest["source"]["frames"] == "1:3" and manifest["workers"] == 2 and manifest["n_frames"] == 2

    for frames, named in [("5:9", "no frames in 5:9"), ("1-3", "expected N (the first N frames")]:
        done = subprocess.run([*script, "--frames", frames, "--out", str(tmp_path / "bad"), "--name", "b"],
                              capture_output=True, text=True)
        assert done.returncode == 2 and named in done.stderr, done.stderr
    assert not (tmp_path / "bad").exists()


def test_workers_asked_for_without_the_main_guard_end_in_an_error_that_says_so(tmp_path: Path) -> None:
    """A script that asks for worker processes at module level (no ``if __name__ == "__main__":``)
    breaks the spawned pool; the error names the guard instead of only the broken pool."""
    script = tmp_path / "unguarded.py"
    script.write_text("import ase\nfrom molntk.data.dft import DFTSettings, label_frames\n"
                      "label_frames([ase.Atoms([8, 1, 1], [[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]])], "
                      "DFTSettings(basis='sto-3g'), workers=2)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode != 0 and "a DFT worker process ended abruptly" in done.stderr
    assert 'if __name__ == "__main__":' in done.stderr.splitlines()[-1]
