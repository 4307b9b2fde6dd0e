"""torch-geometric adapter: conversions, and PyG's QM9 read offline from a tiny raw fixture."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from rdkit import Chem
from rdkit.Chem import rdDetermineBonds
from torch_geometric.data import Data

from molntk.data.molecule import Molecule
from molntk.data.pyg import PYG_QM9_COLUMNS, load_pyg_qm9, molecule_from_pyg, molecule_to_pyg
from molntk.data.qm9 import HARTREE_TO_MEV, QM9, QM9_TARGETS
from molntk.errors import InputError

#: torch_geometric.datasets.qm9.KCALMOL2EV: PyG's factor for the atomization columns.
PYG_KCALMOL_TO_EV = 0.04336414
#: QM9 molecules of the fixture; the third record is listed as uncharacterized (a
#: fixture-only choice, water is characterized in QM9) to exercise PyG's skip list.
FIXTURE_INDICES = (1, 2, 3, 4)
SKIPPED = 3


@pytest.fixture
def water() -> Molecule:
    return Molecule([8, 1, 1], [[0.0, 0.0, 0.1173], [0.0, 0.7572, -0.4692], [0.0, -0.7572, -0.4692]], id="w", smiles="O")


def test_float64_round_trip_is_exact(water: Molecule) -> None:
    data = molecule_to_pyg(water, dtype=torch.float64)
    assert data.z.dtype == torch.long and data.pos.dtype == torch.float64
    assert molecule_from_pyg(data) == water


def test_float32_round_trip_is_close(water: Molecule) -> None:
    data = molecule_to_pyg(water)
    assert data.pos.dtype == torch.float32 and data.name == "w" and data.smiles == "O"
    back = molecule_from_pyg(data, source="model input")
    assert back.id == water.id and back.smiles == water.smiles and back.source == "model input"
    np.testing.assert_array_equal(back.numbers, water.numbers)
    np.testing.assert_allclose(back.positions, water.positions, rtol=1e-7)


def test_from_pyg_ids_and_missing_fields() -> None:
    pos = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.1]])
    assert molecule_from_pyg(Data(z=torch.tensor([6, 8]), pos=pos, idx=torch.tensor([7]))).id == "7"
    assert molecule_from_pyg(Data(z=torch.tensor([6, 8]), pos=pos)).id is None
    with pytest.raises(InputError, match="'z'"):
        molecule_from_pyg(Data(pos=pos))
    with pytest.raises(InputError, match="batch"):
        molecule_from_pyg(Data(z=torch.tensor([6, 8]), pos=pos, name=["a", "b"]))
    with pytest.raises(InputError, match="apart"):  # Molecule's own validation still applies
        molecule_from_pyg(Data(z=torch.tensor([6, 8]), pos=torch.zeros(2, 3)))


def _xyz_block(mol: Molecule) -> str:
    atoms = "\n".join(f"{s} {x:.10f} {y:.10f} {z:.10f}" for s, (x, y, z) in zip(mol.symbols, mol.positions))
    return f"{mol.n_atoms}\n{mol.id}\n{atoms}\n"


def write_pyg_qm9_raw(raw: Path, qm9: QM9) -> None:
    """PyG's raw QM9 files (gdb9.sdf, gdb9.sdf.csv, uncharacterized.txt) for FIXTURE_INDICES.

    The CSV has PyG's columns (mol_id, A, B, C, mu, alpha, homo, ..., g298_atom) in the
    MoleculeNet units: Hartree for energies, kcal/mol for atomization energies. The
    rotational constants A, B, C are not used by molntk and written as 0.
    """
    raw.mkdir(parents=True)
    positions = qm9.positions_of(FIXTURE_INDICES)
    writer = Chem.SDWriter(str(raw / "gdb9.sdf"))
    rows = ["mol_id,A,B,C,mu,alpha,homo,lumo,gap,r2,zpve,u0,u298,h298,g298,cv,u0_atom,u298_atom,h298_atom,g298_atom"]
    for i in positions:
        mol = qm9.molecule(int(i))
        rd = Chem.MolFromXYZBlock(_xyz_block(mol))
        rdDetermineBonds.DetermineBonds(rd, charge=0)
        rd.SetProp("_Name", mol.id)
        writer.write(rd)
        values = []
        for name in PYG_QM9_COLUMNS:
            target, value = QM9_TARGETS[name], qm9.target(name)[i]
            if target.atomization:
                value = value / 1000 / PYG_KCALMOL_TO_EV
            elif target.unit == "meV":
                value = value / HARTREE_TO_MEV
            values.append(repr(float(value)))
        rows.append(",".join([mol.id, "0.0", "0.0", "0.0", *values]))
    writer.close()
    (raw / "gdb9.sdf.csv").write_text("\n".join(rows) + "\n")
    header = [f"header line {k}" for k in range(9)]  # PyG skips 9 header lines and a footer
    (raw / "uncharacterized.txt").write_text("\n".join([*header, f"  {SKIPPED}  fixture", "footer", ""]))


def test_load_pyg_qm9_offline_matches_qm9pack(qm9: QM9, tmp_path: Path) -> None:
    write_pyg_qm9_raw(tmp_path / "raw", qm9)
    loaded = load_pyg_qm9(tmp_path)
    kept = [k for k in FIXTURE_INDICES if k != SKIPPED]
    assert loaded.index.tolist() == kept
    assert loaded.target_names == PYG_QM9_COLUMNS
    reference = qm9.subset(qm9.positions_of(kept))
    np.testing.assert_array_equal(loaded.numbers, reference.numbers)
    np.testing.assert_array_equal(loaded.offsets, reference.offsets)
    np.testing.assert_allclose(loaded.positions, reference.positions, rtol=0, atol=6e-5)  # 4-decimal SDF, float32
    columns = [reference.target_names.index(name) for name in PYG_QM9_COLUMNS]
    np.testing.assert_allclose(loaded.targets, reference.targets[:, columns], rtol=2e-7, atol=1e-4)  # float32 y
    assert [m.id for m in loaded.molecules()] == [f"gdb_{k}" for k in kept]


def test_pyg_data_items_convert_to_molecules(qm9: QM9, tmp_path: Path) -> None:
    from torch_geometric.datasets import QM9 as PygQM9

    write_pyg_qm9_raw(tmp_path / "raw", qm9)
    dataset = PygQM9(str(tmp_path))
    methane = molecule_from_pyg(dataset[0], source="pyg-qm9")
    assert methane.id == "gdb_1" and methane.formula == "CH4"
    np.testing.assert_allclose(methane.positions, qm9.molecule(0).positions, atol=6e-5)
    data = molecule_to_pyg(methane)
    torch.testing.assert_close(data.pos, dataset[0].pos)
    torch.testing.assert_close(data.z, dataset[0].z)
