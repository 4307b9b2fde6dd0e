"""Readers of the user's molecules (molntk.data.readers) and their handling of bad input.

Fixture files are written into ``tmp_path`` by the tests; each bad input must come back
as an error (strict readers) or a failure (batch readers) that names the file and line
(or the SMILES) and the problem, with the good items of the same batch still read.
"""

from __future__ import annotations

import json
from pathlib import Path

import ase
import ase.io
import numpy as np
import pytest
from rdkit import Chem, rdBase
from rdkit.Chem import AllChem

from molntk.data.molecule import Molecule
from molntk.data.readers import (
    DEFAULT_SEED,
    ReadFailure,
    ReadResult,
    molecule_from_atoms,
    molecule_from_smiles,
    molecule_to_atoms,
    read_file,
    read_molecules,
    read_sdf,
    read_smiles,
    read_smiles_file,
    read_xyz,
)
from molntk.errors import InputError

EXAMPLES = Path(__file__).resolve().parents[2] / "data" / "examples"
QM9_ELEMENTS = (1, 6, 7, 8, 9)
#: RDKit releases without rdBase.CaptureErrorLog give no parse-error reasons to quote.
RDKIT_LOG_CAPTURED = hasattr(rdBase, "CaptureErrorLog")

METHANE = [
    ("C", "-0.0126981359", "1.0858041578", "0.0080009958"),
    ("H", "0.002150416", "-0.0060313176", "0.0019761204"),
    ("H", "1.0117308433", "1.4637511618", "0.0002765748"),
    ("H", "-0.540815069", "1.4475266138", "-0.8766437152"),
    ("H", "-0.5238136345", "1.4379326443", "0.9063972942"),
]
AMMONIA = [
    ("N", "-0.0404260543", "1.0241077531", "0.0625637998"),
    ("H", "0.0172574639", "0.0125452063", "-0.0273771593"),
    ("H", "0.9157893661", "1.3587451948", "-0.0287577581"),
    ("H", "-0.5202777357", "1.3435321258", "-0.7755426124"),
]
WATER = [
    ("O", "-0.0343604951", "0.9775395708", "0.0076015923"),
    ("H", "0.0647664923", "0.0205721989", "0.0015346341"),
    ("H", "0.8717903737", "1.3007924048", "0.0006931336"),
]


def frame(atoms, comment="", count=None) -> str:
    """Text of one plain xyz frame (``count`` overrides the atom count line)."""
    lines = [str(len(atoms) if count is None else count), comment, *(" ".join(atom) for atom in atoms)]
    return "\n".join(lines) + "\n"


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def exact(atoms) -> np.ndarray:
    """The coordinates of xyz atom tuples as the floats their text denotes."""
    return np.array([[float(x) for x in atom[1:4]] for atom in atoms])


def only_failure(result: ReadResult) -> ReadFailure:
    assert len(result.failures) == 1, [f.message for f in result.failures]
    return result.failures[0]


# --------------------------------------------------------------------------- plain xyz


def test_single_frame_xyz_positions_are_exact(tmp_path):
    path = write(tmp_path, "methane.xyz", frame(METHANE, "methane from QM9"))
    (mol,) = read_xyz(path)
    assert mol.id == "methane" and mol.source == str(path) and mol.smiles is None
    assert mol.numbers.tolist() == [6, 1, 1, 1, 1]
    assert np.array_equal(mol.positions, exact(METHANE))


def test_multi_frame_xyz_ids_and_exact_positions(tmp_path):
    path = write(tmp_path, "qm9.xyz", frame(METHANE) + frame(AMMONIA) + frame(WATER))
    mols = read_xyz(path)
    assert [m.id for m in mols] == ["qm9#0", "qm9#1", "qm9#2"]
    assert [m.formula for m in mols] == ["CH4", "H3N", "H2O"]
    for mol, atoms in zip(mols, (METHANE, AMMONIA, WATER)):
        assert np.array_equal(mol.positions, exact(atoms))


