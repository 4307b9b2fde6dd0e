"""What SO3NTKRegressor takes in (molecules, ASE, SMILES, PyG, files), its device="auto" and
its verbose progress (logging, never printing)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from rdkit import Chem
from rdkit.Chem import AllChem

from molntk.data.pyg import molecule_to_pyg
from molntk.data.readers import molecule_from_smiles, molecule_to_atoms, read_file
from molntk.errors import InputError
from molntk.models.so3_ntk import SO3NTKRegressor, as_molecules

EXAMPLES = Path(__file__).resolve().parents[2] / "data" / "examples"


def test_every_reader_input_becomes_molecules(qm9, tmp_path):
    """Each kind of input gives the molecule its own reader gives; a file of several molecules
    counts as all of them, in order."""
    methane = qm9.molecule(0)
    frames = EXAMPLES / "qm9_first3.xyz"
    sdf = tmp_path / "ethanol.sdf"
    embedded = Chem.AddHs(Chem.MolFromSmiles("CCO"))
    AllChem.EmbedMolecule(embedded, randomSeed=1)
    Chem.MolToMolFile(embedded, str(sdf))
    got = as_molecules([methane, molecule_to_atoms(methane), "CCO", molecule_to_pyg(methane, dtype=torch.float64),
                        frames, str(sdf)])
    expected = [methane, methane, molecule_from_smiles("CCO"), methane, *read_file(frames), *read_file(sdf)]
    assert len(got) == len(expected) == 8
    for a, b in zip(got, expected):
        assert np.array_equal(a.numbers, b.numbers) and np.array_equal(a.positions, b.positions)
    assert [m.id for m in got[4:7]] == ["qm9_first3#0", "qm9_first3#1", "qm9_first3#2"]
    assert len(as_molecules("C1=CC=CN=C1")) == 1 and len(as_molecules(frames)) == 3  # one input, not a list


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (["CCO", 42], "X[1]: expected a Molecule, ase.Atoms, SMILES string, molecule file path or torch_geometric Data, got int"),
        (["C1CC"], "X[0]: C1CC: cannot parse SMILES"),
        (["CCO", "missing.xyz"], "X[1]: missing.xyz: file not found"),
        ([str(EXAMPLES / "mixed_bad.xyz")], f"X[0]: {EXAMPLES / 'mixed_bad.xyz'}:11: unknown element symbol 'Xx'"),
    ],
)
def test_a_bad_item_is_one_error_naming_it(inputs, message):
    with pytest.raises(InputError) as caught:
        as_molecules(inputs)
    assert str(caught.value).startswith(message)


def test_predict_on_smiles_and_files_equals_predict_on_their_molecules(fitted_so3):
    model = fitted_so3[0]
    ethanol = EXAMPLES / "ethanol.xyz"
    direct = model.predict([molecule_from_smiles("CCO"), *read_file(ethanol)])
    np.testing.assert_array_equal(model.predict(["CCO", str(ethanol)]), direct)


def test_device_auto_resolves_at_fit_and_load(qm9, tmp_path, monkeypatch):
    assert SO3NTKRegressor().device == "auto"
    mols, y = qm9.molecules(range(1, 7)), np.asarray(qm9.target("u0_atom")[1:7])
    model = SO3NTKRegressor(grid_band_limit=2, psd_rtol=1e-4).fit(mols, y)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert model.device == "auto" and model.device_ == expected  # the parameter stays as given (scikit-learn)
    # a model file written with device "cpu" (every file before "auto") loads as it was
    cpu = SO3NTKRegressor(**{**model.get_params(), "device": "cpu"}).fit(mols, y)
    path = cpu.save(tmp_path / "cpu.npz")
    with np.load(path, allow_pickle=False) as archive:
        arrays = dict(archive)
    meta = json.loads(arrays["metadata"].tobytes().decode("utf-8"))
    del meta["params"]["verbose"]  # files from before the verbose parameter
    arrays["metadata"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    np.savez(tmp_path / "old.npz", **arrays)
    loaded = SO3NTKRegressor.load(tmp_path / "old.npz")
    assert (loaded.device, loaded.device_, loaded.verbose) == ("cpu", "cpu", False)
    np.testing.assert_array_equal(loaded.predict(mols[:2]), cpu.predict(mols[:2]))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert SO3NTKRegressor()._resolve_device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InputError, match="device: 'cuda': device is 'cuda' but torch sees no CUDA device"):
        SO3NTKRegressor(device="cuda").fit(mols, y)


def test_verbose_logs_progress_and_prints_nothing(qm9, caplog, capsys):
    mols, y = qm9.molecules(range(1, 6)), np.asarray(qm9.target("u0_atom")[1:6])
    settings = {"grid_band_limit": 2, "psd_rtol": 1e-4, "block_size": 2}
    with caplog.at_level(logging.INFO, logger="molntk.models.so3_ntk"):
        SO3NTKRegressor(**settings).fit(mols, y)
        assert caplog.records == []
        SO3NTKRegressor(**settings, verbose=True).fit(mols, y).predict(mols[:2])
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == f"fit: 5 molecules on {'cuda' if torch.cuda.is_available() else 'cpu'}; feature maps"
    blocks = [m.split(": ")[2].split(" ")[0].split("/") for m in messages if m.startswith("fit: kernel 5 × 5: ")]
    assert len(blocks) > 1 and blocks[-1][0] == blocks[-1][1]  # done/total after each block, all done at the end
    assert any(m.startswith("predict: kernel 2 × 5: ") for m in messages) and "fit: done" in messages
    assert capsys.readouterr() == ("", "")
