"""The QM9 property pipeline (``molntk run`` with task qm9-property) on real QM9 molecules:
the files it writes and its numbers, checked against computations done here (numpy least
squares, scikit-learn KernelRidge), the large-N and sparse paths, the shipped full-split
configs at small sizes, and several targets in one run.

Kept small (tens of molecules, grid band limit 2–3). The configuration checks are in
test_qm9_config.py; Dask, resume and device runs in tests/scale/test_qm9_runs.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from molntk.cli.main import app
from molntk.config import ConfigValidationError
from molntk.data.qm9 import QM9_ELEMENTS
from molntk.data.splits import standard_split
from molntk.features.environments import environment_features
from molntk.molecular.baselines import PowerSpectrumKernel
from molntk.pipelines.tasks import TASKS
from molntk.regression import element_counts
from tests.helpers.qm9_configs import FIXED, SMALL, TINY


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    config = folder / "tiny.yaml"
    config.write_text(TINY + f"output: {folder / 'out'}\n")
    result = CliRunner().invoke(app, ["run", str(config), "--json"])
    assert result.exit_code == 0, result.output
    return folder / "out", json.loads(result.stdout)


# --------------------------------------------------------------------------- the pipeline


def test_pipeline_writes_every_file_with_the_required_keys(tiny_run):
    out, document = tiny_run
    for name in ("report.json", "metrics.csv", "learning_curve.png", "parity.png", "predictions.csv", "config.yaml"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads((out / "report.json").read_text())
    records = report["results"]
    required = {"model", "target", "n_train", "mae", "rmse", "r2", "unit", "fit_seconds", "predict_seconds", "invariance_error"}
    assert all(required <= r.keys() for r in records)
    models = {r["model"] for r in records}
    assert models == {
        "dressed-atom", "so3-ntk", "mlp-ntk", "augmented-mlp-ntk", "power-spectrum", "cm-laplacian", "bob-laplacian",
        "soap-dscribe", "fchl19",
    }
    assert {r["n_train"] for r in records} == {20, 40}
    assert document["result"]["records"] == records
    chosen = [s for s in report["search"] if s["model"] == "so3-ntk" and s["chosen"]]
    assert len(chosen) == 1 and chosen[0]["cv_rmse"] > 0
    # a larger training set costs more: cumulative shell times are measured, never extrapolated
    so3 = sorted((r for r in records if r["model"] == "so3-ntk"), key=lambda r: r["n_train"])
    assert so3[1]["fit_seconds"] > so3[0]["fit_seconds"]



def test_report_compares_the_lowest_mae_with_every_model_on_the_same_molecules(tiny_run):
    """Each record's MAE lies inside its bootstrap interval; at each size the comparisons
    name the lowest-MAE model and one row per other model, whose difference is that of the
    records' MAEs and, at the largest size, that of the predictions in predictions.csv; the
    paired interval holds the difference, its width is that of the normal-theory interval
    2 × 1.96 std(d)/√n within a factor 2 (a small test set: a skewed d), and ``resolved``
    says whether it lies above 0."""
    import pandas as pd

    out, _ = tiny_run
    report = json.loads((out / "report.json").read_text())
    records = report["results"]
    assert all("test_errors" not in r for r in records)
    assert all(r["mae_ci95_low"] <= r["mae"] <= r["mae_ci95_high"] for r in records)
    comparisons = report["comparisons"]
    predictions = pd.read_csv(out / "predictions.csv")
    largest = max(r["n_train"] for r in records)
    for n in {r["n_train"] for r in records}:
        mae = {r["model"]: r["mae"] for r in records if r["n_train"] == n}
        rows = [c for c in comparisons if c["n_train"] == n]
        best = min(mae, key=mae.get)
        assert {c["model"] for c in rows} == {best}
        assert sorted(c["against"] for c in rows) == sorted(m for m in mae if m != best)
        for c in rows:
            assert c["mae_difference"] == pytest.approx(mae[c["against"]] - mae[best], abs=1e-9)
            assert c["ci95_low"] <= c["mae_difference"] <= c["ci95_high"]
            assert c["resolved"] == (c["ci95_low"] > 0)
            if n == largest:
                y = predictions["u0_atom"].to_numpy()
                d = np.abs(predictions[f"u0_atom:{c['against']}"] - y) - np.abs(predictions[f"u0_atom:{best}"] - y)
                assert c["mae_difference"] == pytest.approx(d.mean(), abs=1e-9)
                normal = 2 * 1.96 * d.std(ddof=1) / math.sqrt(len(d))
                assert 0.5 * normal <= c["ci95_high"] - c["ci95_low"] <= 2 * normal


def _sets(qm9, n_train, n_test):
    split = standard_split(len(qm9), 0)
    return split.train[:n_train], split.test[:n_test]



def test_dressed_atom_records_equal_numpy_least_squares(tiny_run, qm9):
    _, document = tiny_run
    train, test = _sets(qm9, 40, 25)
    y = qm9.target("u0_atom")
    C_train = element_counts(qm9.molecules(train.tolist()), QM9_ELEMENTS)
    C_test = element_counts(qm9.molecules(test.tolist()), QM9_ELEMENTS)
    w = np.linalg.lstsq(C_train, y[train], rcond=None)[0]
    expected = np.abs(C_test @ w - y[test]).mean()
    got = next(r for r in document["result"]["records"] if r["model"] == "dressed-atom" and r["n_train"] == 40)
    # the pipeline's ridge is 1e-12 × mean(C²): a relative perturbation far below 1e-6
    assert got["mae"] == pytest.approx(expected, rel=1e-6)



def test_shell_assembled_kernel_ridge_equals_scikit_learn(tiny_run, qm9):
    """The power-spectrum record at n = 40 = sklearn KernelRidge on the one-shot kernel with the
    record's λ (the pipeline assembles the kernel from shells 0–20 and 20–40)."""
    from sklearn.kernel_ridge import KernelRidge

    from molntk.pipelines.qm9.evaluate import dressed_atom

    out, document = tiny_run
    record = next(r for r in document["result"]["records"] if r["model"] == "power-spectrum" and r["n_train"] == 40)
    zeta = int(record["hyperparameters"].removeprefix("ζ="))
    train_idx, test_idx = _sets(qm9, 40, 25)
    train, test = qm9.molecules(train_idx.tolist()), qm9.molecules(test_idx.tolist())
    y = qm9.target("u0_atom")[train_idx]
    base_train, base_test = dressed_atom(train, y, test)
    features = TASKS.load(out.parent / "tiny.yaml").features.feature_config()  # the run's
    kern = PowerSpectrumKernel(features, zeta)
    f_train, f_test = (environment_features(m, features) for m in (train, test))
    K, K_test = kern(f_train).kernel.numpy(), kern(f_test, f_train).kernel.numpy()
    reg = record["reg_relative"] * np.mean(np.diag(K))
    residual = y - base_train
    krr = KernelRidge(alpha=reg, kernel="precomputed").fit(K, residual - residual.mean())
    pred = base_test + residual.mean() + krr.predict(K_test)
    expected = np.abs(pred - qm9.target("u0_atom")[test_idx]).mean()
    # same kernel and λ; solves differ only by rounding amplified by cond(K + λI) (reported)
    assert record["mae"] == pytest.approx(expected, rel=1e-6)



