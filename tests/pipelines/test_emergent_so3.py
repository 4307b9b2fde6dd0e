"""The emergent-so3 experiment (molntk.pipelines.emergent.qm9): feature maps rotated by Wigner
D are those of the rotated molecule; the augmented MLP NTK predictor on a group orbit is the
orbit-averaged kernel's; the finite atom-sum network and its seeds; the ensemble mean's
rotation std falls with ensemble size; the config end to end through ``molntk run``;
one-line config errors naming the key."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from e3nn import o3

from molntk.data.molecule import Molecule
from molntk.data.readers import read_molecules
from molntk.ensembles import StackedEnsemble, group_means, train_full_batch
from molntk.features.environments import FeatureConfig, environment_features
from molntk.features.radial import GaussianBasis
from molntk.molecular.baselines.mlp import MLPArchitecture, MLPNTK
from molntk.molecular.rotation import haar_angles, rotate_environments, rotated_batch
from molntk.pipelines.emergent.atom_sum import AtomSumMLP, padded_inputs
from molntk.pipelines.emergent.qm9 import rotation_std
from molntk.regression import NTKDynamics
from tests.helpers.toy_runs import config_error, run_toy

pytestmark = pytest.mark.usefixtures("one_thread")

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "examples" / "qm9_subset.extxyz"
FEATURES = FeatureConfig(band_limit=3, radial=GaussianBasis(n=2, r_min=0.5, r_cut=3.0))
ARCH = MLPArchitecture(depth=1, activation="relu", sigma_w=1.0, sigma_b=0.1)


@pytest.fixture(scope="module")
def molecules() -> list[Molecule]:
    return read_molecules([EXAMPLE]).molecules[:10]  # 10 QM9 molecules of 9 to 19 atoms


def test_wigner_rotated_feature_maps_are_those_of_the_rotated_molecule(molecules):
    batch = environment_features(molecules, FEATURES)
    angles = haar_angles(len(molecules), seed=3)
    matrices = o3.angles_to_matrix(*angles).numpy()
    rotated = [Molecule(m.numbers, m.positions @ matrices[i].T) for i, m in enumerate(molecules)]
    expected = environment_features(rotated, FEATURES).coeffs
    torch.testing.assert_close(rotate_environments(batch, angles).coeffs, expected, rtol=0, atol=1e-12)
    assert (expected - batch.coeffs).abs().max() > 0.1  # the rotation does change the maps


def test_augmented_mlp_predictor_on_a_group_orbit_equals_the_orbit_averaged_kernel(molecules):
    """Every training molecule under the four rotations g of C4 (about y): training the shared
    per-atom MLP on the 4n copies (rate η / 4n) predicts, after every number of steps, what the
    orbit-averaged kernel ¼ Σ_g Θ(M, g M') on the n molecules predicts (rate η / n)."""
    train, test = environment_features(molecules[:4], FEATURES), environment_features(molecules[8:], FEATURES)
    y = torch.linspace(-1.0, 1.0, 4, dtype=torch.float64)
    zero, quarter = torch.zeros(4, dtype=torch.float64), torch.arange(4, dtype=torch.float64) * math.pi / 2
    orbit = rotated_batch(train, 4, (zero.repeat(4), zero.repeat(4), quarter.repeat(4)))
    mlp = MLPNTK(features=FEATURES, architecture=ARCH, pairing="shared")

    def averaged(a, b):  # ¼ Σ_g Θ(M, g M'), every molecule of b rotated by g
        return sum(mlp(a, rotate_environments(b, (zero[:1].expand(b.n_molecules),) * 2 + (quarter[g].expand(b.n_molecules),))).ntk
                   for g in range(4)) / 4

    theta = mlp(orbit).ntk.numpy()
    lr = 16 / float(np.linalg.eigvalsh(theta)[-1])
    big = NTKDynamics.fit(theta, y.repeat_interleave(4), lr=lr / 16)
    small = NTKDynamics.fit(averaged(train, train), y, lr=lr / 4)
    for steps in (1, 10, 200):
        a = big.mean(mlp(test, orbit).ntk, steps=steps)
        b = small.mean(averaged(test, train), steps=steps)
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-8 * np.abs(b).max())


