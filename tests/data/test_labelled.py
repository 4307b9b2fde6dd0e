"""Labelled data sets (molntk.data.labelled): every format written by its own library (ASE,
RDKit, pandas, ase.db) in tmp_path, values checked against what was written, failures named."""

from __future__ import annotations

from pathlib import Path

import ase
import ase.db
import ase.io
import numpy as np
import pandas as pd
import pytest
from ase.calculators.singlepoint import SinglePointCalculator
from rdkit import Chem
from rdkit.Chem import AllChem

from molntk.data.labelled import read_labelled
from molntk.data.qm9 import QM9
from molntk.errors import InputError

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "examples"


def _methane() -> ase.Atoms:
    d = 0.629
    return ase.Atoms("CH4", positions=[[0, 0, 0], [d, d, d], [-d, -d, d], [-d, d, -d], [d, -d, -d]])


def _water() -> ase.Atoms:
    return ase.Atoms("OH2", positions=[[0, 0, 0], [0.957, 0, 0], [-0.24, 0.927, 0]])


@pytest.fixture
def extxyz(tmp_path: Path) -> Path:
    """Three frames: energy on ASE's calculator, gap/mu/split in info; frame 1's gap is text."""
    frames = []
    for atoms, energy, gap, split in ((_methane(), -40.5, 9.1, "train"), (_water(), -76.4, "n/a", "test"),
                                      (_methane(), -40.4, 9.2, "test")):
        atoms.info.update(gap=gap, mu=0.25, split=split)
        atoms.calc = SinglePointCalculator(atoms, energy=energy)
        frames.append(atoms)
    path = tmp_path / "set.extxyz"
    ase.io.write(path, frames, format="extxyz")
    return path


def test_extxyz_values_from_info_and_calculator(extxyz: Path) -> None:
    data = read_labelled(extxyz, ["energy", "mu"], split_key="split")
    assert data.ok and [m.id for m in data.molecules] == ["set#0", "set#1", "set#2"]
    np.testing.assert_array_equal(data.targets["energy"], [-40.5, -76.4, -40.4])
    assert data.targets["energy"].dtype == np.float64
    assert data.split == ("train", "test", "test")
    assert data.elements == (1, 6, 8)
    np.testing.assert_allclose(data.molecules[1].positions, _water().positions, atol=1e-8)


def test_extxyz_non_numeric_value_is_a_failure_naming_item_and_key(extxyz: Path) -> None:
    data = read_labelled(extxyz)  # every numeric key: gap, mu, energy (split is text)
    assert set(data.targets) == {"gap", "mu", "energy"}
    assert [m.id for m in data.molecules] == ["set#0", "set#2"]
    np.testing.assert_array_equal(data.targets["gap"], [9.1, 9.2])
    (failure,) = data.failures
    assert failure.message == f"{extxyz}: frame 1 (set#1): target 'gap' is not a number: 'n/a'"


def test_unknown_target_is_one_error_listing_the_keys(extxyz: Path) -> None:
    with pytest.raises(InputError) as caught:
        read_labelled(extxyz, ["U0", "mu", "HOMO"])
    assert str(caught.value) == f"{extxyz}: no target key(s) 'U0', 'HOMO' in the file; its keys: gap, mu, split, energy"
    with pytest.raises(InputError, match="no key.s. 'fold'"):
        read_labelled(extxyz, ["mu"], split_key="fold")


def test_bad_split_value_and_broken_frame(tmp_path: Path, extxyz: Path) -> None:
    text = extxyz.read_text().replace("split=test", "split=valid", 1)
    broken = tmp_path / "broken.extxyz"
    broken.write_text(text + "5\ncomment\nC 0 0\n")  # a fourth frame ASE cannot parse
    data = read_labelled(broken, ["mu"], split_key="split")
    assert [m.id for m in data.molecules] == ["broken#0", "broken#2"]
    assert data.failures[0].problem == "frame 1 (broken#1): split key 'split' is 'valid', expected 'train' or 'test'"
    assert data.failures[1].problem.startswith("frame 3 and after: not valid (extended) xyz")


