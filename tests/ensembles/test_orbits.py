"""The relative orbit standard deviation (molntk.ensembles.orbits) by hand."""

from __future__ import annotations

import math

import torch

from molntk.ensembles import member_relative_orbit_std, orbit_spread, relative_orbit_std


def test_relative_orbit_std_by_hand():
    # |G| = 4 aligned values of one input with 2 outputs: output 0 takes 1, 3, 1, 3
    # (mean 2, std 1 over the orbit); output 1 is -2 everywhere (mean -2, std 0)
    aligned = torch.tensor([[[1.0, -2.0]], [[3.0, -2.0]], [[1.0, -2.0]], [[3.0, -2.0]]])
    std, size = orbit_spread(aligned)
    torch.testing.assert_close(std, torch.tensor([[1.0, 0.0]]))
    torch.testing.assert_close(size, torch.tensor([[2.0, 2.0]]))
    assert math.isclose(relative_orbit_std(aligned), (1.0 + 0.0) / 2 / ((2.0 + 2.0) / 2))


def test_equivariant_values_have_zero_orbit_std_and_per_member_values():
    equivariant = torch.randn(1, 3, 5).expand(4, 3, 5)
    assert relative_orbit_std(equivariant) == 0.0
    # two members (|G| = 2): member 0 equivariant, member 1 values 0 and 2 (std 1, mean 1)
    aligned = torch.tensor([[[5.0], [0.0]], [[5.0], [2.0]]])
    torch.testing.assert_close(member_relative_orbit_std(aligned), torch.tensor([0.0, 1.0]))
