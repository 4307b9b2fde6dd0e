"""The sum of SO(3) NTKs in a ``qm9-property`` run (``models.so3_ntk_sum``): its records
against kernel ridge computed here on the two networks' own kernels (each computed from its
recipe, not from the run's block assembler), the λ search done by the plain regressor for
each weight; the refit above ``eigh_max`` with the weights and relative λ of the largest
size below; weight 0 is the first network alone. Its sparse model (``so3_ntk_sum`` in
``sparse.models``) on every training environment against the same kernel ridge: with the
exact sum's weights and scales, or, without exact sizes, with its one point and the mean
self-kernels of the training molecules."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from molntk.cli.main import app
from molntk.data.splits import standard_split
from molntk.pipelines.qm9.candidates import so3_recipe
from molntk.pipelines.qm9.config import SO3Candidate
from molntk.pipelines.qm9.evaluate import dressed_atom
from molntk.pipelines.tasks import TASKS
from molntk.regression import KernelRegressor
from molntk.regression.selection import lambda_grid
from tests.helpers.qm9_configs import SMALL

FIRST = "{layers: 'lift:3 erf pool dense', sigma_w: 1.0, sigma_b: 0.1}"
SECOND = "{layers: 'lift:3 erf pool dense', sigma_w: 1.0, sigma_b: 0.1, radial: {kind: gaussian, n: 4, r_min: 0.7, r_cut: 3.0}}"
WEIGHTS = [0.0, 0.3, 3.0]


#: Every training environment inducing (the pool is the largest training set), K_mm's
#: pseudo-inverse cut at 1e-12 of its largest eigenvalue.
EVERY_ENVIRONMENT = "{models: [so3_ntk_sum], environments: 100000, selection: random, rank_rtol: 1.0e-12}"


def run_sum(tmp_path, weights, name, *settings, points=None):
    """``molntk run`` of the small config (sizes 10, 18, 24; eigh_max 18) with the sum of the
    two networks (the weight grid ``weights``, or ``points``) and the further ``--set``
    ``settings``; its config and records."""
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        SMALL.replace("n_train: [10, 24]", "n_train: [10, 18, 24]").replace("power_spectrum: {zetas: [1, 2]}}", "power_spectrum: null}")
    )
    search = f"weights: {weights}" if points is None else f"points: {points}"
    sets = ["regression.eigh_max=18", f"models.so3_ntk_sum={{terms: [{FIRST}, {SECOND}], {search}}}", *settings]
    result = CliRunner().invoke(app, ["run", str(config), "--json", "--set", f"output={tmp_path / name}",
                                      *[a for kv in sets for a in ("--set", kv)]])
    assert result.exit_code == 0, result.output
    records = json.loads((tmp_path / name / "report.json").read_text())["results"]
    return TASKS.load(config), records


def network_kernels(config, qm9, n_train=24, n_test=8):
    """Each network's NTK on the first ``n_train`` training molecules and against the first
    ``n_test`` test molecules of the standard split, from its recipe; the targets; whether
    a kernel is a quadrature."""
    split = standard_split(len(qm9), 0)
    train, test = qm9.molecules(split.train[:n_train].tolist()), qm9.molecules(split.test[:n_test].tolist())
    y, y_test = qm9.target("u0_atom")[split.train[:n_train]], qm9.target("u0_atom")[split.test[:n_test]]
    kernels, quadrature = [], False
    for text in (FIRST, SECOND):
        recipe = so3_recipe(config, SO3Candidate(**yaml.safe_load(text)), "sum")
        quadrature |= recipe.quadrature
        kernel = recipe.molecular_kernel()
        environments = recipe.environments(train)
        kernels.append((kernel(environments).ntk.double().numpy(), kernel(recipe.environments(test), environments).ntk.double().numpy()))
    return kernels, (train, test, y, y_test), quadrature


@pytest.fixture(scope="module")
def sum_run(tmp_path_factory):
    return run_sum(tmp_path_factory.mktemp("so3_sum"), WEIGHTS, "sum")


def test_the_sum_is_kernel_ridge_on_the_weighted_sum_of_the_networks_kernels(sum_run, qm9):
    config, records = sum_run
    kernels, (train, test, y, y_test), quadrature = network_kernels(config, qm9)
    grid = lambda_grid(config.regression.psd_rtol, quadrature)
    sums = {r["n_train"]: r for r in records if r["model"] == "so3-ntk-sum"}
    chosen = None
    for n in (10, 18, 24):
        base_train, base_test = dressed_atom(train[:n], y[:n], test)
        tau = [np.mean(np.diag(K[:n, :n])) for K, _ in kernels]

        def summed(c, n=n, tau=tau):
            return (kernels[0][0][:n, :n] / tau[0] + c * kernels[1][0][:n, :n] / tau[1],
                    kernels[0][1][:, :n] / tau[0] + c * kernels[1][1][:, :n] / tau[1])

        if n <= 18:  # every weight with its own λ search; the lowest CV error wins
            fits = {c: KernelRegressor("ntk", reg="cv", psd_rtol=config.regression.psd_rtol, relative_grid=grid)
                       .fit(summed(c)[0], y[:n] - base_train) for c in WEIGHTS}
            chosen = min(WEIGHTS, key=lambda c: fits[c].cv_result_.best_error)
            model, rel = fits[chosen], fits[chosen].reg_relative_
        else:  # above eigh_max: the weights and relative λ of n = 18, solved by Cholesky
            model = KernelRegressor("ntk", reg=rel * (1 + chosen), solver="cholesky").fit(summed(chosen)[0], y[:n] - base_train)
        record = sums[n]
        assert record["term_weights"] == [1.0, chosen]
        assert record["hyperparameters"].startswith("1·[lift:3 erf pool dense") and f" + {chosen:g}·[" in record["hyperparameters"]
        pred = base_test + model.predict(summed(chosen)[1])
        # the same kernels assembled in blocks by the run: rounding, amplified by cond(K + λI)
        assert record["mae"] == pytest.approx(np.abs(pred - y_test).mean(), rel=1e-6)
    assert sums[24]["solver"] == "cholesky" and sums[18]["solver"] == "eigh"
    assert sums[24]["reg_relative"] == pytest.approx(sums[18]["reg_relative"], rel=1e-12)


def test_weight_zero_is_the_first_network_alone(tmp_path, sum_run):
    _, records = run_sum(tmp_path, [0.0], "zero")
    single = {r["n_train"]: r for r in sum_run[1] if r["model"] == "so3-ntk"}  # the config's candidate = FIRST
    for r in records:
        if r["model"] == "so3-ntk-sum":
            assert r["term_weights"] == [1.0, 0.0]
            assert r["mae"] == pytest.approx(single[r["n_train"]]["mae"], rel=1e-9)
            assert r["reg_relative"] == pytest.approx(single[r["n_train"]]["reg_relative"], rel=1e-12)


def test_the_shipped_exact_config_runs_the_sum_beside_its_parts_at_small_n(tmp_path):
    """configs/qm9_u0_exact.yaml as shipped, the sizes shrunk: the sum, its 3 Å network alone
    and the power spectrum at every size, the sum's weights from the config's grid, and
    the 3 Å network's kernel blocks read from the cache by the sum's first term."""
    config = Path(__file__).parents[2] / "configs" / "qm9_u0_exact.yaml"
    shrink = ["learning_curve.n_train=[12,20]", "learning_curve.n_test=6", "invariance.n_molecules=2",
              "kernel.threads=1", f"output={tmp_path / 'exact'}"]
    result = CliRunner().invoke(app, ["run", str(config), "--json", *[a for kv in shrink for a in ("--set", kv)]])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)["result"]
    models = ("dressed-atom", "so3-ntk", "power-spectrum", "so3-ntk-sum")
    assert {(r["model"], r["n_train"]) for r in document["records"]} == {(m, n) for m in models for n in (12, 20)}
    grid = TASKS.load(config).models.so3_ntk_sum.weights
    for r in document["records"]:
        if r["model"] == "so3-ntk-sum":
            assert r["term_weights"][0] == 1.0 and r["term_weights"][1] in grid and np.isfinite(r["mae"])
    n_blocks = document["kernel_blocks"]
    assert n_blocks["from_cache"] > 0  # the sum's first term = the so3_ntk candidate: its blocks are reused


def summed_ridge(kernels, data, config, n, weights, scales):
    """Test MAE and relative λ of kernel ridge (λ by LOO on the relative grid of a
    quadrature) on Σ_i c_i K_i / τ_i of the first n training molecules' dressed-atom residual."""
    train, test, y, y_test = data
    base_train, base_test = dressed_atom(train[:n], y[:n], test)
    K = sum(c / tau * K[:n, :n] for (K, _), c, tau in zip(kernels, weights, scales))
    K_test = sum(c / tau * K_t[:, :n] for (_, K_t), c, tau in zip(kernels, weights, scales))
    grid = lambda_grid(config.regression.psd_rtol, True)
    model = KernelRegressor("ntk", reg="cv", psd_rtol=config.regression.psd_rtol, relative_grid=grid).fit(K, y[:n] - base_train)
    return float(np.abs(base_test + model.predict(K_test) - y_test).mean()), model.reg_relative_


