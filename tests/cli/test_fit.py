"""``molntk fit --data FILE --target KEY``: one model file from a labelled file, equal to the
estimator fitted by hand; unreadable items named (exit 1, the model fitted on the rest);
usage errors exit 2 before any work."""

from __future__ import annotations

import json

import ase.io
import numpy as np
import pytest
from typer.testing import CliRunner

from molntk.cli.main import app
from molntk.data.labelled import read_labelled
from molntk.models import SO3NTKRegressor

EXAMPLE = "data/examples/qm9_subset.extxyz"


@pytest.fixture(scope="module")
def labelled_file(tmp_path_factory):
    """The first 12 molecules of the example data set, the fourth without its U0 value."""
    frames = ase.io.read(EXAMPLE, index=":12")
    del frames[3].info["U0"]
    path = tmp_path_factory.mktemp("fit") / "small.extxyz"
    ase.io.write(path, frames, format="extxyz")
    return path


def test_fit_data_writes_the_estimators_model_and_names_the_unread_item(labelled_file, tmp_path):
    out = tmp_path / "models"
    result = CliRunner().invoke(app, ["fit", "--data", str(labelled_file), "--target", "U0", "--unit", "eV",
                                      "--out", str(out), "--json"])
    assert result.exit_code == 1, result.output  # one molecule had no U0 value
    document = json.loads(result.stdout)
    assert document["result"]["n_train"] == 11
    [failure] = document["result"]["read_failures"]
    assert "U0" in failure
    model = SO3NTKRegressor.load(out / "U0.molntk.npz")
    assert (model.target_, model.unit_) == ("U0", "eV")
    assert model.provenance_["read_failures"] == 1
    data = read_labelled(labelled_file, "U0")
    by_hand = SO3NTKRegressor(elements=data.elements).fit(data.molecules, data.targets["U0"])
    query = ["CCO", data.molecules[0]]
    np.testing.assert_allclose(model.predict(query), by_hand.predict(query), rtol=1e-10)


def test_fit_data_with_a_baseline_writes_a_delta_model(labelled_file, tmp_path):
    """``--baseline gfn2-xtb``: the model file holds the baseline, and its predictions are
    those of the estimator fitted by hand with it."""
    pytest.importorskip("tblite", reason="the GFN2-xTB baseline needs tblite (pip install \"molntk[md]\")")
    out = tmp_path / "models"
    result = CliRunner().invoke(app, ["fit", "--data", str(labelled_file), "--target", "U0", "--unit", "eV",
                                      "--baseline", "gfn2-xtb", "--out", str(out), "--json"])
    assert result.exit_code == 1, result.output  # one molecule had no U0 value
    model = SO3NTKRegressor.load(out / "U0.molntk.npz")
    assert (model.baseline, model.unit_) == ("gfn2-xtb", "eV")
    data = read_labelled(labelled_file, "U0")
    by_hand = SO3NTKRegressor(elements=data.elements, baseline="gfn2-xtb").fit(data.molecules, data.targets["U0"], unit="eV")
    np.testing.assert_allclose(model.predict(data.molecules[:3]), by_hand.predict(data.molecules[:3]), rtol=1e-10)


@pytest.mark.parametrize("args, hint", [
    (["fit"], "CONFIG"),
    (["fit", "--data", EXAMPLE, "--target", "U0", "--baseline", "dft"], "--baseline"),
    (["fit", "configs/qm9_u0.yaml", "--baseline", "gfn2-xtb"], "--baseline"),
    (["fit", "configs/qm9_u0.yaml", "--data", EXAMPLE, "--target", "U0"], "CONFIG"),
    (["fit", "--data", EXAMPLE], "--target"),
    (["fit", "configs/qm9_u0.yaml", "--target", "U0"], "--target"),
    (["fit", "--data", "data/md/ethanol_sample.extxyz", "--target", "energy", "--forces", "--unit", "kcal/mol"], "--unit"),
    (["fit", "configs/qm9_u0.yaml", "--forces"], "--forces"),
])
def test_fit_usage_errors_exit_2_naming_the_option(args, hint):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert hint in result.output


def test_fit_data_with_an_unwritable_output_exits_2_before_reading(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = CliRunner().invoke(app, ["fit", "--data", str(tmp_path / "missing.extxyz"), "--target", "U0",
                                      "--out", str(blocker / "models")])
    assert result.exit_code == 2, result.output
    assert "missing.extxyz" not in result.output  # the output folder is checked first