def test_xyz_tolerates_blank_lines_extra_columns_numbers_and_qm9_exponents(tmp_path):
    text = (
        "\n3\n  comment with words  \n"
        "o -0.0343604951 0.9775395708 0.0076015923 -0.589706\n"
        "1 0.0647664923 0.0205721989 1.5346341*^-3 0.294853\n"
        "H 0.8717903737 1.3007924048 0.0006931336 0.294853\n\n\n"
        + frame(AMMONIA)
        + "\n\n"
    )
    water, ammonia = read_xyz(write(tmp_path, "loose.xyz", text))
    assert water.numbers.tolist() == [8, 1, 1] and ammonia.formula == "H3N"
    assert np.array_equal(water.positions, exact(WATER))


def test_example_files_read_as_documented():
    inputs = [*sorted(EXAMPLES.glob("*.xyz")), EXAMPLES / "molecules.smi"]
    result = read_molecules(inputs, allowed_elements=QM9_ELEMENTS)
    assert [m.id for m in result.molecules] == [
        "ethanol",
        *("mixed_bad#0", "mixed_bad#2", "mixed_bad#5"),
        *("qm9_first3#0", "qm9_first3#1", "qm9_first3#2"),
        *("ethanol", "acetic_acid", "benzene", "pyridine", "glycerol", "paracetamol", "fluoroform", "cyclopropane"),
    ]
    bad = str(EXAMPLES / "mixed_bad.xyz")
    assert [f.message for f in result.failures] == [
        f"{bad}:11: unknown element symbol 'Xx'",
        f"{bad}:21: non-finite coordinate 'nan'",
        f"{bad}:24: frame 4: atoms 1 (H) and 2 (H) are 0.05 Å apart (minimum 0.1 Å)",
    ]
    qm9 = read_xyz(EXAMPLES / "qm9_first3.xyz")
    assert np.array_equal(qm9[0].positions, exact(METHANE)) and np.array_equal(qm9[2].positions, exact(WATER))


# --------------------------------------------------------------------------- bad xyz


def test_unknown_element_symbol_names_file_and_line(tmp_path):
    bad = [WATER[0], ("Xx", *WATER[1][1:]), WATER[2]]
    path = write(tmp_path, "mixed.xyz", frame(METHANE) + frame(bad) + frame(AMMONIA))
    with pytest.raises(InputError) as info:
        read_xyz(path)
    assert str(info.value) == f"{path}:11: unknown element symbol 'Xx'"
    assert (info.value.source, info.value.line) == (str(path), 11)

    result = read_molecules([path])
    assert [m.id for m in result.molecules] == ["mixed#0", "mixed#2"]
    failure = only_failure(result)
    assert (failure.source, failure.line, failure.problem) == (str(path), 11, "unknown element symbol 'Xx'")


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "Infinity"])
def test_non_finite_coordinates_name_the_line(tmp_path, value):
    bad = [AMMONIA[0], (AMMONIA[1][0], AMMONIA[1][1], value, AMMONIA[1][3]), *AMMONIA[2:]]
    path = write(tmp_path, "nan.xyz", frame(bad) + frame(WATER))
    result = read_molecules([path])
    assert [m.formula for m in result.molecules] == ["H2O"]
    assert only_failure(result).message == f"{path}:4: non-finite coordinate {value!r}"


@pytest.mark.parametrize(
    ("atom_line", "problem"),
    [
        ("H 0.1 zero 0.3", "non-numeric coordinate 'zero'"),
        ("H 0.1 0.2", "expected 'symbol x y z', got 'H 0.1 0.2'"),
        ("0 0.1 0.2 0.3", "unknown atomic number 0 (elements are 1..118)"),
        ("3.5 0.1 0.2 0.3", "unknown element symbol '3.5'"),
    ],
)
def test_malformed_atom_lines_name_the_line(tmp_path, atom_line, problem):
    text = frame(WATER) + f"2\n\nH 5 5 5\n{atom_line}\n" + frame(METHANE)
    path = write(tmp_path, "bad_line.xyz", text)
    result = read_molecules([path])
    assert [m.formula for m in result.molecules] == ["H2O", "CH4"]
    assert only_failure(result).message == f"{path}:9: {problem}"


