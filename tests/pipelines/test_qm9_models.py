"""The SO(3) model files of a qm9-property config: ``molntk run`` saves them beside its report,
``molntk fit`` writes them alone; both checked against the run's own predictions and against
an estimator built here by hand from the config's numbers. Also the output folder's safety:
checked before any work, and a result set that is complete or left as it was."""

from __future__ import annotations

import errno
import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from molntk._version import __version__
from molntk.cli.main import app
from molntk.data.splits import standard_split
from molntk.features.radial import radial_basis_from_dict
from molntk.models import SO3NTKRegressor, SO3NTKSumRegressor
from molntk.models.loading import load_model
from molntk.pipelines.qm9.models import config_sha256
from molntk.pipelines.tasks import TASKS
from tests.helpers.qm9_configs import SMALL

#: SMALL's largest training size and test size.
N_TRAIN, N_TEST = 24, 8


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory):
    """SMALL run by ``molntk run`` (its tables) and by ``molntk fit --out``: (config path, run
    folder, fit folder, fit JSON, the run's output)."""
    folder = tmp_path_factory.mktemp("models")
    config = folder / "small.yaml"
    config.write_text("name: small\n" + SMALL + f"output: {folder / 'run'}\n")
    run = CliRunner().invoke(app, ["run", str(config)])
    assert run.exit_code == 0, run.output
    fit = CliRunner().invoke(app, ["fit", str(config), "--out", str(folder / "fit"), "--json"])
    assert fit.exit_code == 0, fit.output
    return config, folder / "run", folder / "fit", json.loads(fit.stdout)["result"], run.output


def _test_molecules(qm9):
    return qm9.molecules(standard_split(len(qm9), 0).test[:N_TEST].tolist())


def test_run_saves_the_chosen_model_with_target_unit_and_provenance(small_runs):
    config, run, _, _, _ = small_runs
    model = SO3NTKRegressor.load(run / "models" / "u0_atom.molntk.npz")
    assert (model.target_, model.unit_) == ("u0_atom", "meV")
    assert model.training_elements_ == (1, 6, 7, 8)  # the first 24 training molecules have no F
    prov = model.provenance_
    resolved = TASKS.load(str(config), [])
    assert prov["n_train"] == N_TRAIN and len(model.train_molecules_) == N_TRAIN
    assert prov["config"] == "small" and prov["config_file"] == str(config)
    assert prov["config_sha256"] == config_sha256(resolved) and len(prov["config_sha256"]) == 64
    assert prov["data"]["source"] == "qm9pack" and prov["split_seed"] == 0
    assert prov["candidate"]["layers"] == "lift:3 erf pool dense" and prov["molntk"] == __version__
    assert datetime.fromisoformat(prov["created"]).tzinfo is not None
    report = json.loads((run / "report.json").read_text())
    assert report["model_files"] == {"u0_atom": str(run / "models" / "u0_atom.molntk.npz")}


def test_run_model_predicts_what_the_run_reported(small_runs, qm9):
    """The saved model recomputes K(test, train) itself; the run predicted from its block-assembled
    kernel. Same kernel up to rounding (≈ 1e-12 relative), same λ: equal to 1e-6 meV on
    predictions of ≈ 3e4 meV."""
    _, run, _, _, _ = small_runs
    model = SO3NTKRegressor.load(run / "models" / "u0_atom.molntk.npz")
    reported = pd.read_csv(run / "predictions.csv")["u0_atom:so3-ntk"].to_numpy()
    np.testing.assert_allclose(model.predict(_test_molecules(qm9)), reported, rtol=0, atol=1e-6)


def test_fit_equals_an_estimator_built_by_hand_from_the_config(small_runs, qm9):
    """``molntk fit`` against SO3NTKRegressor.fit with SMALL's numbers typed here (FIXED: smearing
    0.5 rad, 6 Gaussians on [0.5, 5] Å, Gauss–Legendre grid of band limit 3, psd_rtol 1e-4;
    the candidate σ_w 1, σ_b 0.1; dressed-atom residual for U0), on the first 24 molecules of
    the standard training split: the mapping from config to estimator, checked. Means and
    standard deviations to 1e-8 relative (the same kernels, computed in blocks vs whole)."""
    _, run, fit, result, _ = small_runs
    assert result["model_files"] == {"u0_atom": str(fit / "u0_atom.molntk.npz")} and result["n_train"] == N_TRAIN
    fitted = SO3NTKRegressor.load(fit / "u0_atom.molntk.npz")
    train = standard_split(len(qm9), 0).train[:N_TRAIN]
    by_hand = SO3NTKRegressor(
        layers="lift:3 erf pool dense", sigma_w=1.0, sigma_b=0.1, smearing_width=0.5,
        radial={"kind": "gaussian", "n": 6, "r_min": 0.5, "r_cut": 5.0}, grid_band_limit=3, sampling="gauss-legendre",
        psd_rtol=1e-4, residual=True,
    ).fit(qm9.molecules(train.tolist()), np.asarray(qm9.target("u0_atom"))[train])
    test = _test_molecules(qm9)[:4]
    expected, expected_std = by_hand.predict(test, return_std=True)
    got, got_std = fitted.predict(test, return_std=True)
    np.testing.assert_allclose(got, expected, rtol=1e-8)
    np.testing.assert_allclose(got_std, expected_std, rtol=1e-8)
    assert np.all(got_std > 0)
    from_run = SO3NTKRegressor.load(run / "models" / "u0_atom.molntk.npz").predict(test)
    np.testing.assert_allclose(got, from_run, rtol=1e-8)
    assert fitted.provenance_["config_sha256"] == SO3NTKRegressor.load(run / "models" / "u0_atom.molntk.npz").provenance_["config_sha256"]


