"""CUDA speed of the SO(3) NTK's two GPU settings (not a test; needs a CUDA device).

1. ``--part blocks``: the Triton kernel of the fused dual activation + mean
   (:mod:`molntk.kernels.pooled_activations_triton`) for block shapes (rows × columns ×
   warps) on P = 2¹⁹ pairs × 381 float64 values (erf, Θ = K; the Lebedev grid of band limit
   5 has 380 points + the identity), median of ``triton.testing.do_bench``; registers and
   spills of each compiled shape; its relative error against the torch dual + weighted
   sum; and the torch path's time. Writes ``pooled_dual_triton_blocks.json``.
2. ``--part tiles``: environment pairs per second of the sparse SO(3) NTK kernel
   Θ(molecule, inducing environment) (the default model: 8 Gaussians to 3 Å, smearing
   0.3, band limit 4, ``lift:3 erf pool dense`` σw = 2, σb = 1, Lebedev grid of band limit
   5, element pairing, float64) for the first ``--n`` training molecules of QM9's standard
   split against ``--m`` of their environments (FPS), for tile sizes
   (``TILE_ELEMENTS_CUDA``) and environment blocks, with the Triton kernel and with the
   torch path; each result against the first one. Writes ``so3_sparse_kernel_cuda_tiles.json``.

    python benchmarks/so3_cuda.py                            # both parts
    python benchmarks/so3_cuda.py --part tiles --n 4000 --m 2000 --molecules mols.npz

``--molecules``: molecules from an .npz (as ``benchmarks/scaling.py --export-molecules``
writes) instead of the QM9 package. Results go to ``benchmarks/results/`` (``--out``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results"
#: (rows, columns, warps) of the Triton kernel's blocks that part 1 times.
BLOCK_SHAPES = [(16, 64, 4), (32, 128, 4), (8, 64, 4), (16, 32, 4), (32, 64, 4), (64, 64, 8), (16, 128, 4),
                (8, 128, 4), (32, 32, 4), (4, 128, 4), (16, 64, 2), (32, 64, 8), (64, 32, 4), (128, 32, 8)]
#: (Triton kernel, tile values, environments per kernel-call side) that part 2 times.
TILE_SETTINGS = [(True, 2**21, 2048), (True, 2**23, 2048), (True, 2**25, 2048), (True, 2**26, 8192),
                 (True, 2**27, 8192), (False, 2**23, 2048), (False, 2**25, 8192)]


def block_shapes() -> dict:
    """Part 1 (module docstring)."""
    import triton

    import molntk.kernels.pooled_activations_triton as kernel
    from molntk.kernels.activations import get_activation

    pairs, values = 2**19, 381
    g = torch.Generator(device="cuda").manual_seed(0)
    va = torch.rand(pairs, device="cuda", dtype=torch.float64, generator=g) * 3 + 0.1
    vb = torch.rand(pairs, device="cuda", dtype=torch.float64, generator=g) * 3 + 0.1
    k = (torch.rand(pairs, values, device="cuda", dtype=torch.float64, generator=g) * 2 - 1) * (va * vb).sqrt()[:, None]
    w = torch.rand(values, device="cuda", dtype=torch.float64, generator=g)
    w /= w.sum()
    f_terms, fdot = get_activation("erf").dual(k, va[:, None], vb[:, None])
    ref_f, ref_t = f_terms @ w, (fdot * k) @ w
    constants = torch.tensor(kernel.CONSTANTS, dtype=torch.float64, device="cuda")
    out_f, out_t = torch.empty(pairs, dtype=torch.float64, device="cuda"), torch.empty(pairs, dtype=torch.float64, device="cuda")
    defaults, rows = (kernel.BLOCK_ROWS, kernel.BLOCK_COLS, kernel.NUM_WARPS), []
    try:
        for block_rows, block_cols, warps in BLOCK_SHAPES:
            kernel.BLOCK_ROWS, kernel.BLOCK_COLS, kernel.NUM_WARPS = block_rows, block_cols, warps
            f, t = kernel.pooled_dual_triton("erf", k, None, va, vb, w)
            error = float(max((f - ref_f).abs().max() / ref_f.abs().max(), (t - ref_t).abs().max() / ref_t.abs().max()))
            ms = triton.testing.do_bench(lambda: kernel.pooled_dual_triton("erf", k, None, va, vb, w), warmup=50, rep=300, return_mode="median")
            compiled = kernel._pooled_dual_kernel[(triton.cdiv(pairs, block_rows),)](
                k, k, va, vb, w, constants, out_f, out_t, pairs,
                N_COLS=values, ACT=0, SAME=True, BLOCK_R=block_rows, BLOCK_C=block_cols, num_warps=warps,
            )
            row = dict(block_rows=block_rows, block_cols=block_cols, warps=warps, ms=ms, values_per_s=pairs * values / ms * 1e3,
                       gb_per_s=pairs * values * 8 / ms / 1e6, regs=compiled.n_regs, spills=compiled.n_spills, rel_err=error)
            rows.append(row)
            print(f"{block_rows:4} × {block_cols:4} × {warps} warps  {ms:7.3f} ms  {row['values_per_s']:.3e} values/s  "
                  f"{row['gb_per_s']:7.1f} GB/s  regs {row['regs']} spills {row['spills']}  error {error:.1e}", flush=True)
    finally:
        kernel.BLOCK_ROWS, kernel.BLOCK_COLS, kernel.NUM_WARPS = defaults
    torch_ms = triton.testing.do_bench(
        lambda: (lambda d: (d[0] @ w, (d[1] * k) @ w))(get_activation("erf").dual(k, va[:, None], vb[:, None])),
        warmup=20, rep=200, return_mode="median")
    best = min(rows, key=lambda r: r["ms"])
    print(f"torch path {torch_ms:.3f} ms; fastest block {best['block_rows']} × {best['block_cols']} × {best['warps']}: "
          f"{best['ms']:.3f} ms ({torch_ms / best['ms']:.1f}×)")
    return {"rows": rows, "best": best, "torch_ms": torch_ms}


def tiles(n: int, m: int, molecules: str | None) -> list[dict]:
    """Part 2 (module docstring)."""
    import molntk.kernels.pooled_activations as pooled
    import molntk.kernels.so3.network as network
    from molntk.features.environments import environment_features
    from molntk.features.inducing import environments_as_molecules, inducing_environments
    from scaling import build, load_molecules

    train, _ = load_molecules(n, 0, molecules)
    kernel = build("main", "cuda")
    feats = environment_features(train, kernel.features, device="cuda")
    inducing = environments_as_molecules(feats, inducing_environments(feats, m, method="fps"))
    z1, z2 = feats.centre_numbers.cpu(), inducing.centre_numbers.cpu()
    pairs = sum(int((z1 == z).sum()) * int((z2 == z).sum()) for z in z1.unique())
    triton_available, tile_default, rows, reference = pooled.triton_available, network.TILE_ELEMENTS_CUDA, [], None
    try:
        for fused, tile, env_block in TILE_SETTINGS:
            network.TILE_ELEMENTS_CUDA = tile
            pooled.triton_available = triton_available if fused else (lambda: False)
            kernel.block_size = env_block
            if reference is None:
                kernel(feats, inducing)  # warm-up: Triton compilation, cuBLAS handles
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            ntk = kernel(feats, inducing).ntk
            torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            ntk = ntk.cpu()
            reference = ntk if reference is None else reference
            row = dict(triton=fused, tile_values=tile, env_block=env_block, seconds=seconds, pairs=pairs, pairs_per_s=pairs / seconds,
                       gpu_peak_mb=torch.cuda.max_memory_allocated() / 2**20,
                       rel_diff=float((ntk - reference).abs().max() / reference.abs().max()))
            rows.append(row)
            print(f"triton {fused!s:5}  tile 2^{tile.bit_length() - 1}  env block {env_block:5}  {seconds:7.3f} s  "
                  f"{row['pairs_per_s']:.3e} pairs/s  GPU peak {row['gpu_peak_mb']:6.0f} MB  vs first {row['rel_diff']:.1e}", flush=True)
    finally:
        pooled.triton_available, network.TILE_ELEMENTS_CUDA = triton_available, tile_default
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["blocks", "tiles", "both"], default="both")
    parser.add_argument("--n", type=int, default=4000, help="molecules (part tiles)")
    parser.add_argument("--m", type=int, default=2000, help="inducing environments (part tiles)")
    parser.add_argument("--molecules", help="molecules .npz instead of the QM9 package")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/so3_cuda.py needs a CUDA device")
    stamp = {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(), "torch": torch.__version__}
    args.out.mkdir(parents=True, exist_ok=True)
    if args.part in ("blocks", "both"):
        result = {**stamp, **block_shapes()}
        (args.out / "pooled_dual_triton_blocks.json").write_text(json.dumps(result, indent=1) + "\n")
    if args.part in ("tiles", "both"):
        result = {**stamp, "n_molecules": args.n, "n_inducing": args.m, "rows": tiles(args.n, args.m, args.molecules)}
        (args.out / "so3_sparse_kernel_cuda_tiles.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
