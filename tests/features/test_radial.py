"""Radial bases (molntk.features.radial): impossible settings are refused."""

from __future__ import annotations

import pytest

from molntk.features import radial_basis_from_dict


@pytest.mark.parametrize(
    "radial",
    [
        {"kind": "gaussian", "n": 0},
        {"kind": "gaussian", "r_min": 5.0, "r_cut": 5.0},
        {"kind": "gaussian", "r_min": -1.0},
        {"kind": "gaussian", "width": 0.0},
        {"kind": "coulomb", "powers": []},
        {"kind": "coulomb", "powers": [2, 2]},
        {"kind": "coulomb", "powers": [0]},
        {"kind": "bessel"},
        {"kind": "gaussian", "r_cutoff": 4.0},
    ],
)
def test_radial_basis_rejects_impossible_values(radial: dict) -> None:
    with pytest.raises(ValueError):
        radial_basis_from_dict(radial)
