"""The QM9 property pipeline, the SO(3) estimator and ``molntk predict``, on real QM9 molecules.

Kept small (tens of molecules, grid band limit 2) so that the whole file runs in well
under a minute on two cores; the quantities asserted are computed independently here
(numpy least squares, scikit-learn KernelRidge, brute-force orbit averages).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from molntk.cli.main import app
from molntk.config import ConfigValidationError
from molntk.data.qm9 import QM9_ELEMENTS
from molntk.data.splits import standard_split
from molntk.errors import InputError
from molntk.features.environments import FeatureConfig, environment_features
from molntk.features.radial import GaussianBasis
from molntk.kernels.so3.spec import describe_architecture, parse_architecture
from molntk.kernels.so3.wigner import coeff_slices
from molntk.molecular import BlockKernelOf, MoleculeSet
from molntk.molecular.baselines import MLPNTK, AugmentedMLPNTK, MLPArchitecture, PowerSpectrumKernel, RotationSet, wigner_table
from molntk.pipelines.tasks import TASKS
from molntk.regression import element_counts
from molntk.models.so3_ntk import SO3NTKRegressor

TINY = """\
task: qm9-property
name: tiny
learning_curve: {n_train: [20, 40], n_test: 25, n_select: 20}
invariance: {n_molecules: 6, n_rotations: 2}
kernel: {grid_band_limit: 3, threads: 1}
models:
  so3_ntk:
    candidates:
      - {layers: "lift:3 erf pool dense", sigma_b: 0.1}
      - {layers: "lift:3 relu pool dense", sigma_b: 0.1}
  augmented_mlp_ntk: {rotations: 2}
  power_spectrum: {zetas: [1, 2]}
  soap: {zetas: [2]}
  fchl19: {sigmas: [2.0]}
