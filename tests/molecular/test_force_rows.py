"""Energy and force rows against inducing environments (molntk.molecular.force_rows) on
ethanol frames of the committed GFN2-xTB MD sample: autograd and central finite differences
of Θ(M, s_j), the energy kernel, rotation, translation, and errors.

Kernels: feature maps of H, C, O with 4 radial Gaussians on [0.5, 3] Å, fast mode on a
Lebedev grid of band limit 2 (cheap) unless a test needs the quadrature accuracy of band
limit 5; inducing environments: 10 chosen by FPS from frames 0–4, queries frames 20–22.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

from molntk.data.labelled import read_labelled
from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.features.environments import FeatureConfig, environment_features
from molntk.features.inducing import environments_as_molecules, inducing_environments
from molntk.features.radial import GaussianBasis
from molntk.models.so3_recipe import SO3ModelRecipe
from molntk.molecular import force_rows as force_rows_module
from molntk.molecular.force_rows import force_rows

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "md" / "ethanol_sample.extxyz"
FEATURES = FeatureConfig(elements=(1, 6, 8), radial=GaussianBasis(n=4, r_min=0.5, r_cut=3.0))
NETWORKS = {
    "erf": "lift:3 erf pool dense",
    "exp": "lift:3 exp pool dense",
    # a group convolution and a second activation on the group (torch's formulas), and a
    # dense layer after the pool: every step reads variances of its own
    "deep": "lift:3 erf conv:3 relu pool dense dense",
}


def kernel(layers: str = NETWORKS["erf"], pairing: str = "element", grid_band_limit: int = 2, reduce: str = "sum",
           sigma_w: float = 2.0):
    return SO3ModelRecipe(layers=layers, pairing=pairing, grid_band_limit=grid_band_limit, reduce=reduce,
                          sigma_w=sigma_w, features=FEATURES).molecular_kernel()


@pytest.fixture(scope="module")
def frames() -> list[Molecule]:
    return read_labelled(SAMPLE, "energy").molecules


@pytest.fixture(scope="module")
def inducing(frames):
    feats = environment_features(frames[:5], FEATURES)
    return environments_as_molecules(feats, inducing_environments(feats, 10))


def moved(molecule: Molecule, positions: np.ndarray) -> Molecule:
    return Molecule(molecule.numbers, positions, id=molecule.id)


def autograd_rows(k, molecule: Molecule, inducing, features: FeatureConfig = FEATURES) -> np.ndarray:
    """∂Θ(M, s_j)/∂r (3n, m) by autograd through the feature maps and the kernel, one j at a time."""
    r = torch.tensor(molecule.positions, requires_grad=True)
    theta = k(environment_features([molecule], features, positions=r), inducing).ntk[0]
    return torch.stack([torch.autograd.grad(t, r, retain_graph=True)[0].reshape(-1) for t in theta], 1).numpy()


@pytest.mark.parametrize("network", sorted(NETWORKS))
@pytest.mark.parametrize("pairing", ["element", "shared"])
def test_rows_equal_the_energy_kernel_and_autograd(frames, inducing, network, pairing):
    """Energy rows equal the molecular kernel (the same fused forward: bound 1e-12 relative);
    force rows equal autograd of it, one inducing environment at a time (the same chain rule
    by another route, so to rounding: measured ≤ 8e-16, bound 1e-12 relative to the largest
    entry). Three query molecules at once: rows continue across molecules."""
    k = kernel(NETWORKS[network], pairing)
    queries = frames[20:23]
    rows = force_rows(k, queries, inducing)
    assert rows.energy.shape == (3, 10) and rows.gradient.shape == (81, 10)
    energy = k(queries, inducing).ntk.numpy()
    assert np.abs(rows.energy - energy).max() <= 1e-12 * np.abs(energy).max()
    reference = np.concatenate([autograd_rows(k, m, inducing) for m in queries])
    assert np.abs(reference).max() > 1e-3
    assert np.abs(rows.gradient - reference).max() <= 1e-12 * np.abs(reference).max()


def test_rows_are_central_differences(frames, inducing):
    """∂Θ(M, s_j)/∂r against (Θ(r + h e) − Θ(r − h e)) / 2h of the energy kernel (no autograd)
    for all 27 coordinates, h = 1e-4 Å: truncation h²/6 |∂³Θ| ≈ 2e-8 relative (Θ varies on the
    ≈ 0.3 Å scale of the radial Gaussians), rounding ε |Θ| / h ≈ 1e-10 relative; measured 1e-8,
    bound 1e-6 relative to the largest entry, while a wrong term of the chain rule is an O(1) error."""
    k, query = kernel(), frames[21]
    rows = force_rows(k, [query], inducing)
    h = 1e-4
    steps = [sign * h * np.eye(27)[i].reshape(9, 3) for i in range(27) for sign in (1, -1)]
    shifted = k([moved(query, query.positions + e) for e in steps], inducing).ntk.numpy().reshape(27, 2, -1)
    numeric = (shifted[:, 0] - shifted[:, 1]) / (2 * h)
    assert np.abs(rows.gradient - numeric).max() <= 1e-6 * np.abs(numeric).max()


def test_mean_reduction_divides_by_the_atom_counts(frames, inducing):
    """reduce="mean": Θ / (n · 1) for single-environment references, and so are its derivatives."""
    total, mean = force_rows(kernel(), frames[20:22], inducing), force_rows(kernel(reduce="mean"), frames[20:22], inducing)
    np.testing.assert_allclose(mean.energy, total.energy / 9, rtol=1e-14)
    np.testing.assert_allclose(mean.gradient, total.gradient / 9, rtol=1e-14)


def test_rows_rotate_with_the_molecule(frames, inducing):
    """Θ is invariant, so ∂Θ/∂r_a rotates with the molecule: G(R r)_a = R G(r)_a, to the accuracy
    of the SO(3) quadrature. Measured (max error / max entry): band limit 5 3.9e-6, band limit
    2 8.8e-3 (the quadrature's error, which shrinks with the grid). Bounds 2e-5 and above 1e-4."""
    query = frames[21]
    rotation = Rotation.random(random_state=3).as_matrix()
    errors = {}
    for band in (2, 5):
        k = kernel(grid_band_limit=band)
        plain = force_rows(k, [query], inducing).gradient.reshape(9, 3, -1)
        turned = force_rows(k, [moved(query, query.positions @ rotation.T)], inducing).gradient.reshape(9, 3, -1)
        errors[band] = np.abs(turned - np.einsum("de,aej->adj", rotation, plain)).max() / np.abs(plain).max()
    assert errors[5] < 2e-5
    assert errors[2] > 1e-4


def test_rows_sum_to_zero_over_atoms(frames, inducing):
    """Θ depends on positions only through differences r_b − r_a: Σ_a ∂Θ/∂r_a = 0 for every
    inducing environment (rounding: measured 2e-16, bound 1e-13 relative to the largest entry); translating the
    molecule changes nothing (bound 1e-12 relative)."""
    k, query = kernel(), frames[22]
    rows = force_rows(k, [query], inducing)
    per_atom = rows.gradient.reshape(9, 3, -1)
    assert np.abs(per_atom.sum(0)).max() <= 1e-13 * np.abs(per_atom).max()
    shifted = force_rows(k, [moved(query, query.positions + np.array([3.0, -1.0, 0.5]))], inducing)
    assert np.abs(shifted.gradient - rows.gradient).max() <= 1e-12 * np.abs(rows.gradient).max()


def test_batches_and_tiles_do_not_change_the_rows(frames, inducing, monkeypatch):
    """One molecule per batch and tiny tiles give the same rows (each pair's sum is its own)."""
    k = kernel()
    whole = force_rows(k, frames[20:23], inducing)
    monkeypatch.setattr(force_rows_module, "ATOM_BATCH", 9)
    monkeypatch.setattr(force_rows_module, "tile_elements", lambda device: 3 * k.ctx.support_size)
    pieces = force_rows(k, frames[20:23], inducing)
    np.testing.assert_allclose(pieces.energy, whole.energy, rtol=1e-13)
    assert np.abs(pieces.gradient - whole.gradient).max() <= 1e-13 * np.abs(whole.gradient).max()


def test_bad_inputs_are_input_errors(frames, inducing):
    with pytest.raises(InputError, match="atom-index"):
        force_rows(kernel(pairing="atom-index"), frames[:1], inducing)
    with pytest.raises(InputError, match="no molecules"):
        force_rows(kernel(), [], inducing)
    other = environment_features(frames[:1], FeatureConfig(elements=(1, 6, 8)))
    with pytest.raises(InputError, match="feature config"):
        force_rows(kernel(), frames[:1], other)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_weighted_rows_are_the_rows_times_the_weights(frames, inducing, reduce):
    """``weights`` contracts the rows as they are computed: Σ_j w_j Θ and Σ_j w_j ∂Θ/∂r equal the
    full rows times w (two summation orders: bound 1e-12 relative)."""
    k = kernel(reduce=reduce)
    w = np.random.default_rng(0).normal(size=10)
    full, weighted = force_rows(k, frames[20:23], inducing), force_rows(k, frames[20:23], inducing, weights=w)
    assert weighted.energy.shape == (3, 1) and weighted.gradient.shape == (81, 1)
    np.testing.assert_allclose(weighted.energy[:, 0], full.energy @ w, rtol=1e-12)
    assert np.abs(weighted.gradient[:, 0] - full.gradient @ w).max() <= 1e-12 * np.abs(full.gradient @ w).max()
    with pytest.raises(InputError, match="weights"):
        force_rows(k, frames[20:21], inducing, weights=w[:3])


def test_rows_with_mixed_elements_equal_autograd(frames):
    """With neighbour elements mixed (``element_width`` 1.5: C and O overlap by e^{−4/4.5} ≈ 0.41)
    each pair's Jacobian reaches every element's channels through A; autograd through the mixed
    feature maps is the independent route (bound as above)."""
    features = FeatureConfig(elements=(1, 6, 8), radial=GaussianBasis(n=4, r_min=0.5, r_cut=3.0), element_width=1.5)
    k = SO3ModelRecipe(layers=NETWORKS["erf"], grid_band_limit=2, sigma_w=2.0, features=features).molecular_kernel()
    feats = environment_features(frames[:5], features)
    mixed_inducing = environments_as_molecules(feats, inducing_environments(feats, 10))
    rows = force_rows(k, frames[20:22], mixed_inducing)
    reference = np.concatenate([autograd_rows(k, m, mixed_inducing, features) for m in frames[20:22]])
    assert np.abs(rows.gradient - reference).max() <= 1e-12 * np.abs(reference).max()