def _sdf(path: Path, entries: list[tuple[str, dict[str, str]]]) -> None:
    with Chem.SDWriter(str(path)) as writer:
        for smiles, props in entries:
            mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
            AllChem.EmbedMolecule(mol, randomSeed=7)
            mol.SetProp("_Name", smiles)
            for key, value in props.items():
                mol.SetProp(key, value)
            writer.write(mol)


def test_sdf_property_tags(tmp_path: Path) -> None:
    path = tmp_path / "set.sdf"
    _sdf(path, [("CCO", {"E": "-1.5", "tag": "a"}), ("CC", {"E": "x"}), ("C=O", {}), ("CN", {"E": "2e-3"})])
    data = read_labelled(path, "E")
    assert [m.id for m in data.molecules] == ["CCO", "CN"]
    np.testing.assert_array_equal(data.targets["E"], [-1.5, 2e-3])
    expected = Chem.SDMolSupplier(str(path), removeHs=False)[0].GetConformer().GetPositions()
    np.testing.assert_allclose(data.molecules[0].positions, expected, atol=1e-4)  # SDF: 4 decimals
    lines = path.read_text().splitlines()
    messages = [(f.line, f.problem) for f in data.failures]
    assert messages == [(lines.index("CC") + 1, "record 1 ('CC'): target 'E' is not a number: 'x'"),
                        (lines.index("C=O") + 1, "record 2 ('C=O'): no value for target 'E'")]


def test_csv_smiles_column_ids_and_failures(tmp_path: Path) -> None:
    path = tmp_path / "set.csv"
    pd.DataFrame({"name": ["eth", "bad", "gap", "me"], "SMILES": ["CCO", "C1CC", "CC", "C"],
                  "y": [1.5, 2.0, None, -3.0]}).to_csv(path, index=False)
    data = read_labelled(path, ["y"], id_column="name")
    assert [m.id for m in data.molecules] == ["eth", "me"]
    assert [m.smiles for m in data.molecules] == ["CCO", "C"]
    np.testing.assert_array_equal(data.targets["y"], [1.5, -3.0])
    assert [(f.line, f.problem.split(":")[0]) for f in data.failures] == [(3, "row 1"), (4, "row 2 (CC)")]
    assert "cannot parse SMILES" in data.failures[0].problem
    assert data.failures[1].problem == "row 2 (CC): no value for target 'y'"
    assert set(read_labelled(path).targets) == {"y"}  # the only numeric column


def test_csv_structure_column(tmp_path: Path) -> None:
    (tmp_path / "mols").mkdir()
    ase.io.write(tmp_path / "mols" / "w.xyz", _water())
    ase.io.write(tmp_path / "mols" / "two.xyz", [_water(), _methane()])
    path = tmp_path / "set.csv"
    pd.DataFrame({"file": ["mols/w.xyz", "mols/two.xyz", "mols/none.xyz"], "y": [1.0, 2.0, 3.0]}).to_csv(path, index=False)
    data = read_labelled(path, ["y"], structure_column="file")
    assert [m.id for m in data.molecules] == ["w"] and data.targets["y"].tolist() == [1.0]
    assert data.failures[0].problem.endswith("holds 2 molecules, expected one")
    assert "file not found" in data.failures[1].problem
    with pytest.raises(InputError, match="no column 'path'; columns: file, y"):
        read_labelled(path, ["y"], structure_column="path")
    with pytest.raises(InputError, match="no SMILES column"):
        read_labelled(path, ["y"])


def test_ase_database(tmp_path: Path) -> None:
    path = tmp_path / "set.db"
    with ase.db.connect(path) as db:
        methane = _methane()
        methane.calc = SinglePointCalculator(methane, energy=-40.5)
        db.write(methane, name="methane", gap=9.1, data={"alpha": 13.2})
        db.write(_water(), name="water", data={"alpha": 9.8})
    data = read_labelled(path, ["energy", "gap", "alpha"], id_column="name")
    assert [m.id for m in data.molecules] == ["methane"]
    assert {k: v.tolist() for k, v in data.targets.items()} == {"energy": [-40.5], "gap": [9.1], "alpha": [13.2]}
    assert data.failures[0].problem == "row id 2 (set#2): no value for target 'energy'"
    assert read_labelled(path, ["alpha"]).targets["alpha"].tolist() == [13.2, 9.8]


