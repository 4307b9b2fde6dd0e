"""Do the activation's body-order weights limit the SO(3) NTK on QM9? (issue "accuracy at scale", diagnosis (c))

After the lift, a pointwise activation and the Haar pool weight the body orders of the
pooled kernel. With the lift kernel of atoms a, b (σ_w = 1, σ_b = 0)

    k_ab(u) = 1/C · Σ_{l<L} ⟨M^l_ab, D^l(u)⟩,   ρ_ab(u) = k_ab(u) / √(k_aa(e) k_bb(e)),

an activation's NNGP on unit-variance inputs is Σ_ν a_ν² ρ^ν (its Hermite expansion), so every
such network kernel (σ_b = 0, normalised environments) is a non-negative sum of the (ν + 1)-body kernels

    K_ν^cos(M, M') = Σ_{a∈M, b∈M', Z_a = Z_b} ∫ ρ_ab(u)^ν du,   K_ν^raw: the same with k_ab(u)^ν

(ν = 0: Σ_Z n_Z n'_Z, the composition kernel). This script computes both families up to
ν_max on the selection molecules of a ``qm9-property`` config (its first ``n_select``
training molecules, the dressed-atom residual of its first target), as the pair sum of the
lift's values on a Lebedev grid of band limit B (exact for ν (L − 1) ≤ 2B − 2), and chooses
non-negative weights c_ν (Powell on log c_ν) and λ by the leave-one-out MAE of the config's
kernel ridge, as its candidate search scores a candidate. Beside them,
the config's SO(3) NTK candidate ``--candidate`` under the same protocol:

- ``loo``: leave-one-out MAE on all selection molecules (weights chosen on the same LOO);
- ``held_out``: weights and λ by LOO on the first 70 %, MAE on the other 30 %.

Kernel matrices are cached under ``--cache`` (keyed by the config's name, a hash of the
``--set`` overrides, the candidate, L, B and ν_max: delete the folder after editing the config).

    python benchmarks/qm9_body_orders.py --config configs/qm9_u0_scale.yaml --candidate 1 \\
        --lifts 3:6:5 4:7:4 --cache results/qm9_body_order_kernels

Prints a table and merges its records into benchmarks/results/qm9_body_orders.json.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from benchmark_files import cached, merge_records
from scipy.optimize import minimize

from molntk.kernels.so3.context import Discretisation
from molntk.kernels.so3.grids import SO3Grid
from molntk.kernels.so3.lift import Lift
from molntk.molecular import MoleculeSet
from molntk.molecular.pair_sum import pair_sum
from molntk.pipelines.qm9.candidates import Candidate, build_candidates, dtype_and_device
from molntk.pipelines.qm9.config import QM9PropertyConfig
from molntk.pipelines.qm9.evaluate import residual_targets
from molntk.pipelines.qm9.exact import fit_kernel_ridge
from molntk.pipelines.qm9.run import target_settings
from molntk.pipelines.qm9.sets import load_sets
from molntk.pipelines.tasks import TASKS
from molntk.scale import torch_threads

RESULTS = Path(__file__).parent / "results" / "qm9_body_orders.json"
#: Fraction of the selection molecules that chooses weights and λ in the held-out check.
FIT_FRACTION = 0.7


def body_order_kernels(molecules: MoleculeSet, candidate: Candidate, band_limit: int, grid_band_limit: int,
                       nu_max: int) -> np.ndarray:
    """[K_0, K_1^cos, K_1^raw, …, K_νmax^cos, K_νmax^raw] (1 + 2 ν_max, n, n) on the
    candidate's feature maps (module docstring), element pairing."""
    kernel = candidate.kernel
    features = kernel.describe(molecules)
    x = features.coeffs.to(kernel.ctx.dtype)
    lift = Lift(band_limit, 1.0, 0.0)
    ctx = Discretisation(SO3Grid(grid_band_limit, "lebedev"), band_limit, "fast", x.dtype, x.device)
    weights = ctx.measure.mean_weights(x.dtype, x.device)[:-1]
    variance = x[..., : band_limit**2].square().sum(dim=(1, 2)) / x.shape[1]  # k_aa(e) = ‖f_a‖²_{l<L} / C

    def block(i1: torch.Tensor, i2: torch.Tensor, diagonal: bool) -> list[torch.Tensor]:
        values = lift.cross(x[i1], x[i2], ctx)[..., :-1]  # k_ab(u_k), identity dropped
        scale = torch.sqrt(variance[i1][:, None] * variance[i2][None, :])
        rho = values.div_(scale.clamp_min(torch.finfo(x.dtype).tiny)[..., None])  # ρ = 0 beside an empty environment
        outputs = [torch.ones_like(scale)]
        power = torch.ones_like(rho)
        for nu in range(1, nu_max + 1):
            mean = power.mul_(rho) @ weights
            outputs += [mean, mean * scale**nu]
        return outputs

    sums = pair_sum(block, features, None, n_outputs=1 + 2 * nu_max, mirror=ctx.symmetric, pairing="element",
                    block_size=kernel.block_size, dtype=x.dtype, device=x.device)
    return torch.stack(sums).cpu().numpy()


