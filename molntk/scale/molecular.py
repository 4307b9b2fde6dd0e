"""Block kernels of molecule sets: features once per molecule, a kernel call per block.

:class:`MolecularBlockKernel` wraps a molecular kernel and a list of molecules:

- :class:`~molntk.kernels.molecular.MolecularKernel`: environment feature maps
  (:func:`~molntk.features.environments.environment_features`, or ``padded_features`` for
  ``pairing="atom-index"``) of all molecules are computed once, in float64 on the kernel's
  device; a block takes the rows of its molecules
  (:func:`~molntk.features.environments.select_molecules`) and calls the kernel, which
  returns ``{"nngp", "ntk"}``;
- any other kernel with ``features(molecules)`` and a call ``kernel(a, b=None)`` on those
  features (the baselines of :mod:`molntk.baselines`): descriptors are computed once and
  subset per block; a :class:`~molntk.kernels.molecular.MoleculeKernels` result gives
  ``{"nngp", "ntk"}``, a single tensor ``{"kernel"}``.

So per-molecule work (neighbour lists, spherical harmonics, radial functions, descriptors)
is done once, not once per block; what is per pair of environments stays in the kernel.

Cache key: SHA-256 of the kernel config (the network, grid, mode, dtype, pairing,
reduction, environment block size and feature config of a MolecularKernel; the ``repr`` of
other kernels, which are frozen dataclasses; plus ``config`` when given) and of the
molecule fingerprint (:func:`molecule_fingerprint`). The device is not part of it: a
block computed on a GPU is reused on the CPU (equal to rounding).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from molntk.baselines.assembly import AtomDescriptors
from molntk.data.molecule import Molecule
from molntk.features.environments import (
    EnvironmentBatch,
    FeatureConfig,
    PaddedFeatures,
    environment_features,
    molecule_rows,
    padded_features,
    select_molecules,
)
from molntk.kernels.molecular import MolecularKernel, MoleculeKernels
from molntk.scale.memory import DEFAULT_BYTES_PER_PAIR

Features = EnvironmentBatch | PaddedFeatures | AtomDescriptors | Tensor


def molecule_fingerprint(molecules: Sequence[Molecule]) -> str:
    """SHA-256 over (n_atoms, numbers as int64, positions as float64) of every molecule, in order."""
    h = hashlib.sha256(str(len(molecules)).encode())
    for m in molecules:
        h.update(np.int64(m.n_atoms).tobytes())
        h.update(np.ascontiguousarray(m.numbers, dtype=np.int64).tobytes())
        h.update(np.ascontiguousarray(m.positions, dtype=np.float64).tobytes())
    return h.hexdigest()


def kernel_config(kernel: Any, feature_config: FeatureConfig | None) -> dict[str, Any]:
    """What defines a kernel's values (for the cache key); see the module docstring."""
    if isinstance(kernel, MolecularKernel):
        ctx = kernel.ctx
        return {
            "type": "MolecularKernel",
            "network": repr(kernel.network),
            "grid": repr(ctx.grid),
            "mode": ctx.mode,
            "dtype": str(ctx.dtype),
            "pairing": kernel.pairing,
            "reduce": kernel.reduce,
            "block_size": kernel.block_size,
            "features": None if feature_config is None else feature_config.to_dict(),
        }
    return {"type": type(kernel).__name__, "repr": repr(kernel)}


def subset(features: Features, indices: np.ndarray) -> Features:
    """Features of molecules ``indices`` (in that order) of a precomputed set."""
    if isinstance(features, (EnvironmentBatch, PaddedFeatures)):
        return select_molecules(features, indices)
    if isinstance(features, AtomDescriptors):
        rows, new_index = molecule_rows(features.molecule_index, features.n_molecules, indices)
        return AtomDescriptors(features.values[rows], features.centre_numbers[rows], new_index, len(indices))
    if isinstance(features, Tensor):
        return features[torch.as_tensor(indices, device=features.device)]
    raise TypeError(f"cannot take molecule subsets of features of type {type(features).__name__}")


def to_device(features: Features, device: str) -> Features:
    """The same features with every tensor on ``device``."""
    if isinstance(features, Tensor):
        return features.to(device)
    moved = {f.name: getattr(features, f.name).to(device) for f in dataclasses.fields(features) if isinstance(getattr(features, f.name), Tensor)}
    return dataclasses.replace(features, **moved)


def as_numpy(result: Any) -> dict[str, np.ndarray]:
    """A kernel call's result as named float64 numpy matrices."""
    if isinstance(result, MoleculeKernels):
        pairs = {"nngp": result.nngp, "ntk": result.ntk}
    elif isinstance(result, Tensor):
        pairs = {"kernel": result}
    else:
        raise TypeError(f"a molecular kernel call returned {type(result).__name__}; expected MoleculeKernels or a Tensor")
    return {name: t.detach().to(device="cpu", dtype=torch.float64).numpy() for name, t in pairs.items()}


class MolecularBlockKernel:
    """A block kernel (:mod:`molntk.scale.blocks`) of ``kernel`` over ``molecules``.

    ``feature_config``: the environment features of a MolecularKernel (default
    FeatureConfig()); ignored for other kernels, which featurize themselves. ``config``:
    extra key material for the cache (e.g. the run's model section).
    """

    bytes_per_pair = DEFAULT_BYTES_PER_PAIR

    def __init__(
        self,
        kernel: Any,
        molecules: Sequence[Molecule],
        *,
        feature_config: FeatureConfig | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        molecules = list(molecules)
        if not molecules:
            raise ValueError("MolecularBlockKernel needs at least one molecule")
        if isinstance(kernel, MolecularKernel):
            feature_config = FeatureConfig() if feature_config is None else feature_config
            featurize = padded_features if kernel.pairing == "atom-index" else environment_features
            features = featurize(molecules, feature_config, device=kernel.ctx.device)
        elif callable(getattr(kernel, "features", None)) and callable(kernel):
            feature_config = None
            features = kernel.features(molecules)
        else:
            raise TypeError(f"{type(kernel).__name__} is neither a MolecularKernel nor a kernel with features(molecules) and a call")
        self.kernel = kernel
        self.features = features
        self.n_molecules = len(molecules)
        material = {"kernel": kernel_config(kernel, feature_config), "config": dict(config or {}), "molecules": molecule_fingerprint(molecules)}
        self._key = hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()

    def cache_key(self) -> str:
        """Content hash of the kernel config and the molecule set."""
        return self._key

    def compute_block(self, rows: np.ndarray, cols: np.ndarray | None) -> dict[str, np.ndarray]:
        """K[rows, cols] of every matrix of the kernel; ``cols=None``: the symmetric call on rows."""
        a = subset(self.features, rows)
        b = None if cols is None else subset(self.features, cols)
        with torch.no_grad():
            return as_numpy(self.kernel(a) if b is None else self.kernel(a, b))

    def on(self, device: str) -> MolecularBlockKernel:
        """A copy computing on ``device`` (features moved; a MolecularKernel gets a
        discretisation on that device); the cache key is unchanged."""
        copy = object.__new__(MolecularBlockKernel)
        copy.__dict__.update(self.__dict__)
        copy.features = to_device(self.features, device)
        if isinstance(self.kernel, MolecularKernel):
            ctx = self.kernel.ctx
            copy.kernel = dataclasses.replace(self.kernel, ctx=self.kernel.network.discretisation(ctx.grid, ctx.mode, ctx.dtype, device))
        return copy
