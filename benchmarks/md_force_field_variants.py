"""Variants of the sparse SO(3) NTK force field on one MD trajectory, one change at a time (not a test).

Training frames: the first N of the md task's training pool (``configs/md_<molecule>.yaml``'s
seeded split); scored on the frames pool[500:1000], which no variant trains on and which are
not test frames, and by each model's own grouped leave-one-configuration-out criterion on its
training frames (``cv_score_``). Records: K_mm directions kept, the criterion, energy and
force MAE (meV, meV/Å), fit and predict seconds.

    OMP_NUM_THREADS=1 python benchmarks/md_force_field_variants.py                        # ethanol, N = 250, every variant
    OMP_NUM_THREADS=1 python benchmarks/md_force_field_variants.py --variants default grid7

Each record is appended to ``--json`` (default benchmarks/results/md_force_field_variants.json)
as soon as it is measured, replacing the record of the same molecule, N and variant.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import numpy as np
import torch

from molntk.data.labelled import read_labelled
from molntk.data.md import md_cache_dir
from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.pipelines.md.config import MDSplitConfig
from molntk.pipelines.md.run import split
from molntk.utils.files import atomic_write_json, sha256_file

RESULTS = Path(__file__).resolve().parent / "results" / "md_force_field_variants.json"
#: The width-growth radial maps of the QM9 diagnosis (docs/qm9-accuracy.md, "What limits the curve").
GROWTH = {"kind": "gaussian", "n": 16, "r_min": 0.7, "r_cut": 3.0, "width_growth": 1.5}
#: Finer quadrature with the λ floor and rank cut it allows.
GRID7 = {"grid_band_limit": 7, "psd_rtol": 1e-12, "rank_rtol": 1e-13}
GRID9 = {"grid_band_limit": 9, "psd_rtol": 1e-13, "rank_rtol": 1e-14}
#: A 4 Å cutoff with the default Gaussians' spacing (0.36 Å): the whole of a small molecule in
#: most environments (sGDML's descriptor is global).
CUT4 = {"kind": "gaussian", "n": 11, "r_min": 0.5, "r_cut": 4.0}
#: Variant name → the estimator parameters it changes (on top of inducing = 1,000, unit eV).
VARIANTS: dict[str, dict] = {
    "default": {},
    "growth16": {"radial": GROWTH, "sigma_w": 2.85},
    "grid7": GRID7,
    "grid9": GRID9,
    "growth16_grid7": {"radial": GROWTH, "sigma_w": 2.85, **GRID7},
    "grid7_m2000": {**GRID7, "inducing": 2000},
    # Longer cutoffs, the Gaussians' spacing kept.
    "grid7_m2000_cut4": {**GRID7, "inducing": 2000, "radial": CUT4},
    "grid7_m2000_cut5": {**GRID7, "inducing": 2000,
                         "radial": {"kind": "gaussian", "n": 13, "r_min": 0.5, "r_cut": 5.0}},
    # The exact GDML-form model: the joint kernel of energies and forces of every training
    # frame (N(1 + 3n) functions), no inducing environments.
    "grid7_exact": {**GRID7, "inducing": None},
    "grid7_exact_cut4": {**GRID7, "inducing": None, "radial": CUT4},
    # The finer quadrature lowers the λ floor the exact model's noise search may reach.
    "grid9_exact_cut4": {**GRID9, "inducing": None, "radial": CUT4},
    # Overlapping neighbour elements (C and O two periodic-table steps apart), the width the
    # QM9 selection chose (docs/qm9-accuracy.md, "Body-order weights, feature maps and composition").
    "grid7_exact_cut4_elements": {**GRID7, "inducing": None, "radial": CUT4, "element_width": 2.18},
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecule", default="ethanol")
    parser.add_argument("--n-train", type=int, default=250)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.n_train > 500:
        parser.error("--n-train must be ≤ 500: the frames pool[500:1000] score the variants")
    frames = md_cache_dir() / f"{args.molecule}.extxyz"
    data = read_labelled(frames, ["energy"], forces=True)
    frames_sha256 = sha256_file(frames)
    _, pool = split(MDSplitConfig(n_train=[args.n_train], n_test=1000), len(data.molecules))
    energies = np.asarray(data.targets["energy"])
    train, held_out = pool[: args.n_train], pool[500:1000]
    true_forces = np.concatenate([data.forces[i].ravel() for i in held_out])
    for name in args.variants:
        params = {"inducing": 1000, "unit": "eV", **VARIANTS[name]}
        tic = time.perf_counter()
        model = SO3ForceFieldRegressor(**params).fit([data.molecules[i] for i in train], energies[train],
                                                     [data.forces[i] for i in train])
        fit_s = time.perf_counter() - tic
        tic = time.perf_counter()
        e, f = model.predict_forces([data.molecules[i] for i in held_out], return_energy=True)
        predict_s = time.perf_counter() - tic
        row = {"molecule": args.molecule, "n_train": args.n_train, "variant": name, "params": params,
               "m": model.n_inducing_ if model.sparse_ else None, "rank": int(model.rank_) if model.sparse_ else None,
               "cv_score": model.cv_score_,
               "reg_energy": model.reg_energy_, "reg_force": model.reg_force_,
               "reg_at_grid_edge": model.reg_at_grid_edge_,
               "energy_mae_meV": float(np.mean(np.abs(e - energies[held_out]))) * 1000,
               "force_mae_meV_per_A": float(np.mean(np.abs(np.concatenate([x.ravel() for x in f]) - true_forces))) * 1000,
               "fit_s": fit_s, "predict_s": predict_s, "n_scored": len(held_out), "frames_sha256": frames_sha256,
               "date": datetime.date.today().isoformat(), "torch_threads": torch.get_num_threads()}
        print(f"{name:<16} rank {row['rank'] or '-':>5}  LOO {row['cv_score']:.4f}  energy {row['energy_mae_meV']:6.2f} meV  "
              f"force {row['force_mae_meV_per_A']:6.2f} meV/Å  fit {fit_s:6.0f} s", flush=True)
        rows = json.loads(args.json.read_text())["rows"] if args.json.exists() else []
        rows = [r for r in rows if (r["molecule"], r["n_train"], r["variant"]) != (args.molecule, args.n_train, name)]
        atomic_write_json(args.json, {"benchmark": "md_force_field_variants", "rows": rows + [row]})


if __name__ == "__main__":
    main()
