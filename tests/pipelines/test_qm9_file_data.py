"""The property pipeline on the user's own labelled file (``data.source: file``): split,
units, read failures, and elements outside QM9, checked against computations done here
(ASE reads the file, numpy least squares). Small: baselines only (the SO(3) NTK on the
example file runs in the README example, tests/test_readme.py)."""

from __future__ import annotations

import json
from pathlib import Path

import ase.io
import numpy as np
import pandas as pd
import pytest
from sklearn.model_selection import train_test_split
from typer.testing import CliRunner

from molntk.cli.main import app
from molntk.config import ConfigValidationError
from molntk.pipelines.tasks import TASKS

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "examples" / "qm9_subset.extxyz"

#: The baselines that need the data's element set and molecule sizes, on a coarse scale.
BASELINES = (
    "models: {so3_ntk: null, mlp_ntk: null, augmented_mlp_ntk: null, power_spectrum: {zetas: [1]},\n"
    "         coulomb_matrix: {width_factors: [1.0]}, bag_of_bonds: {width_factors: [1.0]}}\n"
    "features: {smearing_width: 0.5, radial: {kind: gaussian, n: 4, r_min: 0.5, r_cut: 3.0}}\n"
    "invariance: {n_molecules: 2, n_rotations: 2}\ncache: false\n"
)


def _run(tmp_path: Path, text: str, exit_code: int = 0) -> dict:
    config = tmp_path / "own.yaml"
    config.write_text(text + BASELINES + f"output: {tmp_path / 'out'}\n")
    result = CliRunner().invoke(app, ["run", str(config), "--json"])
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)["result"]


def _element_counts(frames: list[ase.Atoms], elements: list[int]) -> np.ndarray:
    return np.array([[int((a.numbers == z).sum()) for z in elements] for a in frames], dtype=float)


def test_given_split_dressed_atoms_and_a_failed_frame(tmp_path: Path) -> None:
    """The file's split key, the U0 unit from the config, the data's elements; a frame whose
    U0 is not a number is reported and left out; the dressed-atom MAE is numpy's."""
    frames = ase.io.read(EXAMPLE, index=":")
    frames[4].info["U0"] = "n/a"  # a training frame
    path = tmp_path / "set.extxyz"
    ase.io.write(path, frames, format="extxyz")
    result = _run(tmp_path, f"task: qm9-property\ndata: {{source: file, path: {path}, targets: {{U0: eV}},\n"
                            "  split: {kind: given, key: split}}\nlearning_curve: {n_train: [12, 24], n_test: 10, n_select: 12}\n",
                  exit_code=1)  # the run is complete; exit status 1 says that an item was left out
    problem = f"frame 4 ({frames[4].info['id']}): target 'U0' is not a number: 'n/a'"
    assert result["read_failures"] == [f"{path}: {problem}"]
    assert result["units"] == {"U0": "eV"} and result["elements"] == [1, 6, 7, 8, 9]
    assert {r["model"] for r in result["records"]} == {"dressed-atom", "power-spectrum", "cm-laplacian", "bob-laplacian"}
    assert all(r["unit"] == "eV" for r in result["records"])
    del frames[4]
    train = [a for a in frames if a.info["split"] == "train"][:24]
    test = [a for a in frames if a.info["split"] == "test"][:10]
    elements = [1, 6, 7, 8, 9]
    y_train, y_test = (np.array([a.info["U0"] for a in part]) for part in (train, test))
    w = np.linalg.lstsq(_element_counts(train, elements), y_train, rcond=None)[0]
    expected = np.abs(_element_counts(test, elements) @ w - y_test).mean()
    got = next(r for r in result["records"] if r["model"] == "dressed-atom" and r["n_train"] == 24)
    # the pipeline's ridge is 1e-12 × mean(C²): a relative perturbation far below 1e-6
    assert got["mae"] == pytest.approx(expected, rel=1e-6)
    predictions = pd.read_csv(tmp_path / "out" / "predictions.csv")
    np.testing.assert_allclose(predictions["U0"], y_test)