"""


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    config = folder / "tiny.yaml"
    config.write_text(TINY + f"output: {folder / 'out'}\n")
    result = CliRunner().invoke(app, ["run", str(config), "--json"])
    assert result.exit_code == 0, result.output
    return folder / "out", json.loads(result.stdout)


# --------------------------------------------------------------------------- architecture strings


def test_architecture_strings_round_trip():
    spec = "lift:4 relu conv:3 erf dense relu pool dense"
    net = parse_architecture(spec, sigma_w=1.3, sigma_b=0.2)
    assert describe_architecture(net) == spec
    assert net.layers[0].band_limit == 4 and net.layers[0].sigma_w == 1.3 and net.layers[2].sigma_b == 0.2
    assert describe_architecture(parse_architecture("lift:2 -> relu -> pool -> dense")) == "lift:2 relu pool dense"


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [("lift:3 tanh pool dense", "unknown layer 'tanh'"), ("relu pool dense", "starts with Lift"), ("", "empty")],
)
def test_bad_architecture_names_the_problem(spec, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_architecture(spec)


# --------------------------------------------------------------------------- configuration


def test_config_problems_name_their_keys(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "task: qm9-property\ntargets: [u0_atm]\nlearning_curve: {n_train: [10, 20], n_select: 30}\n"
        "models: {so3_ntk: {candidates: [{layers: 'lift:3 tanh pool dense'}]}}\n"
    )
    with pytest.raises(ConfigValidationError) as info:
        TASKS.load(str(path), ())
    text = str(info.value)
    assert "targets: unknown QM9 target 'u0_atm'" in text and "u0_atom" in text
    assert "learning_curve.n_select: 30 exceeds the largest n_train 20" in text
    assert "unknown layer 'tanh'" in text


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


def test_invariance_errors_separate_invariant_from_non_invariant_models(tiny_run):
    _, document = tiny_run
    at = {r["model"]: r for r in document["result"]["records"] if r["n_train"] == 40}
    for invariant in ("power-spectrum", "cm-laplacian", "bob-laplacian", "dressed-atom", "soap-dscribe", "fchl19"):
        # exactly invariant descriptors: only rounding of rotated coordinates remains
        assert at[invariant]["invariance_error"] < 1e-6 * at[invariant]["mae"], invariant
    # the SO(3) NTK is invariant up to quadrature; the plain MLP NTK is not invariant at all
    assert at["so3-ntk"]["invariance_error"] < 0.1 * at["mlp-ntk"]["invariance_error"]


# --------------------------------------------------------------------------- symmetrised augmentation


def _rotate(x, table, k, band_limit):
    out, offset = torch.empty_like(x), 0
    for l, s in enumerate(coeff_slices(band_limit)):
        d = 2 * l + 1
        out[..., s] = x[..., s] @ table[k, offset : offset + d * d].reshape(d, d).T
        offset += d * d
    return out


def test_rotation_differences_give_the_symmetrised_network_kernel():
    """Σ_k w_k Θ(f, ρ(g_i⁻¹g_j) f') over the difference set = Σ_ij w_i w_j Θ(ρ(g_i) f, ρ(g_j) f'),
    computed by rotating the coefficients (erf: smooth, so rounding-level agreement), and PSD."""
    torch.manual_seed(0)
    x = torch.randn(5, 3, 9, dtype=torch.float64)
    base = RotationSet.random(2, seed=3)
    arch = MLPArchitecture(1, "erf", 1.0, 0.1)
    got = AugmentedMLPNTK(FeatureConfig(band_limit=3, smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0)), arch, RotationSet.differences(base)).env_kernel(x)[1]
    table = wigner_table(3, base.alpha, base.beta, base.gamma)
    mlp = MLPNTK(FeatureConfig(band_limit=3, smearing_width=0.5, radial=GaussianBasis(n=6, r_cut=5.0)), arch)
    expected = sum(
        base.weights[i] * base.weights[j] * mlp.env_kernel(_rotate(x, table, i, 3), _rotate(x, table, j, 3))[1]
        for i in range(len(base))
        for j in range(len(base))
    )
    assert torch.allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert torch.linalg.eigvalsh(got).min() > 0


# --------------------------------------------------------------------------- estimator and predict


@pytest.fixture(scope="module")
def fitted(qm9):
    mols = qm9.molecules(range(1, 41))
    y = np.asarray(qm9.target("u0_atom")[1:41])
    return SO3NTKRegressor(grid_band_limit=2, psd_rtol=1e-4).fit(mols[:30], y[:30]), mols, y


def test_estimator_save_load_gives_identical_predictions(fitted, tmp_path):
    model, mols, y = fitted
    mean, std = model.predict(mols[30:], return_std=True)
    assert np.all(std >= 0) and np.isfinite(mean).all()
    assert np.abs(mean - y[30:]).mean() < np.abs(y[30:] - y[:30].mean()).mean()  # beats the mean predictor
    path = model.save(tmp_path / "u0.molntk.npz")
    loaded = SO3NTKRegressor.load(path)
    mean2, std2 = loaded.predict(mols[30:], return_std=True)
    assert np.array_equal(mean, mean2) and np.array_equal(std, std2)
    assert loaded.get_params() == model.get_params()


def test_model_files_without_a_sampling_load_with_the_grid_they_were_fitted_on(fitted, tmp_path):
    """Files written before ``sampling`` existed were fitted on Gauss–Legendre grids: loading
    one must not switch it to the new default (a different kernel for the same weights)."""
    model, mols, y = fitted
    gl = SO3NTKRegressor(**{**model.get_params(), "sampling": "gauss-legendre"}).fit(mols[:30], y[:30])
    path = gl.save(tmp_path / "gl.npz")
    with np.load(path, allow_pickle=False) as archive:
        arrays = dict(archive)
    meta = json.loads(arrays["metadata"].tobytes().decode("utf-8"))
    del meta["params"]["sampling"]
    arrays["metadata"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    old = tmp_path / "old.npz"
    np.savez(old, **arrays)
    loaded = SO3NTKRegressor.load(old)
    assert loaded.sampling == "gauss-legendre"
    assert np.array_equal(loaded.predict(mols[30:]), gl.predict(mols[30:]))


def test_estimator_works_with_scikit_learn_tools(qm9):
    from sklearn.base import clone
    from sklearn.model_selection import cross_val_score

    mols = qm9.molecules(range(1, 31))
    y = np.asarray(qm9.target("u0_atom")[1:31])
    est = SO3NTKRegressor(grid_band_limit=2, psd_rtol=1e-4, sigma_b=0.2)
    assert clone(est).get_params()["sigma_b"] == 0.2
    scores = cross_val_score(est, mols, y, cv=3, scoring="neg_mean_absolute_error")
    assert scores.shape == (3,) and np.isfinite(scores).all()


def test_loading_a_file_that_is_not_a_model_names_it(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, metadata=np.frombuffer(b'{"format": "other"}', dtype=np.uint8))
    with pytest.raises(InputError, match="not a molntk SO\\(3\\) NTK model"):
        SO3NTKRegressor.load(bad)
    junk = tmp_path / "junk.npz"
    junk.write_text("hello")
    with pytest.raises(InputError, match="junk.npz"):
        SO3NTKRegressor.load(junk)


def test_predict_cli_predicts_good_smiles_and_names_bad_ones(fitted, tmp_path):
    model, _, _ = fitted
    path = model.save(tmp_path / "m.npz")
    out = tmp_path / "pred.csv"
    result = CliRunner().invoke(
        app, ["predict", "--model", str(path), "--out", str(out), "--json", "--smiles", "CCO", "not-a-smiles", "C[Si](C)C", "C1=CC=CN=C1"]
    )
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert [p["smiles"] for p in document["predictions"]] == ["CCO", "C1=CC=CN=C1"]
    failed = {f["source"]: f["problem"] for f in document["failures"]}
    assert set(failed) == {"not-a-smiles", "C[Si](C)C"}
    assert "Si" in failed["C[Si](C)C"]
    import pandas as pd

    table = pd.read_csv(out)
    assert list(table["smiles"]) == ["CCO", "C1=CC=CN=C1"] and table["prediction"].notna().all()
    assert all(math.isfinite(v) for v in table["std"])


# --------------------------------------------------------------------------- interruption


def test_killed_run_resumes_from_its_kernel_cache_with_the_same_numbers(tmp_path):
    """`molntk run` killed by SIGKILL mid-kernel, then the same command again: it finishes from the
    cached blocks and reports exactly the numbers of an uninterrupted run (no cache)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    config = tmp_path / "resume.yaml"
    config.write_text(
        "task: qm9-property\nlearning_curve: {n_train: [10, 20, 30, 40], n_test: 15, n_select: 10}\n"
        "invariance: {n_molecules: 3, n_rotations: 2}\nkernel: {grid_band_limit: 3, threads: 1}\n"
        "models: {mlp_ntk: null, augmented_mlp_ntk: null, coulomb_matrix: null, bag_of_bonds: null,\n"
        "         power_spectrum: {zetas: [2]}}\n"
    )
    out = tmp_path / "out"
    command = [sys.executable, "-m", "molntk", "run", str(config), "--json", "--set", f"output={out}"]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    cache = out / "kernel_cache"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(cache.glob("*/*.npz"))) < 4 and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "report.json").exists(), "the run finished before it could be killed"
    assert len(list(cache.glob("*/*.npz"))) >= 4
    resumed = subprocess.run(command, capture_output=True, text=True, env=env)
    assert resumed.returncode == 0, resumed.stderr
    fresh = subprocess.run(
        [*command[:-2], "--set", f"output={tmp_path / 'fresh'}", "--set", "cache=false"],
        capture_output=True, text=True, env=env,
    )
    assert fresh.returncode == 0, fresh.stderr
    keys = ("model", "n_train", "mae", "rmse", "r2", "invariance_error", "hyperparameters")
    numbers = [
        [{k: r[k] for k in keys} for r in json.loads(run.stdout)["result"]["records"]] for run in (resumed, fresh)
    ]
    assert numbers[0] == numbers[1]