def test_calibration_records_equal_a_numpy_gp_and_the_plot_is_written(tiny_run, qm9):
    """The power-spectrum record's coverage at n = 40 against numpy: standardised residual z,
    A = K + λI, σ_f² = (1/n) Σ_i [A⁻¹z]_i² / [A⁻¹]_ii (leave-one-out), std of y
    = s (σ_f² (k** − k*ᵀA⁻¹k* + λ))^{1/2}; calibration.png and the std column are written."""
    from molntk.pipelines.qm9.evaluate import dressed_atom

    out, document = tiny_run
    assert (out / "calibration.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "u0_atom:so3-ntk:std" in (out / "predictions.csv").read_text().splitlines()[0].split(",")
    record = next(r for r in document["result"]["records"] if r["model"] == "power-spectrum" and r["n_train"] == 40)
    zeta = int(record["hyperparameters"].removeprefix("ζ="))
    train_idx, test_idx = _sets(qm9, 40, 25)
    train, test = qm9.molecules(train_idx.tolist()), qm9.molecules(test_idx.tolist())
    y, y_test = qm9.target("u0_atom")[train_idx], qm9.target("u0_atom")[test_idx]
    base_train, base_test = dressed_atom(train, y, test)
    kern = PowerSpectrumKernel(TASKS.load(out.parent / "tiny.yaml").features.feature_config(), zeta)
    f_train = environment_features(train, kern.features)
    f_test = environment_features(test, kern.features)
    K, K_test = kern(f_train).kernel.numpy(), kern(f_test, f_train).kernel.numpy()
    k_self = np.diag(kern(f_test).kernel.numpy())
    reg = record["reg_relative"] * np.mean(np.diag(K))
    residual = y - base_train
    scale = residual.std()
    A_inv = np.linalg.inv(K + reg * np.eye(40))
    W = A_inv @ (residual - residual.mean()) / scale
    amplitude = np.mean(W**2 / np.diag(A_inv))
    std = scale * np.sqrt(amplitude * (k_self - np.einsum("ij,jk,ik->i", K_test, A_inv, K_test) + reg))
    z = np.abs(y_test - base_test - residual.mean() - K_test @ W * scale) / std
    assert record["within_1sigma"] == pytest.approx(np.mean(z <= 1), abs=1 / 25)  # one molecule at the boundary
    assert record["within_2sigma"] == pytest.approx(np.mean(z <= 2), abs=1 / 25)
    assert record["mean_abs_z"] == pytest.approx(np.mean(z), rel=1e-5)


def test_invariance_errors_separate_invariant_from_non_invariant_models(tiny_run):
    _, document = tiny_run
    at = {r["model"]: r for r in document["result"]["records"] if r["n_train"] == 40}
    for invariant in ("power-spectrum", "cm-laplacian", "bob-laplacian", "dressed-atom", "soap-dscribe", "fchl19"):
        # exactly invariant descriptors: only rounding of rotated coordinates remains
        assert at[invariant]["invariance_error"] < 1e-6 * at[invariant]["mae"], invariant
    # the SO(3) NTK is invariant up to quadrature; the plain MLP NTK is not invariant at all
    assert at["so3-ntk"]["invariance_error"] < 0.1 * at["mlp-ntk"]["invariance_error"]



def test_sizes_above_eigh_max_reuse_the_cv_lambda_with_cholesky_or_pcg(tmp_path):
    """eigh_max = 10: N = 10 chooses λ by LOO; N = 18 and 24 reuse its relative λ and solve
    by Cholesky or by PCG on out-of-core matrices (N = 18 is a non-contiguous view of the
    stored 24 × 24 matrix). Both solve the same system: PCG stops at a relative residual of
    1e-12 and κ(K + λI) ≤ (n · max diag K + λ) / λ ≤ 24 / psd_rtol (λ ≥ psd_rtol · mean diag,
    psd_rtol = 1e-4 here) ≈ 2.4e5, so the solutions, and the MAEs, agree to ≲ 3e-7 relative;
    1e-6 leaves margin and still catches a wrong λ or system."""
    config = tmp_path / "large.yaml"
    config.write_text(SMALL.replace("n_train: [10, 24]", "n_train: [10, 18, 24]").replace("power_spectrum: {zetas: [1, 2]}", "power_spectrum: null"))
    runs = {}
    for solver, extra in {"cholesky": [], "pcg": ["--set", "compute.storage=disk", "--set", "regression.pcg_tol=1e-12"]}.items():
        result = CliRunner().invoke(app, [
            "run", str(config), "--json", "--set", f"output={tmp_path / solver}", "--set", "regression.eigh_max=10",
            "--set", f"regression.large_solver={solver}", *extra,
        ])
        assert result.exit_code == 0, result.output
        runs[solver] = {r["n_train"]: r for r in json.loads(result.stdout)["result"]["records"] if r["model"] == "so3-ntk"}
    for solver, records in runs.items():
        assert [records[n]["solver"] for n in (10, 18, 24)] == ["eigh", solver, solver]
        assert records[18]["reg_relative"] == pytest.approx(records[10]["reg_relative"], rel=1e-12)
        assert records[24]["reg_relative"] == pytest.approx(records[10]["reg_relative"], rel=1e-12)
    for n in (18, 24):
        assert runs["pcg"][n]["mae"] == pytest.approx(runs["cholesky"][n]["mae"], rel=1e-6)
    assert runs["pcg"][10]["mae"] == runs["cholesky"][10]["mae"]



def run_shipped_config(name: str, shrink: list[str]):
    """``molntk run configs/<name> --json`` with ``--set`` for each of ``shrink``: the CLI
    result (exit code 0 asserted) and its JSON document's ``result``."""
    config = Path(__file__).parents[2] / "configs" / name
    result = CliRunner().invoke(app, ["run", str(config), "--json", *[a for kv in shrink for a in ("--set", kv)]])
    assert result.exit_code == 0, result.output
    return result, json.loads(result.stdout)["result"]


def test_full_split_config_runs_its_path_at_small_n(tmp_path):
    """configs/qm9_u0_full.yaml as shipped (out-of-core matrices, λ by LOO up to eigh_max,
    then the large-N solver; sparse models beside them) with only the sizes shrunk: every
    model is reported at every size, the exact sizes above eigh_max were solved without an
    eigendecomposition, and each model's scratch matrices (exact and sparse) are gone
    afterwards."""
    shrink = ["learning_curve.n_train=[10,16,22]", "learning_curve.n_test=6", "learning_curve.n_select=10",
              "regression.eigh_max=10", "kernel.grid_band_limit=3", "kernel.threads=1", "invariance.n_molecules=2",
              f"output={tmp_path / 'full'}"]
    _, document = run_shipped_config("qm9_u0_full.yaml", shrink)
    models = {"dressed-atom", "so3-ntk", "mlp-ntk", "power-spectrum", "cm-laplacian", "bob-laplacian",
              "so3-ntk-sparse", "mlp-ntk-sparse", "power-spectrum-sparse"}
    assert {(r["model"], r["n_train"]) for r in document["records"]} == {(m, n) for m in models for n in (10, 16, 22)}
    for r in document["records"]:
        if r["model"].endswith("-sparse"):
            assert r["solver"] == "sparse", r
        elif r["model"] != "dressed-atom":
            assert r["solver"] == ("eigh" if r["n_train"] == 10 else "cholesky"), r
        assert math.isfinite(r["mae"])
    assert {k["storage"] for k in document["kernel_seconds"]} == {"disk"}
    assert not list((tmp_path / "full" / "kernel_matrices").iterdir())



def test_full_split_so3_config_runs_sparse_only_at_small_n(tmp_path):
    """configs/qm9_u0_full_so3.yaml as shipped (one candidate, no exact model, no selection
    set) with the sizes shrunk: only the dressed atoms and the sparse SO(3) NTK are reported,
    and the batch log (stderr not a terminal) has plain progress lines."""
    shrink = ["learning_curve.n_train=[30]", "learning_curve.n_test=6", "sparse.environments=40",
              "kernel.grid_band_limit=3", "kernel.threads=1", "invariance.n_molecules=2", f"output={tmp_path / 'so3'}"]
    result, document = run_shipped_config("qm9_u0_full_so3.yaml", shrink)
    assert {(r["model"], r["n_train"]) for r in document["records"]} == {("dressed-atom", 30), ("so3-ntk-sparse", 30)}
    sparse = next(r for r in document["records"] if r["model"] == "so3-ntk-sparse")
    assert sparse["n_inducing"] == 40 and math.isfinite(sparse["mae"])
    assert isinstance(sparse["reg_at_grid_edge"], bool)  # λ chosen by LOO: whether at an end of its grid
    assert "so3-ntk-sparse-sum: " in result.stderr and " blocks, " in result.stderr


def test_full_split_sum_config_runs_its_sparse_sum_at_small_n(tmp_path):
    """configs/qm9_u0_full_sum.yaml as shipped (the sum of two networks, one point, no exact
    size, Falkon) with the sizes shrunk: only the dressed atoms and the sparse sum are
    reported, with the config's point, positive scales τ_i and the first network's maps."""
    shrink = ["learning_curve.n_train=[30]", "learning_curve.n_test=6", "sparse.environments=40",
              "kernel.threads=1", "invariance.n_molecules=2", f"output={tmp_path / 'sum'}"]
    _, document = run_shipped_config("qm9_u0_full_sum.yaml", shrink)
    assert {(r["model"], r["n_train"]) for r in document["records"]} == {("dressed-atom", 30), ("so3-ntk-sum-sparse", 30)}
    sparse = next(r for r in document["records"] if r["model"] == "so3-ntk-sum-sparse")
    assert sparse["n_inducing"] == 40 and sparse["term_weights"] == [1.0, 0.03] and sparse["inducing_maps"] == "first"
    assert len(sparse["term_scales"]) == 2 and min(sparse["term_scales"]) > 0 and math.isfinite(sparse["mae"])


def test_cpu20k_config_runs_four_sparse_models_on_one_inducing_pool(tmp_path):
    """configs/qm9_u0_cpu20k.yaml as shipped (four sparse models, inducing environments from
    a pool of the first training molecules, Cholesky factor, kernel rows on disk) with the
    sizes shrunk: every model is reported at every size, with the same m at each size, and
    with no exact model."""
    shrink = ["learning_curve.n_train=[12,24]", "learning_curve.n_test=6", "sparse.environments=30",
              "sparse.pool=12", "kernel.grid_band_limit=3", "kernel.threads=1", "invariance.n_molecules=0",
              f"output={tmp_path / 'out'}"]
    _, document = run_shipped_config("qm9_u0_cpu20k.yaml", shrink)
    records = document["records"]
    sparse = ("so3-ntk-sparse", "power-spectrum-sparse", "soap-dscribe-sparse", "fchl19-sparse")
    assert {(r["model"], r["n_train"]) for r in records} == {(m, n) for m in ("dressed-atom", *sparse) for n in (12, 24)}
    for r in records:
        if r["model"] != "dressed-atom":
            assert r["n_inducing"] == 30 and math.isfinite(r["mae"]), r
    assert {k["storage"] for k in document["kernel_seconds"]} == {"disk"}



def test_several_targets_share_kernels_by_reduction(tmp_path):
    """HOMO (intensive: mean-pooled kernel, no dressed atoms), U0 and μ (sum) in one run: one
    kernel per reduction, each target fitted on its own; dressed atoms are reported for all."""
    config = tmp_path / "multi.yaml"
    config.write_text(
        "task: qm9-property\ntargets: [homo, u0_atom, mu]\n"
        "learning_curve: {n_train: [20, 30], n_test: 10, n_select: 20}\ninvariance: {n_molecules: 0}\n" + FIXED +
        "models: {so3_ntk: null, mlp_ntk: null, augmented_mlp_ntk: null, coulomb_matrix: null, bag_of_bonds: null,\n"
        "         power_spectrum: {zetas: [1, 2]}}\n"
        f"output: {tmp_path / 'out'}\ncache: false\n"
    )
    result = CliRunner().invoke(app, ["run", str(config), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)["result"]
    reduces = {s["reduce"]: s["targets"] for s in document["search"]}
    assert reduces == {"mean": ["homo"], "sum": ["u0_atom", "mu"]}
    assert [k["reduce"] for k in document["kernel_seconds"]] == ["mean", "sum"]
    pairs = {(r["model"], r["target"]) for r in document["records"]}
    assert pairs == {(m, t) for m in ("dressed-atom", "power-spectrum") for t in ("homo", "u0_atom", "mu")}
    assert {r["unit"] for r in document["records"] if r["target"] == "homo"} == {"meV"}
    assert all(r["invariance_error"] is None for r in document["records"])
    for target in ("homo", "u0_atom", "mu"):
        assert (tmp_path / "out" / f"learning_curve_{target}.png").exists()



@pytest.mark.slow
def test_sparse_models_on_every_training_environment_equal_the_exact_models(tmp_path):
    """``sparse`` with more inducing environments than the 24 training molecules have: at
    n = 24 every training environment is inducing, so the Nyström kernel K_nm K_mm⁺ K_mn is
    the exact molecular kernel (Σ over environment pairs, push-through identity), the LOO
    curves coincide and the power spectrum's sparse model equals its exact one: same λ,
    MAE to 1e-7 relative (with rank_rtol = 1e-12, K_mm's pseudo-inverse drops eigenvalues
    below 1e-12 · s_max only, a rounding-level change of the kernel amplified at most by
    κ(K + λI) ≤ 1e4 for λ ≥ psd_rtol · mean diag K). ``exact_up_to: 10`` leaves the exact models out at n = 24."""
    config = tmp_path / "sparse.yaml"
    config.write_text(SMALL + "sparse: {models: [so3_ntk, power_spectrum], environments: 100000, selection: random, rank_rtol: 1.0e-12}\n")
    result = CliRunner().invoke(app, ["run", str(config), "--json", "--set", f"output={tmp_path / 'all'}"])
    assert result.exit_code == 0, result.output
    records = {(r["model"], r["n_train"]): r for r in json.loads(result.stdout)["result"]["records"]}
    for model in ("so3-ntk", "power-spectrum"):
        sparse, exact = records[(model + "-sparse", 24)], records[(model, 24)]
        assert sparse["solver"] == "sparse" and sparse["n_inducing"] > 24
        assert math.isfinite(records[(model + "-sparse", 10)]["mae"])
    sparse, exact = records[("power-spectrum-sparse", 24)], records[("power-spectrum", 24)]
    assert sparse["reg_relative"] == pytest.approx(exact["reg_relative"], rel=1e-12)
    assert sparse["mae"] == pytest.approx(exact["mae"], rel=1e-7)

    result = CliRunner().invoke(app, ["run", str(config), "--json", "--set", f"output={tmp_path / 'cut'}",
                                      "--set", "sparse.exact_up_to=10", "--set", "sparse.environments=30"])
    assert result.exit_code == 0, result.output
    pairs = {(r["model"], r["n_train"]) for r in json.loads(result.stdout)["result"]["records"]}
    assert ("so3-ntk", 10) in pairs and ("so3-ntk", 24) not in pairs
    assert {("so3-ntk-sparse", 10), ("so3-ntk-sparse", 24), ("power-spectrum-sparse", 24)} <= pairs



def test_sparse_solver_falkon_reports_its_iterations_beside_the_nystrom_solver(tmp_path):
    """``sparse.solver: falkon`` fits the same sparse model by preconditioned CG: its records
    carry ``solver: falkon``, the PCG iterations and the jitter (no condition number or K_mm
    eigenvalue count, which the Nyström SVD reports), and on the same kernels its test MAE is
    within 25 % of the SVD solver's: λ is chosen on 5 held-out molecules instead of by LOO on
    24, so the two models differ by their λ, not by the solve (measured: 696 against 814 meV,
    15 % apart; the solves themselves agree to 1e-8 at equal λ, tests/regression/test_falkon.py).
    ``sparse.factorisation: cholesky`` factors K_mm + j·mean diag·I instead of cutting its
    eigenvalues: the same λ by LOO and the same MAE to 2e-6 (the jitter 1e-10 · mean diag
    changes K̃ at that relative order, amplified at most by cond(K̃ + λI) ≈ 2e4; measured 3e-9)."""
    config = tmp_path / "falkon.yaml"
    config.write_text(SMALL + "sparse: {models: [power_spectrum], environments: 60, selection: fps}\n")
    records = {}
    for solver, factorisation in (("nystrom", "eigh"), ("nystrom", "cholesky"), ("falkon", "eigh")):
        result = CliRunner().invoke(app, ["run", str(config), "--json", "--set", f"output={tmp_path / solver / factorisation}",
                                          "--set", f"sparse.solver={solver}", "--set", f"sparse.factorisation={factorisation}"])
        assert result.exit_code == 0, result.output
        records[solver, factorisation] = next(r for r in json.loads(result.stdout)["result"]["records"]
                                              if r["model"] == "power-spectrum-sparse" and r["n_train"] == 24)
    falkon, eigh, cholesky = records["falkon", "eigh"], records["nystrom", "eigh"], records["nystrom", "cholesky"]
    assert falkon["solver"] == "falkon" and falkon["iterations"] >= 1 and falkon["jitter"] > 0
    assert "condition_number" not in falkon and "eigenvalues_clipped" not in falkon
    assert eigh["solver"] == "sparse" and eigh["eigenvalues_clipped"] >= 0 and eigh["jitter"] == 0
    assert falkon["mae"] == pytest.approx(eigh["mae"], rel=0.25), (falkon["mae"], eigh["mae"])
    assert cholesky["solver"] == "sparse" and cholesky["jitter"] == 1e-10 and cholesky["eigenvalues_clipped"] == 0
    assert cholesky["reg_relative"] == eigh["reg_relative"] and cholesky["mae"] == pytest.approx(eigh["mae"], rel=2e-6)


def test_nystrom_solver_factors_k_mm_once_per_model(tmp_path, monkeypatch):
    """The Nyström solver factors Θ(inducing, inducing) once for all training sizes and
    targets of a model (two sizes × two targets here, one sum-pooled kernel): the pipeline
    makes the factor, the regressor never refactors, and every fit uses that one factor."""
    import molntk.pipelines.qm9.sparse as pipeline_sparse
    import molntk.regression.sparse as regression_sparse

    made, used = [], []
    factor = pipeline_sparse.factor_inducing
    monkeypatch.setattr(pipeline_sparse, "factor_inducing", lambda *a, **k: made.append(factor(*a, **k)) or made[-1])
    monkeypatch.setattr(regression_sparse, "factor_inducing", lambda *a, **k: pytest.fail("the regressor refactored K_mm"))
    nystrom = regression_sparse.nystrom_factors
    monkeypatch.setattr(regression_sparse, "nystrom_factors", lambda K_nm, root: used.append(root) or nystrom(K_nm, root))
    config = tmp_path / "once.yaml"
    config.write_text(SMALL.replace("task: qm9-property\n", "task: qm9-property\ntargets: [u0_atom, u_atom]\n")
                      + "sparse: {models: [power_spectrum], environments: 40, factorisation: cholesky}\n")
    result = CliRunner().invoke(app, ["run", str(config), "--json", "--set", f"output={tmp_path / 'out'}"])
    assert result.exit_code == 0, result.output
    records = [r for r in json.loads(result.stdout)["result"]["records"] if r["model"] == "power-spectrum-sparse"]
    assert sorted((r["target"], r["n_train"]) for r in records) == [("u0_atom", 10), ("u0_atom", 24), ("u_atom", 10), ("u_atom", 24)]
    assert len(made) == 1 and made[0].method == "cholesky" and made[0].m == 40
    assert len(used) == 4 and all(root is made[0] for root in used)


def test_sparse_fchl19_uses_the_sigma_chosen_for_the_exact_model(tmp_path):
    """``sparse.models: [fchl19]``: the exact FCHL19 model up to n = 20, its sparse model on 30
    inducing atoms at every size, with the σ cross-validation chose for the exact model; the
    search row says whether that σ is an end of the grid [1, 2, 4]."""
    config = tmp_path / "fchl19.yaml"
    config.write_text(
        "task: qm9-property\nlearning_curve: {n_train: [20, 40], n_test: 10, n_select: 20}\n"
        "invariance: {n_molecules: 3, n_rotations: 2}\nkernel: {threads: 1}\n"
        "models: {so3_ntk: null, mlp_ntk: null, augmented_mlp_ntk: null, power_spectrum: null, coulomb_matrix: null,\n"
        "         bag_of_bonds: null, fchl19: {sigmas: [1.0, 2.0, 4.0]}}\n"
        "sparse: {models: [fchl19], environments: 30, exact_up_to: 20}\n"
        f"output: {tmp_path / 'out'}\ncache: false\n"
    )
    result = CliRunner().invoke(app, ["run", str(config), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)["result"]
    records = {(r["model"], r["n_train"]): r for r in document["records"]}
    assert set(records) == {("dressed-atom", 20), ("dressed-atom", 40), ("fchl19", 20), ("fchl19-sparse", 20), ("fchl19-sparse", 40)}
    (chosen,) = [s for s in document["search"] if s["model"] == "fchl19" and s["chosen"]]
    for n in (20, 40):
        sparse = records[("fchl19-sparse", n)]
        assert sparse["solver"] == "sparse" and sparse["n_inducing"] == 30 and math.isfinite(sparse["mae"])
        assert sparse["hyperparameters"] == f"{chosen['candidate']}; 30 inducing environments (fps)"
    assert records[("fchl19", 20)]["hyperparameters"] == chosen["candidate"]
    assert chosen["hyperparameter_at_grid_edge"] == (chosen["params"]["sigma"] in (1.0, 4.0))
    assert [k["model"] for k in document["kernel_seconds"]] == ["fchl19", "fchl19-sparse"]


def test_cv_loss_absolute_chooses_by_the_mean_absolute_leave_one_out_error(tmp_path, qm9):
    """``regression.cv_loss: absolute``: the search rows give the CV MAE, and the power
    spectrum's λ at n = 24 is the grid point whose leave-one-out refits (23 molecules each,
    numpy solves on the kernel computed here) have the smallest mean |residual| of the
    standardised dressed-atom residuals (the smallest mean squared residual lies at another
    grid point here: 3.2e-3 against 1e-3, so the test tells the two losses apart); the
    record's ``cv_error`` is that smallest mean |residual| in meV."""
    from molntk.pipelines.qm9.evaluate import dressed_atom
    from molntk.regression.selection import DEFAULT_RELATIVE_GRID

    config = tmp_path / "absolute.yaml"
    config.write_text(SMALL)
    result = CliRunner().invoke(app, ["run", str(config), "--json", "--set", f"output={tmp_path / 'out'}",
                                      "--set", "regression.cv_loss=absolute", "--set", "models.so3_ntk=null"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)["result"]
    rows = [s for s in document["search"] if s["model"] == "power-spectrum"]
    assert len(rows) == 2 and all(r["cv_mae"] > 0 and "cv_rmse" not in r for r in rows)
    record = next(r for r in document["records"] if r["model"] == "power-spectrum" and r["n_train"] == 24)
    train_idx, test_idx = _sets(qm9, 24, 8)
    train, test = qm9.molecules(train_idx.tolist()), qm9.molecules(test_idx.tolist())
    y = qm9.target("u0_atom")[train_idx]
    residual = y - dressed_atom(train, y, test)[0]
    z = (residual - residual.mean()) / residual.std()
    features = TASKS.load(str(config)).features.feature_config()
    zeta = int(record["hyperparameters"].removeprefix("ζ="))
    f_train = environment_features(train, features)
    K = PowerSpectrumKernel(features, zeta)(f_train).kernel.numpy()
    mean_diag = np.mean(np.diag(K))
    scores = []
    for q in DEFAULT_RELATIVE_GRID:
        loo = [z[i] - K[i, rest] @ np.linalg.solve(K[np.ix_(rest, rest)] + q * mean_diag * np.eye(23), z[rest])
               for i in range(24) for rest in [np.delete(np.arange(24), i)]]
        scores.append(np.mean(np.abs(loo)))
    assert record["reg_relative"] == pytest.approx(DEFAULT_RELATIVE_GRID[int(np.argmin(scores))], rel=1e-9)
    # the record's CV error: that LOO MAE, in meV (the residuals' std undoes the standardisation)
    assert record["cv_criterion"] == "loo"
    assert record["cv_error"] == pytest.approx(min(scores) * residual.std(), rel=1e-6)
    with pytest.raises(Exception, match="cv_loss.*GCV scores squared residuals only"):
        TASKS.load(str(config), ["regression.cv=gcv", "regression.cv_loss=absolute"])


def _extend_to_30(common: list[str], monkeypatch) -> tuple[object, object, list]:
    """The run of ``common``, then the same run extended to 30 training molecules in the
    same output folder: both results and the (rows, cols) of the blocks the second computed."""
    from molntk.scale.executors import SerialExecutor

    first = CliRunner().invoke(app, common)
    assert first.exit_code == 0, first.output
    computed = []
    serial_run = SerialExecutor.run
    monkeypatch.setattr(SerialExecutor, "run", lambda self, kernel, jobs: computed.extend(jobs) or serial_run(self, kernel, jobs))
    second = CliRunner().invoke(app, [*common, "--set", "learning_curve.n_train=[10,24,30]"])
    assert second.exit_code == 0, second.output
    return first, second, computed


def test_an_extended_curve_reads_the_blocks_of_the_shorter_run(tmp_path, monkeypatch):
    """``sparse.pool`` fixes the inducing environments, and the block cache knows a block by
    its molecules: a run extended from 24 to 30 training molecules in the same output folder
    computes only the rows of molecules 24–29 against the 40 inducing environments (7 blocks
    of 6 columns; the selection, exact and test blocks all come from the first run's cache,
    and its report counts them so), and its records at 10 and 24 molecules are the first
    run's, number for number."""
    config = tmp_path / "pool.yaml"
    config.write_text(SMALL.replace("cache: false\n", "") + "sparse: {models: [power_spectrum], environments: 40, pool: 10, exact_up_to: 10}\n")
    common = ["run", str(config), "--json", "--set", f"output={tmp_path / 'out'}", "--set", "models.so3_ntk=null"]
    first, second, computed = _extend_to_30(common, monkeypatch)
    assert len(computed) == 7 and all(np.array_equal(rows, 40 + np.arange(24, 30)) for rows, _ in computed), computed
    tallies = [json.loads(run.stdout)["result"]["kernel_blocks"] for run in (first, second)]
    assert tallies[1]["computed"] == 7 and tallies[1]["from_cache"] >= tallies[0]["computed"], tallies
    before, after = ({(r["model"], r["n_train"]): r["mae"] for r in json.loads(run.stdout)["result"]["records"]}
                     for run in (first, second))
    assert ("power-spectrum-sparse", 30) in after
    assert {key: after[key] for key in before} == before


def test_an_inducing_pool_beyond_the_curve_is_that_of_the_longer_curve(tmp_path, monkeypatch):
    """``sparse.pool`` may reach beyond the largest training size: a run at 10 and 24
    training molecules on the inducing environments of the first 30 (SOAP's own descriptors,
    whose inducing atoms come from the same pool) is extended to 30 by computing only the
    rows of molecules 24–29 — its Θ(inducing, inducing), training and test blocks all read
    from the first run's cache, which therefore had the extended run's inducing set — and
    its records at 10 and 24 come back number for number. A pool beyond the training split
    is refused, naming ``sparse.pool``."""
    from molntk.pipelines.qm9.sets import load_sets

    config = tmp_path / "pool.yaml"
    config.write_text(SMALL.replace("cache: false\n", "") + "sparse: {models: [power_spectrum, soap], environments: 40, pool: 30, exact_up_to: 10}\n")
    common = ["run", str(config), "--json", "--set", f"output={tmp_path / 'out'}", "--set", "models.so3_ntk=null",
              "--set", "models.soap={zetas: [2]}"]
    first, second, computed = _extend_to_30(common, monkeypatch)
    assert computed and all(np.array_equal(rows, 40 + np.arange(24, 30)) for rows, _ in computed), computed
    before, after = ({(r["model"], r["n_train"]): r["mae"] for r in json.loads(run.stdout)["result"]["records"]}
                     for run in (first, second))
    assert {("power-spectrum-sparse", 30), ("soap-dscribe-sparse", 30)} <= set(after)
    assert {key: after[key] for key in before} == before
    beyond = TASKS.load(str(config), ["models.soap={zetas: [2]}", "data.split.n_train=50", "sparse.pool=60"])
    with pytest.raises(ConfigValidationError, match="sparse.pool: 60 exceeds the 50 molecules of the training split"):
        load_sets(beyond, str(config), torch.float64, "cpu")
