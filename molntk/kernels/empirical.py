"""Kernels of finite networks: empirical NTK and Monte Carlo NNGP.

For a finite network f(x; θ) with scalar output:

    Θ̂(x, x') = Σ_θ ∂f(x)/∂θ · ∂f(x')/∂θ          (empirical NTK, one draw of θ)
    K̂(x, x') = (1/S) Σ_s f(x; θ_s) f(x'; θ_s)      (Monte Carlo NNGP over S draws)

As the width grows these converge to the analytic NTK and NNGP of the infinite network
(the checks in the tests; error ~ width^(-1/2) for Θ̂).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call, jacrev


def _jacobian(module: nn.Module, params: dict[str, Tensor], x: Tensor) -> Tensor:
    jac = jacrev(lambda p: functional_call(module, p, (x,)))(params)
    return torch.cat([j.reshape(x.shape[0], -1) for j in jac.values()], dim=1)


def empirical_ntk(module: nn.Module, x1: Tensor, x2: Tensor | None = None) -> Tensor:
    """Θ̂(x1_i, x2_j) of ``module`` (scalar output per input) at its current parameters."""
    params = {k: v.detach() for k, v in module.named_parameters()}
    j1 = _jacobian(module, params, x1)
    j2 = j1 if x2 is None else _jacobian(module, params, x2)
    return j1 @ j2.T


@torch.no_grad()
def monte_carlo_nngp(make_module: Callable[[], nn.Module], x: Tensor, n_samples: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Mean and standard error of f(x_i) f(x_j) over ``n_samples`` random networks.

    ``make_module()`` must draw fresh parameters; the generator is seeded once with ``seed``.
    Returns (K̂, standard error of each entry), both (n, n).
    """
    torch.manual_seed(seed)
    outer = torch.stack([torch.outer(out, out) for out in (make_module()(x) for _ in range(n_samples))])
    return outer.mean(0), outer.std(0) / n_samples**0.5
