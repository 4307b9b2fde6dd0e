"""The memory of the projected-process energy+force system (molntk.regression.sparse_joint):
built from K_nm a few rows at a time with its QR factorisations in place, and the same
weights whichever chunk size reads K_nm."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from molntk.regression import sparse_joint
from molntk.regression.noise_search import RATIO_GRID, SCALE_GRID
from molntk.regression.sparse_joint import fit_sparse_joint, scored_rows, sparse_joint_system


def _problem(n_configs: int = 600, n_atoms: int = 4, m: int = 200, seed: int = 0):
    """A random low-noise system: K = Z Xᵀ of rank 30 plus K_mm's ridge, energies first."""
    rng = np.random.default_rng(seed)
    rows = n_configs * (1 + 3 * n_atoms)
    X, Z = rng.standard_normal((m, 30)), rng.standard_normal((rows, 30))
    is_force = np.arange(rows) >= n_configs
    groups = [np.concatenate([[i], n_configs + 3 * n_atoms * i + np.arange(3 * n_atoms)]) for i in range(n_configs)]
    return Z @ X.T, X @ X.T + 1e-3 * np.eye(m), rng.standard_normal(rows), is_force, groups


def test_the_system_is_built_without_copies_of_k_nm(monkeypatch):
    """With K_nm read 256 rows at a time the build allocates (numpy's traced memory) the
    features B once, factored in place, plus K_mm's O(m²) factor and the finiteness check's
    two boolean masks (¼ of K_nm): ≤ 1.3 K_nm + 6 m² float64 values above its inputs, where
    copying K_nm's rows into order and B's blocks for the QR took ≈ 4 K_nm."""
    K_nm, K_mm, y, is_force, groups = _problem()
    monkeypatch.setattr(sparse_joint, "CHUNK_VALUES", 256 * K_nm.shape[1])
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        system = sparse_joint_system(K_nm, K_mm, y, is_force, groups)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak <= 1.3 * K_nm.nbytes + 6 * K_mm.nbytes
    assert system.energy[0].shape == (600, 200) and system.force[0].shape == (7200, 200)


def test_the_weights_do_not_depend_on_the_chunk_size(monkeypatch):
    """Reading K_nm 7 rows at a time (and the LOO's configurations one by one, 20 of the 60
    scored: Q's scored force rows formed in chunks that end inside its force rows) or whole gives
    the same λ's and fitted values to rounding (the mean diagonals come out of differently blocked
    products: an ulp apart)."""
    monkeypatch.setattr(sparse_joint, "LOO_GROUPS", 20)
    problem, grid = _problem(n_configs=60), dict(ratios=RATIO_GRID[5:9], scales=SCALE_GRID[8:20])
    whole = fit_sparse_joint(*problem, **grid)
    monkeypatch.setattr(sparse_joint, "CHUNK_VALUES", 7 * 200)
    by_rows = fit_sparse_joint(*problem, **grid)
    assert by_rows.reg_energy == pytest.approx(whole.reg_energy, rel=1e-12)
    assert by_rows.reg_force == pytest.approx(whole.reg_force, rel=1e-12)
    # the fitted values K_nm w (the weights carry K_mm's condition, ≈ 4e5 here, into their rounding)
    fitted, expected = problem[0] @ by_rows.weights, problem[0] @ whole.weights
    np.testing.assert_allclose(fitted, expected, rtol=0, atol=1e-10 * np.abs(expected).max())


def test_scored_rows_count_the_sampled_configurations():
    groups = [np.arange(k) for k in (3, 5, 7)] * 200  # 600 configurations: 500 scored
    assert scored_rows(groups[:10]) == sum(len(g) for g in groups[:10])
    picked = np.random.default_rng(0).permutation(600)[: sparse_joint.LOO_GROUPS]
    assert scored_rows(groups) == sum(len(groups[g]) for g in picked)


def test_the_local_search_starts_at_the_ratio_it_is_given():
    """``start_ratio`` (an absolute λ_F/λ_E) puts the ratio climb's start at the grid ratio
    nearest to it · s_E/s_F: from the ratio a first local search chose, the same λ's with the
    chosen ratio and its two neighbours scored (3 SVDs); from the grid's middle more."""
    problem = _problem(n_configs=60)
    first = fit_sparse_joint(*problem, search="local")
    again = fit_sparse_joint(*problem, search="local", start_ratio=first.reg_force / first.reg_energy)
    assert (again.reg_energy, again.reg_force, again.cv_score) == (first.reg_energy, first.reg_force, first.cv_score)
    assert again.factorisations == 3 < first.factorisations
