"""Inducing environments of sparse molecular kernels (molntk.features.inducing and the
InducingSet of molntk.molecular), on real QM9 molecules."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.features.environments import FeatureConfig, environment_features
from molntk.features.inducing import (
    allocate,
    channel_amplitudes,
    environments_as_molecules,
    farthest_points,
    inducing_environments,
)
from molntk.features.radial import GaussianBasis
from molntk.kernels.so3 import SO3Grid
from molntk.kernels.so3.spec import parse_architecture
from molntk.molecular import InducingSet, MoleculeSet, SO3MolecularKernel

FEATURES = FeatureConfig(band_limit=3, smearing_width=0.3, radial=GaussianBasis(n=4, r_min=0.5, r_cut=3.0))


@pytest.fixture(scope="module")
def molecules(qm9) -> list[Molecule]:
    return qm9.molecules(list(range(1, 13)))


@pytest.fixture(scope="module")
def kernel() -> SO3MolecularKernel:
    net = parse_architecture("lift:3 erf pool dense", sigma_w=2.0, sigma_b=0.5)
    return SO3MolecularKernel(net, net.discretisation(SO3Grid(3), "fast", torch.float64, "cpu"), "element", "sum", 16, FEATURES)


@pytest.mark.parametrize(("counts", "m"), [({1: 50, 6: 30, 7: 5, 8: 14, 9: 1}, 20), ({1: 3, 6: 2}, 10), ({1: 10, 6: 10}, 1), ({1: 7}, 4)])
def test_allocation_is_proportional_complete_and_capped(counts, m):
    quota = allocate(counts, m)
    total = sum(counts.values())
    assert sum(quota.values()) == min(m, total)
    assert all(0 <= quota[e] <= counts[e] for e in counts)
    if m >= len(counts):
        assert all(quota[e] >= 1 for e in counts)
    if m < total and m >= len(counts):
        # largest remainders: each share is within one of m · n_e / Σn (or raised to the minimum of one)
        assert all(abs(quota[e] - m * counts[e] / total) < 1 or quota[e] == 1 for e in counts)


def test_farthest_points_on_a_line_halve_the_gaps():
    """0, 1, …, 8: largest norm 8, then 0, then 4, then 2 and 6 (a tie: 2 first): the
    greedy max-min rule by hand."""
    points = torch.arange(9, dtype=torch.float64)[:, None]
    assert farthest_points(points, 5).tolist() == [8, 0, 4, 2, 6]


def test_selection_is_per_element_from_the_pool_and_rotation_invariant(molecules):
    feats = environment_features(molecules, FEATURES)
    rows = inducing_environments(feats, 25, pool=8)
    assert rows.tolist() == sorted(set(rows.tolist())) and len(rows) == 25
    in_pool = feats.molecule_index[rows] < 8
    assert bool(in_pool.all())
    pool_numbers = feats.centre_numbers[feats.molecule_index < 8]
    expected = allocate({int(e): int((pool_numbers == e).sum()) for e in torch.unique(pool_numbers)}, 25)
    assert {int(e): int((feats.centre_numbers[rows] == e).sum()) for e in torch.unique(feats.centre_numbers[rows])} == expected
    rotations = Rotation.random(len(molecules), random_state=1).as_matrix()
    turned = [Molecule(m.numbers, m.positions @ r.T, id=m.id) for m, r in zip(molecules, rotations)]
    turned_feats = environment_features(turned, FEATURES)
    turned_rows = inducing_environments(turned_feats, 25, pool=8)
    # the same environments, up to ties between symmetry-equivalent atoms (equal amplitudes,
    # so which of them is picked depends on rounding): compare the chosen amplitude vectors
    def chosen(f, r):
        a = channel_amplitudes(f.coeffs[r], FEATURES.band_limit).numpy().round(8)
        return a[np.lexsort(a.T[::-1])]

    np.testing.assert_array_equal(chosen(turned_feats, turned_rows), chosen(feats, rows))
    random_rows = inducing_environments(feats, 25, method="random", seed=3, pool=8)
    assert random_rows.tolist() == inducing_environments(feats, 25, method="random", seed=3, pool=8).tolist()
    assert bool((feats.molecule_index[random_rows] < 8).all())


def chosen_amplitudes(feats, rows):
    """The chosen environments' amplitude vectors, rounded and sorted: the choice up to ties
    between symmetry-equivalent atoms (equal amplitudes)."""
    a = channel_amplitudes(feats.coeffs[rows], feats.config.band_limit).numpy().round(8)
    return a[np.lexsort(a.T[::-1])]


def brute_force_choice(batches, m, pool):
    """FPS by hand in the side-by-side maps: per element, each batch's amplitudes over the
    element's pool atoms divided by their root mean square norm, concatenated; start at the
    largest norm, then the atom of largest distance ‖x − y‖² to its nearest pick."""
    first = batches[0]
    candidates = np.flatnonzero(first.molecule_index.numpy() < pool)
    numbers = first.centre_numbers.numpy()[candidates]
    quota = allocate({int(e): int((numbers == e).sum()) for e in np.unique(numbers)}, m)
    picked = []
    for e, k in quota.items():
        rows = candidates[numbers == e]
        parts = [channel_amplitudes(b.coeffs[rows], b.config.band_limit).double().numpy() for b in batches]
        x = np.hstack([a / np.sqrt(np.mean(np.sum(a**2, axis=1))) for a in parts])
        order = [int(np.argmax(np.sum(x**2, axis=1)))]
        while len(order) < k:
            nearest = np.min(((x[:, None, :] - x[order][None, :, :]) ** 2).sum(-1), axis=1)
            nearest[order] = -1.0
            order.append(int(np.argmax(nearest)))
        picked += rows[order].tolist()
    return torch.tensor(sorted(picked))


def test_several_maps_of_the_same_atoms_are_compared_side_by_side(molecules):
    """A 3 Å and a 5 Å map of the same atoms (the networks of a kernel sum): the choice is FPS
    in both maps' amplitudes at unit mean square norm each, as computed by hand; a map beside
    a scaled copy of itself chooses as the map alone; batches of other atoms are refused."""
    short = environment_features(molecules, FEATURES)
    long = environment_features(molecules, FeatureConfig(band_limit=3, smearing_width=0.3,
                                                         radial=GaussianBasis(n=5, r_min=0.5, r_cut=5.0)))
    rows = inducing_environments([short, long], 25, pool=8)
    np.testing.assert_array_equal(chosen_amplitudes(short, rows), chosen_amplitudes(short, brute_force_choice([short, long], 25, 8)))
    np.testing.assert_array_equal(chosen_amplitudes(long, rows), chosen_amplitudes(long, brute_force_choice([short, long], 25, 8)))
    assert chosen_amplitudes(long, rows).tolist() != chosen_amplitudes(long, inducing_environments(short, 25, pool=8)).tolist()
    scaled = dataclasses.replace(short, coeffs=10.0 * short.coeffs)
    np.testing.assert_array_equal(chosen_amplitudes(short, inducing_environments([short, scaled], 25, pool=8)),
                                  chosen_amplitudes(short, inducing_environments(short, 25, pool=8)))
    with pytest.raises(InputError, match="feats"):
        inducing_environments([short, environment_features(molecules[:6], FEATURES)], 5)


def test_farthest_points_never_repeat_a_point_even_among_duplicates():
    points = torch.tensor([[0.0], [1.0], [1.0], [1.0], [0.0]], dtype=torch.float64)
    assert sorted(farthest_points(points, 5).tolist()) == [0, 1, 2, 3, 4]


def test_asking_for_every_environment_gives_each_once(molecules):
    """Ammonia, water, acetylene: symmetry-equivalent atoms have identical amplitudes."""
    feats = environment_features(molecules[:3], FEATURES)
    for method in ("fps", "random"):
        assert inducing_environments(feats, feats.n_env, method=method).tolist() == list(range(feats.n_env))
        assert inducing_environments(feats, 10 * feats.n_env, method=method).tolist() == list(range(feats.n_env))


def test_bad_selection_settings_name_the_setting(molecules):
    feats = environment_features(molecules[:3], FEATURES)
    for kwargs, name in (({"method": "kmeans"}, "selection"), ({"pool": 4}, "pool")):
        with pytest.raises(InputError, match=name):
            inducing_environments(feats, 5, **kwargs)
    with pytest.raises(InputError, match="environments"):
        inducing_environments(feats, 0)
    with pytest.raises(InputError, match="rows"):
        environments_as_molecules(feats, torch.tensor([feats.n_env]))


def test_kernels_against_inducing_environments_are_sums_of_environment_kernels(molecules, kernel, one_thread):
    """Θ(M, {s}) = Σ_{a∈M} [Z_a = Z_s] k(env_a, s) and Θ({s}, {s'}) = [Z_s = Z_s'] k(s, s'),
    against the environment kernel matrix of the network (SO3MolecularKernel.env_kernel) summed by hand."""
    group = MoleculeSet(molecules)
    feats = group.environments(FEATURES)
    rows = inducing_environments(feats, 9, pool=6)
    items = kernel.describe(InducingSet(group, rows))
    assert items.n_molecules == 9 + len(molecules)
    K = kernel(items).ntk.numpy()
    _, k_env = kernel.env_kernel(feats.coeffs, None)
    same = feats.centre_numbers[:, None] == feats.centre_numbers[None, :]
    k_env = torch.where(same, k_env, 0.0).numpy()
    onehot = np.zeros((len(molecules), feats.n_env))
    onehot[feats.molecule_index.numpy(), np.arange(feats.n_env)] = 1.0
    r = rows.numpy()
    scale = np.abs(k_env).max()
    np.testing.assert_allclose(K[:9, :9], k_env[np.ix_(r, r)], rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(K[9:, :9], onehot @ k_env[:, r], rtol=0, atol=1e-12 * scale * 30)
    np.testing.assert_allclose(K[9:, 9:], onehot @ k_env @ onehot.T, rtol=0, atol=1e-12 * scale * 900)
