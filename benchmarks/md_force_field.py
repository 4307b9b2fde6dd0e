"""Sparse SO(3)-NTK force fields on GFN2-xTB MD trajectories: energies only vs energies + forces (not a test).

Data: the cached trajectories of ``data/md/make_md_trajectories.py`` (2,000 frames each,
``$MOLNTK_CACHE_DIR/md/<name>.extxyz``, eV and eV/Å), read with ``read_labelled(..., forces=True)``.
Split: the md task's (:func:`molntk.pipelines.md.run.split`): a seeded permutation of the
frames; the first ``--n-test`` frames are the test set, the training sets are the first N of
the remaining frames (nested, disjoint from the test set).

Models (the recipe's defaults: ``lift:3 erf pool dense``, σ_w = 2, σ_b = 1, feature maps of
H C N O F with 8 radial Gaussians on [0.5, 3] Å, L = 4, Lebedev grid of band limit 5, element
pairing), m inducing environments chosen by FPS from the training environments (all of them
when there are fewer):

- ``energy``: :class:`~molntk.models.so3_ntk.SO3NTKRegressor` (``inducing=m``): sparse kernel
  ridge on the energies, λ by LOO;
- ``energy+force``: :class:`~molntk.models.force_field.SO3ForceFieldRegressor` (``inducing=m``):
  the projected-process fit on energy and force rows, λ_E and λ_F by grouped LOO.

Both predict E(M) = E_dressed + offset + Σ_j w_j Θ(M, s_j) and F = −Σ_j w_j ∂Θ(M, s_j)/∂r,
evaluated for the test set in one pass (:func:`~molntk.molecular.force_rows.force_rows` with
``weights``; checked against each model's ``predict`` on a few frames). Reported per (molecule,
N, m, model): energy MAE (meV), force-component MAE (meV/Å), fit and predict seconds (wall,
one torch and one BLAS thread), and, per molecule, the cost of the rows per configuration
(energy rows alone and energy + force rows against the m inducing environments).

    OMP_NUM_THREADS=1 python benchmarks/md_force_field.py                    # ethanol, N = 100 250 1000, m = 1000
    OMP_NUM_THREADS=1 python benchmarks/md_force_field.py --molecules aspirin --n 100 --m 1000

Rows of the molecules run replace their rows in benchmarks/results/md_force_field.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from molntk.data.labelled import read_labelled
from molntk.data.md import md_cache_dir
from molntk.features.inducing import environments_as_molecules, inducing_environments
from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.models.forces import kernel_expansion
from molntk.models.so3_ntk import SO3NTKRegressor
from molntk.molecular.force_rows import force_rows
from molntk.pipelines.md.config import MDSplitConfig
from molntk.pipelines.md.run import split
from molntk.regression.dressed_atom import element_counts
from molntk.utils.files import atomic_write_json

RESULTS = Path(__file__).resolve().parent / "results" / "md_force_field.json"


def flat(forces) -> np.ndarray:
    return np.concatenate([np.asarray(f).reshape(-1) for f in forces])


def expansion(model) -> tuple[object, object, np.ndarray, float]:
    """(kernel, inducing environments, weights w, offset) of a fitted sparse model:
    E = E_dressed + offset + Σ_j w_j Θ(M, s_j)."""
    if isinstance(model, SO3ForceFieldRegressor):
        return model.kernel_, model.inducing_, model.inducing_weights_, 0.0
    kernel, reference = model._reference()
    fitted = kernel_expansion(kernel, reference, model.regressor_.fitted_arrays())
    return kernel, reference, fitted.coef.cpu().numpy(), fitted.offset


def predict(model, molecules) -> tuple[np.ndarray, np.ndarray, float]:
    """Energies (n,), flattened forces (3Σn,) and seconds, one weighted pass of force_rows."""
    start = time.perf_counter()
    kernel, reference, w, offset = expansion(model)
    rows = force_rows(kernel, molecules, reference, weights=w)
    base = model.dressed_atom_.predict(element_counts(molecules, model.elements)) if model.dressed_atom_ is not None else 0.0
    return base + offset + rows.energy[:, 0], -rows.gradient[:, 0], time.perf_counter() - start


def row_costs(molecules, train, m: int) -> dict:
    """Seconds per configuration of the energy rows and of the energy + force rows against m
    inducing environments (FPS from ``train``), over ``molecules``."""
    model = SO3ForceFieldRegressor(inducing=m)
    kernel = model.recipe().molecular_kernel()
    feats = kernel.describe(train)
    inducing = environments_as_molecules(feats, inducing_environments(feats, m))
    kernel(molecules[:2], inducing)
    force_rows(kernel, molecules[:2], inducing)
    start = time.perf_counter()
    kernel(molecules, inducing)
    energy = (time.perf_counter() - start) / len(molecules)
    start = time.perf_counter()
    force_rows(kernel, molecules, inducing)
    both = (time.perf_counter() - start) / len(molecules)
    return {"m": inducing.n_molecules, "energy_rows_s": energy, "energy_force_rows_s": both, "ratio": both / energy}


def run(name: str, sizes: list[int], m: int, n_test: int, seed: int, models: list[str]) -> list[dict]:
    data = read_labelled(md_cache_dir() / f"{name}.extxyz", "energy", forces=True)
    test_idx, pool = split(MDSplitConfig(n_train=[max(sizes)], n_test=n_test, seed=seed), len(data.molecules))
    energies = np.asarray(data.targets["energy"])
    test = [data.molecules[i] for i in test_idx]
    test_e, test_f = energies[test_idx], flat([data.forces[i] for i in test_idx])
    costs = row_costs(test[:50], [data.molecules[i] for i in pool[: max(sizes)]], m)
    print(f"{name}: rows per configuration against m = {costs['m']}: energy {1e3 * costs['energy_rows_s']:.1f} ms, "
          f"energy + force {1e3 * costs['energy_force_rows_s']:.1f} ms ({costs['ratio']:.1f}×)", flush=True)
    rows = []
    for n in sizes:
        idx = pool[:n]
        train = [data.molecules[i] for i in idx]
        for kind in models:
            start = time.perf_counter()
            if kind == "energy":
                model = SO3NTKRegressor(inducing=m, device="cpu").fit(train, energies[idx])
            else:
                model = SO3ForceFieldRegressor(inducing=m).fit(train, energies[idx], [data.forces[i] for i in idx])
            fit_s = time.perf_counter() - start
            pred_e, pred_f, predict_s = predict(model, test)
            check = model.predict(test[:3])
            assert np.allclose(check, pred_e[:3], rtol=1e-9, atol=1e-9), (check, pred_e[:3])
            row = {
                "molecule": name, "n_train": n, "m": int(expansion(model)[1].n_molecules), "model": kind,
                "energy_mae_meV": 1e3 * float(np.mean(np.abs(pred_e - test_e))),
                "force_mae_meV_per_A": 1e3 * float(np.mean(np.abs(pred_f - test_f))),
                "fit_s": fit_s, "predict_s": predict_s, "n_test": n_test,
            }
            if kind == "energy+force":
                row.update(reg_energy=model.reg_energy_, reg_force=model.reg_force_, rank=model.rank_)
            else:
                row.update(reg=model.regressor_.reg_, rank=model.regressor_.rank_)
            rows.append({**row, "row_costs": costs})
            print(f"{name:>13} N={n:>5} m={row['m']:>5} {kind:>12}: E MAE {row['energy_mae_meV']:7.1f} meV, "
                  f"F MAE {row['force_mae_meV_per_A']:7.1f} meV/Å, fit {fit_s:7.1f} s, predict {predict_s:6.1f} s", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", nargs="+", default=["ethanol"])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 250, 1000], help="training configurations")
    parser.add_argument("--m", type=int, default=1000, help="inducing environments")
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", nargs="+", default=["energy", "energy+force"], choices=["energy", "energy+force"])
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        rows = [row for name in args.molecules for row in run(name, args.n, args.m, args.n_test, args.seed, args.models)]
    out = Path(args.out)
    kept = [r for r in json.loads(out.read_text())["rows"] if r["molecule"] not in args.molecules] if out.exists() else []
    atomic_write_json(out, {"benchmark": "md_force_field", "date": datetime.date.today().isoformat(),
                            "torch_threads": 1, "rows": kept + rows})
    print(f"\n{'molecule':>13} {'N':>5} {'m':>5} {'model':>12} {'E MAE meV':>10} {'F MAE meV/Å':>12} {'fit s':>8} {'predict s':>10}")
    for r in kept + rows:
        print(f"{r['molecule']:>13} {r['n_train']:>5} {r['m']:>5} {r['model']:>12} {r['energy_mae_meV']:>10.1f} "
              f"{r['force_mae_meV_per_A']:>12.1f} {r['fit_s']:>8.1f} {r['predict_s']:>10.1f}")


if __name__ == "__main__":
    main()