def test_fit_needs_an_so3_model_and_a_qm9_property_config(tmp_path):
    config = tmp_path / "no_so3.yaml"
    config.write_text("name: no_so3\n" + SMALL + "output: " + str(tmp_path / "out") + "\n")
    result = CliRunner().invoke(app, ["fit", str(config), "--set", "models.so3_ntk=null"])
    assert result.exit_code == 2 and "models.so3_ntk: is null" in result.output
    result = CliRunner().invoke(app, ["fit", "configs/qm9_summary.yaml"])
    assert result.exit_code == 2 and "task: is 'qm9-summary'" in result.output


# --------------------------------------------------------------------------- the sum of two networks

#: A second network for SMALL's: the same layers on 4 Gaussians to 3 Å (SMALL's maps: 6 to 5 Å).
SECOND_RADIAL = {"kind": "gaussian", "n": 4, "r_min": 0.7, "r_cut": 3.0}
SUM = ("{terms: [{layers: 'lift:3 erf pool dense', sigma_w: 1.0, sigma_b: 0.1}, {layers: 'lift:3 erf pool dense', "
       "sigma_w: 1.0, sigma_b: 0.1, radial: {kind: gaussian, n: 4, r_min: 0.7, r_cut: 3.0}}], weights: [0.0, 0.3, 3.0]}")


@pytest.fixture(scope="module")
def sum_runs(tmp_path_factory):
    """SMALL with ``models.so3_ntk_sum`` (its network + the same on SECOND_RADIAL) by ``molntk
    run`` and ``molntk fit``: (run folder, fit folder, the run's records)."""
    folder = tmp_path_factory.mktemp("sum_models")
    config = folder / "small_sum.yaml"
    config.write_text("name: small_sum\n" + SMALL + f"output: {folder / 'run'}\n")
    run = CliRunner().invoke(app, ["run", str(config), "--set", f"models.so3_ntk_sum={SUM}"])
    assert run.exit_code == 0, run.output
    fit = CliRunner().invoke(app, ["fit", str(config), "--out", str(folder / "fit"), "--set", f"models.so3_ntk_sum={SUM}"])
    assert fit.exit_code == 0, fit.output
    return folder / "run", folder / "fit", json.loads((folder / "run" / "report.json").read_text())["results"]


def test_a_config_with_a_sum_saves_the_sum_with_the_weights_the_run_chose(sum_runs, qm9):
    """The run's model file is the sum (SO3NTKSumRegressor), with the weights of its N = 24
    record, and predicts what the run reported for it (1e-6 meV, as the single network's)."""
    run, _, records = sum_runs
    model = load_model(run / "models" / "u0_atom.molntk.npz")
    assert type(model) is SO3NTKSumRegressor
    record = next(r for r in records if r["model"] == "so3-ntk-sum" and r["n_train"] == N_TRAIN)
    assert list(model.regressor_.weights_) == record["term_weights"]
    assert radial_basis_from_dict(model.terms[0]["radial"]) == radial_basis_from_dict(SECOND_RADIAL)
    assert model.provenance_["candidate"]["chosen_weights"] == record["term_weights"][1:]
    reported = pd.read_csv(run / "predictions.csv")["u0_atom:so3-ntk-sum"].to_numpy()
    np.testing.assert_allclose(model.predict(_test_molecules(qm9)), reported, rtol=0, atol=1e-6)


def test_fit_of_a_config_with_a_sum_equals_the_sum_built_by_hand(sum_runs, qm9):
    """``molntk fit`` against SO3NTKSumRegressor.fit with SMALL's numbers typed here (as in
    test_fit_equals_an_estimator_built_by_hand_from_the_config) and the second network's
    radial basis: the same weights chosen from the config's grid, means and stds to 1e-8."""
    run, fit, _ = sum_runs
    fitted = load_model(fit / "u0_atom.molntk.npz")
    train = standard_split(len(qm9), 0).train[:N_TRAIN]
    by_hand = SO3NTKSumRegressor(
        layers="lift:3 erf pool dense", sigma_w=1.0, sigma_b=0.1, smearing_width=0.5,
        radial={"kind": "gaussian", "n": 6, "r_min": 0.5, "r_cut": 5.0}, grid_band_limit=3, sampling="gauss-legendre",
        psd_rtol=1e-4, residual=True, terms=[{"radial": SECOND_RADIAL}], weights=[0.0, 0.3, 3.0],
    ).fit(qm9.molecules(train.tolist()), np.asarray(qm9.target("u0_atom"))[train])
    assert fitted.regressor_.weights_ == by_hand.regressor_.weights_ == load_model(run / "models" / "u0_atom.molntk.npz").regressor_.weights_
    test = _test_molecules(qm9)[:4]
    expected, expected_std = by_hand.predict(test, return_std=True)
    got, got_std = fitted.predict(test, return_std=True)
    np.testing.assert_allclose(got, expected, rtol=1e-8)
    np.testing.assert_allclose(got_std, expected_std, rtol=1e-8)