def test_atoms_closer_than_0_1_angstrom(tmp_path):
    close = [("O", "0", "0", "0"), ("H", "0.96", "0", "0"), ("H", "1.01", "0", "0")]
    path = write(tmp_path, "close.xyz", frame(WATER) + frame(close) + frame(AMMONIA))
    result = read_molecules([path])
    assert [m.formula for m in result.molecules] == ["H2O", "H3N"]
    failure = only_failure(result)
    assert failure.message == f"{path}:6: frame 1: atoms 1 (H) and 2 (H) are 0.05 Å apart (minimum 0.1 Å)"


def test_zero_atom_frame_is_an_empty_molecule(tmp_path):
    path = write(tmp_path, "empty_frame.xyz", frame(WATER) + "0\nnothing here\n" + frame(METHANE))
    result = read_molecules([path])
    assert [m.id for m in result.molecules] == ["empty_frame#0", "empty_frame#2"]
    assert only_failure(result).message == f"{path}:6: frame 1: molecule has no atoms"


def test_bad_atom_count_line(tmp_path):
    path = write(tmp_path, "count.xyz", "three\nwater\n" + "".join(" ".join(a) + "\n" for a in WATER))
    with pytest.raises(InputError, match=r"count\.xyz:1: expected the number of atoms of frame 0, got 'three'$"):
        read_xyz(path)


def test_atom_count_too_small_is_reported_with_a_hint(tmp_path):
    path = write(tmp_path, "short_count.xyz", frame(WATER) + frame(METHANE, count=4) + frame(AMMONIA))
    result = read_molecules([path])
    assert [m.formula for m in result.molecules] == ["H2O", "CH3"]  # frame 1 as its count line says
    failure = only_failure(result)
    assert failure.line == 12
    assert failure.problem == (
        f"expected the number of atoms of frame 2, got {' '.join(METHANE[4])!r} "
        "(does the atom count 4 of frame 1 at line 6 match its atom lines?)"
    )


def test_truncated_last_frame(tmp_path):
    path = write(tmp_path, "trunc.xyz", frame(WATER) + frame(METHANE, count=7))
    result = read_molecules([path])
    assert [m.id for m in result.molecules] == ["trunc#0"]
    assert only_failure(result).message == (
        f"{path}:6: truncated frame 1: the atom count says 7 atoms but the file ends after 5 atom line(s)"
    )


# --------------------------------------------------------------------------- extended xyz


def test_extxyz_written_by_ase(tmp_path):
    water = ase.Atoms("OH2", positions=exact(WATER))
    water.info.update(id="water", smiles="O")
    methane = ase.Atoms("CH4", positions=exact(METHANE))
    path = tmp_path / "two.extxyz"
    ase.io.write(path, [water, methane], format="extxyz")
    mols = read_xyz(path)
    assert [(m.id, m.smiles, m.formula) for m in mols] == [("water", "O", "H2O"), ("two#1", None, "CH4")]
    np.testing.assert_allclose(mols[0].positions, exact(WATER), atol=1e-8)  # ASE writes 8 decimals
    np.testing.assert_allclose(mols[1].positions, exact(METHANE), atol=1e-8)


def test_extxyz_is_detected_in_a_xyz_file_and_cell_is_ignored(tmp_path):
    atoms = ase.Atoms("OH2", positions=exact(WATER), cell=[10, 10, 10], pbc=True)
    path = tmp_path / "boxed.xyz"
    ase.io.write(path, atoms, format="extxyz")
    assert "Lattice=" in path.read_text()
    (mol,) = read_molecules([path]).molecules
    assert mol.id == "boxed" and mol.formula == "H2O"
    np.testing.assert_allclose(mol.positions, exact(WATER), atol=1e-8)


def test_bad_extxyz_frames_name_file_and_frame_line(tmp_path):
    header = 'Properties=species:S:1:pos:R:3 pbc="F F F"'
    unknown = [("Xx", "0", "0", "0"), ("H", "1", "0", "0")]
    nan = [("H", "0", "0", "nan"), ("H", "1", "0", "0")]
    garbage = [("H", "0", "0", "zero"), ("H", "1", "0", "0")]
    text = "".join(frame(atoms, header) for atoms in (WATER, unknown, nan, garbage, AMMONIA))
    path = write(tmp_path, "bad.extxyz", text)
    result = read_molecules([path])
    assert [m.id for m in result.molecules] == ["bad#0", "bad#4"]
    messages = [f.message for f in result.failures]
    assert messages[0] == f"{path}:6: frame 1: unknown element symbol 'Xx'"
    assert messages[1] == f"{path}:10: frame 2: atom 0 (H) has non-finite coordinates [0.0, 0.0, nan]"
    assert messages[2].startswith(f"{path}:14: frame 3: not valid extended xyz (ValueError:")