def test_extxyz_forces_round_trip(tmp_path: Path) -> None:
    """Forces written by ASE (a calculator's forces, eV/Å) come back per molecule, aligned with
    the molecules; a frame without forces is a failure when forces are asked for."""
    rng = np.random.default_rng(3)
    written = [rng.normal(size=(5, 3)), None, rng.normal(size=(3, 3))]
    frames = []
    for atoms, energy, forces in zip((_methane(), _methane(), _water()), (-40.5, -40.4, -76.4), written):
        atoms.calc = SinglePointCalculator(atoms, energy=energy, forces=forces)
        frames.append(atoms)
    path = tmp_path / "forces.extxyz"
    ase.io.write(path, frames, format="extxyz")
    data = read_labelled(path, "energy", forces=True)
    assert [m.id for m in data.molecules] == ["forces#0", "forces#2"]
    assert data.forces is not None and [f.shape for f in data.forces] == [(5, 3), (3, 3)]
    np.testing.assert_allclose(data.forces[0], written[0], atol=1e-8)  # ASE writes 8 decimals
    np.testing.assert_allclose(data.forces[1], written[2], atol=1e-8)
    np.testing.assert_array_equal(data.targets["energy"], [-40.5, -76.4])
    assert [f.problem for f in data.failures] == ["frame 1 (forces#1): no forces"]
    without = read_labelled(path, "energy")
    assert without.forces is None and len(without.molecules) == 3


def test_ase_database_forces_and_formats_without_forces(tmp_path: Path) -> None:
    path = tmp_path / "forces.db"
    forces = np.arange(9.0).reshape(3, 3)
    with ase.db.connect(path) as db:
        water = _water()
        water.calc = SinglePointCalculator(water, energy=-76.4, forces=forces)
        db.write(water)
    data = read_labelled(path, "energy", forces=True)
    np.testing.assert_array_equal(data.forces[0], forces)
    table = tmp_path / "set.csv"
    pd.DataFrame({"smiles": ["C"], "y": [1.0]}).to_csv(table, index=False)
    with pytest.raises(InputError, match=r"set\.csv: forces=True needs a file with per-atom forces"):
        read_labelled(table, "y", forces=True)


def test_bad_inputs_are_one_line_errors(tmp_path: Path, extxyz: Path) -> None:
    with pytest.raises(InputError, match="unknown labelled-data file type '.json'"):
        read_labelled(tmp_path / "x.json")
    with pytest.raises(InputError, match="file not found"):
        read_labelled(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()  # ase.db would have created it
    with pytest.raises(InputError, match="apply to CSV tables only"):
        read_labelled(extxyz, smiles_column="smiles")
    (tmp_path / "junk.db").write_text("not sqlite")
    with pytest.raises(InputError, match="not a readable ASE database"):
        read_labelled(tmp_path / "junk.db")


def test_example_data_set_is_qm9(qm9: QM9) -> None:
    """data/examples/qm9_subset.extxyz holds QM9 geometries and values (eV, D) of the ids it names."""
    data = read_labelled(EXAMPLE / "qm9_subset.extxyz", ["U0", "gap", "mu"], split_key="split")
    assert data.ok and len(data.molecules) == 300 and data.split.count("test") == 60
    rows = np.searchsorted(qm9.index, [int(m.id.removeprefix("gdb_")) for m in data.molecules])
    np.testing.assert_allclose(data.targets["U0"], qm9.target("u0")[rows] / 1000, rtol=0, atol=1e-6)
    np.testing.assert_allclose(data.targets["gap"], qm9.target("gap")[rows] / 1000, rtol=0, atol=1e-6)
    np.testing.assert_allclose(data.targets["mu"], qm9.target("mu")[rows], rtol=0, atol=1e-4)
    for mol, row in zip(data.molecules, rows):
        np.testing.assert_allclose(mol.positions, qm9.molecule(int(row)).positions, rtol=0, atol=5e-7)
    table = pd.read_csv(EXAMPLE / "qm9_subset.csv")
    assert table["id"].tolist() == [m.id for m in data.molecules]
    np.testing.assert_array_equal(table["U0"], data.targets["U0"])
