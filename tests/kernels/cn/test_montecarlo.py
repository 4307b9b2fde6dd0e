"""Monte-Carlo NNGP: the output covariance of many random finite networks.

For networks with one nonlinearity followed only by linear layers (convolution, pooling,
Dense readout), E[f(x) f(x')] over the N(0, 1) parameters equals the NNGP kernel at every
width: the pre-activations are exactly Gaussian and everything after the nonlinearity is
linear in its (channel-i.i.d.) features. So the sample mean of f_s(a) f_s(b) over S
independent networks must match the kernel within its standard error; we require every
entry within 4.5 standard errors (|z| > 4.5 has probability 7e-6 per entry).
"""

import pytest
import torch
from torch.func import functional_call, vmap

from molntk.kernels.cn import (
    Nonlinearity,
    Dense,
    Flatten,
    Pool,
    GroupConv,
    Lift,
    RotationPool,
    SpatialPool,
    serial,
)

DT = torch.float64
SAMPLES = 4000


pytestmark = pytest.mark.usefixtures("one_thread")


NETWORKS = {
    "c8-same": serial(
        Lift(8, 3, "same", sigma_w=1.2, sigma_b=0.3),
        Nonlinearity("relu"),
        GroupConv(8, 3, "same", sigma_w=0.8, sigma_b=0.2),
        Pool(),
        Dense(out=1, sigma_w=1.1, sigma_b=0.1),
    ),
    "c4-per-rotation": serial(
        Lift(4, 3, "valid", sigma_b=0.2),
        Nonlinearity("erf"),
        GroupConv(4, 3, "valid"),
        SpatialPool(),
        Dense(out=1, sigma_b=0.3),
        RotationPool(),
    ),
    "c3-circular": serial(
        Lift(3, 3, "circular"), Nonlinearity("relu"), GroupConv(3, 3, "circular"), Pool(), Dense(out=1)
    ),
    "cnn-flatten": serial(Lift(1, 3, "valid", sigma_b=0.5), Nonlinearity("relu"), Flatten(), Dense(out=1)),
    "mlp": serial(Flatten(), Dense(sigma_w=1.5, sigma_b=0.2), Nonlinearity("erf"), Dense(out=1)),
}


def sample_outputs(net, x: torch.Tensor, width: int, samples: int) -> torch.Tensor:
    """f_s(x) (samples, N) for independent N(0, 1) parameter draws of the finite twin."""
    module = net.finite(tuple(x.shape[1:]), width, seed=0)
    g = torch.Generator().manual_seed(1)
    params = {name: torch.randn(samples, *p.shape, generator=g, dtype=DT) for name, p in module.named_parameters()}
    return vmap(lambda p: functional_call(module, p, (x,))[:, 0])(params)


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_monte_carlo_nngp(name):
    net = NETWORKS[name]
    x = torch.randn(4, 2, 6, 6, generator=torch.Generator().manual_seed(7), dtype=DT)
    kernel = net.kernel(x, ntk=False).nngp
    f = sample_outputs(net, x, width=3, samples=SAMPLES)
    products = f[:, :, None] * f[:, None, :]
    mean = products.mean(0)
    stderr = products.std(0) / SAMPLES**0.5
    z = (mean - kernel) / stderr
    assert z.abs().max() < 4.5, f"z-scores {z}"
    assert (mean - kernel).abs().max() < 0.1 * kernel.abs().max()