# --------------------------------------------------------------------------- SDF / MOL


def embedded_rdkit(smiles: str, name: str, seed: int = 7) -> Chem.Mol:
    mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
    assert AllChem.EmbedMolecule(mol, randomSeed=seed) == 0
    mol.SetProp("_Name", name)
    return mol


def molblock(mol: Chem.Mol) -> str:
    return Chem.MolToMolBlock(mol)


def sdf(*blocks: str) -> str:
    return "".join(block + "$$$$\n" for block in blocks)


@pytest.fixture(scope="module")
def ethanol() -> Chem.Mol:
    return embedded_rdkit("CCO", "ethanol")


@pytest.fixture(scope="module")
def flat_benzene() -> str:
    mol = Chem.MolFromSmiles("c1ccccc1")
    AllChem.Compute2DCoords(mol)
    mol.SetProp("_Name", "benzene_2d")
    return molblock(mol)


def test_sdf_with_hydrogens_keeps_every_atom(tmp_path, ethanol):
    path = write(tmp_path, "ethanol.sdf", sdf(molblock(ethanol)))
    (mol,) = read_sdf(path)
    assert (mol.id, mol.source, mol.formula, mol.n_atoms) == ("ethanol", str(path), "C2H6O", 9)
    assert mol.numbers.tolist() == [a.GetAtomicNum() for a in ethanol.GetAtoms()]
    # molfiles hold 4 decimals
    np.testing.assert_allclose(mol.positions, ethanol.GetConformer().GetPositions(), atol=5.1e-5)


def test_mol_file_and_unnamed_records(tmp_path, ethanol):
    unnamed = Chem.Mol(ethanol)
    unnamed.SetProp("_Name", "")
    (single,) = read_file(write(tmp_path, "alone.mol", molblock(unnamed)))
    assert single.id == "alone"
    mols = read_file(write(tmp_path, "pair.sdf", sdf(molblock(unnamed), molblock(ethanol))))
    assert [m.id for m in mols] == ["pair#0", "ethanol"]


def test_sdf_without_hydrogens_needs_add_hs(tmp_path, ethanol):
    heavy = Chem.RemoveHs(ethanol)
    path = write(tmp_path, "heavy.sdf", sdf(molblock(heavy)))
    result = read_molecules([path])
    assert result.molecules == []
    assert only_failure(result).message == (
        f"{path}:1: record 0 ('ethanol'): 6 hydrogen(s) are implied but have no coordinates; "
        "read it with add_hs=True to place them"
    )
    (mol,) = read_sdf(path, add_hs=True)
    assert mol.formula == "C2H6O" and mol.n_atoms == 9
    np.testing.assert_allclose(mol.positions[:3], heavy.GetConformer().GetPositions(), atol=5.1e-5)
    distances = np.linalg.norm(mol.positions[:, None] - mol.positions[None], axis=-1)
    for h in np.flatnonzero(mol.numbers == 1):
        nearest = np.min(np.delete(distances[h], h))
        assert 0.9 < nearest < 1.2  # placed hydrogens sit at bond length from a heavy atom


def test_sdf_2d_record_rejected_others_read(tmp_path, ethanol, flat_benzene):
    path = write(tmp_path, "mixed.sdf", sdf(molblock(ethanol), flat_benzene, molblock(ethanol)))
    result = read_molecules([path])
    assert [m.id for m in result.molecules] == ["ethanol", "ethanol"]
    failure = only_failure(result)
    assert failure.source == str(path) and failure.line == len(molblock(ethanol).splitlines()) + 2
    assert failure.problem.startswith("record 1 ('benzene_2d'): has no 3D coordinates")


