"""``SO3NTKSumRegressor``: kernel regression with the NTK of several SO(3) networks side by side.

    from molntk.models import SO3NTKSumRegressor
    five_angstrom = {"kind": "gaussian", "n": 20, "r_min": 0.7, "r_cut": 5.0, "width_growth": 1.5,
                     "scaling_r0": 2.5, "scaling_power": 4.0}
    model = SO3NTKSumRegressor(layers="lift:4 quadratic pool layernorm dense quadratic dense",
                               terms=[{"radial": five_angstrom}], weights=[0, 0.01, 0.03, 0.1])
    model.fit(molecules, energies)                    # c and λ by leave-one-out
    mean, std = model.predict(new_molecules, return_std=True)
    model.save("u0.molntk.npz")                        # molntk predict and load_model read it

The estimator's own parameters describe the first network (as
:class:`~molntk.models.so3_ntk.SO3NTKRegressor`'s do); each entry of ``terms`` is a further
network, given by the parameters in which it differs from the first (its layers, σ_w, σ_b,
feature maps, grid: :data:`TERM_PARAMS`). The model's kernel is

    Θ(M, M') = Σ_i c_i Θ_i(M, M') / τ_i,   τ_i = mean_j Θ_i(M_j, M_j) over the training molecules,   c_1 = 1,

the NTK of the networks' outputs added with independent parameters, f = Σ_i (c_i/τ_i)^{1/2} f_i,
so still the kernel of one infinite-width network. (c_2, …) and λ are chosen together by the
regression's CV on the training molecules (:class:`~molntk.regression.KernelSumRegressor`:
``weights`` is the grid of each c_i, or a list of points (c_2, …); one point fixes them). A
short and a long cutoff side by side is the QM9 use (docs/qm9-accuracy.md, "A short and a
long cutoff side by side, exact"; ``models.so3_ntk_sum`` of a ``qm9-property`` config).

Everything else is the exact model of :class:`SO3NTKRegressor`: the dressed-atom residual,
Δ-learning on a ``baseline``, the calibrated std, forces (the sum of each network's
expansion, F = −Σ_i (c_i/τ_i) σ Σ_j W_j ∂Θ_i(M, M_j)/∂r), out-of-domain scores (on the first
network's feature maps) and model files (format :data:`FORMAT`: the parameters, ``terms`` and
``weights`` included, and the chosen c_i and τ_i as ``regressor_sum_weights`` and
``regressor_sum_scales``). A sum is exact only: ``inducing`` must stay None.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from molntk.errors import InputError
from molntk.models.forces import KernelExpansion, kernel_expansion
from molntk.models.so3_ntk import SO3NTKRegressor
from molntk.models.so3_recipe import SO3ModelRecipe
from molntk.regression.kernel_sum import DEFAULT_WEIGHTS, KernelSumRegressor

#: Name of the model file format.
FORMAT = "molntk-so3-ntk-sum-regressor"
#: The parameters a further network may set: its own network, feature maps and grid. The
#: elements, pairing, reduction, dtype and the regression (psd_rtol: λ's floor) are the model's, shared by all.
TERM_PARAMS = ("layers", "sigma_w", "sigma_b", "band_limit", "smearing_width", "radial", "element_width",
               "grid_band_limit", "sampling", "mode")


@dataclass(eq=False, repr=False)
class SO3NTKSumRegressor(SO3NTKRegressor):
    """Kernel regression with Σ_i c_i Θ_i/τ_i, the NTKs of several SO(3) networks (module
    docstring). The parameters of :class:`SO3NTKRegressor` describe the first network and the
    regression; ``terms``: the further networks, each a dict of :data:`TERM_PARAMS` that differ
    from the first (at least one); ``weights``: the grid of each c_2, … (or the points) from which
    CV chooses, with λ. Fitted attributes as :class:`SO3NTKRegressor`'s; ``regressor_`` is a
    :class:`~molntk.regression.KernelSumRegressor` (``weights_`` the chosen (1, c_2, …),
    ``scales_`` the τ_i)."""

    FILE_FORMAT = FORMAT
    FILE_DESCRIPTION = "SO(3) NTK sum model"

    terms: Sequence[Mapping[str, Any]] = ()
    weights: Sequence[float] | Sequence[Sequence[float]] = DEFAULT_WEIGHTS

    def term_params(self) -> list[dict[str, Any]]:
        """The validated ``terms``: dicts of :data:`TERM_PARAMS`; InputError naming ``terms``
        or ``terms[i]``."""
        if isinstance(self.terms, (str, Mapping)) or not isinstance(self.terms, Sequence) or not self.terms:
            raise InputError("terms", f"must be a non-empty list of dicts (one per further network), got {self.terms!r}")
        out = []
        for i, term in enumerate(self.terms):
            if not isinstance(term, Mapping):
                raise InputError(f"terms[{i}]", f"must be a dict of the network's parameters, got {type(term).__name__}")
            unknown = sorted(set(term) - set(TERM_PARAMS))
            if unknown:
                raise InputError(f"terms[{i}]", f"unknown or shared parameter(s) {unknown}; a term sets {', '.join(TERM_PARAMS)}")
            out.append(dict(term))
        return out

    def recipes(self) -> list[SO3ModelRecipe]:
        """The first network's recipe (:meth:`recipe`) and each term's: the first's parameters
        updated by the term's."""
        shared = {k: v for k, v in self.get_params(deep=False).items() if k not in ("terms", "weights")}
        return [self.recipe(), *(SO3NTKRegressor(**(shared | term)).recipe() for term in self.term_params())]

    def _kernel_input(self, kernels: list[np.ndarray]) -> list[np.ndarray]:
        """The recipes' kernels, all of them: the regressor sums them."""
        return kernels

    def _regressor(self, recipe: SO3ModelRecipe) -> KernelSumRegressor:
        """:class:`KernelSumRegressor` over ``weights`` with the single model's kernel ridge
        (λ by ``cv``, its grid down to ``psd_rtol`` · the sum's mean diagonal)."""
        return KernelSumRegressor(regressor=super()._regressor(recipe), weights=self.weights)

    def _check_sparse(self) -> None:
        """A sum is exact only: InputError naming ``inducing`` when it is set."""
        if self.inducing is not None:
            raise InputError("inducing", f"a sum of NTKs is an exact model; inducing must be None, got {self.inducing!r}")
        self.term_params()  # terms checked before any kernel is computed

    def _expansions(self) -> list[KernelExpansion]:
        """Each network's expansion with the fitted coefficients scaled by c_i/τ_i (the target
        mean μ once, on the first)."""
        kerns, references = self._reference()
        regressor = self.regressor_
        first = kernel_expansion(kerns[0], references[0], regressor.fitted_arrays())
        return [dataclasses.replace(first, kernel=kern, reference=ref, coef=first.coef * (c / tau), offset=first.offset if i == 0 else 0.0)
                for i, (kern, ref, c, tau) in enumerate(zip(kerns, references, regressor.weights_, regressor.scales_))]
