"""The models of a ``qm9-property`` run and their hyperparameter candidates.

A :class:`Candidate` is one hyperparameter setting of one model: its molecular kernel
(:mod:`molntk.molecular`, :mod:`molntk.molecular.baselines`) and what the report says of it.
:func:`build_candidates` turns the config's ``models`` section into the candidates of each
model; the run chooses among them by cross-validation (:mod:`molntk.pipelines.qm9.exact`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from molntk.data.molecule import Molecule
from molntk.features.environments import FeatureConfig
from molntk.features.radial import radial_basis_from_dict
from molntk.models import SO3ModelRecipe
from molntk.molecular import MolecularKernel
from molntk.molecular.baselines import MLPNTK, AugmentedMLPNTK, BagOfBonds, CoulombMatrix, DScribeSOAPKernel, FCHL19Kernel
from molntk.molecular.baselines import LaplacianKernel, MLPArchitecture, PowerSpectrumKernel, RotationSet, median_l1_width
from molntk.pipelines.qm9.config import PowerSpectrumModelConfig, QM9PropertyConfig, SO3Candidate
from molntk.pipelines.qm9.sets import Composition
from molntk.scale.devices import resolve_device


#: Report name of each model → its key in the config's ``models`` section.
CONFIG_KEYS = {
    "so3-ntk": "so3_ntk", "mlp-ntk": "mlp_ntk", "augmented-mlp-ntk": "augmented_mlp_ntk",
    "so3-ntk-sum": "so3_ntk_sum", "power-spectrum": "power_spectrum", "soap-dscribe": "soap", "fchl19": "fchl19",
    "cm-laplacian": "coulomb_matrix", "bob-laplacian": "bag_of_bonds",
}


@dataclass(frozen=True)
class Candidate:
    """One hyperparameter setting of a model: report label, JSON parameters, its kernel,
    whether the kernel is a quadrature (accurate to ``regression.psd_rtol``, not to
    rounding), and its point on the model's grid (ζ, FCHL19's σ, a Laplacian's width
    factor; a tuple on a grid of several axes, SOAP's (r_cut, σ, ζ); None for
    architectures, which have no order)."""

    label: str
    params: dict[str, Any]
    kernel: MolecularKernel
    quadrature: bool = False
    grid_value: float | tuple[float, ...] | None = None

    @property
    def matrix(self) -> str:
        """The matrix kernel ridge is fitted on: the kernel's last output (the NTK Θ of a
        network's kernel, else the kernel itself)."""
        return self.kernel.outputs[-1]


def dtype_and_device(config: QM9PropertyConfig) -> tuple[torch.dtype, str]:
    """(dtype, device) of the kernel engine (``device: auto``: CUDA when available,
    :func:`~molntk.scale.devices.resolve_device`)."""
    dtype = torch.float64 if config.kernel.dtype == "float64" else torch.float32
    return dtype, str(resolve_device(config.kernel.device, "kernel.device"))


def so3_recipe(config: QM9PropertyConfig, candidate: SO3Candidate, reduce: str,
               elements: Sequence[int] | None = None) -> SO3ModelRecipe:
    """The SO(3) model of one candidate under the run's ``features``, ``kernel`` and
    ``regression`` sections (a candidate's ``smearing_width``, ``radial`` and ``element_width``
    replace the feature maps', its ``grid_band_limit`` the kernel section's);
    ``elements``: its element set (None: the feature maps' default, QM9's)."""
    features = config.features.feature_config(elements)
    if candidate.smearing_width is not None:
        features = dataclasses.replace(features, smearing_width=candidate.smearing_width)
    if candidate.radial is not None:
        features = dataclasses.replace(features, radial=radial_basis_from_dict(candidate.radial))
    if candidate.element_width is not None:
        features = dataclasses.replace(features, element_width=candidate.element_width)
    kernel = config.kernel
    return SO3ModelRecipe(
        layers=candidate.layers, sigma_w=candidate.sigma_w, sigma_b=candidate.sigma_b, features=features,
        grid_band_limit=candidate.grid_band_limit or kernel.grid_band_limit, sampling=kernel.sampling,
        mode=kernel.mode, pairing=kernel.pairing, reduce=reduce, dtype=kernel.dtype, block_size=kernel.block_size,
        psd_rtol=config.regression.psd_rtol,
    )


def radial_label(radial: dict[str, Any] | None) -> str:
    """", radial n=… r_min=…" for a candidate's own radial basis, "" for the feature maps'."""
    if radial is None:
        return ""
    return ", radial " + " ".join(f"{k}={v}" for k, v in radial.items() if k != "kind")


def power_spectrum_candidates(section: PowerSpectrumModelConfig, features: FeatureConfig, pairing: str,
                              reduce: str) -> list[Candidate]:
    """The power spectrum's candidates: every radial basis × element width × ζ of ``section``
    on the feature maps ``features`` (a candidate's radial basis and width replace the maps')."""
    out = []
    for radial in section.radials or [None]:
        radial_maps = features if radial is None else dataclasses.replace(features, radial=radial_basis_from_dict(radial))
        for width in section.element_widths or [features.element_width]:
            maps, params, label = radial_maps, {"radial": radial}, radial_label(radial)
            if section.element_widths is not None:  # the key only where the grid has it: earlier caches stay valid
                maps = dataclasses.replace(radial_maps, element_width=width)
                params["element_width"] = width
                label += ", elements apart" if width is None else f", element width {width:g}"
            out += [Candidate(f"ζ={z}" + label, {"zeta": z, **params},
                              PowerSpectrumKernel(maps, z, pairing=pairing, reduce=reduce), grid_value=z)
                    for z in section.zetas]
    return out