def test_planar_3d_record_in_the_xy_plane_is_accepted(tmp_path):
    mol = embedded_rdkit("O", "water")
    conf = mol.GetConformer()
    for i, (x, y, _) in enumerate(conf.GetPositions()):
        conf.SetAtomPosition(i, (x, y, 0.0))
    block = molblock(mol)
    assert block.splitlines()[1][20:22] == "3D"
    (water,) = read_sdf(write(tmp_path, "flat_water.sdf", sdf(block)))
    assert water.formula == "H2O" and not water.positions[:, 2].any()


def test_coordinate_less_record_rejected(tmp_path, ethanol):
    origin = Chem.Mol(ethanol)
    for i in range(origin.GetNumAtoms()):
        origin.GetConformer().SetAtomPosition(i, (0.0, 0.0, 0.0))
    path = write(tmp_path, "origin.sdf", sdf(molblock(origin)))
    with pytest.raises(InputError) as info:
        read_sdf(path)
    assert str(info.value) == f"{path}:1: record 0 ('ethanol'): has no 3D coordinates (all atoms at the origin)"


def test_bad_sdf_records_are_failures_naming_index_name_and_line(tmp_path, ethanol):
    good = molblock(ethanol)
    lines = good.splitlines()
    unknown = "\n".join([*lines[:4], lines[4][:31] + "Xx " + lines[4][34:], *lines[5:]]) + "\n"
    broken_counts = good.replace(lines[3], "  9  X" + lines[3][6:])
    five_bonds = Chem.MolFromMolBlock(
        "pentavalent\n     RDKit          3D\n\n  6  5  0  0  0  0  0  0  0  0999 V2000\n"
        "    0.0000    0.0000    0.0000 C   0  0\n"
        "    1.0900    0.0000    0.0000 H   0  0\n"
        "   -1.0900    0.0000    0.0000 H   0  0\n"
        "    0.0000    1.0900    0.0000 H   0  0\n"
        "    0.0000   -1.0900    0.0000 H   0  0\n"
        "    0.0000    0.0000    1.0900 H   0  0\n"
        "  1  2  1  0\n  1  3  1  0\n  1  4  1  0\n  1  5  1  0\n  1  6  1  0\nM  END\n",
        sanitize=False,
    )
    pentavalent = molblock(five_bonds)
    empty = molblock(Chem.Mol())
    close_mol = Chem.Mol(ethanol)
    close_mol.GetConformer().SetAtomPosition(1, close_mol.GetConformer().GetAtomPosition(0))
    close = molblock(close_mol)
    blocks = [good, unknown, broken_counts, pentavalent, empty, close, good, "", good]  # "": a bare $$$$ record
    path = write(tmp_path, "bad.sdf", sdf(*blocks))
    first_lines = np.cumsum([1] + [len(block.splitlines()) + 1 for block in blocks]).tolist()
    result = read_molecules([path])
    assert [m.id for m in result.molecules] == ["ethanol", "ethanol", "ethanol"]
    problems = [(f.source, f.problem) for f in result.failures]
    assert [p.split(":")[0] for _, p in problems] == [
        "record 1 ('ethanol')",
        "record 2 ('ethanol')",
        "record 3 ('pentavalent')",
        "record 4",
        "record 5 ('ethanol')",
        "record 7",
    ]
    assert all(source == str(path) for source, _ in problems)
    assert "cannot parse it" in problems[0][1]
    assert "Element 'Xx' not found" in problems[0][1] or not RDKIT_LOG_CAPTURED
    assert "cannot parse it" in problems[1][1]
    assert "invalid molecule (Explicit valence for atom # 0 C, 5" in problems[2][1]
    assert problems[3][1] == "record 4: molecule has no atoms"
    assert problems[4][1] == "record 5 ('ethanol'): atoms 0 (C) and 1 (C) are 0 Å apart (minimum 0.1 Å)"
    assert "cannot parse it" in problems[5][1]
    assert [f.line for f in result.failures] == [first_lines[i] for i in (1, 2, 3, 4, 5, 7)]


# --------------------------------------------------------------------------- SMILES


