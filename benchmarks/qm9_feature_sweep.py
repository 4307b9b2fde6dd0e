"""Which feature maps does the SO(3) NTK need on QM9 at N = 1,000? (issue "accuracy at scale", diagnosis (b))

One feature setting (or the lift's band limit) of the scale config's chosen SO(3) NTK
candidate (``--candidate``: by default `lift:3 erf pool dense`, 16 width-growth Gaussians
from 0.7 to 3 Å, angular smearing 0.3 rad) changed at a time, in sweeps:

- ``radial``: n Gaussians with widths growing like e^{r/ℓ}, (n, ℓ) from (12, 1.5 Å) to (32, 1.5 Å);
- ``cutoff``: r_cut 2, 2.5, 3.5 and 4 Å, the Gaussians' growth step kept (n from the step);
- ``smearing``: angular smearing σ = 0, 0.15 and 0.5 rad;
- ``lift``: the lift's band limit l < 4 (the Wigner kernel's λ_max = 3), with the reference's
  smearing and without; its degree-3 terms need a finer grid than the scale config's
  (``--set kernel.grid_band_limit=7``, which the reference row then uses too);
- ``depth``: a group convolution of band limit 3 and a second erf between the lift and
  the pool (``lift:3 erf conv:3 erf pool dense``);
- ``head``: an invariant MLP on the pooled features, ``pool dense quadratic dense`` and
  ``pool dense erf dense`` (products of two Haar means, as the power spectrum's ζ = 2: its
  (p·p')² is the square of the body-order-3 Haar mean);
- ``elements``: neighbour elements overlapping (``element_width`` w = 0.85, 1.5, 2.18 and
  3.12 periodic-table steps: C–N overlap κ = e^{−1/(2w²)} ≈ 0.5, 0.8, 0.9, 0.95;
  :mod:`molntk.features.elements`).

Every changed candidate has σ_w *matched*: rescaled to keep the lift's input-dependent
pre-activation variance σ_w² · mean ‖f‖²_{l<L} / C (L the lift's band limit) of the main
job's model, ``qm9_diagnosis.py``'s ``preactivation_scale`` on every 500th of QM9's first
100,000 molecules (otherwise a feature change would also change how nonlinear the erf is,
i.e. the body-order weights); the reference row keeps the config's σ_w. Each kernel is the exact molecular kernel on the config's
selection molecules (its first ``n_select`` training molecules, dressed-atom residual of
its first target), scored as the config's candidate search scores it:

- ``loo``: leave-one-out MAE of the config's kernel ridge (λ by its CV and loss);
- ``held_out``: λ by the same CV on the first 70 %, MAE on the other 30 %.

``--element-width w``: every row, the reference included, on maps whose neighbour elements
overlap by w (the reference's σ_w then matched too): the sweeps around the overlapping maps.

Kernel matrices are cached under ``--cache`` (keyed by the config's name, a hash of the
``--set`` overrides and the candidate's parameters).

    python benchmarks/qm9_feature_sweep.py --sweeps radial cutoff smearing
    python benchmarks/qm9_feature_sweep.py --sweeps lift --set kernel.grid_band_limit=7
    python benchmarks/qm9_feature_sweep.py --sweeps elements
    python benchmarks/qm9_feature_sweep.py --sweeps cutoff --element-width 2.18

Prints a table and merges its records into benchmarks/results/qm9_feature_sweep.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from benchmark_files import cached, merge_records
from qm9_body_orders import held_out_mae, loo_mae, overrides_tag, selection_problem
from qm9_diagnosis import BASE, preactivation_scale

from molntk.data.qm9 import load_qm9
from molntk.features.radial import radial_basis_from_dict
from molntk.pipelines.tasks import TASKS
from molntk.scale import torch_threads

RESULTS = Path(__file__).parent / "results" / "qm9_feature_sweep.json"
#: QM9 molecules (every 500th of the first 100,000) on which σ_w is matched.
MATCH_MOLECULES = range(0, 100_000, 500)


def sweep_changes(sweep: str, radial: dict[str, Any]) -> list[dict[str, Any]]:
    """The feature changes of ``sweep`` from the reference candidate's ``radial`` basis (each a
    dict of SO(3) candidate fields: ``radial`` and/or ``smearing_width``)."""
    if sweep == "radial":
        return [{"radial": {**radial, "n": n, "width_growth": ell}}
                for n, ell in [(12, 1.5), (16, 1.0), (16, 2.0), (24, 1.5), (32, 1.5)]]
    if sweep == "cutoff":
        step = radial_basis_from_dict(radial).growth_step
        out = []
        for r_cut in (2.0, 2.5, 3.5, 4.0):
            t = -np.expm1(-(r_cut - radial["r_min"]) / radial["width_growth"])
            out.append({"radial": {**radial, "r_cut": r_cut, "n": int(round(t / step)) + 1}})
        return out
    if sweep == "smearing":
        return [{"smearing_width": sigma} for sigma in (0.0, 0.15, 0.5)]
    if sweep == "lift":
        return [{"layers": "lift:4 erf pool dense"}, {"layers": "lift:4 erf pool dense", "smearing_width": 0.0}]
    if sweep == "depth":
        return [{"layers": "lift:3 erf conv:3 erf pool dense"}]
    if sweep == "head":
        return [{"layers": f"lift:3 erf pool dense {activation} dense"} for activation in ("quadratic", "erf")]
    if sweep == "elements":
        return [{"element_width": w} for w in (0.85, 1.5, 2.18, 3.12)]
    raise ValueError(f"unknown sweep {sweep!r}; choose one of {SWEEPS}")


SWEEPS = ("radial", "cutoff", "smearing", "lift", "depth", "head", "elements")


def matched_sigma_w(change: dict[str, Any], smearing_width: float, molecules: list, base_scale: float) -> float:
    """σ_w of the changed feature maps (and lift) with the default model's pre-activation variance
    (3 decimals); ``base_scale``: the default model's :func:`preactivation_scale` on ``molecules``."""
    features = dataclasses.replace(BASE.features, radial=radial_basis_from_dict(change["radial"]),
                                   smearing_width=change.get("smearing_width", smearing_width),
                                   element_width=change.get("element_width"))
    changed = dataclasses.replace(BASE, features=features, layers=change.get("layers", BASE.layers))
    ratio = base_scale / preactivation_scale(changed, molecules)
    return round(BASE.sigma_w * ratio**0.5, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/qm9_u0_scale.yaml")
    parser.add_argument("--candidate", type=int, default=1, help="index of the config's SO(3) NTK candidate")
    parser.add_argument("--sweeps", nargs="+", default=["radial", "cutoff", "smearing"], choices=SWEEPS)
    parser.add_argument("--element-width", type=float, default=None,
                        help="neighbour elements overlapping by w in every row, the reference included")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override key=value")
    parser.add_argument("--cache", type=Path, default=Path("results/qm9_feature_sweep_kernels"))
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()

    config = TASKS.load(args.config, args.overrides)
    reference = config.models.so3_ntk.candidates[args.candidate]
    smearing_width = reference.smearing_width if reference.smearing_width is not None else config.features.smearing_width
    match_molecules = load_qm9().molecules(MATCH_MOLECULES)
    base_scale = preactivation_scale(BASE, match_molecules)
    rows: list[tuple[str, dict[str, Any]]] = [("reference", reference.model_dump())]
    base_change = {"radial": reference.radial}
    if args.element_width is not None:
        base_change["element_width"] = args.element_width
        rows = [("reference", {**reference.model_dump(), **base_change,
                               "sigma_w": matched_sigma_w(base_change, smearing_width, match_molecules, base_scale)})]
    for sweep in args.sweeps:
        for change in sweep_changes(sweep, reference.radial):
            change = {**base_change, **change}
            params = {**reference.model_dump(), **change, "sigma_w": matched_sigma_w(change, smearing_width, match_molecules, base_scale)}
            rows.append((sweep, params))
    candidates = config.models.so3_ntk.model_copy(update={"candidates": [type(reference)(**p) for _, p in rows]})
    config = config.model_copy(update={"models": config.models.model_copy(update={"so3_ntk": candidates})})

    records = []
    with torch_threads(config.kernel.threads):
        target, y, molecules, built = selection_problem(config)
        n = len(y)
        for (sweep, params), candidate in zip(rows, built, strict=True):
            key = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
            K, seconds = cached(args.cache / f"{Path(args.config).stem}-{overrides_tag(args.overrides)}-{key}.npy",
                                lambda c=candidate: c.kernel(molecules)[c.matrix].cpu().numpy())
            records.append({"config": args.config, "overrides": args.overrides, "sweep": sweep, "candidate": candidate.label,
                            "params": params, "target": target, "n": n, "loo": loo_mae(K, y, config),
                            "held_out": held_out_mae(K, y, config), "kernel_seconds": seconds,
                            "date": datetime.date.today().isoformat()})
    print(f"{'sweep':9s} {'σ_w':>6s} {'LOO MAE':>8s} {'held-out':>8s}  candidate (meV; {n} selection molecules, {target})")
    for row in records:
        print(f"{row['sweep']:9s} {row['params']['sigma_w']:6.3f} {row['loo']:8.2f} {row['held_out']:8.2f}  {row['candidate']}")
    merge_records(args.json, records, lambda r: (r["config"], tuple(r.get("overrides", ())), r["candidate"]))


if __name__ == "__main__":
    main()