def overrides_tag(overrides: list[str]) -> str:
    """A short hash of the ``--set`` overrides ("as-is" without any), for cache keys."""
    return hashlib.sha1(" ".join(overrides).encode()).hexdigest()[:8] if overrides else "as-is"


def selection_problem(config: QM9PropertyConfig) -> tuple[str, np.ndarray, MoleculeSet, list[Candidate]]:
    """The config's candidate-search problem: its first target, the dressed-atom residual y of
    its first ``n_select`` training molecules, those molecules, and its SO(3) NTK candidates."""
    dtype, device = dtype_and_device(config)
    sets = load_sets(config, "qm9pack", dtype, device)
    n = config.learning_curve.n_select
    target = config.targets[0]
    reduce, residual = target_settings(config, target)
    y = residual_targets(sets, target, residual, n)
    molecules = MoleculeSet(sets.train_molecules[:n], dtype, device)
    return target, y, molecules, build_candidates(config, reduce, sets.train_molecules[:n], sets.composition)["so3-ntk"]


def names(nu_max: int) -> list[str]:
    """Labels of :func:`body_order_kernels`' outputs: K0, cos1, raw1, …"""
    return ["K0"] + [f"{family}{nu}" for nu in range(1, nu_max + 1) for family in ("cos", "raw")]


def loo_mae(K: np.ndarray, y: np.ndarray, config: QM9PropertyConfig) -> float:
    """Leave-one-out MAE of the config's kernel ridge on K: its candidate search's score
    (:func:`~molntk.pipelines.qm9.exact.fit_kernel_ridge`, λ by the config's CV)."""
    model = fit_kernel_ridge(K, y, config, quadrature=True)
    return model.cv_result_.best_error * float(np.mean(model.target_scale_))


def weighted(stack: np.ndarray, log_weights: np.ndarray) -> np.ndarray:
    """Σ_ν c_ν K_ν with c_ν = exp(log_weights[ν])."""
    return np.tensordot(np.exp(log_weights), stack, axes=1)


def fit_weights(stack: np.ndarray, y: np.ndarray, config: QM9PropertyConfig, start: np.ndarray | None = None) -> np.ndarray:
    """log c_ν minimising the LOO MAE of Σ_ν c_ν K_ν (Powell from equal weights and from
    weights falling like e^{-ν}, or from ``start``)."""
    loss = lambda log_c: loo_mae(weighted(stack, log_c), y, config)
    starts = [start] if start is not None else [np.zeros(len(stack)), -np.arange(len(stack), dtype=float)]
    best = min((minimize(loss, s, method="Powell", options={"maxfev": 400, "xtol": 0.05, "ftol": 1e-3}) for s in starts),
               key=lambda r: r.fun)
    return best.x


def held_out_mae(K: np.ndarray, y: np.ndarray, config: QM9PropertyConfig) -> float:
    """MAE on the last 30 % of the config's kernel ridge fitted (λ by its CV) on the first 70 %."""
    fit = np.arange(int(FIT_FRACTION * len(y)))
    rest = np.arange(len(fit), len(y))
    model = fit_kernel_ridge(K[np.ix_(fit, fit)], y[fit], config, quadrature=True)
    return float(np.mean(np.abs(model.predict(K[np.ix_(rest, fit)]) - y[rest])))


