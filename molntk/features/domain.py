"""Out-of-domain scores: how far a molecule's atom environments lie from every reference
(training) environment.

Each environment x is described by its rotation-invariant channel amplitudes a(x) ∈ R^{C·L}
(:func:`~molntk.features.inducing.channel_amplitudes`, the description the sparse model's
farthest-point sampling uses). For an atom a of centre element e,

    d(a) = min_{b ∈ reference, Z_b = e} ‖a(x_a) − a(x_b)‖ / q_e,

the distance to the nearest reference environment of its element in units of q_e, the
median over the reference environments of element e of their distance to the nearest
environment of another reference molecule (so every element's typical spacing is 1). The
score of a molecule is max_a d(a) (its least covered atom), divided by the threshold t =
the ``quantile`` (default 0.99) of the same score of every reference molecule computed
without that molecule (leave-one-molecule-out: its own environments, and duplicate atoms
of its own, do not count). A score above 1 flags the molecule as outside the training
domain; about 1 % of molecules like the training ones score above 1. An atom whose element
no reference environment has scores inf.

Cost: one (environments × reference environments) distance matrix of C·L-dimensional
vectors per element, in row blocks; no kernel evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from molntk.errors import InputError
from molntk.features.environments import EnvironmentBatch
from molntk.features.inducing import channel_amplitudes

#: Rows of a distance block (× the reference environments of one element).
BLOCK_ROWS = 2048


@dataclass(frozen=True, eq=False)
class EnvironmentDomain:
    """Reference environments and the calibration of their scores (module docstring):
    per element e the amplitudes (n_e, C·L) and molecule indices of its reference
    environments and the spacing ``scales[e]`` = q_e; ``threshold`` t."""

    amplitudes: dict[int, np.ndarray]
    molecules: dict[int, np.ndarray]
    scales: dict[int, float]
    threshold: float
    quantile: float

    @classmethod
    def fit(cls, reference: EnvironmentBatch, quantile: float = 0.99) -> EnvironmentDomain:
        """The domain of the environments of ``reference`` (at least 2 molecules)."""
        if not 0 < quantile < 1:
            raise InputError("quantile", f"must be between 0 and 1, got {quantile}")
        if reference.n_molecules < 2:
            raise InputError("reference", "an out-of-domain threshold needs at least 2 training molecules")
        amplitudes, numbers, molecules = _described(reference)
        by_element = {int(e): numbers == e for e in np.unique(numbers)}
        amps = {e: amplitudes[rows] for e, rows in by_element.items()}
        mols = {e: molecules[rows] for e, rows in by_element.items()}
        nearest = np.empty(len(numbers))
        for e, rows in by_element.items():  # leave-one-molecule-out nearest distances
            nearest[rows] = _nearest(amps[e], amps[e], mols[e], mols[e])
        finite = np.isfinite(nearest)
        pooled = float(np.median(nearest[finite])) if finite.any() else 0.0
        pooled = pooled if pooled > 0 else 1.0  # no spacing measured (copies only): unit scale
        scales = {}
        for e, rows in by_element.items():
            own = nearest[rows][np.isfinite(nearest[rows])]
            scales[e] = float(np.median(own)) if own.size and np.median(own) > 0 else pooled
        per_atom = nearest / np.array([scales[int(z)] for z in numbers])
        scores = np.full(reference.n_molecules, -np.inf)
        np.maximum.at(scores, molecules, per_atom)
        threshold = float(np.quantile(scores[np.isfinite(scores)], quantile)) if np.isfinite(scores).any() else np.inf
        return cls(amps, mols, scales, threshold if threshold > 0 else np.inf, quantile)

    def scores(self, batch: EnvironmentBatch) -> np.ndarray:
        """Score of each molecule of ``batch`` (n_molecules,): max over its atoms of d(a), / t."""
        amplitudes, numbers, molecules = _described(batch)
        per_atom = np.full(len(numbers), np.inf)
        for e in np.unique(numbers):
            rows = numbers == e
            if int(e) in self.amplitudes:
                nearest = _nearest(amplitudes[rows], self.amplitudes[int(e)], None, None)
                per_atom[rows] = nearest / self.scales[int(e)]
        out = np.full(batch.n_molecules, -np.inf)
        np.maximum.at(out, molecules, per_atom)
        return np.maximum(out, 0.0) / self.threshold


def _described(batch: EnvironmentBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Amplitudes (n_env, C·L) in float64, centre atomic numbers and molecule indices."""
    amplitudes = channel_amplitudes(batch.coeffs.detach().to("cpu", torch.float64), batch.config.band_limit).numpy()
    return amplitudes, batch.centre_numbers.cpu().numpy(), batch.molecule_index.cpu().numpy()


def _nearest(points: np.ndarray, reference: np.ndarray, point_mols: np.ndarray | None, reference_mols: np.ndarray | None) -> np.ndarray:
    """min_b ‖p − r_b‖ for each row p of ``points``, in row blocks; with molecule indices,
    reference rows of the point's own molecule are left out (inf where none is left)."""
    ref_sq = np.sum(reference**2, axis=1)
    out = np.empty(len(points))
    for start in range(0, len(points), BLOCK_ROWS):
        block = points[start : start + BLOCK_ROWS]
        squared = np.sum(block**2, axis=1)[:, None] - 2.0 * block @ reference.T + ref_sq[None, :]
        if point_mols is not None:
            squared[point_mols[start : start + BLOCK_ROWS, None] == reference_mols[None, :]] = np.inf
        out[start : start + BLOCK_ROWS] = np.sqrt(np.maximum(squared.min(axis=1), 0.0))
    return out