SMALL = (
    "task: qm9-property\nlearning_curve: {n_train: [10, 24], n_test: 8, n_select: 10}\n"
    "invariance: {n_molecules: 3, n_rotations: 2}\nkernel: {grid_band_limit: 3, threads: 1}\n"
    "models: {so3_ntk: {candidates: [{layers: 'lift:3 erf pool dense', sigma_b: 0.1}]}, mlp_ntk: null,\n"
    "         augmented_mlp_ntk: null, coulomb_matrix: null, bag_of_bonds: null, power_spectrum: {zetas: [1, 2]}}\n"
    "compute: {block_molecules: 6}\ncache: false\n"
)


def _numbers(document: dict) -> list[dict]:
    keys = ("model", "n_train", "mae", "rmse", "r2", "invariance_error", "hyperparameters")
    return [{k: r[k] for k in keys} for r in document["result"]["records"]]


def test_dask_workers_and_out_of_core_matrices_give_the_serial_numbers(tmp_path):
    """The same config on 2 local Dask workers (``--workers 2``) and with the matrices as
    ``.npy`` memory maps (``compute.storage=disk``; the engine's memmaps are tested in
    test_scale.py): the blocks are the same, so every reported number equals the serial
    in-RAM run's exactly."""
    pytest.importorskip("distributed")
    config = tmp_path / "small.yaml"
    config.write_text(SMALL)
    runs = {}
    for label, extra in {"serial": [], "dask": ["--workers", "2"], "disk": ["--set", "compute.storage=disk"]}.items():
        result = CliRunner().invoke(app, ["run", str(config), "--json", "--set", f"output={tmp_path / label}", *extra])
        assert result.exit_code == 0, result.output
        runs[label] = json.loads(result.stdout)
    assert runs["dask"]["result"]["executor"] == "DaskExecutor"
    assert runs["serial"]["result"]["executor"] == "SerialExecutor"
    assert _numbers(runs["dask"]) == _numbers(runs["serial"])
    assert _numbers(runs["disk"]) == _numbers(runs["serial"])
    storage = {r["model"]: r["storage"] for r in runs["disk"]["result"]["kernel_seconds"]}
    assert storage == {"so3-ntk": "disk", "power-spectrum": "disk"}
    assert {r["storage"] for r in runs["serial"]["result"]["kernel_seconds"]} == {"memory"}
    scratch = tmp_path / "disk" / "kernel_matrices"
    assert scratch.is_dir() and not list(scratch.iterdir())  # each model's matrices deleted once evaluated


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