def ch_bonds(mol: Molecule) -> np.ndarray:
    carbon = mol.positions[mol.numbers == 6][0]
    return np.linalg.norm(mol.positions[mol.numbers == 1] - carbon, axis=1)


def test_methane_embedding_geometry_and_reproducibility():
    mol = molecule_from_smiles("C")
    assert (mol.id, mol.smiles, mol.source, mol.formula) == ("C", "C", "C", "CH4")
    bonds = ch_bonds(mol)
    assert len(bonds) == 4 and np.all(np.abs(bonds - 1.09) < 0.02)
    again = molecule_from_smiles("C", seed=DEFAULT_SEED)
    assert np.array_equal(mol.positions, again.positions)


def test_seed_changes_the_embedding_but_not_the_chemistry():
    a = molecule_from_smiles("CCCCO", seed=1)
    b = molecule_from_smiles("CCCCO", seed=1)
    c = molecule_from_smiles("CCCCO", seed=2)
    assert np.array_equal(a.positions, b.positions)
    assert not np.array_equal(a.positions, c.positions)
    assert a.numbers.tolist() == c.numbers.tolist() and a.formula == "C4H10O"


def test_smiles_with_id_and_aromatic_ring():
    mol = molecule_from_smiles(" c1ccccc1 ", mol_id="benzene")
    assert (mol.id, mol.smiles, mol.formula) == ("benzene", "c1ccccc1", "C6H6")
    ring = mol.positions[mol.numbers == 6]
    cc = np.linalg.norm(ring[:, None] - ring[None], axis=-1)
    assert np.all(np.abs(np.sort(cc, axis=1)[:, 1:3] - 1.39) < 0.03)


@pytest.mark.parametrize(
    ("smiles", "reason"),
    [
        ("C1CC", "(RDKit: unclosed ring for input: 'C1CC')"),
        ("C[Xx]", "(RDKit: syntax error while parsing: C[Xx]; check for mistakes around position 3)"),
    ],
)
def test_unparsable_smiles_raise_with_the_smiles_as_source(smiles, reason):
    with pytest.raises(InputError) as info:
        molecule_from_smiles(smiles)
    assert info.value.source == smiles
    assert str(info.value).startswith(f"{smiles}: cannot parse SMILES")
    if RDKIT_LOG_CAPTURED:
        assert info.value.problem == f"cannot parse SMILES {reason}"


@pytest.mark.parametrize(
    ("smiles", "problem"),
    [
        ("CC(C)(C)(C)C", "invalid molecule (Explicit valence for atom # 1 C, 5"),
        ("c1cccc1", "invalid molecule (Can't kekulize mol"),
        ("CCO.O", "has 2 disconnected fragments (CCO, O); give one molecule per SMILES"),
        ("C1#CCC1", f"3D embedding failed (RDKit ETKDGv3, seed {DEFAULT_SEED:#x})"),
    ],
)
def test_invalid_or_unembeddable_smiles_raise_with_the_smiles_as_source(smiles, problem):
    with pytest.raises(InputError) as info:
        molecule_from_smiles(smiles)
    assert info.value.source == smiles
    assert str(info.value).startswith(f"{smiles}: {problem}")


def test_empty_smiles():
    with pytest.raises(InputError, match=r"^'': empty SMILES$"):
        molecule_from_smiles("  ")


def test_read_smiles_batch_keeps_good_items_in_order():
    result = read_smiles(["O", "C1CC", "N", "C1#CCC1", "Clc1ccccc1", float("nan"), "C"], allowed_elements=QM9_ELEMENTS)
    assert [m.id for m in result.molecules] == ["O", "N", "C"]
    assert [f.source for f in result.failures] == ["C1CC", "C1#CCC1", "Clc1ccccc1", "smiles[5]"]
    assert result.failures[2].problem == "element(s) Cl outside the model's element set (H, C, N, O, F)"
    assert result.failures[3].problem == "not a SMILES string: nan"
    assert not result.ok


