"""Does a head after the Haar pool give the SO(3) NTK the power spectrum's slope? (issue "accuracy at scale")

With overlapping neighbour elements the power spectrum ζ = 2 crosses the SO(3) NTK between
N = 2,000 and 5,000 on the m = 20,000 curve, and ζ = 1 falls far behind it
(docs/qm9-accuracy.md, "The curve with overlapping neighbour elements"): its square of a Haar
mean, (p̂·p̂')², is what makes it steep. A nonlinearity after the pool puts products of Haar
means into the NTK: σ(x) = x² after ``pool dense`` gives F = Σ_aa Σ_bb + 2 Σ_ab² of the
pooled kernel Σ. Exact kernels on the first ``--n`` training molecules of the scale config
(dressed-atom residual of U0), all on the width-growth maps with element width 2.18:

- the power spectrum ζ = 1 and ζ = 2;
- the SO(3) NTK ``lift:3 erf pool dense`` and ``lift:3 erf pool dense quadratic dense``
  (σ_w 2.853, σ_b 1: the feature sweep's matched σ_w for these maps);
- the same quadratic head on normalised pooled features, the NTK's counterpart of the power
  spectrum's p̂ = p/‖p‖: a layer norm on the pooled features themselves
  (``pool layernorm dense quadratic dense``: the head sees σ_w² ρ + σ_b², ρ the correlation
  of the pooled kernel) or after the head's dense layer (``pool dense layernorm quadratic
  dense``: the correlation of σ_w² K + σ_b²);
- with ``--sigma-b 0 --heads "lift:3 quadratic pool layernorm dense quadratic dense"``, the
  NTK closest to the power spectrum ζ = 2: its pooled kernel is (σ_w²/C)² (‖f‖²‖f'‖² + 2 p·p').

Scored by exact leave-one-out residuals (:func:`molntk.regression.selection.loo_residuals`,
one eigendecomposition per kernel) on the grid λ = 10^{-12, -11.5, …, -1} · mean diag K:
the lowest LOO MAE (the candidate search's absolute loss), the RMSE at that λ and the
lowest LOO RMSE.

    python benchmarks/qm9_heads.py --n 2000      # kernels ≈ 45 min on a 2-core CPU
    python benchmarks/qm9_heads.py --n 2000 --no-power-spectrum --heads "lift:3 erf pool dense"

Writes benchmarks/results/qm9_heads.json (records keyed by n and kernel).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import time
from pathlib import Path

import numpy as np
from benchmark_files import merge_records
from qm9_body_orders import selection_problem

from molntk.features.radial import radial_basis_from_dict
from molntk.molecular.baselines.power_spectrum import PowerSpectrumKernel
from molntk.pipelines.tasks import TASKS
from molntk.regression.selection import loo_residuals
from molntk.regression.spectral import eigensystem
from molntk.scale import torch_threads

RESULTS = Path(__file__).parent / "results" / "qm9_heads.json"
RADIAL = {"kind": "gaussian", "n": 16, "r_min": 0.7, "r_cut": 3.0, "width_growth": 1.5}
ELEMENT_WIDTH = 2.18
HEADS = ("lift:3 erf pool dense", "lift:3 erf pool dense quadratic dense",
         "lift:3 erf pool layernorm dense quadratic dense", "lift:3 erf pool dense layernorm quadratic dense")
RELATIVE_REGS = 10.0 ** np.arange(-12.0, -0.9, 0.5)


def loo_scores(K: np.ndarray, y: np.ndarray, psd_rtol: float) -> dict[str, float]:
    """Leave-one-out scores on the λ grid (module doc)."""
    eig = eigensystem(K, psd_rtol=psd_rtol)
    curve = []
    for rel in RELATIVE_REGS:
        residual = loo_residuals(eig, y, rel * eig.mean_diag)
        curve.append((rel, float(np.mean(np.abs(residual))), float(np.sqrt(np.mean(residual**2)))))
    best = min(curve, key=lambda t: t[1])
    return {"loo_mae": best[1], "reg_relative": best[0], "rmse_at_mae_reg": best[2],
            "loo_rmse": min(t[2] for t in curve), "reg_at_grid_edge": best[0] in (RELATIVE_REGS[0], RELATIVE_REGS[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/qm9_u0_scale.yaml")
    parser.add_argument("--n", type=int, default=2000, help="training molecules (the first n of the split)")
    parser.add_argument("--heads", nargs="*", default=list(HEADS), help="SO(3) NTK architectures (default: all of HEADS)")
    parser.add_argument("--sigma-w", type=float, default=2.853, help="σ_w of every weight layer (default 2.853)")
    parser.add_argument("--sigma-b", type=float, default=1.0, help="σ_b of every weight layer (default 1)")
    parser.add_argument("--smearing-width", type=float, default=None,
                        help="the smearing width of every kernel's maps (default: the config's features.smearing_width)")
    parser.add_argument("--r-cut", type=float, default=RADIAL["r_cut"], help=f"radial cutoff in Å (default {RADIAL['r_cut']})")
    parser.add_argument("--n-radial", type=int, default=RADIAL["n"], help=f"radial functions (default {RADIAL['n']})")
    parser.add_argument("--radial-scaling", type=float, nargs=2, default=None, metavar=("R0", "P"),
                        help="radial scaling u(r) = 1/(1 + (r/r₀)^p) of the neighbour density (default: none)")
    parser.add_argument("--power-spectrum", action=argparse.BooleanOptionalAction, default=True,
                        help="also the power spectrum ζ = 1, 2 (default: yes)")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()

    config = TASKS.load(args.config, [f"learning_curve.n_select={args.n}"])
    radial = {**RADIAL, "r_cut": args.r_cut, "n": args.n_radial}
    if args.radial_scaling is not None:
        radial.update(scaling_r0=args.radial_scaling[0], scaling_power=args.radial_scaling[1])
    template = config.models.so3_ntk.candidates[0]
    candidates = [type(template)(layers=layers, sigma_w=args.sigma_w, sigma_b=args.sigma_b, radial=radial, element_width=ELEMENT_WIDTH,
                                 smearing_width=args.smearing_width) for layers in args.heads]
    maps = dataclasses.replace(config.features.feature_config(), radial=radial_basis_from_dict(radial),
                               element_width=ELEMENT_WIDTH)
    if args.smearing_width is not None:  # the power spectrum on the same maps
        maps = dataclasses.replace(maps, smearing_width=args.smearing_width)
    so3 = config.models.so3_ntk.model_copy(update={"candidates": candidates})
    config = config.model_copy(update={"models": config.models.model_copy(update={"so3_ntk": so3})})
    records = []
    with torch_threads(config.kernel.threads):
        target, y, molecules, built = selection_problem(config)
        maps_label = "" if args.smearing_width is None else f", smearing {args.smearing_width:g} rad"
        if radial != RADIAL:
            maps_label += f", radial n={args.n_radial} r_cut={args.r_cut:g}"
            if args.radial_scaling is not None:
                maps_label += f" scaling r0={args.radial_scaling[0]:g} p={args.radial_scaling[1]:g}"
        jobs = [(f"power spectrum ζ={z}, element width 2.18{maps_label}",
                 lambda z=z: PowerSpectrumKernel(maps, z, pairing=config.kernel.pairing, reduce="sum")(molecules)["kernel"])
                for z in ((1, 2) if args.power_spectrum else ())]
        jobs += [(c.label, lambda c=c: c.kernel(molecules)[c.matrix]) for c in built]
        for name, kernel in jobs:
            start = time.perf_counter()
            K = kernel().cpu().numpy()
            seconds = time.perf_counter() - start
            records.append({"kernel": name, "n": args.n, "target": target, **loo_scores(K, y, config.regression.psd_rtol), "kernel_seconds": seconds,
                            "date": datetime.date.today().isoformat()})
            print(f"{name:60.60s} LOO MAE {records[-1]['loo_mae']:7.2f}  RMSE {records[-1]['rmse_at_mae_reg']:7.2f}  "
                  f"kernel {seconds:5.0f} s", flush=True)
    merge_records(args.json, records, lambda r: (r["n"], r["kernel"]))


if __name__ == "__main__":
    main()
