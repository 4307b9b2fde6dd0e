"""Ising configurations (molntk.data.ising): local energies by hand, their C4 equivariance,
orbits and the two kinds of spins."""

from __future__ import annotations

import torch

from molntk.data.ising import c4_orbit, local_energies, rotate_lattice, spin_configurations


def test_local_energies_by_hand_on_a_periodic_3x3_lattice():
    s = torch.tensor([[1.0, 1.0, -1.0], [1.0, -1.0, 1.0], [-1.0, 1.0, 1.0]])
    # site (0, 0): s = 1, neighbours (0,1) = 1, (0,2) = -1 (periodic), (1,0) = 1, (2,0) = -1 → 1·0 = 0
    # site (1, 1): s = -1, neighbours (0,1) = 1, (2,1) = 1, (1,0) = 1, (1,2) = 1 → -4
    # site (0, 2): s = -1, neighbours (0,1) = 1, (0,0) = 1, (1,2) = 1, (2,2) = 1 → -4
    energies = local_energies(s)
    assert energies[0, 0] == 0 and energies[1, 1] == -4 and energies[0, 2] == -4
    assert energies.shape == s.shape


def test_local_energies_are_c4_equivariant_and_the_orbit_holds_the_four_turns():
    x = spin_configurations(5, 4, seed=3)
    orbit = c4_orbit(x)
    assert orbit.shape == (4, 5, 1, 4, 4)
    torch.testing.assert_close(orbit[0], x)
    for g in range(4):
        torch.testing.assert_close(local_energies(rotate_lattice(x, g)), rotate_lattice(local_energies(x), g), rtol=0, atol=0)
    torch.testing.assert_close(rotate_lattice(orbit[1], -1), x)
    # a configuration that is not C4-symmetric has a non-trivial orbit
    assert not torch.equal(orbit[1], orbit[0])


def test_kinds_of_spins():
    ising = spin_configurations(50, 4, seed=0)
    assert set(ising.unique().tolist()) == {-1.0, 1.0}
    gaussian = spin_configurations(50, 4, seed=0, kind="gaussian")
    assert gaussian.unique().numel() == gaussian.numel()  # continuous values
    assert abs(float(gaussian.std()) - 1.0) < 0.1  # 800 N(0, 1) draws: the std is within ~3 % of 1
    torch.testing.assert_close(spin_configurations(3, 4, seed=7), spin_configurations(3, 4, seed=7))
