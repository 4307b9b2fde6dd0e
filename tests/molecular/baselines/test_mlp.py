"""MLP NTK on feature maps (molntk.molecular.baselines.mlp): the limit of finite networks,
Monte Carlo covariances, the one-layer closed form by quadrature, no rotation invariance."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate

from molntk.kernels.empirical import empirical_ntk, monte_carlo_nngp
from molntk.molecular.baselines import MLPNTK, MLPArchitecture, mlp_kernels
from tests.helpers.baselines import CONFIG, random_rotation, rotated


@pytest.mark.parametrize("activation", ["relu", "erf"])
def test_mlp_ntk_is_the_limit_of_empirical_ntks(envs, activation):
    """Θ̂ of a finite network fluctuates around Θ with relative size O(width^(-1/2)) (constant
    ≈ 1–3 measured here): at width 1024 every draw is within 4/√1024 = 0.125, and going from
    width 64 to 1024 (√16 = 4 expected) the mean error falls by more than 2."""
    kern = MLPNTK(CONFIG, MLPArchitecture(2, activation, 1.2, 0.3))
    _, ntk = kern.env_kernel(envs)

    def errors(width: int) -> list[float]:
        out = []
        for seed in range(3):
            torch.manual_seed(seed)
            theta = empirical_ntk(kern.finite(envs.shape[1], envs.shape[2], width), envs)
            out.append(float((theta - ntk).norm() / ntk.norm()))
        return out

    narrow, wide = errors(64), errors(1024)
    assert max(wide) < 4 / math.sqrt(1024)
    assert np.mean(narrow) > 2 * np.mean(wide)


@pytest.mark.parametrize("depth", [1, 2])
def test_mlp_nngp_is_the_monte_carlo_covariance(envs, depth):
    """E[f(x) f(x')] over random networks. Depth 1: the estimator is unbiased at any width
    (the readout is linear in Gaussian weights given the hidden layer), so only Monte Carlo
    error remains: 5 standard errors. Depth 2 adds an O(1/width) bias, allowed as 2/width."""
    kern = MLPNTK(CONFIG, MLPArchitecture(depth, "relu", 1.2, 0.3))
    nngp, _ = kern.env_kernel(envs[:6])
    width = 128
    mc, se = monte_carlo_nngp(lambda: kern.finite(envs.shape[1], envs.shape[2], width), envs[:6], n_samples=1500, seed=depth)
    bias = 0.0 if depth == 1 else 2 / width * float(nngp.abs().max())
    assert torch.all((mc - nngp).abs() <= 5 * se + bias)


def _gaussian_expectation(g, k11: float, k22: float, k12: float) -> float:
    """E[g(u, v)], (u, v) centred Gaussian, by quadrature in polar coordinates of the whitened
    pair (z1, z2): u = √k11 z1, v = √k22 (ρ z1 + √(1−ρ²) z2), breakpoints where u or v changes sign."""
    rho = k12 / math.sqrt(k11 * k22)
    s = math.sqrt(1 - rho * rho)

    def radial(phi: float) -> float:
        a = math.sqrt(k11) * math.cos(phi)
        b = math.sqrt(k22) * (rho * math.cos(phi) + s * math.sin(phi))
        return integrate.quad(lambda r: g(r * a, r * b) * r * math.exp(-r * r / 2), 0, np.inf, epsabs=1e-13, epsrel=1e-12)[0]

    phi_b = math.atan2(-rho, s) % (2 * math.pi)
    points = sorted({math.pi / 2, 3 * math.pi / 2, phi_b, (phi_b + math.pi) % (2 * math.pi)})
    return integrate.quad(radial, 0, 2 * math.pi, points=points, epsabs=1e-12, epsrel=1e-11, limit=200)[0] / (2 * math.pi)


@pytest.mark.parametrize("activation", ["relu", "erf"])
def test_one_layer_closed_form_matches_numerical_integration(envs, activation):
    sw, sb = 1.3, 0.4
    funcs = {
        "relu": (lambda x: max(x, 0.0), lambda x: float(x > 0)),
        "erf": (math.erf, lambda x: 2 / math.sqrt(math.pi) * math.exp(-x * x)),
    }
    sigma, dsigma = funcs[activation]
    x = envs[:3]
    v = x.reshape(3, -1)
    k1 = sw**2 / x.shape[1] * v @ v.T + sb**2
    var = torch.diagonal(k1)
    nngp, ntk = mlp_kernels(k1, var[:, None], var[None, :], depth=1, activation=activation, sigma_w=sw, sigma_b=sb)
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        a, b, c = float(var[i]), float(var[j]), float(k1[i, j])
        f = _gaussian_expectation(lambda u, w: sigma(u) * sigma(w), a, b, c)
        fdot = _gaussian_expectation(lambda u, w: dsigma(u) * dsigma(w), a, b, c)
        assert float(nngp[i, j]) == pytest.approx(sw**2 * f + sb**2, rel=1e-9)
        assert float(ntk[i, j]) == pytest.approx(sw**2 * f + sb**2 + sw**2 * c * fdot, rel=1e-9)


def test_mlp_ntk_is_not_rotation_invariant(molecules):
    """The plain MLP sees orientations: rotating molecules changes its kernel (unlike the others)."""
    kern = MLPNTK(CONFIG)
    R = random_rotation(3)
    base = kern(molecules[6:]).ntk
    turned = kern(molecules[6:], [rotated(m, R) for m in molecules[6:]]).ntk
    assert float((turned - base).abs().max() / base.abs().max()) > 1e-3