def test_full_split_config_runs_its_path_at_small_n(tmp_path):
    """configs/qm9_u0_full.yaml as shipped (out-of-core matrices, λ by LOO up to eigh_max,
    then the large-N solver; sparse models beside them) with only the sizes shrunk: every
    model is reported at every size, the exact sizes above eigh_max were solved without an
    eigendecomposition, and each model's scratch matrices (exact and sparse) are gone
    afterwards."""
    from pathlib import Path

    config = Path(__file__).parents[1] / "configs" / "qm9_u0_full.yaml"
    shrink = ["learning_curve.n_train=[10,16,22]", "learning_curve.n_test=6", "learning_curve.n_select=10",
              "regression.eigh_max=10", "kernel.grid_band_limit=3", "kernel.threads=1", "invariance.n_molecules=2",
              f"output={tmp_path / 'full'}"]
    result = CliRunner().invoke(app, ["run", str(config), "--json", *[a for kv in shrink for a in ("--set", kv)]])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)["result"]
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
    from pathlib import Path

    config = Path(__file__).parents[1] / "configs" / "qm9_u0_full_so3.yaml"
    shrink = ["learning_curve.n_train=[30]", "learning_curve.n_test=6", "sparse.environments=40",
              "kernel.grid_band_limit=3", "kernel.threads=1", "invariance.n_molecules=2", f"output={tmp_path / 'so3'}"]
    result = CliRunner().invoke(app, ["run", str(config), "--json", *[a for kv in shrink for a in ("--set", kv)]])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)["result"]
    assert {(r["model"], r["n_train"]) for r in document["records"]} == {("dressed-atom", 30), ("so3-ntk-sparse", 30)}
    sparse = next(r for r in document["records"] if r["model"] == "so3-ntk-sparse")
    assert sparse["n_inducing"] == 40 and math.isfinite(sparse["mae"])
    assert isinstance(sparse["reg_at_grid_edge"], bool)  # λ chosen by LOO: whether at an end of its grid
    assert "so3-ntk-sparse-sum: " in result.stderr and " blocks, " in result.stderr


