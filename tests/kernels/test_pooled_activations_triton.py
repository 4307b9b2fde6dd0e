"""The Triton kernel of the fused activation-then-mean against torch and the CPU loop.

On machines without a GPU the kernel runs in Triton's interpreter (``TRITON_INTERPRET=1``,
in a subprocess, since the variable is read when the kernel is defined): the same kernel
source, its arithmetic evaluated elementwise by numpy in float64, so the comparison checks
the formulas, the float64 constants, masking of partial row and column blocks and the
per-row sums. On CUDA the compiled kernel is compared the same way (and with the CPU
results). Tolerance: as in tests/kernels/test_pooled_activations.py, the same formulas in float64
differ from the torch path by at most c · K · ε · Σ_k |w_k t_k| per pair (c = 4).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton", reason="Triton is not installed (it comes with torch's CUDA builds; dev installs add it)")

EPS = float(np.finfo(np.float64).eps)

#: Runs in a subprocess with TRITON_INTERPRET=1 (CPU tensors) or on CUDA, and prints, per
#: case, the largest ratio |kernel − reference| / bound (≤ 1 passes) and bit-equality checks.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np, torch
    from molntk.kernels.activations import get_activation
    from molntk.kernels.pooled_activations import pooled_dual
    from molntk.kernels.pooled_activations_triton import BLOCK_ROWS, pooled_dual_triton

    device = sys.argv[1]
    EPS = float(np.finfo(np.float64).eps)

    def inputs(n1, n2, k, seed, zero_variance):
        g = torch.Generator().manual_seed(seed)
        v1 = torch.rand(n1, 1, 1, generator=g, dtype=torch.float64) * 3 + 0.1
        v2 = torch.rand(1, n2, 1, generator=g, dtype=torch.float64) * 3 + 0.1
        if zero_variance:
            v1[0] = 0.0
        nngp = (torch.rand(n1, n2, k, generator=g, dtype=torch.float64) * 2 - 1) * (v1 * v2).sqrt()
        theta = nngp * 1.7 + torch.rand(n1, n2, k, generator=g, dtype=torch.float64)
        w = torch.rand(k, generator=g, dtype=torch.float64)
        return nngp, theta, v1, v2, w / w.sum()

    def ratio(out, terms, w):
        ref = terms @ w
        bound = 4 * terms.shape[-1] * EPS * (terms.abs() @ w.abs()) + 1e-300
        return float(((out.cpu().double() - ref.reshape(out.shape)).abs() / bound.reshape(out.shape)).max())

    result = {}
    # 5 × 9 = 45 rows (one full block of 32 and a partial one), K = 381 = 2 · 128 + 125.
    for activation in ("erf", "relu"):
        for tangent in ("same", "separate"):
            nngp, theta, v1, v2, w = inputs(5, 9, 381, seed=len(result), zero_variance=activation == "relu")
            ntk = nngp if tangent == "same" else theta
            f_terms, fdot = get_activation(activation).dual(nngp, v1, v2)
            t_terms = fdot * ntk
            k = nngp.reshape(-1, 381).contiguous().to(device)
            th = None if tangent == "same" else theta.reshape(-1, 381).contiguous().to(device)
            va = v1.expand(5, 9, 1).reshape(-1).contiguous().to(device)
            vb = v2.expand(5, 9, 1).reshape(-1).contiguous().to(device)
            f, t = pooled_dual_triton(activation, k, th, va, vb, w.to(device))
            result[f"{activation}-{tangent}"] = [ratio(f, f_terms, w), ratio(t, t_terms, w)]
            if device == "cuda":  # the dispatching entry point, against the CPU loop
                fc, tc = pooled_dual(activation, nngp.cuda(), ntk.cuda(), v1.cuda(), v2.cuda(), w.cuda())
                fl, tl = pooled_dual(activation, nngp, ntk, v1, v2, w)
                result[f"{activation}-{tangent}-vs-cpu"] = [ratio(fc, f_terms, w), ratio(tc, t_terms, w),
                                                            float((fc.cpu() - fl).abs().max()), float((tc.cpu() - tl).abs().max())]
            if activation == "erf" and tangent == "same":
                # rows 7: of the call again, shifted across row blocks: the same bits
                f2, t2 = pooled_dual_triton(activation, k[7:], None, va[7:], vb[7:], w.to(device))
                result["shifted-rows-equal"] = bool(torch.equal(f2, f[7:]) and torch.equal(t2, t[7:]))
                # float32 values: read exactly, computed in float64
                f32, t32 = pooled_dual_triton(activation, k.float(), None, va.float(), vb.float(), w.float().to(device))
                f64, t64 = pooled_dual_triton(activation, k.float().double(), None, va.float().double(),
                                              vb.float().double(), w.float().double().to(device))
                result["float32-equals-float64-of-rounded"] = bool(torch.equal(f32, f64) and torch.equal(t32, t64))
    print(json.dumps(result))
    """
)


def _run(device: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1" if device == "cpu" else "0"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, device], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check(result: dict) -> None:
    for case in ("erf-same", "erf-separate", "relu-same", "relu-separate"):
        assert max(result[case]) <= 1.0, (case, result[case])
    assert result["shifted-rows-equal"]
    assert result["float32-equals-float64-of-rounded"]


def test_triton_kernel_in_the_interpreter_equals_torch_within_rounding():
    _check(_run("cpu"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_kernel_on_cuda_equals_torch_and_the_cpu_loop():
    result = _run("cuda")
    _check(result)
    for case in ("erf-same", "erf-separate", "relu-same", "relu-separate"):
        assert max(result[f"{case}-vs-cpu"][:2]) <= 1.0, (case, result[f"{case}-vs-cpu"])
