"""The emergent-digits experiment (molntk.pipelines.emergent.digits): orbit measures by hand,
the C_k sub-orbits of the stored C_K orbits, the NTK predictor of the C4-augmented CNN equal
to the C4 GCNN's (and not for interpolated C8), the ensemble mean nearer the NTK at a larger
width, the config round trip and its errors, and the task end to end through ``molntk run``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from molntk.ensembles import relative_orbit_std, train_ensemble
from molntk.pipelines.emergent.digits import accuracy, cnn, ensemble_records, ntk_predictions, on_orbit, orbit_same
from molntk.pipelines.emergent.digits_config import EmergentDigitsConfig
from molntk.pipelines.emergent.digits_data import digits_data
from molntk.pipelines.tasks import TASKS
from tests.helpers.toy_runs import config_error, run_toy

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
STEPS = (1, 7, 40)


def tiny(**sections: dict) -> EmergentDigitsConfig:
    """A small configuration: 6 training digits, 3 test digits, the given sections."""
    return EmergentDigitsConfig.model_validate(
        {"name": "tiny", "task": "emergent-digits", "data": {"n_train": 6, "n_test": 3}, **sections}
    )


def test_orbit_measures_by_hand():
    """k = 4, two test images, three classes. Image A's scores over its orbit are e0, e0,
    2·e1, e0 (labels 0, 0, 1, 0), image B's 3·e2 four times; the "ood" rows are B's, turned
    into A's order. By hand: per output std_g and |mean_g| of A are (0.433, 0.866, 0) and
    (0.75, 0.5, 0), of B (0, 0, 0) and (0, 0, 3): relative orbit std (0.433 + 0.866) / 4.25;
    orbit-same (3/4 + 1) / 2; accuracy with labels (0, 2): 7/8."""
    a = torch.tensor([[1.0, 0, 0], [1, 0, 0], [0, 2, 0], [1, 0, 0]])
    b = torch.tensor([[0.0, 0, 3]] * 4)
    inside = torch.stack([a, b], dim=1)  # (g, image, class)
    rows = torch.cat([inside.flatten(0, 1), inside.flip(1).flatten(0, 1)])  # "in" then "ood", g-major
    orbit = on_orbit(rows, 4, "in")
    assert torch.equal(orbit, inside) and torch.equal(on_orbit(rows, 4, "ood"), inside.flip(1))
    expected = (0.75**0.5 * 0.5 + 0.75**0.5) / 4.25  # std of (1, 1, 0, 1) is √0.1875 = √0.75 / 2
    assert relative_orbit_std(orbit) == pytest.approx(expected, rel=1e-6)
    assert float(orbit_same(orbit)) == pytest.approx(0.875)
    assert float(accuracy(orbit, torch.tensor([0, 2]))) == pytest.approx(0.875)
    # members (k, E, m, c): one value per member; a member equal on its orbit scores 1
    members = torch.stack([orbit, orbit[:1].expand(4, -1, -1)], dim=1)
    torch.testing.assert_close(orbit_same(members), torch.tensor([0.875, 1.0], dtype=torch.float64))


def test_c4_sub_orbit_of_the_stored_c16_orbit_is_exact_quarter_turns():
    config = tiny(augmentation={"k": [4, 16]})
    data = digits_data(config)
    assert data.order == 16 and data.x_eval.shape == (2 * 16 * 3, 1, 8, 8)
    quarter = on_orbit(data.x_eval[data.eval_rows(4)].flatten(1), 4, "in").unflatten(-1, (1, 8, 8))
    for g in range(4):  # standardising commutes with exact rotations: equal to the bit
        assert torch.equal(quarter[g], torch.rot90(quarter[0], g, dims=(-2, -1)))
    x, y = data.augmented(4)
    assert torch.equal(x[6:12], torch.rot90(data.x_train, 1, dims=(-2, -1))) and torch.equal(y[6:12], data.y_train)
    assert torch.equal(data.augmented(1)[0], data.x_train)
    assert data.y_train.sum(1).eq(1).all() and float(data.x_train.mean()) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(("depth", "head"), [(1, 1), (2, 0)])
def test_augmented_cnn_predictor_equals_the_gcnn_predictor_for_c4_only(depth: int, head: int):
    """Training on the 4n quarter-turned digits with the CNN-GAP NTK (rate η / 4n) predicts
    what the C4 GCNN NTK (head per rotation, averaged last) predicts from the n digits (rate
    η / n), at every step, in and out of distribution; with 45° rotations (bilinear) the
    two differ."""
    config = tiny(augmentation={"k": [4, 8]}, network={"depth": depth, "head": head})
    data = digits_data(config)
    ntk = ntk_predictions(config, data, STEPS)
    for k, gap in ((4, 1e-9), (8, None)):
        cnn_mean, gcnn_mean = ntk.cnn[k].mean[:, data.eval_rows(k)], ntk.gcnn[k].mean
        difference = float((cnn_mean - gcnn_mean).abs().max() / gcnn_mean.abs().max())
        if gap is not None:  # float64 eigen-solves of 24 × 24 and 6 × 6 kernels: measured ≤ 1e-10
            assert difference < gap
        else:
            assert difference > 1e-3


def test_ensemble_mean_error_falls_with_width():
    """At width w the ensemble mean differs from μ_s by a bias O(1/w) plus the Monte Carlo
    error of E members. After 3 steps with E = 48 (seeded: deterministic), measured: 0.38 at
    width 8 (bias 0.35), 0.12 at width 128, where the Monte Carlo floor √(Σ_s / E) is 0.14."""
    config = tiny(data={"n_train": 4, "n_test": 2}, augmentation={"k": [4]}, unaugmented=False)
    data = digits_data(config)
    ntk = ntk_predictions(config, data, (3,))
    net, (x, y) = cnn(config), data.augmented(4)
    records = {}
    for width in (8, 128):
        run = train_ensemble(
            lambda s, width=width: net.finite((1, 8, 8), width, seed=s), range(48), x, y, data.x_eval, lr=ntk.lr, record=[3]
        )
        (records[width],) = ensemble_records(run, ntk, data, k=4, augmented=True, width=width, sizes=[1])
    narrow, wide = records[8], records[128]
    assert wide["mean_error"] < 0.5 * narrow["mean_error"]
    assert wide["mean_error"] < 1.5 * wide["mc_floor"] < narrow["mean_error"]  # wide: down at the Monte Carlo floor


def test_config_round_trip():
    config = TASKS.load(CONFIGS / "emergent_digits.yaml")
    assert isinstance(config, EmergentDigitsConfig)
    assert TASKS.validate(yaml.safe_load(config.to_yaml())) == config
    assert config.ensemble.plan(config.augmentation.k, config.augmentation.width_k) == [(4, 64), (8, 64), (16, 64), (4, 16), (4, 256)]


TOY = """\
task: emergent-digits
data: {n_train: 6, n_test: 3}
augmentation: {k: [4, 8], width_k: 4}
ensemble: {width: 16, widths: [8, 16], members: 4, sizes: [1, 2, 4], chunk: 2}
training: {steps: 20, records: 3}
compute: {threads: 1, device: cpu}
"""


@pytest.mark.slow  # ≈ 10 s on two busy cores (kernels, four trainings, four plots)
def test_config_runs_end_to_end(tmp_path: Path):
    report = run_toy(tmp_path, TOY, ("report.json", "config.yaml", "metrics.csv", "orbit_std.png", "orbit_same.png", "ensemble_size.png",
                 "width_convergence.png"))
    out = tmp_path / "out"
    records, summary = report["results"], report["summary"]
    # (k 4, 8 at width 16; k 4 at width 8; the control measured on both orbits) × 3 steps
    assert len(records) == (2 + 1 + 2) * 3 and report["recorded_steps"] == [1, 4, 20]
    final = {(r["k"], r["augmented"], r["width"]): r for r in records if r["step"] == 20}
    # the C4 NTK predictions are invariant to rounding; the un-augmented CNN NTK is not
    assert final[(4, True, 16)]["orbit_std_ntk_in"] < 1e-9 and final[(4, True, 16)]["orbit_std_gcnn_ood"] < 1e-12
    assert final[(4, False, 16)]["orbit_std_ntk_in"] > 1e-2
    assert final[(8, True, 16)]["ntk_vs_gcnn_in"] > 1e-3
    assert set(summary["by_k"]) == {"4", "8"} and set(summary["unaugmented"]) == {"4", "8"}
    assert list(summary["by_width"]) == ["8", "16"] and list(summary["by_size"]["4"]) == ["1", "2", "4"]
    assert yaml.safe_load((out / "config.yaml").read_text())["ensemble"]["members"] == 4
    assert (out / "metrics.csv").read_text().splitlines()[0].startswith("k,augmented,width,members,step")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("augmentation.k=[4,6]", "augmentation.k: every k must divide the largest (6)"),
        ("augmentation.k=[1,4]", "augmentation.k[0]: must be >= 2, got 1"),
        ("augmentation.width_k=16", "augmentation.width_k: must be one of k [4, 8], got 16"),
        ("ensemble.sizes=[1,8]", "ensemble.sizes: must be at most members (4)"),
        ("network.filter=4", "network.filter: the filter size must be odd"),
        ("network.depth=4", "network.depth: 4 valid 3×3 convolutions leave nothing of 8×8 images"),
        ("ensemble.members=1", "ensemble.members:"),
    ],
)
def test_bad_config_gives_one_line_naming_the_key(tmp_path: Path, override: str, message: str):
    assert message in config_error(tmp_path, TOY, override)
