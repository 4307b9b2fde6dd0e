"""``molntk predict``: predictions for good SMILES, a named failure for each bad one."""

from __future__ import annotations

import json
import math
import re

import pandas as pd
from typer.testing import CliRunner

from molntk.cli.main import app


def test_predict_cli_predicts_good_smiles_and_names_bad_ones(fitted_so3, tmp_path):
    model, _, _ = fitted_so3
    path = model.save(tmp_path / "m.npz")
    out = tmp_path / "pred.csv"
    result = CliRunner().invoke(
        app, ["predict", "--model", str(path), "--out", str(out), "--json", "--smiles", "CCO", "not-a-smiles", "C[Si](C)C", "C1=CC=CN=C1"]
    )
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert [p["smiles"] for p in document["predictions"]] == ["CCO", "C1=CC=CN=C1"]
    failed = {f["source"]: f["problem"] for f in document["failures"]}
    assert set(failed) == {"not-a-smiles", "C[Si](C)C"}
    assert "Si" in failed["C[Si](C)C"]
    table = pd.read_csv(out)
    assert list(table["smiles"]) == ["CCO", "C1=CC=CN=C1"] and table["prediction"].notna().all()
    assert all(math.isfinite(v) for v in table["std"])


def test_predict_with_every_input_failing_leaves_an_existing_file_as_it_was(fitted_so3, tmp_path):
    model, _, _ = fitted_so3
    path = model.save(tmp_path / "m.npz")
    out = tmp_path / "pred.csv"
    out.write_text("id,prediction\ngood,1.0\n")
    result = CliRunner().invoke(app, ["predict", "--model", str(path), "--out", str(out), "--json", "--smiles", "not-a-smiles"])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["predictions"] == []
    assert out.read_text() == "id,prediction\ngood,1.0\n"


def test_predict_out_naming_a_folder_is_a_usage_error_before_any_work(tmp_path):
    """The model file does not exist: the --out problem is reported first, so nothing is loaded or computed."""
    result = CliRunner().invoke(app, ["predict", "--model", str(tmp_path / "missing.npz"), "--out", str(tmp_path), "--smiles", "CCO"])
    assert result.exit_code == 2, result.output
    text = " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())  # rich's error box, unwrapped
    assert "is a folder, not a file" in text and "--out" in text


def test_predict_names_molecules_with_elements_the_model_never_saw(fitted_so3, tmp_path):
    model, _, _ = fitted_so3  # trained on H, C, N, O
    path = model.save(tmp_path / "m.npz")
    out = tmp_path / "pred.csv"
    result = CliRunner().invoke(app, ["predict", "--model", str(path), "--out", str(out), "--json", "--smiles", "CCO", "CF"])
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert [p["smiles"] for p in document["predictions"]] == ["CCO"]
    assert [(f["source"], "F" in f["problem"]) for f in document["failures"]] == [("CF", True)]
