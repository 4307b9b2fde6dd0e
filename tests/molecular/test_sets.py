"""Item keys of molecule and inducing sets: what the block cache knows a block's molecules by."""

from __future__ import annotations

import numpy as np
import torch

from molntk.molecular import InducingSet, MoleculeSet, molecule_digests


def test_molecule_keys_follow_content_not_position(molecules):
    keys = MoleculeSet(molecules).item_keys()
    assert keys.shape == (9, 32) and keys.dtype == np.uint8 and len({k.tobytes() for k in keys}) == 9
    assert np.array_equal(MoleculeSet(molecules[::-1]).item_keys(), keys[::-1])
    assert np.array_equal(molecule_digests(molecules[3:4]), keys[3:4])


def test_an_inducing_atom_is_known_by_its_molecule_and_atom(molecules):
    """The same atoms as inducing rows of two sets whose molecules come in other orders (so
    their rows differ) have the same keys; every atom of the set a different one; the
    molecules follow with their own keys."""
    forward, backward = MoleculeSet(molecules), MoleculeSet(molecules[::-1])
    sizes = np.array([m.n_atoms for m in molecules])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    back_starts = np.concatenate([[0], np.cumsum(sizes[::-1])[:-1]])[::-1]  # start of molecule i in the reversed set
    picks = [(0, 0), (4, 2), (8, 1), (8, 0)]  # (molecule, atom)
    rows = torch.tensor([starts[i] + a for i, a in picks])
    back_rows = torch.tensor([back_starts[i] + a for i, a in picks])
    assert not torch.equal(rows, back_rows)
    keys = InducingSet(forward, rows).item_keys()
    assert keys.shape == (4 + 9, 32)
    assert np.array_equal(keys, np.concatenate([InducingSet(backward, back_rows).item_keys()[:4], forward.item_keys()]))
    every_atom = InducingSet(forward, torch.arange(int(sizes.sum()))).item_keys()
    assert len({k.tobytes() for k in every_atom}) == sizes.sum() + 9
