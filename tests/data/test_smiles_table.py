"""CSV tables of SMILES (molntk/data/smiles_table.py): ids, lines of bad rows, tables without a smiles column."""

from __future__ import annotations

import numpy as np

from molntk.data.readers import molecule_from_smiles
from molntk.data.smiles_table import read_smiles_table


def test_rows_become_molecules_with_the_table_ids_and_bad_rows_name_their_line(tmp_path):
    table = tmp_path / "set.csv"
    table.write_text("Smiles,Id\nCCO,ethanol\n,blank\nC1CC1,\nCF,fluoromethane\n")
    result = read_smiles_table(table, allowed_elements=[1, 6, 7, 8])
    assert [(m.id, m.smiles, m.source) for m in result.molecules] == [("ethanol", "CCO", str(table)), ("set#2", "C1CC1", str(table))]
    expected = molecule_from_smiles("CCO")  # the same embedding as a SMILES given on its own
    assert np.array_equal(result.molecules[0].positions, expected.positions)
    assert [(f.line, f.problem.split(":")[0]) for f in result.failures] == [(3, "empty SMILES cell"), (5, "SMILES 'CF'")]
    assert "F outside" in result.failures[1].problem


def test_a_table_without_smiles_or_not_a_table_is_one_failure_naming_the_file(tmp_path):
    plain = tmp_path / "plain.csv"
    plain.write_text("name,energy\na,1.0\n")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    for path, problem in ((plain, "no 'smiles' column in the table (columns: 'name', 'energy')"),
                          (empty, "cannot read the file as a CSV table"), (tmp_path / "missing.csv", "file not found")):
        result = read_smiles_table(path)
        assert result.molecules == [] and len(result.failures) == 1
        failure = result.failures[0]
        assert failure.source == str(path) and failure.line is None and failure.problem.startswith(problem)
