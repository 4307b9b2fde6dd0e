"""The emergent-ising experiment (molntk.pipelines.emergent): the NTK predictor of the
augmented MLP equals that of the orbit-averaged (GCNN) kernel at every step, for invariant
and for equivariant targets; orbit alignment; the config end to end through ``molntk run``;
one-line config errors naming the key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from molntk.data.ising import c4_orbit, local_energies, rotate_lattice, spin_configurations
from molntk.ensembles import relative_orbit_std
from molntk.kernels.cn import augmented, mlp
from molntk.pipelines.emergent.ising import aligned
from molntk.regression import NTKDynamics
from molntk.regression.ntk import ntk_mean
from molntk.regression.spectral import eigensystem
from tests.helpers.toy_runs import config_error, run_toy

L, N, M = 3, 10, 4
STEPS = (1, 7, 40)


@pytest.fixture(scope="module")
def configurations():
    x = spin_configurations(N, L, seed=0)
    x_test = torch.cat([spin_configurations(M, L, seed=1), spin_configurations(M, L, seed=2, kind="gaussian")])
    return x, c4_orbit(x).flatten(0, 1), x_test


def test_augmented_mlp_predictor_equals_the_orbit_averaged_kernel_for_invariant_targets(configurations):
    """Training on the 4N augmented points with Θ and the mean loss (kernel rate η / 4N) gives
    the prediction of K_aug(x, x') = ¼ Σ_g Θ(x, ρ(g) x') on the N points (rate η / N), the
    library's augmented kernel, after every number of steps; invariant target: the total energy."""
    x, x_aug, x_test = configurations
    net = mlp(1, activation="relu", sigma_w=1.5, sigma_b=0.1)
    energy = lambda s: 0.5 * local_energies(s).flatten(1).sum(1)  # noqa: E731
    lr = 1.0 / float(np.linalg.eigvalsh(net.kernel(x_aug).ntk.numpy())[-1]) * len(x_aug)
    big = NTKDynamics.fit(net.kernel(x_aug).ntk, energy(x_aug), lr=lr / len(x_aug))
    orbit_kernel = augmented(net, 4)
    small = NTKDynamics.fit(orbit_kernel.kernel(x).ntk, energy(x), lr=lr / len(x))
    for s in STEPS:
        a = big.mean(net.kernel(x_test, x_aug).ntk, steps=s)
        b = small.mean(orbit_kernel.kernel(x_test, x).ntk, steps=s)
        # float64 eigen-solves of 40 × 40 and 10 × 10 kernels: rounding ~1e-13 relative
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * np.abs(b).max())


def site_permutations() -> list[np.ndarray]:
    """P_g with (ρ(g) y).flatten() = P_g @ y.flatten() for site values y (L, L)."""
    eye = torch.eye(L * L, dtype=torch.float64).reshape(L * L, L, L)
    return [rotate_lattice(eye, g).reshape(L * L, L * L).T.numpy() for g in range(4)]


def test_augmented_mlp_predictor_equals_the_equivariant_orbit_averaged_kernel(configurations):
    """Local energies (L² equivariant outputs): the augmented MLP (Θ ⊗ I on the 4N points)
    predicts what the matrix-valued kernel K[(x, a), (x', b)] = ¼ Σ_g Θ(x, ρ(g) x') (P_g)_ab of
    the C4-equivariant network predicts on the N points, after every number of steps."""
    x, x_aug, x_test = configurations
    net = mlp(1, activation="erf", sigma_w=1.5, sigma_b=0.1)
    theta = net.kernel(x_aug).ntk.numpy()
    lr = 0.8 * len(x_aug) / float(np.linalg.eigvalsh(theta)[-1])
    big = NTKDynamics.fit(theta, local_energies(x_aug).flatten(1), lr=lr / len(x_aug))
    P = site_permutations()

    def equivariant_kernel(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
        blocks = sum(np.kron(net.kernel(a, rotate_lattice(b, g)).ntk.numpy(), P[g]) for g in range(4)) / 4
        return blocks  # rows (x, a), columns (x', b)

    eig = eigensystem(equivariant_kernel(x, x))
    y = local_energies(x).flatten(1).reshape(-1)
    cross = equivariant_kernel(x_test, x)
    for s in STEPS:
        a = big.mean(net.kernel(x_test, x_aug).ntk, steps=s)
        b = ntk_mean(eig, cross, y, lr=lr / len(x), steps=s).reshape(len(x_test), L * L)
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * np.abs(b).max())  # rounding, as above


