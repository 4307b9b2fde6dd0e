"""The Molecule record: construction, derived fields, and the validation of bad atoms."""

from __future__ import annotations

import numpy as np
import pytest

from molntk.data.molecule import MIN_DISTANCE, Molecule, element_number, element_symbol
from molntk.errors import InputError

WATER_Z = [8, 1, 1]
WATER_POS = [
    [-0.0343604951, 0.9775395708, 0.0076015923],
    [0.0647664923, 0.0205721989, 0.0015346341],
    [0.8717903737, 1.3007924048, 0.0006931336],
]


def water(**kwargs) -> Molecule:
    return Molecule(WATER_Z, WATER_POS, **kwargs)


def test_construction_keeps_values_exactly_and_freezes_arrays():
    mol = water(id="w", smiles="O", source="water.xyz")
    assert mol.numbers.dtype == np.int64 and mol.positions.dtype == np.float64
    assert mol.numbers.tolist() == WATER_Z
    assert mol.positions.tolist() == WATER_POS
    assert mol.n_atoms == 3 and mol.symbols == ["O", "H", "H"]
    with pytest.raises(ValueError):
        mol.positions[0, 0] = 1.0
    with pytest.raises(AttributeError):
        mol.id = "other"  # type: ignore[misc]


def test_construction_copies_its_inputs():
    positions = np.array(WATER_POS)
    mol = Molecule(np.array(WATER_Z), positions)
    positions[0, 0] = 99.0
    assert mol.positions[0, 0] == WATER_POS[0][0]


def test_float_atomic_numbers_that_are_integers_are_accepted():
    assert Molecule([8.0, 1.0, 1.0], WATER_POS).numbers.tolist() == WATER_Z


@pytest.mark.parametrize(
    ("numbers", "formula"),
    [
        ([6, 1, 1, 1, 1], "CH4"),
        ([6, 6, 8, 1, 1, 1, 1, 1, 1], "C2H6O"),
        ([8, 1, 1], "H2O"),
        ([7, 1, 1, 1], "H3N"),
        ([17, 6, 1, 1, 1], "CH3Cl"),
        ([7, 6, 6, 7], "C2N2"),  # carbon without hydrogen (41 QM9 molecules)
        ([9, 6, 9, 9, 9], "CF4"),
        ([8, 6, 8], "CO2"),
    ],
)
def test_formula_is_hill_order(numbers, formula):
    positions = [[1.5 * i, 0.0, 0.0] for i in range(len(numbers))]
    assert Molecule(numbers, positions).formula == formula


def test_to_dict_and_equality():
    mol = water(id="w", smiles="O", source="water.xyz")
    d = mol.to_dict()
    assert d == {
        "id": "w", "smiles": "O", "source": "water.xyz", "formula": "H2O", "numbers": WATER_Z, "positions": WATER_POS
    }
    assert mol == water(id="w", smiles="O", source="elsewhere")  # the source is not part of the identity
    assert mol != water(id="other", smiles="O")
    assert mol != Molecule(WATER_Z, np.array(WATER_POS) + 1e-9, id="w", smiles="O")


def test_describe_names_source_and_id():
    assert water(source="a.xyz").describe() == "a.xyz"
    assert water(source="a.xyz", id="a#2").describe() == "a.xyz [a#2]"
    assert water(source="O", id="O").describe() == "O"


def test_element_number_and_symbol():
    assert element_number("C") == 6 and element_number("cl") == 17 and element_number(" Br ") == 35
    assert element_symbol(1) == "H" and element_symbol(118) == "Og"
    with pytest.raises(InputError, match=r"^mol\.xyz:7: unknown element symbol 'Xx'$"):
        element_number("Xx", source="mol.xyz", line=7)
    with pytest.raises(InputError, match="is not an element"):
        element_symbol(0)


def test_check_elements():
    positions = [[0, 0, 0], [1.8, 0, 0], [-0.5, 0.9, 0], [-0.5, -0.9, 0], [-0.4, 0, 1]]
    mol = Molecule([6, 17, 1, 1, 1], positions, source="cl.xyz", id="cl")
    mol.check_elements([1, 6, 17])
    with pytest.raises(InputError) as info:
        mol.check_elements([1, 6, 7, 8, 9])
    assert str(info.value) == "cl.xyz [cl]: element(s) Cl outside the model's element set (H, C, N, O, F)"


# Each bad molecule raises InputError naming its source and the problem.
BAD = {
    "empty": ([], np.zeros((0, 3)), "molecule has no atoms"),
    "unknown Z=0": ([0, 1], [[0, 0, 0], [1, 0, 0]], "unknown atomic number 0"),
    "unknown Z=119": ([119], [[0, 0, 0]], "unknown atomic number 119"),
    "NaN": ([8, 1, 1], [[0, 0, 0], [0.96, np.nan, 0], [-0.24, 0.93, 0]], r"atom 1 \(H\) has non-finite coordinates"),
    "inf": ([8, 1, 1], [[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, np.inf]], r"atom 2 \(H\) has non-finite coordinates"),
    "-inf": ([8], [[-np.inf, 0, 0]], r"atom 0 \(O\) has non-finite coordinates"),
    "too close": (
        [8, 1, 1],
        [[0, 0, 0], [0.96, 0, 0], [1.01, 0, 0]],
        r"atoms 1 \(H\) and 2 \(H\) are 0\.05 Å apart \(minimum 0\.1 Å\)",
    ),
    "same place": ([6, 6], [[1, 1, 1], [1, 1, 1]], r"atoms 0 \(C\) and 1 \(C\) are 0 Å apart"),
    "shape": ([8, 1, 1], [[0, 0, 0], [1, 0, 0]], r"positions must have shape \(3, 3\)"),
    "2-d numbers": ([[6, 1]], [[0, 0, 0], [1, 0, 0]], r"atomic numbers must be a 1-d array, got shape \(1, 2\)"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_molecules_raise_input_error_naming_the_source(case):
    numbers, positions, problem = BAD[case]
    with pytest.raises(InputError, match=rf"^bad\.xyz \[bad#3\]: {problem}") as info:
        Molecule(numbers, positions, id="bad#3", source="bad.xyz")
    assert info.value.source == "bad.xyz [bad#3]"
    assert isinstance(info.value, ValueError)


def test_non_integer_atomic_numbers_raise_naming_the_source():
    with pytest.raises(InputError, match=r"^bad\.xyz.*: atomic numbers must be integers, got \[6\.5\]"):
        Molecule([6.5], [[0, 0, 0]], id="bad#3", source="bad.xyz")


def test_min_distance_boundary():
    Molecule([1, 1], [[0, 0, 0], [MIN_DISTANCE, 0, 0]])
    with pytest.raises(InputError):
        Molecule([1, 1], [[0, 0, 0], [MIN_DISTANCE * 0.999, 0, 0]])