#: The sparse model on every training environment is kernel ridge on the Nyström kernel
#: K_nm K_mm⁺ K_mn, which is the exact kernel up to the eigenvalues of K_mm the pseudo-inverse
#: drops: the quadrature's negative ones, ≥ −6.3e-8 of the largest for these networks on the
#: small config's grid (measured: eigenvalues of the 450 environments of the 24 training
#: molecules), amplified at most by κ(K + λI) ≤ 1e4 (λ ≥ psd_rtol · mean diag = 1e-4):
#: predictions agree to ≈ 6e-4 relative (measured 3e-6).
NYSTROM_REL = 1e-3


def test_the_sparse_sum_takes_the_exact_sums_weights_and_scales(tmp_path, sum_run, qm9):
    """With exact sizes, the sparse sum uses the weights and τ_i of the exact sum's record at
    the largest size ≤ eigh_max (18) at every size; on every training environment it is the
    exact kernel ridge on that sum, and at n = 18 the exact sum itself."""
    config, records = run_sum(tmp_path, WEIGHTS, "sparse", f"sparse={EVERY_ENVIRONMENT}")
    exact = {r["n_train"]: r for r in records if r["model"] == "so3-ntk-sum"}
    sparse = {r["n_train"]: r for r in records if r["model"] == "so3-ntk-sum-sparse"}
    assert set(sparse) == {10, 18, 24} and all(r["n_inducing"] > 24 for r in sparse.values())
    alone = {r["n_train"]: r for r in sum_run[1] if r["model"] == "so3-ntk-sum"}  # the same run without the sparse model
    for key in ("mae", "reg_relative", "term_weights", "term_scales"):
        assert [exact[n][key] for n in (10, 18, 24)] == [alone[n][key] for n in (10, 18, 24)]
    kernels, data, _ = network_kernels(config, qm9)
    weights, scales = exact[18]["term_weights"], exact[18]["term_scales"]
    assert scales == pytest.approx([np.mean(np.diag(K[:18, :18])) for K, _ in kernels], rel=1e-12)
    for n, record in sparse.items():
        assert record["term_weights"] == weights and record["term_scales"] == scales
        assert record["hyperparameters"].startswith("1·[lift:3 erf pool dense") and f" + {weights[1]:g}·[" in record["hyperparameters"]
        mae, reg_relative = summed_ridge(kernels, data, config, n, weights, scales)
        assert record["reg_relative"] == pytest.approx(reg_relative, rel=1e-12)
        assert record["mae"] == pytest.approx(mae, rel=NYSTROM_REL)
    assert sparse[18]["mae"] == pytest.approx(exact[18]["mae"], rel=NYSTROM_REL)