def test_atom_sum_network_sums_its_atom_network_and_is_seeded(molecules):
    batch = environment_features(molecules, FEATURES)
    x = padded_inputs(batch, slots=max(m.n_atoms for m in molecules))
    net = AtomSumMLP(ARCH, FEATURES.n_channels, FEATURES.n_coeffs, 8, seed=5, dtype=torch.float64)
    per_atom = net.atom(batch.coeffs)
    expected = torch.zeros(len(molecules), dtype=torch.float64).index_add_(0, batch.molecule_index, per_atom)
    torch.testing.assert_close(net(x), expected)
    again = AtomSumMLP(ARCH, FEATURES.n_channels, FEATURES.n_coeffs, 8, seed=5, dtype=torch.float64)
    other = AtomSumMLP(ARCH, FEATURES.n_channels, FEATURES.n_coeffs, 8, seed=6, dtype=torch.float64)
    torch.testing.assert_close(again(x), net(x))
    assert not torch.allclose(other(x), net(x))
    with pytest.raises(ValueError, match="slots"):
        padded_inputs(batch, slots=3)


def test_the_ensemble_mean_is_more_invariant_than_its_members(molecules):
    """16 members trained on 6 molecules (k = 2 rotations each), evaluated on 4 other molecules
    under 6 rotations: the rotation std of the mean of 16 falls well below that of single members
    (≈ 1/4 of it if the members' spreads were independent and nothing else were left)."""
    torch.manual_seed(0)
    train = environment_features(molecules[:6], FEATURES)
    test = environment_features(molecules[6:], FEATURES)
    augmented = rotated_batch(train, 2, haar_angles(12, seed=1))
    evaluate = rotated_batch(test, 6, haar_angles(24, seed=2))
    slots = max(m.n_atoms for m in molecules)
    y = torch.linspace(-1.0, 1.0, 6).repeat_interleave(2)
    ensemble = StackedEnsemble(lambda s: AtomSumMLP(ARCH, FEATURES.n_channels, FEATURES.n_coeffs, 32, seed=s, dtype=torch.float32),
                               range(16))
    run = train_full_batch(ensemble, padded_inputs(augmented, slots).float(), y, padded_inputs(evaluate, slots).float(),
                           lr=0.005, record=[10])
    predictions = run.predictions[0].double()  # (16, 24)
    assert ensemble.seeds == tuple(range(16)) and predictions.shape == (16, 24)
    member = float(rotation_std(predictions, 0, 6).mean())
    mean16 = float(rotation_std(group_means(predictions, 16), 0, 6).mean())
    mean4 = float(rotation_std(group_means(predictions, 4), 0, 6).mean())
    assert member > 0.01 and mean16 < mean4 < member and mean16 < 0.5 * member


TOY = """\
task: emergent-so3
data: {n_train: 6, n_test: 4, n_rotated: 2, rotations: 3}
features: {band_limit: 2, n_radial: 1}
network: {grid: 2}
augmentation: {k: [1, 2], width_k: 2}
ensemble: {width: 16, widths: [16, 64], members: 4, sizes: [1, 4], chunk: 2}
training: {steps: 10, records: 3}
compute: {threads: 1, device: cpu}
"""


@pytest.mark.slow  # ≈ 10–20 s on two busy cores (QM9, kernels, three trainings, a plot)
def test_config_runs_end_to_end(tmp_path: Path):
    report = run_toy(tmp_path, TOY, ("report.json", "config.yaml", "metrics.csv", "rotation_std.png"))
    out = tmp_path / "out"
    records, summary = report["results"], report["summary"]
    assert len(records) == 3 * 3  # (k = 1, 2 at width 16; width 64 at k = 2) × 3 recorded steps
    assert report["member_seeds"] == [0, 1, 2, 3] and {r["members"] for r in records} == {4}
    assert sorted({(r["k"], r["width"]) for r in records}) == [(1, 16), (2, 16), (2, 64)]
    # the SO(3) NTK is invariant to the grid's accuracy; the un-augmented MLP NTK (k = 1) is not
    last = {(r["k"], r["width"]): r for r in records if r["step"] == 10}
    assert last[(1, 16)]["rotation_std_so3"] < 0.05 * last[(1, 16)]["rotation_std_ntk"]
    assert set(summary["by_size"]) == {"1", "4"} and summary["by_k"]["2"]["rotation_std_member"] == summary["by_size"]["1"]
    assert (out / "metrics.csv").read_text().splitlines()[0].startswith("k,width,members,step")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("ensemble.sizes=[1,8]", "ensemble.sizes: must be at most members (4)"),
        ("augmentation.width_k=4", "augmentation.width_k: must be one of k [1, 2]"),
        ("augmentation.k=[2,1]", "augmentation.k: must be strictly increasing"),
        ("data.n_rotated=9", "data.n_rotated: must be at most n_test (4)"),
        ("training.lr_scale=2.5", "training.lr_scale:"),
        ("ensemble.member=4", "ensemble.member: unknown key 'member' (did you mean 'members'?)"),
    ],
)
def test_bad_config_gives_one_line_naming_the_key(tmp_path: Path, override: str, message: str):
    assert message in config_error(tmp_path, TOY, override)
