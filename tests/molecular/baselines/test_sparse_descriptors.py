"""Sparse versions of the descriptor baselines (FCHL19, SOAP): inducing atoms chosen in the
baseline's own descriptor space (molntk.molecular.descriptors.inducing_atoms), kernels on an
InducingSet built from descriptors computed once, and the Nyström identity with every
training atom inducing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.features.inducing import allocate, farthest_points
from molntk.molecular import InducingSet, MoleculeSet
from molntk.molecular.baselines import FCHL19Kernel
from molntk.molecular.descriptors import inducing_atoms
from molntk.regression import KernelRegressor
from molntk.regression.sparse import SparseKernelRegressor

pytest.importorskip("qmllib")


@pytest.fixture(scope="module")
def group(qm9) -> MoleculeSet:
    """Twelve small QM9 molecules (H, C, N, O), as one set (its FCHL19 vectors computed once)."""
    return MoleculeSet(qm9.molecules(list(range(1, 13))))


def hand_kernel(kernel: FCHL19Kernel, group: MoleculeSet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """k(x_a, x_b) [Z_a = Z_b] over every atom pair of the set, by numpy, and the (molecule, atom) incidence."""
    d = kernel.describe(group)
    x = d.values.numpy()
    squared = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    z = d.centre_numbers.numpy()
    k_atoms = np.exp(-squared / (2 * kernel.sigma**2)) * (z[:, None] == z[None, :])
    incidence = np.zeros((d.n_molecules, len(x)))
    incidence[d.molecule_index.numpy(), np.arange(len(x))] = 1.0
    return k_atoms, incidence, z


def test_kernel_against_inducing_atoms_is_the_sum_over_same_element_atoms(group):
    """Θ(M, {s}) = Σ_{a∈M} [Z_a = Z_s] k(x_a, x_s), Θ({s}, {s'}) = [Z_s = Z_s'] k(x_s, x_s') and the
    molecules' block is the exact FCHL19 kernel, against numpy on the FCHL19 vectors."""
    kernel = FCHL19Kernel(sigma=2.0, block_size=16)
    rows = inducing_atoms(kernel.describe(group), 11, pool=8)
    K = kernel(kernel.describe(InducingSet(group, rows))).kernel.numpy()
    k_atoms, incidence, _ = hand_kernel(kernel, group)
    r = rows.numpy()
    assert K.shape == (11 + len(group), 11 + len(group))
    np.testing.assert_allclose(K[:11, :11], k_atoms[np.ix_(r, r)], rtol=0, atol=1e-12)
    np.testing.assert_allclose(K[11:, :11], incidence @ k_atoms[:, r], rtol=0, atol=1e-12 * 30)
    np.testing.assert_allclose(K[11:, 11:], kernel(group.molecules).kernel.numpy(), rtol=1e-12, atol=0)


def test_descriptors_are_computed_once_per_set_and_shared_by_every_sigma(qm9, monkeypatch):
    calls = []
    describe = FCHL19Kernel.atom_descriptors
    monkeypatch.setattr(FCHL19Kernel, "atom_descriptors", lambda self, molecules: calls.append(len(molecules)) or describe(self, molecules))
    fresh = MoleculeSet(qm9.molecules([1, 2, 3]))
    first = FCHL19Kernel(1.0).describe(fresh)
    assert FCHL19Kernel(4.0).describe(fresh) is first
    inducing = FCHL19Kernel(2.0).describe(InducingSet(fresh, torch.tensor([0, 4])))
    assert calls == [3]
    assert torch.equal(inducing.values[:2], first.values[[0, 4]]) and inducing.n_molecules == 5
    fresh.release()
    FCHL19Kernel(1.0).describe(fresh)
    assert calls == [3, 3]


def test_fps_picks_distinct_atoms_per_element_in_the_fchl19_space(group):
    """Per element as many as allocate says, all in the pool, none twice; each element's picks
    are farthest-point sampling of that element's FCHL19 vectors (not of any other space)."""
    d = FCHL19Kernel(2.0).describe(group)
    pool = 8
    rows = inducing_atoms(d, 20, pool=pool)
    assert rows.tolist() == sorted(set(rows.tolist())) and len(rows) == 20
    assert bool((d.molecule_index[rows] < pool).all())
    in_pool = torch.nonzero(d.molecule_index < pool).flatten()
    numbers = d.centre_numbers[in_pool]
    counts = {int(e): int((numbers == e).sum()) for e in torch.unique(numbers)}
    chosen = {int(e): int((d.centre_numbers[rows] == e).sum()) for e in torch.unique(d.centre_numbers[rows])}
    assert chosen == allocate(counts, 20)
    for e, k in chosen.items():
        element_rows = in_pool[numbers == e]
        expected = element_rows[farthest_points(d.values[element_rows], k)]
        assert sorted(expected.tolist()) == rows[d.centre_numbers[rows] == e].tolist()
    seeded = inducing_atoms(d, 20, method="random", seed=4, pool=pool)
    assert seeded.tolist() == inducing_atoms(d, 20, method="random", seed=4, pool=pool).tolist()
    assert len(set(seeded.tolist())) == 20 and bool((d.molecule_index[seeded] < pool).all())


def test_bad_inducing_rows_name_the_setting(group):
    d = FCHL19Kernel(2.0).describe(group)
    with pytest.raises(InputError, match="rows"):
        d.atoms_as_molecules(torch.tensor([len(d.values)]))
    with pytest.raises(InputError, match="selection"):
        inducing_atoms(d, 5, method="kmeans")


def test_sparse_fchl19_on_every_training_atom_equals_exact_kernel_ridge(group):
    """Every atom of the n training molecules inducing: K_nm = O K_mm (O the molecule–atom
    incidence), so K̃ = K_nm K_mm⁺ K_mn = O K_mm Oᵀ = K, and the sparse model is kernel ridge on
    the exact FCHL19 kernel. With rank_rtol = 1e-12 the pseudo-inverse drops K_mm's
    components below 1e-12 · s_max (symmetry-equal atoms make it singular), which moves K̃ by
    ≤ 1e-12 · s_max · 29² ≈ 1e-9 s_max; at λ = 1e-2 · mean diag K, κ(K + λI) ≤ 1 + 100 n ≈ 1e3,
    so predictions agree to ~1e-6 relative: checked at 1e-5 (measured 7e-12)."""
    kernel = FCHL19Kernel(sigma=2.0, block_size=16)
    molecules: list[Molecule] = group.molecules
    n = 9
    train = MoleculeSet(molecules[:n])
    d = kernel.describe(train)
    rows = torch.arange(len(d.values))
    K_exact = kernel(molecules).kernel.numpy()
    K_sparse = kernel(kernel.describe(InducingSet(MoleculeSet(molecules), rows))).kernel.numpy()
    m = len(rows)
    K_mm, K_nm, K_tm = K_sparse[:m, :m], K_sparse[m : m + n, :m], K_sparse[m + n :, :m]
    y = np.array([mol.n_atoms * 1.5 + np.sin(mol.positions.sum()) for mol in molecules[:n]])
    reg = 1e-2 * float(np.mean(np.diagonal(K_exact[:n, :n])))
    exact = KernelRegressor("ntk", reg=reg).fit(K_exact[:n, :n], y)
    sparse = SparseKernelRegressor(reg=reg, rank_rtol=1e-12).fit(K_nm, K_mm, y)
    expected = exact.predict(K_exact[n:, :n])
    np.testing.assert_allclose(sparse.predict(K_tm), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    np.testing.assert_allclose(sparse.predict(K_nm), exact.predict(K_exact[:n, :n]), rtol=1e-5, atol=1e-5 * np.abs(y).max())