@pytest.mark.parametrize("choice", [[], ["sparse.sum_maps=every", "sparse.selection=fps"]], ids=["first-maps", "every-maps"])
def test_without_exact_sizes_the_sparse_sum_takes_its_one_point_and_the_mean_self_kernels(tmp_path, qm9, choice):
    """``sparse.exact_up_to`` below every size: only the sparse sum, with the section's one
    point and τ_i the mean Θ_i(M, M) of the training molecules (all 24: fewer than 1,000);
    every training environment inducing, drawn at random or by FPS in both networks' maps."""
    config, records = run_sum(tmp_path, None, "point", f"sparse={EVERY_ENVIRONMENT}", "sparse.exact_up_to=5",
                              "models.so3_ntk=null", *choice, points=[[0.3]])
    assert {r["model"] for r in records} == {"dressed-atom", "so3-ntk-sum-sparse"}
    kernels, data, _ = network_kernels(config, qm9)
    scales = [float(np.mean(np.diag(K))) for K, _ in kernels]
    for record in (r for r in records if r["model"] == "so3-ntk-sum-sparse"):
        assert record["term_weights"] == [1.0, 0.3] and record["inducing_maps"] == ("every" if choice else "first")
        assert record["term_scales"] == pytest.approx(scales, rel=1e-12)
        mae, reg_relative = summed_ridge(kernels, data, config, record["n_train"], [1.0, 0.3], scales)
        assert record["reg_relative"] == pytest.approx(reg_relative, rel=1e-12)
        assert record["mae"] == pytest.approx(mae, rel=NYSTROM_REL)


def test_the_sparse_sum_on_out_of_core_matrices_equals_the_one_in_memory(tmp_path):
    """``compute.storage: disk``: each network's rows are memory maps, the second added into
    the first's in place; the same arithmetic as in memory gives the same records (to
    rounding of the solver's BLAS, 1e-12), and every scratch matrix is gone afterwards."""
    runs = {}
    for storage in ("memory", "disk"):
        _, records = run_sum(tmp_path, None, storage, f"sparse={EVERY_ENVIRONMENT}", "sparse.exact_up_to=5",
                             "models.so3_ntk=null", f"compute.storage={storage}", points=[[0.3]])
        runs[storage] = {r["n_train"]: r for r in records if r["model"] == "so3-ntk-sum-sparse"}
    for n in (10, 18, 24):
        assert runs["disk"][n]["reg_relative"] == runs["memory"][n]["reg_relative"]
        assert runs["disk"][n]["mae"] == pytest.approx(runs["memory"][n]["mae"], rel=1e-12)
    assert not list((tmp_path / "disk" / "kernel_matrices").iterdir())
