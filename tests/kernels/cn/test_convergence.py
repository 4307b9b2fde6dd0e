"""Empirical NTKs of finite networks converge to the analytic NTK like width^(-1/2).

For each model, widths w₁ < w₂ < w₃ (< w₄) and S seeds per width: the relative error
e = ‖Θ_emp − Θ‖_F / ‖Θ‖_F of the empirical NTK (explicit Jacobian J, Θ_emp = J Jᵀ) on a
few small images. The fluctuations of Θ_emp are O(w^(-1/2)) (central limit over the
channels), so log e = log c − ½ log w + (a width-independent random term): the slope of
the mean of log e over seeds against log w estimates −½. The mean of log e is used
because e has a heavy upper tail at small widths; over 6 independent seed sets the
slope estimate with these widths and seed counts had a standard deviation of 0.04–0.08
(C4: mean −0.54, sd 0.08 at S = 16; C8 over five widths: −0.51, 0.05; CNN-flatten: −0.53, 0.07;
CNN-GAP: −0.53, 0.05; MLP: −0.50, 0.04), so −0.5 ± 0.2 is 2.5–5 standard deviations, and
the seeds here are fixed. The error at the widest width must also be small (< 0.2; the
analytic kernel being a few per cent off would flatten the slope there).
"""

import numpy as np
import pytest
import torch

from molntk.kernels.cn import cnn_flatten, cnn_gap, gcnn, mlp

DT = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def empirical_ntk(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Θ_emp = J Jᵀ with J the Jacobian of the scalar outputs with respect to all parameters."""
    params = list(model.parameters())
    out = model(x)[:, 0]
    rows = [
        torch.cat([g.flatten() for g in torch.autograd.grad(out[i], params, retain_graph=True)])
        for i in range(x.shape[0])
    ]
    jac = torch.stack(rows)
    return jac @ jac.T


CASES = {
    "c4-gcnn": (gcnn(4, 2, head=0, sigma_b=0.2), (8, 32, 128), 24),
    "c8-gcnn-same": (gcnn(8, 2, head=0, padding="same", sigma_b=0.2), (4, 8, 16, 32, 64), 16),
    "cnn-gap": (cnn_gap(2, sigma_b=0.2), (8, 32, 128, 512), 8),
    "cnn-flatten": (cnn_flatten(2, sigma_b=0.2), (8, 32, 128, 512), 8),
    "mlp": (mlp(2, sigma_b=0.2), (8, 32, 128, 512), 8),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_empirical_ntk_converges_like_inverse_sqrt_width(name):
    net, widths, seeds = CASES[name]
    x = torch.randn(3, 2, 6, 6, generator=torch.Generator().manual_seed(0), dtype=DT)
    theta = net.kernel(x).ntk
    log_errors = []
    for width in widths:
        errors = [
            float((empirical_ntk(net.finite((2, 6, 6), width, seed=seed), x) - theta).norm() / theta.norm())
            for seed in range(seeds)
        ]
        log_errors.append(np.mean(np.log(errors)))
    slope = np.polyfit(np.log(widths), log_errors, 1)[0]
    assert -0.7 < slope < -0.3, f"slope {slope:.3f}, errors {np.exp(log_errors)}"
    assert np.exp(log_errors[-1]) < 0.2