def test_smiles_file(tmp_path):
    text = (
        "SMILES Name\n"
        "# a comment line\n"
        "CCO ethanol\n"
        "\n"
        "C#N hydrogen cyanide\n"  # '#' inside a SMILES is a triple bond
        "C1CC broken_ring\n"
        "  O\n"
        "C1#CCC1 cyclobutyne\n"
    )
    path = write(tmp_path, "mols.smi", text)
    result = read_molecules([path])
    assert [(m.id, m.smiles, m.formula, m.source) for m in result.molecules] == [
        ("ethanol", "CCO", "C2H6O", str(path)),
        ("hydrogen cyanide", "C#N", "CHN", str(path)),
        ("mols#3", "O", "H2O", str(path)),
    ]
    first, second = (f.message for f in result.failures)
    assert first.startswith(f"{path}:6: SMILES 'C1CC': cannot parse SMILES")
    assert second == f"{path}:8: SMILES 'C1#CCC1': 3D embedding failed (RDKit ETKDGv3, seed {DEFAULT_SEED:#x})"
    with pytest.raises(InputError, match=r"mols\.smi:6: SMILES 'C1CC'"):
        read_smiles_file(path)


def test_smiles_suffix_and_single_entry_id(tmp_path):
    (mol,) = read_file(write(tmp_path, "water.smiles", "O\n"))
    assert (mol.id, mol.smiles) == ("water", "O")


# --------------------------------------------------------------------------- ASE and PyG objects


def test_ase_round_trip_is_exact():
    mol = Molecule([8, 1, 1], exact(WATER), id="water", smiles="O", source="w.xyz")
    atoms = molecule_to_atoms(mol)
    assert atoms.get_chemical_formula() == "H2O" and not atoms.pbc.any()
    assert atoms.info == {"id": "water", "smiles": "O"}
    back = molecule_from_atoms(atoms, source="atoms[0]")
    assert back == mol and back.source == "atoms[0]"
    atoms.positions[0, 0] = 5.0  # the Atoms are a copy
    assert mol.positions[0, 0] == float(WATER[0][1])


def test_molecule_from_atoms_default_id():
    atoms = ase.Atoms("NH3", positions=exact(AMMONIA))
    assert molecule_from_atoms(atoms, default_id="nh3").id == "nh3"
    assert molecule_from_atoms(atoms).id is None


def test_batch_of_objects(tmp_path):
    good = ase.Atoms("OH2", positions=exact(WATER))
    bad = ase.Atoms("OH2", positions=[[0, 0, 0], [0, 0, np.nan], [1, 0, 0]])
    mol = Molecule([1, 1], [[0, 0, 0], [0.74, 0, 0]], id="h2")
    result = read_molecules([good, bad, mol, 42])
    assert [m.formula for m in result.molecules] == ["H2O", "H2"]
    assert result.molecules[0].source == "atoms[0]"
    assert [f.message for f in result.failures] == [
        "atoms[1]: atom 1 (H) has non-finite coordinates [0.0, 0.0, nan]",
        "inputs[3]: cannot read a int: expected a file path, Molecule, ase.Atoms or torch_geometric Data",
    ]


def test_batch_of_pyg_data():
    pytest.importorskip("molntk.data.pyg")
    import torch
    from torch_geometric.data import Data

    good = Data(z=torch.tensor([8, 1, 1]), pos=torch.tensor(exact(WATER), dtype=torch.float64))
    bad = Data(z=torch.tensor([1, 1]), pos=torch.tensor([[0.0, 0.0, 0.0], [0.01, 0.0, 0.0]]))
    result = read_molecules([bad, good])
    assert len(result.molecules) == 1 and np.array_equal(result.molecules[0].positions, exact(WATER))
    assert result.molecules[0].source == "data[1]"
    assert only_failure(result).source == "data[0]"


# --------------------------------------------------------------------------- files that are not molecules