def so3_candidate(config: QM9PropertyConfig, candidate: SO3Candidate, reduce: str,
                  elements: Sequence[int] | None = None) -> Candidate:
    """One SO(3) network of the config (a candidate or a term of a sum) as a run's
    :class:`Candidate`, reduced by ``reduce``, for the element set ``elements`` (None: QM9's)."""
    _, device = dtype_and_device(config)
    c = candidate
    recipe = so3_recipe(config, c, reduce, elements)
    label = f"{c.layers} (σw={c.sigma_w:g}, σb={c.sigma_b:g})"
    if c.smearing_width is not None:
        label += f", smearing {c.smearing_width:g} rad"
    label += radial_label(c.radial)
    if c.element_width is not None:
        label += f", element width {c.element_width:g}"
    if c.grid_band_limit is not None:
        label += f", grid band limit {c.grid_band_limit}"
    return Candidate(label, c.model_dump(), recipe.molecular_kernel(device), recipe.quadrature)


def so3_candidates(config: QM9PropertyConfig, reduce: str, elements: Sequence[int] | None = None) -> list[Candidate]:
    """The SO(3) NTK's candidates (``models.so3_ntk``, which must not be null) under the
    config, reduced by ``reduce``, for the element set ``elements`` (None: QM9's)."""
    return [so3_candidate(config, c, reduce, elements) for c in config.models.so3_ntk.candidates]


def build_candidates(config: QM9PropertyConfig, reduce: str, reference: Sequence[Molecule],
                     composition: Composition = Composition()) -> dict[str, list[Candidate]]:
    """Model name → its hyperparameter candidates; Laplacian widths scale with the median
    distance among ``reference`` (training molecules); every model accepts the elements of
    ``composition`` and the Coulomb matrix and Bag of Bonds pad to its molecule sizes."""
    models, kernel = config.models, config.kernel
    elements = composition.elements
    features = config.features.feature_config(elements)
    pairing = "element" if kernel.pairing == "atom-index" else kernel.pairing  # the baselines'
    out: dict[str, list[Candidate]] = {}
    if models.so3_ntk is not None:
        out["so3-ntk"] = so3_candidates(config, reduce, elements)
    mlp_like = (("mlp-ntk", models.mlp_ntk), ("augmented-mlp-ntk", models.augmented_mlp_ntk))
    for name, section in mlp_like:
        if section is None:
            continue
        out[name] = []
        for c in section.candidates:
            arch = MLPArchitecture(c.depth, c.activation, c.sigma_w, c.sigma_b)
            label = f"depth {c.depth} {c.activation} (σw={c.sigma_w:g}, σb={c.sigma_b:g})"
            options = {"pairing": pairing, "reduce": reduce, "block_size": kernel.block_size}
            if name == "mlp-ntk":
                kernel = MLPNTK(features, arch, **options)
            else:
                rotations = RotationSet.differences(RotationSet.random(section.rotations, section.seed))
                kernel = AugmentedMLPNTK(features, arch, rotations, **options)
                label += f", {2 * section.rotations} rotations"
            out[name].append(Candidate(label, c.model_dump(), kernel, quadrature=name != "mlp-ntk"))
    if models.power_spectrum is not None:
        out["power-spectrum"] = power_spectrum_candidates(models.power_spectrum, features, pairing, reduce)
    if models.soap is not None:
        soap = models.soap
        out["soap-dscribe"] = [
            Candidate(f"r_cut={r:g} Å, σ={w:g} Å, ζ={z}", {"r_cut": r, "n_max": soap.n_max, "l_max": soap.l_max, "sigma": w, "zeta": z},
                      DScribeSOAPKernel(r_cut=r, n_max=soap.n_max, l_max=soap.l_max, sigma=w, zeta=z, pairing=pairing,
                                        reduce=reduce, elements=elements), grid_value=(r, w, z))
            for r in soap.r_cuts for w in soap.sigmas for z in soap.zetas
        ]
    if models.fchl19 is not None:
        out["fchl19"] = [
            Candidate(f"σ={w:g}", {"sigma": w}, FCHL19Kernel(w, pairing=pairing, reduce=reduce, elements=elements), grid_value=w)
            for w in models.fchl19.sigmas
        ]
    globals_ = (("cm-laplacian", models.coulomb_matrix, CoulombMatrix(n_max=composition.max_atoms)),
                ("bob-laplacian", models.bag_of_bonds, BagOfBonds(elements, composition.max_counts)))
    for name, section, descriptor in globals_:
        if section is not None:
            median = median_l1_width(descriptor(list(reference)))
            kernels = [LaplacianKernel(descriptor, f * median) for f in section.width_factors]
            out[name] = [
                Candidate(f"σ={k.sigma:.3g} ({f:g}× median)", {"width_factor": f, "sigma": k.sigma}, k, grid_value=f)
                for f, k in zip(section.width_factors, kernels)
            ]
    return out