def test_random_split_and_elements_outside_qm9(tmp_path: Path) -> None:
    """A CSV of SMILES with S and Cl, y = Σ_a Z_a (exactly linear in the element counts), split
    at random: the models take the data's elements, the dressed-atom model fits y exactly."""
    smiles = ["CCS", "CSC", "CCl", "ClCCl", "CS", "CCCl", "OCCS", "NCCCl", "CC(Cl)Cl", "CSSC", "SCCS", "ClC=CCl",
              "CCSC", "OCCl", "CC", "CCO", "CN", "C=O", "CCN", "CCCS", "ClCCO", "SCCO", "CC(S)C", "ClCC(Cl)Cl"]
    from rdkit import Chem

    heavy = [sum(a.GetAtomicNum() for a in Chem.AddHs(Chem.MolFromSmiles(s)).GetAtoms()) for s in smiles]
    path = tmp_path / "set.csv"
    pd.DataFrame({"smiles": smiles, "electrons": heavy}).to_csv(path, index=False)
    result = _run(tmp_path, f"task: qm9-property\ndata: {{source: file, path: {path}, targets: [electrons],\n"
                            "  split: {kind: random, seed: 3, test_fraction: 0.25}}\n"
                            "learning_curve: {n_train: [10, 18], n_test: null, n_select: 10}\n")
    assert result["elements"] == [1, 6, 7, 8, 16, 17] and result["units"] == {"electrons": "unknown"}
    _, test = train_test_split(np.arange(len(smiles)), test_size=0.25, random_state=3)
    assert result["n_test"] == 6
    np.testing.assert_array_equal(pd.read_csv(tmp_path / "out" / "predictions.csv")["electrons"], np.array(heavy)[test])
    dressed = next(r for r in result["records"] if r["model"] == "dressed-atom" and r["n_train"] == 18)
    assert dressed["mae"] < 1e-8  # Σ Z_a is exactly linear in the counts of the data's elements
    assert all(np.isfinite(r["mae"]) for r in result["records"])


def test_file_config_problems_name_their_keys(tmp_path: Path) -> None:
    config = tmp_path / "own.yaml"
    config.write_text(f"task: qm9-property\ndata: {{source: file, path: {EXAMPLE}, targets: {{U0: eV, gap: eV}}}}\n")
    loaded = TASKS.load(str(config))
    assert loaded.targets == ["U0", "gap"] and loaded.data.split.kind == "random"
    assert TASKS.load(str(config), ["targets=[gap]"]).targets == ["gap"]
    assert TASKS.load(str(config), ["data.targets=[U0]"]).data.targets == {"U0": "unknown"}
    cases = {
        "data.split.kind=fixed": "data.split.kind: expected one of 'random', 'given', got 'fixed'",
        "data.split={key: split}": "data.split.kind: missing required key",
        "data.split={kind: given}": "data.split.key: missing required key",
        "data.pth=x": "data.pth: unknown key 'pth' (did you mean 'path'?)",
        "targets=[gpa]": "targets: target 'gpa' is not in data.targets (did you mean 'gap'?)",
        "data.source=files": "data.source: expected one of 'qm9pack', 'torch-geometric', 'file', got 'files' (did you mean 'file'?)",
        "data.smiles_column=smiles": "data.smiles_column: only used with a CSV table, not '.extxyz'",
        "data.split={kind: random, test_fraction: 1.5}": "data.split.test_fraction: must be < 1.0, got 1.5",
    }
    for override, message in cases.items():
        with pytest.raises(ConfigValidationError) as caught:
            TASKS.load(str(config), [override])
        assert str(caught.value) == f"--set {override}: {message}", override
    bare = tmp_path / "bare.yaml"
    bare.write_text("task: qm9-property\ndata: {source: file}\n")
    with pytest.raises(ConfigValidationError) as caught:
        TASKS.load(str(bare))
    assert str(caught.value).splitlines() == [f"{bare}: data.path: missing required key", f"{bare}: data.targets: missing required key"]


def test_sizes_and_unknown_keys_are_refused_before_any_kernel(tmp_path: Path) -> None:
    config = tmp_path / "own.yaml"
    config.write_text(f"task: qm9-property\ndata: {{source: file, path: {EXAMPLE}, targets: {{U0: eV}},\n"
                      "  split: {kind: given, key: split}}\nlearning_curve: {n_train: [10, 300], n_select: 10}\n")
    result = CliRunner().invoke(app, ["run", str(config)])
    assert result.exit_code == 2
    assert "learning_curve.n_train: 300 exceeds the 240 molecules of the training split (data.split)" in result.output
    result = CliRunner().invoke(app, ["run", str(config), "--set", "data.targets={HOMO: eV}"])
    assert result.exit_code == 1
    assert "no target key(s) 'HOMO' in the file; its keys: id, smiles, U0, gap, mu, split" in result.output