def test_a_sum_searched_over_points_equals_the_same_weights_as_a_grid(sum_runs, tmp_path):
    """``points`` [[0], [0.3], [3]] are SUM's grid [0, 0.3, 3] of its one further network:
    the run's sum records (weights, λ, MAE, CV error) are the same, bit for bit."""
    _, _, records = sum_runs
    config = tmp_path / "small_sum_points.yaml"
    config.write_text("name: small_sum_points\n" + SMALL + f"output: {tmp_path / 'run'}\n")
    points = SUM.replace("weights: [0.0, 0.3, 3.0]", "points: [[0.0], [0.3], [3.0]]")
    run = CliRunner().invoke(app, ["run", str(config), "--set", f"models.so3_ntk_sum={points}", "--set", "models.so3_ntk=null"])
    assert run.exit_code == 0, run.output
    keys = ("n_train", "term_weights", "reg_relative", "mae", "cv_error")
    got = [[r[k] for k in keys] for r in json.loads((tmp_path / "run" / "report.json").read_text())["results"]
           if r["model"] == "so3-ntk-sum"]
    assert got == [[r[k] for k in keys] for r in records if r["model"] == "so3-ntk-sum"] and len(got) >= 2


# --------------------------------------------------------------------------- output folders


def _no_work(monkeypatch):
    """Make loading the data fail loudly: a test using it proves nothing was loaded."""
    def fail(*args, **kwargs):
        raise AssertionError("data loaded before the output folder was checked")

    monkeypatch.setattr("molntk.pipelines.qm9.run.load_sets", fail)
    monkeypatch.setattr("molntk.pipelines.qm9.fit.load_sets", fail)


@pytest.mark.parametrize("command", ["run", "fit"])
def test_an_output_folder_that_cannot_be_made_is_exit_2_before_any_work(command, tmp_path, monkeypatch):
    _no_work(monkeypatch)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    config = tmp_path / "small.yaml"
    config.write_text("name: small\n" + SMALL + f"output: {blocker}\n")
    args = [command, str(config)] if command == "run" else [command, str(config), "--out", str(blocker / "models")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert str(blocker) in line and "not a folder" in line


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_full_disk_leaves_the_previous_results_as_they_were(small_runs, monkeypatch, tmp_path):
    """A rerun into the folder of a finished run whose metrics.csv writer hits ENOSPC: exit 2
    naming the folder, every file of the previous set byte for byte, no staging folder left."""
    config, run, _, _, _ = small_runs
    before = _snapshot(run)
    assert "models/u0_atom.molntk.npz" in before and "report.json" in before

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("molntk.pipelines.qm9.files.write_metrics_csv", full_disk)
    result = CliRunner().invoke(app, ["run", str(config)])
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert str(run) in line and "No space left on device" in line
    assert _snapshot(run) == before
    assert [p.name for p in run.parent.iterdir() if ".partial-" in p.name] == []


def test_run_table_names_the_saved_model(small_runs):
    _, run, _, _, output = small_runs
    assert f"model (u0_atom): {run / 'models' / 'u0_atom.molntk.npz'}" in output


def test_run_model_chooses_lambda_with_the_configs_cv_loss(tmp_path, qm9):
    """With ``regression.cv_loss: absolute`` the saved model's λ search scores mean |r| as the
    run's own fit does (the estimator and its kernel regressor carry the loss), and the file
    predicts what the run reported (to 1e-6 meV, as above). On SMALL's 24 molecules both
    losses happen to choose the same λ, so the loss is checked on the fitted regressor."""
    config = tmp_path / "small.yaml"
    config.write_text("name: small\n" + SMALL + f"output: {tmp_path / 'run'}\n")
    run = CliRunner().invoke(app, ["run", str(config), "--set", "regression.cv_loss=absolute"])
    assert run.exit_code == 0, run.output
    model = SO3NTKRegressor.load(tmp_path / "run" / "models" / "u0_atom.molntk.npz")
    assert model.cv_loss == "absolute" and model.regressor_.cv_loss == "absolute"
    reported = pd.read_csv(tmp_path / "run" / "predictions.csv")["u0_atom:so3-ntk"].to_numpy()
    np.testing.assert_allclose(model.predict(_test_molecules(qm9)), reported, rtol=0, atol=1e-6)
