"""``molntk predict``: predictions for good SMILES, a named failure for each bad one."""

from __future__ import annotations

import json
import math

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
