"""Rotation equivariance of the trained SO(3) NTK force fields, measured (not a test).

The invariant energy model is exactly equivariant in exact arithmetic: F(R·r) = R·F(r) and
E(R·r) = E(r). In fast mode the SO(3) Haar integral is a quadrature, exact for band-limited
integrands only, so the kernel and with it every prediction is invariant to the quadrature's
accuracy, amplified by the fitted coefficients. This script measures it on the md configs'
models as they are fitted there (grid band limit 7; λ's by grouped LOO), on the config's test
frames: for ``--n-frames`` test frames and ``--n-rotations`` random rotations each,

    force error  = max_a |F(R·r)_a − R F(r)_a|   (meV/Å; and / max_a |F(r)_a|),
    energy error = |E(R·r) − E(r)|               (meV).

Models: ``models.so3_forces_exact`` at ``--n-exact`` training frames and ``models.so3_forces``
(sparse) at ``--n-sparse``, fitted, or loaded from ``--model-dir`` when saved there with the
same settings (``benchmarks/md_nve.py``'s files); ``--model-files`` adds force fields stored by
``molntk run`` (its ``fit_cache/*.molntk.npz``, e.g. a model on inducing frames), measured on
the test frames of the first of ``--molecules``.

    OMP_NUM_THREADS=1 python benchmarks/md_force_equivariance.py --molecules ethanol malonaldehyde

``--grid-band-limit`` and ``--psd-rtol`` change the models' quadrature and λ floor. Each row
replaces the row of the same molecule, model, N and parameters in ``--json`` as soon as it is
measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import numpy as np
import torch
from scipy.spatial.transform import Rotation

from md_nve import CONFIGS, force_field
from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.pipelines.md.run import split
from molntk.data.labelled import read_labelled
from molntk.data.md import md_cache_dir
from molntk.data.molecule import Molecule
from molntk.pipelines.tasks import TASKS
from molntk.utils.files import atomic_write_json

RESULTS = Path(__file__).resolve().parent / "results" / "md_force_equivariance.json"
#: Config key → (model name in the md records, the option giving its training size).
MODELS = {"so3_forces_exact": ("so3-ntk-forces-exact", "n_exact"), "so3_forces": ("so3-ntk-forces", "n_sparse")}


def rotation_errors(model, frames: list[Molecule], rotations: np.ndarray) -> dict:
    """Force and energy errors of the module docstring over every frame and rotation."""
    energies, forces = model.predict_forces(frames, return_energy=True)
    turned = [Molecule(m.numbers, m.positions @ r.T, id=m.id) for m in frames for r in rotations]
    turned_energies, turned_forces = model.predict_forces(turned, return_energy=True)
    force_abs, force_rel, energy_abs = [], [], []
    for k, (frame_forces, frame_energy) in enumerate(zip(forces, energies)):
        for j, rot in enumerate(rotations):
            i = k * len(rotations) + j
            gap = np.abs(turned_forces[i] - frame_forces @ rot.T).max()
            force_abs.append(gap)
            force_rel.append(gap / np.abs(frame_forces).max())
            energy_abs.append(abs(turned_energies[i] - frame_energy))
    return {"force_error_max_meV_per_A": 1e3 * float(np.max(force_abs)),
            "force_error_median_meV_per_A": 1e3 * float(np.median(force_abs)),
            "force_error_max_relative": float(np.max(force_rel)),
            "energy_error_max_meV": 1e3 * float(np.max(energy_abs)),
            "energy_error_median_meV": 1e3 * float(np.median(energy_abs))}


def test_errors(model, molecule: str, test: list[Molecule]) -> dict:
    """Energy and force-component MAE (meV, meV/Å) on the test frames (``test``: the frames of
    the config's split, in its order; their labels read from the cached trajectory by id)."""
    config = TASKS.load(CONFIGS / f"md_{molecule}.yaml")
    data = read_labelled(md_cache_dir() / f"{molecule}.extxyz", [config.data.energy_key], forces=True)
    index = {m.id: i for i, m in enumerate(data.molecules)}
    rows = [index[m.id] for m in test]
    energies, forces = model.predict_forces(test, return_energy=True)
    true_e = np.asarray(data.targets[config.data.energy_key])[rows]
    true_f = np.concatenate([np.ravel(data.forces[i]) for i in rows])
    return {"test_frames": len(test), "test_energy_mae_meV": 1e3 * float(np.mean(np.abs(energies - true_e))),
            "test_force_mae_meV_per_A": 1e3 * float(np.mean(np.abs(np.concatenate([np.ravel(f) for f in forces]) - true_f)))}


def stored_force_field(molecule: str, path: Path) -> tuple[SO3ForceFieldRegressor, list[Molecule], dict]:
    """The force field stored at ``path``, the test frames of ``configs/md_<molecule>.yaml``'s
    split (they do not depend on its training sizes) and the model's settings."""
    config = TASKS.load(CONFIGS / f"md_{molecule}.yaml")
    data = read_labelled(md_cache_dir() / f"{molecule}.extxyz", [config.data.energy_key], forces=True)
    test, _ = split(config.split, len(data.molecules))
    model = SO3ForceFieldRegressor.load(path)
    params = {key: value for key, value in model.get_params(deep=False).items() if key != "baseline"}
    return model, [data.molecules[i] for i in test], {"params": params, "fit_s": None, "file": str(path)}


def stored_name(model: SO3ForceFieldRegressor) -> str:
    """The md records' name of a stored force field's kind."""
    if getattr(model, "inducing_frame_rows_", None) is not None:
        return "so3-ntk-forces-frames"
    return "so3-ntk-forces" if model.sparse_ else "so3-ntk-forces-exact"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", nargs="+", default=["ethanol"])
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS),
                        help="config models fitted or loaded (none: only --model-files)")
    parser.add_argument("--n-exact", type=int, default=100)
    parser.add_argument("--n-sparse", type=int, default=1000)
    parser.add_argument("--n-frames", type=int, default=20)
    parser.add_argument("--n-rotations", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", type=Path, default=Path("runs/md_nve_models"))
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--grid-band-limit", type=int, default=None, help="another quadrature than the config's")
    parser.add_argument("--psd-rtol", type=float, default=None, help="another λ floor than the config's")
    parser.add_argument("--score-test", action="store_true", help="also the energy and force MAE on every test frame")
    parser.add_argument("--model-files", type=Path, nargs="+", default=[],
                        help="stored force fields of the first molecule (molntk run's fit_cache/*.molntk.npz) measured too")
    args = parser.parse_args(argv)
    changes = {key: value for key, value in (("grid_band_limit", args.grid_band_limit), ("psd_rtol", args.psd_rtol))
               if value is not None}
    rotations = Rotation.random(args.n_rotations, random_state=args.seed).as_matrix()
    out = json.loads(args.json.read_text()) if args.json.exists() else {"benchmark": "md_force_equivariance", "rows": []}
    jobs = [(molecule, key, None) for molecule in args.molecules for key in args.models]
    jobs += [(args.molecules[0], None, path) for path in args.model_files]
    for molecule, key, path in jobs:
        if path is None:
            name, size_option = MODELS[key]
            n_train = getattr(args, size_option)
            model, test, settings = force_field(molecule, n_train, args.model_dir, key=key, changes=changes)
        else:
            model, test, settings = stored_force_field(molecule, path)
            name, n_train = stored_name(model), len(model.train_molecules_)
        tic = time.perf_counter()
        row = {"molecule": molecule, "model": name, "n_train": n_train, "params": settings["params"],
               "fit_s": settings["fit_s"], "reg_energy": model.reg_energy_, "reg_force": model.reg_force_,
               "frames": args.n_frames, "rotations": args.n_rotations,
               **rotation_errors(model, test[: args.n_frames], rotations)}
        if args.score_test:
            row.update(test_errors(model, molecule, test))
        row["seconds"] = time.perf_counter() - tic
        same = lambda r: (r["molecule"], r["model"], r["n_train"], r["params"]) == (molecule, name, n_train, row["params"])  # noqa: E731
        out["rows"] = [r for r in out["rows"] if not same(r)]
        out["rows"].append(row)
        out["date"] = datetime.date.today().isoformat()
        out["torch_threads"] = torch.get_num_threads()
        atomic_write_json(args.json, out)
        print(f"{molecule} {name} N = {n_train}: force error max {row['force_error_max_meV_per_A']:.2e} meV/Å "
              f"({row['force_error_max_relative']:.1e} of max |F|), energy error max {row['energy_error_max_meV']:.2e} meV",
              flush=True)


if __name__ == "__main__":
    main()