def score(name: str, stack: np.ndarray, y: np.ndarray, config: QM9PropertyConfig) -> dict[str, Any]:
    """The CV-weighted sum of ``stack``: weights on all molecules (LOO) and on the first 70 %
    (held-out check); a single kernel is scored as it is."""
    if len(stack) == 1:
        return {"kernel": name, "loo": loo_mae(stack[0], y, config), "held_out": held_out_mae(stack[0], y, config)}
    fit = np.arange(int(FIT_FRACTION * len(y)))
    log_c_fit = fit_weights(stack[:, fit][:, :, fit], y[fit], config)
    log_c = fit_weights(stack, y, config, start=log_c_fit)
    return {"kernel": name, "loo": loo_mae(weighted(stack, log_c), y, config),
            "held_out": held_out_mae(weighted(stack, log_c_fit), y, config),
            "weights": (np.exp(log_c) / np.exp(log_c).sum()).tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/qm9_u0_scale.yaml")
    parser.add_argument("--candidate", type=int, default=1, help="index of the config's SO(3) NTK candidate")
    parser.add_argument("--lifts", nargs="+", default=["3:6:5", "4:7:4"], help="L:B:nu_max (lift band limit, grid, order)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override key=value")
    parser.add_argument("--cache", type=Path, default=Path("results/qm9_body_order_kernels"))
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()

    config = TASKS.load(args.config, args.overrides)
    tag = f"{Path(args.config).stem}-{overrides_tag(args.overrides)}-c{args.candidate}"
    with torch_threads(config.kernel.threads):
        target, y, molecules, candidates = selection_problem(config)
        candidate = candidates[args.candidate]
        n = len(y)
        reference, seconds = cached(args.cache / f"{tag}-ntk.npy",
                                    lambda: candidate.kernel(molecules)[candidate.matrix].cpu().numpy())
        rows = [{**score("candidate NTK", reference[None], y, config), "kernel_seconds": seconds}]
        for spec in args.lifts:
            band_limit, grid_band_limit, nu_max = (int(v) for v in spec.split(":"))
            stack, seconds = cached(args.cache / f"{tag}-L{band_limit}-B{grid_band_limit}-nu{nu_max}.npy",
                                    lambda: body_order_kernels(molecules, candidate, band_limit, grid_band_limit, nu_max))
            stack = stack / np.einsum("kii->k", stack)[:, None, None] * n  # unit mean diagonal each
            labels = names(nu_max)
            for i, label in enumerate(labels):
                rows.append({**score(label, stack[i:i + 1], y, config), "lift": band_limit})
            for family in ("cos", "raw"):
                members = [0] + [i for i, label in enumerate(labels) if label.startswith(family)]
                rows.append({**score(f"Σ c_ν K_ν^{family}, ν ≤ {nu_max}", stack[members], y, config),
                             "lift": band_limit, "grid_band_limit": grid_band_limit, "kernel_seconds": seconds,
                             "members": [labels[i] for i in members]})
    date = datetime.date.today().isoformat()
    records = [{"config": args.config, "overrides": args.overrides, "candidate": candidate.label, "target": target, "n": n, "date": date, **row}
               for row in rows]
    print(f"{'kernel':34s} {'lift':>4s} {'LOO MAE':>8s} {'held-out':>8s}  weights c_ν / Σ c (meV; {n} selection molecules, {target})")
    for row in records:
        weights = " ".join(f"{w:.1e}" for w in row.get("weights", []))
        print(f"{row['kernel']:34s} {row.get('lift', '') or '':>4} {row['loo']:8.2f} {row['held_out']:8.2f}  {weights}")
    merge_records(args.json, records, lambda r: (r["config"], tuple(r.get("overrides", ())), r["candidate"], r["kernel"],
                                                 r.get("lift")))


if __name__ == "__main__":
    main()
