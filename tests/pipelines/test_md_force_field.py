"""``task: md-force-field`` (molntk/pipelines/md) on the committed ethanol sample."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from molntk.config import ConfigValidationError
from molntk.data.labelled import read_labelled
from molntk.errors import InputError, MolntkError
from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.pipelines.md.run import estimators, split
from molntk.pipelines.tasks import TASKS

pytest.importorskip("sgdml", reason="the sGDML baseline needs the optional package sgdml (molntk[md])")

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "md" / "ethanol_sample.extxyz"


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "md.yaml"
    path.write_text(f"name: md_test\ntask: md-force-field\ndata: {{molecule: null, path: {SAMPLE}}}\n{text}")
    return path


def test_the_split_is_disjoint_seeded_and_nested(tmp_path):
    config = TASKS.load(write_config(tmp_path, "split: {n_train: [10, 30], n_test: 40, seed: 3}\n"))
    test, pool = split(config.split, 100)
    assert len(test) == 40 and len(pool) == 60
    assert not set(test) & set(pool) and set(test) | set(pool) == set(range(100))
    again, _ = split(config.split, 100)
    assert np.array_equal(test, again)
    with pytest.raises(InputError, match=r"split\.n_train.*need 80 frames; the data has 70"):
        split(TASKS.load(write_config(tmp_path, "split: {n_train: [40], n_test: 40}\n")).split, 70)


@pytest.mark.parametrize("text, key", [
    ("data: {molecule: ethanol, path: x.extxyz}\n", "path"),
    ("split: {n_train: [20, 10]}\n", "n_train"),
    ("models: {so3_forces: null, so3_energy: null, sgdml: null}\n", "so3_forces"),
    ("models: {so3_forces_exact: {params: {inducing: 100}}}\n", "so3_forces_exact.params.inducing"),
    ("models: {so3_forces_frames: {params: {grid_band_limit: 3}}}\n", "so3_forces_frames.params.inducing_frames"),
])
def test_bad_configs_name_the_key(tmp_path, text, key):
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\ntask: md-force-field\n{text}")
    with pytest.raises(ConfigValidationError, match=key):
        TASKS.load(path)


def test_an_unknown_model_parameter_is_refused_before_any_work(tmp_path):
    config = TASKS.load(write_config(tmp_path, "models: {so3_forces: {params: {sigma_q: 1}}}\n"),
                        [f"output={tmp_path / 'out'}"])
    with pytest.raises(InputError, match=r"models\.so3_forces\.params.*sigma_q"):
        TASKS[config.task].run(config, "md.yaml")
    assert not any((tmp_path / "out").iterdir())


def test_a_tiny_run_writes_its_files_and_force_training_beats_energy_training_on_forces(tmp_path):
    """Two training sizes, five models, 6 test frames: every record, every file; the model
    trained on 8 frames' forces (216 force labels) predicts forces better than the one trained
    on their 8 energies, whose forces are a by-product. The exact energy+force model runs at
    its max_n_train (4) only; the size above it is listed as skipped; the GDML form on 3
    inducing frames at both sizes. The report compares the lowest MAE with every other model
    at each size, for energies and forces."""
    config = TASKS.load(write_config(tmp_path, (
        "split: {n_train: [4, 8], n_test: 6, seed: 0}\n"
        "models: {so3_forces: {params: {grid_band_limit: 3}}, so3_energy: {params: {grid_band_limit: 3}},"
        " so3_forces_exact: {params: {grid_band_limit: 3}, max_n_train: 4},"
        " so3_forces_frames: {params: {grid_band_limit: 3, inducing_frames: 3}},"
        " sgdml: {sigmas: [20.0], validation_fraction: 0.25}}\n"
        "compute: {threads: 1}\n")), [f"output={tmp_path / 'out'}"])
    calls: list[tuple[str, int, int]] = []
    result = TASKS[config.task].run(config, "md.yaml", lambda label, done, total: calls.append((label, done, total)))
    # progress: every fit, and the closed-form force fields' kernel blocks (≤ 16 frames: one)
    # and prediction batches (6 test frames: one), each label ending at total of total
    last = {label: (done, total) for label, done, total in calls}
    kernels = {f"{m} N={n} kernel" for m, n in (("so3-ntk-forces", 4), ("so3-ntk-forces", 8),  # no inducing: exact
                                                ("so3-ntk-forces-exact", 4), ("so3-ntk-forces-frames", 4),
                                                ("so3-ntk-forces-frames", 8))}
    assert last == {"fits": (9, 9), **{k: (1, 1) for k in kernels},
                    **{k.replace("kernel", "predict"): (1, 1) for k in kernels}}
    out = tmp_path / "out"
    for name in ("report.json", "config.yaml", "metrics.csv", "learning_curve_energy.png", "learning_curve_forces.png"):
        assert (out / name).is_file(), name
    report = json.loads((out / "report.json").read_text())
    assert {(r["model"], r["n_train"]) for r in report["results"]} == {
        (m, n) for m in ("so3-ntk-forces", "so3-ntk-forces-frames", "so3-ntk-energy", "sgdml") for n in (4, 8)} | {
        ("so3-ntk-forces-exact", 4)}
    assert [(s["model"], s["n_train"]) for s in report["skipped_fits"]] == [("so3-ntk-forces-exact", 8)]
    assert report["data"]["formula"] == "C2H6O" and len(report["test_frames"]) == 6
    assert report["data"]["sha256"] == hashlib.sha256(Path(report["data"]["file"]).read_bytes()).hexdigest()
    by = {(r["model"], r["n_train"]): r for r in result["results"]}
    assert by["so3-ntk-forces", 8]["force_mae"] < by["so3-ntk-energy", 8]["force_mae"]
    assert {"reg_energy_", "reg_force_", "noise_factorisations_"} <= set(by["so3-ntk-forces", 8]["chosen"])
    assert by["so3-ntk-forces-frames", 8]["force_mae"] < by["so3-ntk-energy", 8]["force_mae"]
    frames = by["so3-ntk-forces-frames", 8]["chosen"]
    assert {"reg_energy_", "reg_force_"} <= set(frames) and frames["n_inducing_"] == 3 * 28 >= frames["rank_"]
    assert by["sgdml", 8]["chosen"]["sigma_"] == 20.0
    # Each MAE lies in its bootstrap interval; the comparisons put, per size and quantity, the
    # lowest MAE against every other model, by the records' MAE differences.
    assert all("frame_errors" not in r for r in report["results"])
    for r in report["results"]:
        for q in ("energy", "force"):
            assert r[f"{q}_mae_ci95_low"] <= r[f"{q}_mae"] <= r[f"{q}_mae_ci95_high"]
    for n in (4, 8):
        for quantity, key in (("energy", "energy_mae"), ("forces", "force_mae")):
            maes = {r["model"]: r[key] for r in report["results"] if r["n_train"] == n}
            rows = [c for c in report["comparisons"] if c["n_train"] == n and c["quantity"] == quantity]
            best = min(maes, key=maes.get)
            assert {c["model"] for c in rows} == {best}
            assert sorted(c["against"] for c in rows) == sorted(set(maes) - {best})
            for c in rows:
                assert c["mae_difference"] == pytest.approx(maes[c["against"]] - maes[best], abs=1e-9)
                assert c["ci95_low"] <= c["mae_difference"] <= c["ci95_high"]
                assert c["resolved"] == (c["ci95_low"] > 0)
    # The joint kernels' rows are in the output's kernel cache: one block of 4 frames, which
    # both exact fits at 4 share (so3_forces has no inducing points here), and one of 8; and
    # the frames model's rows of 4 and of 8 frames against its 3 inducing frames.
    blocks = [np.load(path)["joint"].shape for path in (out / "kernel_cache").glob("*/*.npz")]
    assert sorted(blocks) == [(4 * 28, 3 * 28), (4 * 28, 4 * 28), (8 * 28, 3 * 28), (8 * 28, 8 * 28)]


def test_a_failing_fit_is_reported_the_others_go_on_and_a_rerun_fits_only_what_is_missing(tmp_path, monkeypatch):
    """sGDML's σ search cannot hold out 10 % of 4 frames (InputError inside that fit): the
    fit at n_train 4 is reported, the one at 8 runs. A rerun finds the stored record of the
    fit at 8 (the same numbers, no fit) and tries the failed one again."""
    from molntk.pipelines.md import run as md_run

    config = TASKS.load(write_config(tmp_path, (
        "split: {n_train: [4, 8], n_test: 4, seed: 0}\n"
        "models: {so3_forces: null, so3_energy: null, sgdml: {sigmas: [10.0, 20.0], validation_fraction: 0.1}}\n")),
        [f"output={tmp_path / 'out'}"])
    first = TASKS[config.task].run(config, "md.yaml")
    assert [(f["model"], f["n_train"]) for f in first["failed_fits"]] == [("sgdml", 4)]
    assert "too few to hold out" in first["failed_fits"][0]["error"]
    assert [(r["model"], r["n_train"]) for r in first["results"]] == [("sgdml", 8)]
    assert len(list((tmp_path / "out" / "fit_cache").glob("*.json"))) == 1
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["failed_fits"] == first["failed_fits"]

    calls = []
    real = md_run.evaluate
    monkeypatch.setattr(md_run, "evaluate", lambda name, estimator, data, energies, train, *rest:
                        calls.append(len(train)) or real(name, estimator, data, energies, train, *rest))
    again = TASKS[config.task].run(config, "md.yaml")
    assert calls == [4]  # the stored fit at 8 is not made again; the failed one is tried again
    assert again["results"][0]["force_mae"] == pytest.approx(first["results"][0]["force_mae"], rel=1e-15)


def test_a_run_killed_while_predicting_predicts_again_from_the_stored_force_field(tmp_path, monkeypatch):
    """The frames model's predictions raise on the first run (a kill while predicting): the fit
    is reported failed, but its force field is already stored (``fit_cache/<key>.molntk.npz``).
    The rerun reads it instead of fitting (fit not called), its record keeps the first run's
    fit seconds, and its errors equal those of an uninterrupted run in another folder (the
    same model: 1e-10 relative, the kernel recomputed from the file's molecules)."""
    from molntk.pipelines.md import run as md_run

    text = ("split: {n_train: [5], n_test: 4, seed: 0}\n"
            "models: {so3_forces: null, so3_energy: null, sgdml: null,"
            " so3_forces_frames: {params: {grid_band_limit: 3, inducing_frames: 2}}}\n"
            "compute: {threads: 1}\n")
    config = TASKS.load(write_config(tmp_path, text), [f"output={tmp_path / 'out'}"])
    real_predict = SO3ForceFieldRegressor.predict_forces

    def killed(self, *args, **kwargs):
        raise RuntimeError("killed while predicting")

    monkeypatch.setattr(SO3ForceFieldRegressor, "predict_forces", killed)
    with pytest.raises(MolntkError, match="killed while predicting"):
        TASKS[config.task].run(config, "md.yaml")
    [stored] = (tmp_path / "out" / "fit_cache").glob("*.molntk.npz")
    fit_seconds = SO3ForceFieldRegressor.load(stored).provenance_["fit_seconds"]
    monkeypatch.setattr(SO3ForceFieldRegressor, "predict_forces", real_predict)
    monkeypatch.setattr(SO3ForceFieldRegressor, "fit", lambda *a, **k: pytest.fail("fitted again"))
    [again] = TASKS[config.task].run(config, "md.yaml")["results"]
    assert again["fit_seconds"] == fit_seconds
    monkeypatch.undo()
    fresh = TASKS.load(write_config(tmp_path, text), [f"output={tmp_path / 'fresh'}"])
    [plain] = TASKS[fresh.task].run(fresh, "md.yaml")["results"]
    for key in ("energy_mae", "force_mae"):
        assert again[key] == pytest.approx(plain[key], rel=1e-10)
    assert md_run.FRAME_ERRORS not in again


def test_a_run_killed_between_prediction_batches_predicts_only_the_batches_it_lacks(tmp_path, monkeypatch):
    """Batches of 2 of the 5 test frames (2, 2, 1): the run is killed in the second batch's
    prediction; the first batch is kept (``<key>.predictions/<model sha>/0-2.npz``). The rerun
    predicts the second and third batches only, its errors equal an uninterrupted run's in
    another folder (the same fit: 1e-10 relative), and its ``predict_seconds`` is the sum of
    the stored batches' seconds. A damaged batch file is predicted again (and only it)."""
    from molntk.pipelines.md import fits

    text = ("split: {n_train: [5], n_test: 5, seed: 0}\n"
            "models: {so3_forces: null, so3_energy: null, sgdml: null,"
            " so3_forces_frames: {params: {grid_band_limit: 3, inducing_frames: 2}}}\n"
            "compute: {threads: 1}\n")
    config = TASKS.load(write_config(tmp_path, text), [f"output={tmp_path / 'out'}"])
    monkeypatch.setattr(fits, "QUERY_BATCH", 2)
    real_predict = SO3ForceFieldRegressor.predict_forces
    batches = []

    def counted(self, molecules, *args, **kwargs):
        batches.append(len(molecules))
        if len(batches) == 2 and kill:
            raise RuntimeError("killed while predicting")
        return real_predict(self, molecules, *args, **kwargs)

    monkeypatch.setattr(SO3ForceFieldRegressor, "predict_forces", counted)
    kill = True
    with pytest.raises(MolntkError, match="killed while predicting"):
        TASKS[config.task].run(config, "md.yaml")
    [kept] = (tmp_path / "out" / "fit_cache").glob("*.predictions/*/*.npz")
    assert kept.name == "0-2.npz"
    kill, batches[:] = False, []
    [again] = TASKS[config.task].run(config, "md.yaml")["results"]
    assert batches == [2, 1]
    stored = sorted((tmp_path / "out" / "fit_cache").glob("*.predictions/*/*.npz"))
    assert [p.name for p in stored] == ["0-2.npz", "2-4.npz", "4-5.npz"]
    assert again["predict_seconds"] == pytest.approx(sum(float(np.load(p)["seconds"]) for p in stored), rel=1e-12)
    fresh = TASKS.load(write_config(tmp_path, text), [f"output={tmp_path / 'fresh'}"])
    [plain] = TASKS[fresh.task].run(fresh, "md.yaml")["results"]
    for key in ("energy_mae", "force_mae"):
        assert again[key] == pytest.approx(plain[key], rel=1e-10)
    stored[1].write_bytes(b"not a batch")
    [record] = (tmp_path / "out" / "fit_cache").glob("*.json")
    record.unlink()  # the run then reads the stored model and its predictions
    batches[:] = []
    [third] = TASKS[config.task].run(config, "md.yaml")["results"]
    assert batches == [2] and third["force_mae"] == again["force_mae"]


def test_without_the_cache_nothing_is_stored_and_a_run_whose_every_fit_fails_says_so(tmp_path):
    config = TASKS.load(write_config(tmp_path, (
        "split: {n_train: [4], n_test: 4, seed: 0}\ncache: false\n"
        "models: {so3_forces: null, so3_energy: null, sgdml: {sigmas: [10.0, 20.0], validation_fraction: 0.1}}\n")),
        [f"output={tmp_path / 'out'}"])
    with pytest.raises(MolntkError, match=r"every fit failed: sgdml at n_train 4: InputError.*too few"):
        TASKS[config.task].run(config, "md.yaml")
    assert not (tmp_path / "out" / "fit_cache").exists() and not (tmp_path / "out" / "report.json").exists()


def test_fchl19_is_off_by_default_and_a_tiny_run_with_it_beats_zero_forces(tmp_path):
    """FCHL19 (qmllib), exact and sparse, only where the config names them; alone on 4 and 8
    frames (the exact model: one σ, the default λ grid searched on a quarter of them; the sparse
    one: 40 inducing atoms, two σ, λ's by grouped LOO), their forces on 6 test frames beat zero."""
    default = TASKS.load(write_config(tmp_path, ""))
    assert default.models.fchl19 is None and default.models.fchl19_sparse is None
    assert not {"fchl19", "fchl19-sparse"} & set(estimators(default))
    pytest.importorskip("qmllib", reason="the FCHL19 baseline needs the optional package qmllib (molntk[baselines])")
    config = TASKS.load(write_config(tmp_path, (
        "split: {n_train: [4, 8], n_test: 6, seed: 0}\n"
        "models: {so3_forces: null, so3_energy: null, sgdml: null,"
        " fchl19: {sigmas: [8.0], validation_fraction: 0.25}, fchl19_sparse: {inducing: 40, sigmas: [2.0, 8.0]}}\n")),
        [f"output={tmp_path / 'out'}"])
    result = TASKS[config.task].run(config, "md.yaml")
    by = {(r["model"], r["n_train"]): r for r in result["results"]}
    assert set(by) == {(name, n) for name in ("fchl19", "fchl19-sparse") for n in (4, 8)}
    assert by["fchl19", 8]["chosen"]["sigma_"] == 8.0 and "reg_relative_" in by["fchl19", 8]["chosen"]
    assert by["fchl19-sparse", 8]["chosen"]["sigma_"] in (2.0, 8.0) and "reg_force_" in by["fchl19-sparse", 8]["chosen"]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    test_forces = np.concatenate([read_labelled(SAMPLE, ["energy"], forces=True).forces[i] for i in report["test_frames"]])
    for name in ("fchl19", "fchl19-sparse"):
        assert by[name, 8]["force_mae"] < 0.5 * np.abs(test_forces).mean()


def test_a_model_is_fitted_up_to_its_max_n_train_and_the_larger_sizes_are_listed(tmp_path):
    config = TASKS.load(write_config(tmp_path, (
        "split: {n_train: [4, 8], n_test: 4, seed: 0}\n"
        "models: {so3_forces: null, so3_energy: null, sgdml: {sigmas: [20.0], max_n_train: 4}}\n")),
        [f"output={tmp_path / 'out'}"])
    result = TASKS[config.task].run(config, "md.yaml")
    assert [(r["model"], r["n_train"]) for r in result["results"]] == [("sgdml", 4)]
    assert result["skipped_fits"] == [{"model": "sgdml", "n_train": 8, "max_n_train": 4}]
    assert json.loads((tmp_path / "out" / "report.json").read_text())["skipped_fits"] == result["skipped_fits"]
