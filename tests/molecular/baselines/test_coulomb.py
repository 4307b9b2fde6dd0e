"""Coulomb matrix and bag of bonds (molntk.molecular.baselines.coulomb): values by hand,
invariances, size limits, QM9 bag sizes, agreement with qmllib."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.molecular.baselines import BagOfBonds, CoulombMatrix, l1_distances, median_l1_width
from tests.helpers.baselines import random_rotation, rotated


BOHR = 0.52917721067  # Å (ase.units.Bohr, CODATA 2014)


def test_coulomb_matrix_of_h2_and_hf_by_hand():
    h2 = Molecule([1, 1], [[0, 0, 0], [0, 0, 0.74]])
    cm = CoulombMatrix(n_max=3)(h2)[0].numpy()  # lower triangle of the 3×3 padded matrix
    assert np.allclose(cm, [0.5, 1 / 0.74, 0.5, 0, 0, 0], rtol=1e-15)
    bohr = CoulombMatrix(n_max=2, length_unit="bohr")(h2)[0].numpy()
    assert np.allclose(bohr, [0.5, BOHR / 0.74, 0.5], rtol=1e-9)
    hf = Molecule([1, 9], [[0, 0, 0], [0.92, 0, 0]])  # F has the larger row norm: it goes first
    assert np.allclose(CoulombMatrix(n_max=2)(hf)[0].numpy(), [0.5 * 9**2.4, 9 / 0.92, 0.5], rtol=1e-15)
    bob = BagOfBonds()(h2)[0].numpy()
    sizes = [bag.size for bag in BagOfBonds().bags]
    assert bob.size == sum(sizes) and sizes[:2] == [20, 190]  # H atoms, H–H pairs first
    assert np.allclose(bob[:2], [0.5, 0.5]) and bob[20] == pytest.approx(1 / 0.74, rel=1e-15)
    assert np.count_nonzero(bob) == 3


@pytest.mark.parametrize("descriptor", [CoulombMatrix(), BagOfBonds()], ids=["cm", "bob"])
def test_descriptors_are_permutation_rotation_and_translation_invariant(molecules, descriptor):
    """Includes the exactly symmetric C₂H₂, where only the CM's tie-break keeps the order canonical."""
    assert "C2H2" in {m.formula for m in molecules}
    base = descriptor(molecules)
    rng = np.random.default_rng(1)
    for seed in range(3):
        moved = [rotated(m, random_rotation(seed), rng.normal(size=3) * 5, rng.permutation(m.n_atoms)) for m in molecules]
        assert torch.allclose(descriptor(moved), base, rtol=1e-12, atol=1e-12)


def test_descriptor_limits_are_input_errors(qm9):
    big = qm9.molecules([int(np.argmax(qm9.n_atoms))])
    with pytest.raises(InputError, match="do not fit"):
        CoulombMatrix(n_max=10)(big)
    with pytest.raises(InputError, match="bag size"):
        BagOfBonds(max_counts={1: 2, 6: 9, 7: 7, 8: 5, 9: 6})(big)
    with pytest.raises(InputError, match="Cl"):
        BagOfBonds()(Molecule([17, 1], [[0, 0, 0], [1.3, 0, 0]]))
    with pytest.raises(ValueError, match="two descriptors"):
        median_l1_width(torch.zeros(1, 3))


def test_qm9_max_counts_hold_for_all_of_qm9(qm9):
    """The default bag sizes fit every QM9 molecule (checked without building descriptors)."""
    BagOfBonds()._check_counts(qm9.molecules(np.argsort(-qm9.n_atoms)[:2000]))
    mol = np.repeat(np.arange(len(qm9)), qm9.n_atoms)
    for z, limit in BagOfBonds().max_counts.items():
        assert np.bincount(mol[qm9.numbers == z], minlength=len(qm9)).max() == limit


def test_cm_and_bob_match_qmllib(molecules):
    """Same descriptors as qmllib's (entry order aside, so compare all L1 distances). The CM
    comparison leaves out C₂H₂, whose exact symmetry qmllib's plain row-norm sort resolves by
    input order (ours is canonical there: see the invariance test)."""
    reps = pytest.importorskip("qmllib.representations")
    asymmetric = [m for m in molecules if m.formula != "C2H2"]
    ours = CoulombMatrix()(asymmetric)
    theirs = torch.tensor(np.array([reps.generate_coulomb_matrix(m.numbers, m.positions, size=29) for m in asymmetric]))
    assert torch.allclose(l1_distances(ours), l1_distances(theirs), rtol=1e-12, atol=1e-10)
    asize = {"H": 20, "C": 9, "N": 7, "O": 5, "F": 6}
    ours = BagOfBonds()(molecules)
    theirs = torch.tensor(np.array([reps.generate_bob(m.numbers, m.positions, None, size=29, asize=asize) for m in molecules]))
    assert ours.shape == theirs.shape
    assert torch.allclose(l1_distances(ours), l1_distances(theirs), rtol=1e-12, atol=1e-10)