def test_unreadable_files_are_failures_naming_the_path(tmp_path):
    good = write(tmp_path, "water.xyz", frame(WATER))
    (tmp_path / "folder.xyz").mkdir()
    inputs = [
        tmp_path / "missing.xyz",
        tmp_path / "folder.xyz",
        write(tmp_path, "empty.xyz", ""),
        write(tmp_path, "blank.sdf", "  \n\n"),
        write(tmp_path, "binary.xyz", bytes(range(256))),
        write(tmp_path, "garbage.xyz", "this is not a molecule\nat all\n"),
        write(tmp_path, "short.sdf", "this is not a molecule\nat all\n"),
        write(tmp_path, "garbage.sdf", "this is not a molecule\nat all\nnor this\nnor that\n"),
        write(tmp_path, "notes.txt", "CCO\n"),
        write(tmp_path, "README", "hello\n"),
        tmp_path / "missing.txt",
        good,
    ]
    result = read_molecules(inputs)
    assert [m.id for m in result.molecules] == ["water"]
    got = {Path(f.source).name: (f.line, f.problem) for f in result.failures}
    garbage_line, garbage_problem = got.pop("garbage.sdf")
    assert garbage_line == 1
    assert garbage_problem.startswith("record 0 ('this is not a molecule'): RDKit cannot parse it")
    assert got == {
        "missing.xyz": (None, "file not found"),
        "folder.xyz": (None, "is a directory, not a molecule file"),
        "empty.xyz": (None, "file is empty"),
        "blank.sdf": (None, "file is empty"),
        "binary.xyz": (None, "is a binary file, not a text molecule file"),
        "garbage.xyz": (1, "expected the number of atoms of frame 0, got 'this is not a molecule'"),
        "short.sdf": (None, "no MOL record found (too short for a MOL header and counts line)"),
        "notes.txt": (None, "unknown file type '.txt'; expected one of .xyz, .extxyz, .sdf, .mol, .smi, .smiles"),
        "README": (None, "unknown file type '(no suffix)'; expected one of .xyz, .extxyz, .sdf, .mol, .smi, .smiles"),
        "missing.txt": (None, "file not found"),
    }
    assert all(str(tmp_path) in f.source for f in result.failures)


def test_strict_reader_raises_for_unreadable_file(tmp_path):
    with pytest.raises(InputError, match=r"nothing\.sdf: file not found$"):
        read_sdf(tmp_path / "nothing.sdf")


def test_allowed_elements_turn_foreign_elements_into_failures(tmp_path):
    chloro = [
        ("C", "0", "0", "0"),
        ("Cl", "1.78", "0", "0"),
        ("H", "-0.36", "1.03", "0"),
        ("H", "-0.36", "-0.51", "0.89"),
        ("H", "-0.36", "-0.51", "-0.89"),
    ]
    path = write(tmp_path, "halo.xyz", frame(WATER) + frame(chloro) + frame(METHANE))
    result = read_molecules([path], allowed_elements=QM9_ELEMENTS)
    assert [m.id for m in result.molecules] == ["halo#0", "halo#2"]
    problem = "element(s) Cl outside the model's element set (H, C, N, O, F)"
    assert only_failure(result).message == f"{path} [halo#1]: {problem}"
    assert read_molecules([path]).ok


def test_read_result_to_dict_is_json(tmp_path):
    path = write(tmp_path, "w.xyz", frame(WATER))
    result = read_molecules([path, tmp_path / "gone.sdf"])
    data = json.loads(json.dumps(result.to_dict()))
    gone = str(tmp_path / "gone.sdf")
    assert data == {
        "ok": False,
        "n_molecules": 1,
        "n_failures": 1,
        "molecules": [{"id": "w", "formula": "H2O", "n_atoms": 3, "source": str(path), "smiles": None}],
        "failures": [
            {"source": gone, "line": None, "problem": "file not found", "message": f"{gone}: file not found"}
        ],
    }
    assert ReadResult().ok and ReadResult().to_dict()["molecules"] == []


def test_molntk_and_its_qm9_pipeline_import_without_rdkit() -> None:
    """RDKit is imported where SDF/MOL files and SMILES are read, not with molntk: a fresh
    interpreter in which ``import rdkit`` fails imports molntk, the QM9 pipeline and the CLI
    (e.g. a GPU machine for the QM9 runs without RDKit), and reading a SMILES there names RDKit."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['rdkit'] = None\n"
        "import molntk, molntk.pipelines.qm9, molntk.cli.main\n"
        "from molntk.data.readers import molecule_from_smiles\n"
        "try:\n    molecule_from_smiles('CCO')\nexcept ImportError as error:\n    print('ImportError', error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "ImportError" in result.stdout and "rdkit" in result.stdout