def test_alignment_makes_equivariant_predictions_constant_over_the_orbit():
    x_in, x_ood = spin_configurations(3, L, seed=4), spin_configurations(3, L, seed=5, kind="gaussian")
    x_eval = torch.cat([c4_orbit(x_in).flatten(0, 1), c4_orbit(x_ood).flatten(0, 1)])
    equivariant = aligned(local_energies(x_eval).flatten(1), 3, L)
    assert set(equivariant) == {"in", "ood"} and equivariant["in"].shape == (4, 3, L * L)
    assert relative_orbit_std(equivariant["in"]) == 0  # ±1 spins: integer arithmetic, exact
    # N(0, 1) spins: the four neighbours are summed in another order after a rotation (1 ulp)
    assert relative_orbit_std(equivariant["ood"]) < 1e-15
    torch.testing.assert_close(equivariant["in"][2], local_energies(x_in).flatten(1))
    # a fixed linear map of the flattened lattice is not equivariant: its orbit std is O(1)
    weights = torch.randn(L * L, L * L, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert relative_orbit_std(aligned(x_eval.flatten(1) @ weights, 3, L)["ood"]) > 0.3


TOY = """\
task: emergent-ising
data: {lattice: 3, n_train: 8, n_test: 4}
ensemble: {widths: [8, 64], members: 8, chunk: 5}
training: {steps: 30, records: 4}
compute: {threads: 1, device: cpu}
"""


@pytest.mark.slow  # ≈ 10 s on two busy cores (three trainings, kernels, two plots)
def test_config_runs_end_to_end(tmp_path: Path):
    report = run_toy(tmp_path, TOY, ("report.json", "config.yaml", "metrics.csv", "width_convergence.png", "orbit_std.png"))
    out = tmp_path / "out"
    records, summary = report["results"], report["summary"]
    assert len(records) == (2 + 1) * 4  # (2 widths + the un-augmented control) × 4 recorded steps
    assert report["recorded_steps"] == [1, 3, 10, 30] and report["member_seeds"] == list(range(8))
    augmented_rows = [r for r in records if r["augmented"]]
    # the NTK prediction on full orbits is C4-equivariant to rounding, in and out of distribution
    assert max(max(r["orbit_std_ntk_in"], r["orbit_std_ntk_ood"]) for r in augmented_rows) < 1e-12
    # without augmentation it is not (an O(1) orbit std), and training lowers the loss
    control = [r for r in records if not r["augmented"]]
    assert min(r["orbit_std_ntk_in"] for r in control) > 0.1
    assert all(r["train_loss"] < records[0]["train_loss"] for r in augmented_rows if r["step"] == 30)
    assert summary["widths"] == [8, 64] and summary["slope_mean_error"] is not None
    assert yaml.safe_load((out / "config.yaml").read_text())["ensemble"]["members"] == 8
    assert (out / "metrics.csv").read_text().splitlines()[0].startswith("augmented,width,members,step")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("ensemble.widths=[64,8]", "ensemble.widths: must be strictly increasing"),
        ("training.lr_scale=2.5", "training.lr_scale:"),
        ("data.lattice=2", "data.lattice:"),
        ("ensemble.member=4", "ensemble.member: unknown key 'member' (did you mean 'members'?)"),
    ],
)
def test_bad_config_gives_one_line_naming_the_key(tmp_path: Path, override: str, message: str):
    assert message in config_error(tmp_path, TOY, override)