def test_eigh_max_applies_to_the_exact_sizes_only(tmp_path):
    """λ comes from an eigendecomposition at the smallest exact size; with every size above
    ``sparse.exact_up_to`` no exact model runs and eigh_max does not limit the sizes."""
    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    sparse = ["sparse.models=[so3_ntk]", "sparse.environments=20"]
    with pytest.raises(ConfigValidationError, match="below the smallest n_train 10"):
        TASKS.load(str(config), ["regression.eigh_max=5", *sparse, "sparse.exact_up_to=10"])
    assert TASKS.load(str(config), ["regression.eigh_max=5", *sparse, "sparse.exact_up_to=5"]).regression.eigh_max == 5


def test_block_kernel_on_two_devices_equals_serial(qm9, tmp_path, one_thread):
    """BlockKernelOf.on(device) through the DeviceExecutor (two CPU "devices": the
    multi-GPU code path without a GPU) gives the serial blocks bit for bit, for the SO(3)
    NTK and a feature-map baseline. (This caught a race: the two threads building Wigner
    tables at once could leave e3nn in float32; see molntk.kernels.so3.wigner.)"""
    from molntk.pipelines.qm9.candidates import build_candidates
    from molntk.scale import DeviceExecutor, SerialExecutor, kernel_matrices

    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    molecules = qm9.molecules(list(range(14)))
    candidates = build_candidates(TASKS.load(str(path), []), "sum", molecules)
    group = MoleculeSet(molecules)
    for name in ("so3-ntk", "power-spectrum"):
        kernel = BlockKernelOf(candidates[name][0].kernel, group, outputs=(candidates[name][0].matrix,))
        serial = kernel_matrices(kernel, np.arange(10), np.arange(10, 14), block_size=4, executor=SerialExecutor())
        devices = kernel_matrices(kernel, np.arange(10), np.arange(10, 14), block_size=4, executor=DeviceExecutor(["cpu", "cpu"]))
        for matrix in serial:
            assert np.array_equal(serial[matrix], devices[matrix]), (name, matrix)


def test_compute_section_is_validated(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    with pytest.raises(ConfigValidationError, match="exactly one of 'workers'"):
        TASKS.load(str(config), ["compute.executor=dask"])
    with pytest.raises(ConfigValidationError, match="only used with executor 'dask'"):
        TASKS.load(str(config), ["compute.workers=2"])
    with pytest.raises(ConfigValidationError, match="below the smallest n_train 10"):
        TASKS.load(str(config), ["regression.eigh_max=5"])
    assert TASKS.load(str(config), ["compute.executor=dask", "compute.scheduler=tcp://127.0.0.1:8786"]).compute.scheduler


def test_several_targets_share_kernels_by_reduction(tmp_path):
    """HOMO (intensive: mean-pooled kernel, no dressed atoms), U0 and μ (sum) in one run: one
    kernel per reduction, each target fitted on its own; dressed atoms are reported for all."""
    config = tmp_path / "multi.yaml"
    config.write_text(
        "task: qm9-property\ntargets: [homo, u0_atom, mu]\n"
        "learning_curve: {n_train: [20, 30], n_test: 10, n_select: 20}\ninvariance: {n_molecules: 0}\n"
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
