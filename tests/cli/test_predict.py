"""``molntk predict``: predictions for good SMILES, a named failure for each bad one; the
table, CSV and JSON files, SMILES tables, ``--add-hs`` and unusable model files."""

from __future__ import annotations

import copy
import json
import math
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from molntk.cli.main import app
from molntk.data.readers import read_smiles


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


# --------------------------------------------------------------------------- table, files, inputs


@pytest.fixture
def described_model(fitted_so3, tmp_path):
    """The session's fitted estimator saved with a target name and unit (a copy: the fixture stays as it is)."""
    model = copy.copy(fitted_so3[0])
    model.target_, model.unit_ = "u0_atom", "meV"
    return model, model.save(tmp_path / "u0.molntk.npz")


def test_predict_prints_a_table_with_target_and_unit_and_writes_json(described_model, tmp_path):
    model, path = described_model
    out = tmp_path / "pred.json"
    result = CliRunner().invoke(app, ["predict", "--model", str(path), "--smiles", "CCO", "--out", str(out)])
    assert result.exit_code == 0, result.output
    for header in ("id", "SMILES", "target", "unit", "prediction", "std", "domain"):
        assert header in result.output
    assert "u0_atom" in result.output and "meV" in result.output
    document = json.loads(out.read_text())
    (row,) = document["predictions"]
    mean, std = model.predict(read_smiles(["CCO"]).molecules, return_std=True)
    assert (row["id"], row["smiles"], row["target"], row["unit"]) == ("CCO", "CCO", "u0_atom", "meV")
    assert row["prediction"] == pytest.approx(float(mean[0]), rel=1e-12) and row["std"] == pytest.approx(float(std[0]), rel=1e-12)
    assert row["domain"] == pytest.approx(float(model.domain_scores(read_smiles(["CCO"]).molecules)[0]), rel=1e-12)
    assert document["failures"] == [] and document["model"] == str(path)


def test_predict_csv_has_target_and_unit_columns(described_model, tmp_path):
    _, path = described_model
    out = tmp_path / "pred.csv"
    result = CliRunner().invoke(app, ["predict", "--model", str(path), "--smiles", "CCO", "CCN", "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    assert list(table.columns) == ["id", "smiles", "source", "target", "unit", "prediction", "std", "domain"]
    assert list(table["target"]) == ["u0_atom"] * 2 and list(table["unit"]) == ["meV"] * 2


@pytest.mark.parametrize("name", ["pred.txt", "pred"])
def test_predict_out_of_another_suffix_is_a_usage_error(described_model, tmp_path, name):
    _, path = described_model
    result = CliRunner().invoke(app, ["predict", "--model", str(path), "--smiles", "CCO", "--out", str(tmp_path / name)])
    assert result.exit_code == 2, result.output
    assert ".csv or .json" in " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())


def test_predict_reads_csv_tables_of_smiles_and_names_bad_rows_and_tables(described_model, tmp_path):
    _, path = described_model
    table = tmp_path / "mols.csv"
    table.write_text("ID,SMILES,note\neth,CCO,a\nbad,not-a-smiles,b\n,C1=CC=CN=C1,c\n")
    no_column = tmp_path / "plain.csv"
    no_column.write_text("name,value\nx,1\n")
    result = CliRunner().invoke(app, ["predict", "--model", str(path), "--json", "--input", str(table), str(no_column)])
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert [(p["id"], p["smiles"], p["source"]) for p in document["predictions"]] == [
        ("eth", "CCO", str(table)), ("mols#2", "C1=CC=CN=C1", str(table))]
    failures = [(f["source"], f["line"]) for f in document["failures"]]
    assert failures == [(str(table), 3), (str(no_column), None)]
    assert "no 'smiles' column" in document["failures"][1]["problem"]


def test_predict_add_hs_places_the_hydrogens_an_sdf_leaves_out(described_model, tmp_path):
    from rdkit import Chem
    from rdkit.Chem import AllChem

    mol = Chem.AddHs(Chem.MolFromSmiles("CCO"))
    AllChem.EmbedMolecule(mol, randomSeed=1)
    sdf = tmp_path / "heavy.sdf"
    sdf.write_text(Chem.MolToMolBlock(Chem.RemoveHs(mol)) + "$$$$\n")
    _, path = described_model
    without = CliRunner().invoke(app, ["predict", "--model", str(path), "--json", "--input", str(sdf)])
    assert without.exit_code == 1 and "hydrogen" in json.loads(without.stdout)["failures"][0]["problem"]
    with_hs = CliRunner().invoke(app, ["predict", "--model", str(path), "--json", "--add-hs", "--input", str(sdf)])
    assert with_hs.exit_code == 0, with_hs.output
    (row,) = json.loads(with_hs.stdout)["predictions"]
    assert math.isfinite(row["prediction"])


@pytest.mark.parametrize("content", [b"", b"not a zip archive", b"PK\x03\x04truncated"])
def test_predict_with_an_unusable_model_file_exits_2_naming_it(tmp_path, content):
    path = tmp_path / "broken.molntk.npz"
    path.write_bytes(content)
    result = CliRunner().invoke(app, ["predict", "--model", str(path), "--smiles", "CCO"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {path}: ") and len(result.output.strip().splitlines()) == 1
