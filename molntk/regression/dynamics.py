"""The NTK predictor at training time t for any kernel of molntk: one entry point.

An infinite-width network trained by gradient descent on L = ½ Σ_i ‖f(x_i) - y_i‖² (learning
rate η) is, over random initialisations, a Gaussian process at every training time t with

    μ_t(x)    = Θ(x, X) Θ⁻¹ (I - e^{-η Θ t}) Y                        (mean)
    Σ_t(x, x) = K(x, x) + Θ(x, X) M_t K M_t Θ(X, x) - 2 Θ(x, X) M_t K(X, x)   (NTK-GP variance)

with Θ = Θ(X, X), K = K(X, X) the NNGP kernel and M_t = Θ⁻¹ (I - e^{-η Θ t})
(:mod:`molntk.regression.ntk`, also with a ridge λ and for s discrete steps instead of time t).
μ_∞ is kernel regression on Θ. A loss averaged over the n training points is the same with
η → η / n.

:class:`NTKDynamics` holds one eigendecomposition of Θ(X, X) and evaluates μ_t and Σ_t at any
number of times (O(m n k) each). It takes kernel matrices, so it serves every kernel of the
library: the SO(3) and C_n GCNNs, CNN and MLP baselines, augmented (orbit-averaged) kernels,
molecular pair sums. :func:`kernel_matrices` reads the (NNGP, NTK) pair out of whatever a
library kernel returns (``net.kernel(x1, x2)`` → :class:`~molntk.kernels.result.Kernels`,
a molecular kernel ``kern(a, b)`` → ``{"nngp", "ntk"}``), and :meth:`NTKDynamics.from_kernel`
fits straight from such a kernel and the training inputs::

    dyn = NTKDynamics.from_kernel(net.kernel, x_train, y_train, lr=0.1)
    mu = dyn.mean(kernel_matrices(net.kernel(x_test, x_train))[1], t=50.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from molntk.regression import validation
from molntk.regression.ntk import ntk_gp_variance, ntk_mean
from molntk.regression.spectral import Eigensystem, eigensystem


def kernel_matrices(result: object) -> tuple[np.ndarray | None, np.ndarray]:
    """(NNGP, NTK) as float64 numpy arrays from what a library kernel returns.

    ``result`` is a :class:`~molntk.kernels.result.Kernels` (``.nngp``, ``.ntk``), a mapping
    with keys ``"nngp"`` and ``"ntk"`` (molecular kernels), or a bare NTK matrix (then the
    NNGP is None). Raises ValueError when no NTK is there.
    """
    if isinstance(result, Mapping):
        nngp, ntk = result.get("nngp"), result.get("ntk")
    elif hasattr(result, "ntk"):
        nngp, ntk = getattr(result, "nngp", None), result.ntk
    else:
        nngp, ntk = None, result
    if ntk is None:
        raise ValueError("the kernel result has no NTK (was it computed with ntk=False?)")
    return (None if nngp is None else validation.as_float64(nngp, "nngp")), validation.as_float64(ntk, "ntk")


@dataclass(frozen=True, eq=False)
class NTKDynamics:
    """μ_t and Σ_t of the infinite network trained on (X, Y), from Θ(X, X) (and K(X, X)).

    ``lr`` is η, ``reg`` a ridge λ ≥ 0 (0: plain gradient descent); ``targets`` (n, k).
    Build it with :meth:`fit` (kernel matrices) or :meth:`from_kernel` (a library kernel).
    """

    theta: Eigensystem
    targets: np.ndarray
    lr: float
    reg: float
    nngp_rotated: np.ndarray | None

    @classmethod
    def fit(
        cls, ntk_train: object, Y: object, *, nngp_train: object | None = None, lr: float = 1.0, reg: float = 0.0
    ) -> NTKDynamics:
        """From Θ(X, X) (n, n), targets Y (n,) or (n, k) and optionally K(X, X) for variances."""
        theta = eigensystem(ntk_train, "ntk_train")
        Y2, _ = validation.targets(Y, "Y", rows=theta.n)
        rotated = None
        if nngp_train is not None:
            K = validation.matrix(nngp_train, "nngp_train", rows=theta.n, cols=theta.n)
            rotated = theta.rotate(K)
        return cls(theta, Y2, validation.positive(lr, "lr"), validation.nonnegative(reg, "reg"), rotated)

    @classmethod
    def from_kernel(
        cls, kernel: Callable[..., object], x_train: object, Y: object, *, lr: float = 1.0, reg: float = 0.0
    ) -> NTKDynamics:
        """From a library kernel: ``kernel(x_train)`` must return the train NNGP and NTK
        (any form :func:`kernel_matrices` reads)."""
        nngp, ntk = kernel_matrices(kernel(x_train))
        return cls.fit(ntk, Y, nngp_train=nngp, lr=lr, reg=reg)

    def mean(self, ntk_test_train: object, *, t: float = math.inf, steps: int | None = None) -> np.ndarray:
        """μ_t(x) (m, k) for the rows of Θ(x, X) (m, n): after time t, or after ``steps``
        gradient-descent steps of size η (:func:`~molntk.regression.ntk.ntk_mean`)."""
        return ntk_mean(self.theta, ntk_test_train, self.targets, t=t, lr=self.lr, reg=self.reg, steps=steps)

    def means(self, ntk_test_train: object, *, times: Sequence[float] = (), steps: Sequence[int] = ()) -> np.ndarray:
        """μ at every time in ``times`` or every step count in ``steps`` (give one of them): (T, m, k)."""
        if bool(len(times)) == bool(len(steps)):
            raise ValueError("give either times or steps (a non-empty sequence), not both")
        cross = validation.as_float64(ntk_test_train, "ntk_test_train")
        if len(times):
            return np.stack([self.mean(cross, t=t) for t in times])
        return np.stack([self.mean(cross, steps=s) for s in steps])

    def variance(
        self,
        ntk_test_train: object,
        nngp_test_train: object,
        nngp_test_diag: object,
        *,
        t: float = math.inf,
        steps: int | None = None,
    ) -> np.ndarray:
        """Σ_t(x, x) (m,), the variance over initialisations of each output of the trained
        network (the same for every output unit); needs ``nngp_train`` at :meth:`fit`."""
        if self.nngp_rotated is None:
            raise ValueError("the NTK-GP variance needs the NNGP train kernel: pass nngp_train to NTKDynamics.fit")
        return ntk_gp_variance(
            self.theta,
            self.nngp_rotated,
            ntk_test_train,
            nngp_test_train,
            nngp_test_diag,
            t=t,
            lr=self.lr,
            reg=self.reg,
            steps=steps,
        )
