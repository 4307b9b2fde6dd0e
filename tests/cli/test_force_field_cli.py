"""``molntk fit --data FILE --target KEY --forces`` and ``molntk predict`` with its model file:
the file holds the force field the estimator fits by hand (same energies and forces); a
frame without forces is named (exit 1, fitted on the rest); predictions go to JSON (with
forces) and extended xyz (read back by ASE), not to CSV; an energy model is not written
to extended xyz."""

from __future__ import annotations

import hashlib
import json
import re

import ase.io
import numpy as np
import pytest
from typer.testing import CliRunner

from molntk.cli.main import app
from molntk.data.labelled import read_labelled
from molntk.models import SO3ForceFieldRegressor
from molntk.models.loading import load_model

SAMPLE = "data/md/ethanol_sample.extxyz"


def unboxed(text: str) -> str:
    """rich's error box, unwrapped into one line."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    """6 training frames of the ethanol sample (the third without forces), their energies also
    under the key ``dft_energy``, and 3 test frames."""
    folder = tmp_path_factory.mktemp("forces")
    train = ase.io.read(SAMPLE, index=":6")
    for atoms in train:
        atoms.info["dft_energy"] = atoms.get_potential_energy()
    train[2].calc = None
    ase.io.write(folder / "train.extxyz", train, format="extxyz")
    ase.io.write(folder / "test.extxyz", ase.io.read(SAMPLE, index="50:53"), format="extxyz")
    return folder


@pytest.fixture(scope="module")
def fitted(frames):
    """``molntk fit --forces`` on the training frames' ``dft_energy``: the run's result and its model file."""
    out = frames / "models"
    result = CliRunner().invoke(app, ["fit", "--data", str(frames / "train.extxyz"), "--target", "dft_energy",
                                      "--forces", "--out", str(out), "--json"])
    return result, out / "dft_energy.molntk.npz"


def test_fit_forces_writes_the_force_field_fitted_by_hand_and_names_the_frame_without_forces(frames, fitted):
    result, path = fitted
    assert result.exit_code == 1, result.output  # one frame had no forces
    document = json.loads(result.stdout)
    assert document["result"]["n_train"] == 5 and not document["result"]["sparse"]
    assert len(list((path.parent / "kernel_cache").glob("*/*.npz"))) == 1  # the exact fit's joint kernel, resumable
    assert "kernel: 1/1 blocks" in result.stderr  # its progress, as plain lines off a terminal
    [failure] = document["result"]["read_failures"]
    assert "forces" in failure
    model = load_model(path)
    assert isinstance(model, SO3ForceFieldRegressor) and (model.unit_, model.target_) == ("eV", "dft_energy")
    provenance = model.provenance_  # the data file, its hash and the item that failed
    assert provenance["data_file"] == str(frames / "train.extxyz") and provenance["n_train"] == 5
    assert provenance["data_sha256"] == hashlib.sha256((frames / "train.extxyz").read_bytes()).hexdigest()
    assert provenance["read_failures"] == 1 and {"molntk", "created", "read_options"} <= provenance.keys()
    data = read_labelled(frames / "train.extxyz", "dft_energy", forces=True)
    by_hand = SO3ForceFieldRegressor(elements=data.elements, unit="eV", noise_search="local")
    by_hand.fit(data.molecules, data.targets["dft_energy"], data.forces)
    test = read_labelled(frames / "test.extxyz", "energy", forces=True).molecules
    energies, forces = model.predict_forces(test, return_energy=True)
    expected_e, expected_f = by_hand.predict_forces(test, return_energy=True)
    np.testing.assert_allclose(energies, expected_e, rtol=1e-10)
    np.testing.assert_allclose(np.stack(forces), np.stack(expected_f), rtol=1e-8, atol=1e-10)


def test_predict_with_a_force_field_writes_energies_and_forces_to_json_and_extxyz(frames, fitted):
    _, path = fitted
    model = load_model(path)
    test = read_labelled(frames / "test.extxyz", "energy", forces=True).molecules
    energies, forces = model.predict_forces(test, return_energy=True)
    runner = CliRunner()
    result = runner.invoke(app, ["predict", "--model", str(path), "--input", str(frames / "test.extxyz"),
                                 "--out", str(frames / "pred.json"), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads((frames / "pred.json").read_text())["predictions"]
    assert [r["target"] for r in rows] == ["dft_energy"] * 3
    np.testing.assert_allclose([r["prediction"] for r in rows], energies, rtol=1e-12)
    np.testing.assert_allclose(np.array([r["forces"] for r in rows]), np.stack(forces), rtol=1e-12)
    result = runner.invoke(app, ["predict", "--model", str(path), "--input", str(frames / "test.extxyz"),
                                 "--out", str(frames / "pred.extxyz")])
    assert result.exit_code == 0, result.output
    written = ase.io.read(frames / "pred.extxyz", index=":")
    assert [a.info["id"] for a in written] == [m.id for m in test]
    np.testing.assert_allclose([a.get_potential_energy() for a in written], energies, rtol=1e-12)
    # extended xyz writes per-atom columns with 8 decimals: rounding ≤ 5e-9
    np.testing.assert_allclose(np.stack([a.get_forces() for a in written]), np.stack(forces), rtol=0, atol=5.01e-9)
    np.testing.assert_allclose(written[0].positions, test[0].positions, rtol=0, atol=5.01e-9)


def test_predict_with_a_force_field_to_csv_is_a_usage_error_that_writes_nothing(frames, fitted):
    _, path = fitted
    out = frames / "pred.csv"
    result = CliRunner().invoke(app, ["predict", "--model", str(path), "--input", str(frames / "test.extxyz"), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "is a force field" in unboxed(result.output) and ".extxyz" in result.output
    assert not out.exists()


def test_predict_with_an_energy_model_to_extxyz_is_a_usage_error(fitted_so3, tmp_path):
    model, _, _ = fitted_so3
    path = model.save(tmp_path / "m.npz")
    result = CliRunner().invoke(app, ["predict", "--model", str(path), "--smiles", "CCO", "--out", str(tmp_path / "p.extxyz")])
    assert result.exit_code == 2, result.output
    assert "is an energy model" in unboxed(result.output)


def test_fit_forces_on_a_file_without_forces_names_it_and_writes_nothing(tmp_path):
    out = tmp_path / "models"
    frames = ase.io.read("data/examples/qm9_subset.extxyz", index=":3")  # U0 values, no forces
    ase.io.write(tmp_path / "no_forces.extxyz", frames, format="extxyz")
    result = CliRunner().invoke(app, ["fit", "--data", str(tmp_path / "no_forces.extxyz"), "--target", "U0", "--forces",
                                      "--out", str(out)])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "no_forces.extxyz" in text and "no frame with a value of 'U0' and forces" in text
    assert not (out / "U0.molntk.npz").exists()


def test_fit_forces_on_inducing_frames_writes_that_model_and_needs_forces(frames, tmp_path):
    """``--inducing-frames 3``: the GDML form on 3 of the 5 frames that have forces, as the
    estimator fits it by hand (the noise ratio searched locally), its rows against the 3 frames kept in the joint-kernel cache
    (one block: 5 frames × 3); without ``--forces`` the option is a usage error."""
    out = tmp_path / "models"
    result = CliRunner().invoke(app, ["fit", "--data", str(frames / "train.extxyz"), "--target", "dft_energy", "--forces",
                                      "--inducing-frames", "3", "--out", str(out), "--json"])
    assert result.exit_code == 1, result.output  # the frame without forces, as above
    document = json.loads(result.stdout)["result"]
    assert document["inducing_frames"] == 3 and not document["sparse"]
    blocks = [np.load(path)["joint"].shape for path in (out / "kernel_cache").glob("*/*.npz")]
    n_rows = 5 + 3 * sum(m.n_atoms for m in read_labelled(frames / "train.extxyz", "dft_energy", forces=True).molecules)
    assert len(blocks) == 1 and blocks[0][0] == n_rows and blocks[0][1] < n_rows
    model = load_model(out / "dft_energy.molntk.npz")
    data = read_labelled(frames / "train.extxyz", "dft_energy", forces=True)
    by_hand = SO3ForceFieldRegressor(elements=data.elements, unit="eV", inducing_frames=3, noise_search="local")
    by_hand.fit(data.molecules, data.targets["dft_energy"], data.forces)
    assert np.array_equal(model.inducing_frame_rows_, by_hand.inducing_frame_rows_)
    test = read_labelled(frames / "test.extxyz", "energy", forces=True).molecules
    energies, forces = model.predict_forces(test, return_energy=True)
    expected_e, expected_f = by_hand.predict_forces(test, return_energy=True)
    np.testing.assert_allclose(energies, expected_e, rtol=1e-10)
    np.testing.assert_allclose(np.stack(forces), np.stack(expected_f), rtol=1e-8, atol=1e-10)
    usage = CliRunner().invoke(app, ["fit", "--data", str(frames / "train.extxyz"), "--target", "dft_energy",
                                     "--inducing-frames", "3", "--out", str(tmp_path / "none")])
    assert usage.exit_code == 2 and "--inducing-frames applies to a force field" in unboxed(usage.output)


def test_fit_forces_with_the_upper_storage_writes_the_model_fitted_by_hand(frames, tmp_path):
    """``--kernel-storage upper``: the exact model holding its joint kernel's upper triangle,
    as the estimator fits it by hand with that storage (its λ's by the grid on the leading
    frames, here all 5), the factorisation's progress on stderr; the option is a usage error
    with ``--inducing-frames``, without ``--forces`` and with another value."""
    out = tmp_path / "models"
    result = CliRunner().invoke(app, ["fit", "--data", str(frames / "train.extxyz"), "--target", "dft_energy", "--forces",
                                      "--kernel-storage", "upper", "--out", str(out), "--json"])
    assert result.exit_code == 1, result.output  # the frame without forces, as above
    assert json.loads(result.stdout)["result"]["kernel_storage"] == "upper"
    assert "factor: 1/1 blocks" in result.stderr
    model = load_model(out / "dft_energy.molntk.npz")
    data = read_labelled(frames / "train.extxyz", "dft_energy", forces=True)
    by_hand = SO3ForceFieldRegressor(elements=data.elements, unit="eV", kernel_storage="upper")
    by_hand.fit(data.molecules, data.targets["dft_energy"], data.forces)
    assert (model.reg_energy_, model.reg_force_) == (by_hand.reg_energy_, by_hand.reg_force_)
    test = read_labelled(frames / "test.extxyz", "energy", forces=True).molecules
    energies, forces = model.predict_forces(test, return_energy=True)
    expected_e, expected_f = by_hand.predict_forces(test, return_energy=True)
    np.testing.assert_allclose(energies, expected_e, rtol=1e-10)
    np.testing.assert_allclose(np.stack(forces), np.stack(expected_f), rtol=1e-8, atol=1e-10)
    for extra, problem in ((["--forces", "--inducing-frames", "3", "--kernel-storage", "upper"], "applies to the exact force field"),
                           (["--kernel-storage", "upper"], "applies to the exact force field"),
                           (["--forces", "--kernel-storage", "half"], "must be 'full' or 'upper'")):
        usage = CliRunner().invoke(app, ["fit", "--data", str(frames / "train.extxyz"), "--target", "dft_energy", *extra,
                                         "--out", str(tmp_path / "none")])
        assert usage.exit_code == 2 and problem in unboxed(usage.output), usage.output
