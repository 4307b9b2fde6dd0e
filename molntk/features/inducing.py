"""Inducing environments of sparse (Nyström) molecular kernels.

A molecular kernel is a sum of environment kernels, Θ(M, M') = Σ_{a∈M} Σ_{b∈M'} [Z_a = Z_b]
k(env_a, env_b) (:mod:`molntk.molecular.pair_sum`). A sparse model expands the energy in m
inducing environments s_1 … s_m instead of in the training molecules,

    E(M) = Σ_j w_j Θ(M, {s_j}),   Θ(M, {s}) = Σ_{a∈M} [Z_a = Z_s] k(env_a, s),

so it needs only Θ between molecules and single environments (n × m instead of n × n
molecule pairs) and among the inducing environments (m × m); with all training
environments as inducing set it is exact kernel ridge on Θ
(:mod:`molntk.regression.sparse`). Treating each inducing environment as a molecule of
its own (:func:`environments_as_molecules`) makes those kernels ordinary molecular
kernels, computed by the same code, blocks, cache and devices.

Choice of the m environments (:func:`inducing_rows`, one rule for every local kernel),
from the atoms of the first ``pool`` molecules (the training molecules), per centre
element e:

- m_e ∝ n_e (the element's share of the pool; largest remainders, at least one per
  element present when m allows, at most n_e);
- ``"fps"``: farthest-point sampling in the space the kernel compares atoms in: first the
  atom of largest norm, then repeatedly the one farthest (Euclidean) from all chosen so
  far, so rare environments are covered. For molntk's feature maps
  (:func:`inducing_environments`) that space is the rotation-invariant per-channel
  amplitudes a_{c,l}(x) = (Σ_m f̂^l_{c,m}(x)²)^{1/2} (C · L numbers per environment), or
  those of several maps of the same atoms side by side, each scaled to unit mean square
  norm (the networks of a kernel sum); a
  baseline with descriptors of its own (FCHL19, SOAP) picks in its own descriptor space
  (:func:`molntk.molecular.descriptors.inducing_atoms`);
- ``"random"``: a seeded uniform sample without replacement.

Inducing molecules (:func:`inducing_molecules`): the configurations in which a force field's
exact form is expanded when it is sparse in configurations, chosen alike among molecules, by
farthest points in the molecules' element-wise sums of those amplitudes, or at random.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from molntk.errors import InputError
from molntk.features.environments import EnvironmentBatch, molecule_rows

SELECTIONS = ("fps", "random")


def allocate(counts: dict[int, int], m: int) -> dict[int, int]:
    """m_e for each element: m · n_e / Σn by largest remainders, ≥ 1 per element when
    m ≥ number of elements, ≤ n_e; Σ m_e = min(m, Σ n_e)."""
    total = sum(counts.values())
    m = min(m, total)
    share = {e: m * n / total for e, n in counts.items()}
    out = {e: min(counts[e], math.floor(s)) for e, s in share.items()}
    if m >= len(counts):
        out = {e: max(1, k) for e, k in out.items()}
    order = sorted(counts, key=lambda e: (-(share[e] - math.floor(share[e])), e))
    while sum(out.values()) > m:  # raising every element to one overshot m: take from the largest
        biggest = max(out, key=lambda e: (out[e], -e))
        out[biggest] -= 1
    while sum(out.values()) < m:
        for e in order:
            if sum(out.values()) < m and out[e] < counts[e]:
                out[e] += 1
        order = [e for e in order if out[e] < counts[e]]
    return out


def channel_amplitudes(coeffs: Tensor, band_limit: int) -> Tensor:
    """a_{c,l} = ‖f̂^l_c‖ of environments (n, C, L²) → (n, C · L), rotation invariant."""
    parts = [coeffs[..., l * l : (l + 1) * (l + 1)].pow(2).sum(-1).sqrt() for l in range(band_limit)]
    return torch.stack(parts, dim=-1).flatten(1)


def farthest_points(points: Tensor, k: int) -> Tensor:
    """Indices of k rows of ``points`` (n, d) by farthest-point sampling from the row of
    largest norm (ties: lowest index), in the order chosen; squared distances to each new
    pick y as ‖x‖² − 2 x·y + ‖y‖² (one matrix-vector product), never below 0."""
    chosen = torch.empty(k, dtype=torch.long)
    norms = points.pow(2).sum(1)
    pick = int(torch.argmax(norms))
    distance = torch.full_like(norms, math.inf)
    for i in range(k):
        chosen[i] = pick
        distance = torch.minimum(distance, (norms - 2 * (points @ points[pick]) + norms[pick]).clamp_min_(0))
        distance[pick] = -1.0  # never again (min keeps it), even among duplicates at distance 0
        pick = int(torch.argmax(distance))
    return chosen


class AtomRows(Protocol):
    """Atoms of a list of molecules, one row each in molecule order (an
    :class:`~molntk.features.environments.EnvironmentBatch`, or the per-atom descriptors of
    :mod:`molntk.molecular`)."""

    centre_numbers: Tensor
    molecule_index: Tensor
    n_molecules: int


def inducing_rows(atoms: AtomRows, m: int, points: Callable[[Tensor], Tensor], *, method: str = "fps", seed: int = 0,
                  pool: int | None = None) -> Tensor:
    """Rows (ascending, into ``atoms``) of m inducing atoms among the atoms of the first
    ``pool`` molecules (all: None): m_e per element by :func:`allocate`, then per element
    ``"fps"`` (:func:`farthest_points` on ``points(rows)``, the float64 (k, d) vectors of
    those rows in the space the atoms are compared in) or ``"random"`` (seeded, without
    replacement)."""
    if method not in SELECTIONS:
        raise InputError("selection", f"must be one of {SELECTIONS}, got {method!r}")
    if not isinstance(m, int) or m < 1:
        raise InputError("environments", f"must be a whole number ≥ 1, got {m!r}")
    pool = atoms.n_molecules if pool is None else pool
    if not 1 <= pool <= atoms.n_molecules:
        raise InputError("pool", f"must be between 1 and the {atoms.n_molecules} molecules of the batch, got {pool}")
    candidates = molecule_rows(atoms.molecule_index, atoms.n_molecules, np.arange(pool))[0].cpu()
    numbers = atoms.centre_numbers.cpu()[candidates]
    elements = sorted(int(e) for e in torch.unique(numbers))
    by_element = {e: candidates[numbers == e] for e in elements}
    quota = allocate({e: len(rows) for e, rows in by_element.items()}, m)
    rng = np.random.default_rng(seed)
    picked = []
    for e in elements:
        rows, k = by_element[e], quota[e]
        if k == 0:
            continue
        if method == "random":
            picked.append(rows[torch.from_numpy(rng.choice(len(rows), size=k, replace=False))])
        else:
            picked.append(rows[farthest_points(points(rows), k)])
    return torch.sort(torch.cat(picked)).values


def inducing_environments(
    feats: EnvironmentBatch | Sequence[EnvironmentBatch], m: int, *, method: str = "fps", seed: int = 0,
    pool: int | None = None,
) -> Tensor:
    """Rows (ascending, into ``feats``) of m inducing environments from the environments of
    the first ``pool`` molecules (all: None), by :func:`inducing_rows` in the channel
    amplitudes (:func:`channel_amplitudes`); see the module docstring. Several batches of
    the same atoms (one per network of a kernel sum, e.g. a short and a long cutoff) are
    compared in all their maps at once: the amplitudes of batch k over an element's candidate
    rows R scaled to unit mean square norm, a_k(x) / (mean_{y∈R} ‖a_k(y)‖²)^{1/2}, and
    concatenated, so each batch's distances count alike whatever its norm."""
    batches = [feats] if isinstance(feats, EnvironmentBatch) else list(feats)
    first = batches[0]
    if any(b.n_env != first.n_env or not torch.equal(b.centre_numbers, first.centre_numbers) for b in batches[1:]):
        raise InputError("feats", "the feature batches of one choice must hold the same atoms in the same order")

    def amplitudes(rows: Tensor) -> Tensor:
        parts = [channel_amplitudes(b.coeffs[rows.to(b.coeffs.device)].to(torch.float64), b.config.band_limit)
                 for b in batches]
        if len(parts) == 1:
            return parts[0]
        return torch.cat([a / a.pow(2).sum(1).mean().sqrt().clamp_min(1e-300) for a in parts], dim=1)

    return inducing_rows(first, m, amplitudes, method=method, seed=seed, pool=pool)


def molecule_amplitudes(feats: EnvironmentBatch) -> Tensor:
    """A rotation- and permutation-invariant vector per molecule, (n_molecules, E · C · L):
    for each centre element e present in ``feats`` (ascending Z), the channel amplitudes
    (:func:`channel_amplitudes`) summed over the molecule's atoms of element e, d_e(M) =
    Σ_{a∈M, Z_a=e} a(env_a); float64."""
    amplitudes = channel_amplitudes(feats.coeffs.to(torch.float64), feats.config.band_limit)
    elements = torch.unique(feats.centre_numbers)
    slot = torch.searchsorted(elements, feats.centre_numbers)
    out = amplitudes.new_zeros(feats.n_molecules * elements.numel(), amplitudes.shape[1])
    out.index_add_(0, feats.molecule_index * elements.numel() + slot, amplitudes)
    return out.view(feats.n_molecules, -1).cpu()


def inducing_molecules(feats: EnvironmentBatch, m: int, *, method: str = "fps", seed: int = 0) -> np.ndarray:
    """Indices (ascending, int64) of min(m, n) of the n molecules of ``feats``: ``"fps"`` by
    :func:`farthest_points` on :func:`molecule_amplitudes` (the first pick the molecule of largest
    norm, then repeatedly the one farthest from all chosen), ``"random"`` a seeded uniform
    sample without replacement. The inducing configurations of a force field in the GDML form
    (:class:`~molntk.models.force_field.SO3ForceFieldRegressor`, ``inducing_frames``)."""
    if method not in SELECTIONS:
        raise InputError("inducing_selection", f"must be one of {SELECTIONS}, got {method!r}")
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise InputError("inducing_frames", f"must be a whole number ≥ 1, got {m!r}")
    k = min(m, feats.n_molecules)
    if method == "random":
        picked = np.random.default_rng(seed).choice(feats.n_molecules, size=k, replace=False)
    else:
        picked = farthest_points(molecule_amplitudes(feats), k).numpy()
    return np.sort(picked).astype(np.int64)


def environments_as_molecules(feats: EnvironmentBatch, rows: Tensor) -> EnvironmentBatch:
    """Environments ``rows`` of ``feats``, each a molecule of its own (molecule j = row j)."""
    rows = torch.as_tensor(rows, dtype=torch.long, device=feats.coeffs.device)
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= feats.n_env):
        raise InputError("rows", f"must index the {feats.n_env} environments of the batch")
    return EnvironmentBatch(
        coeffs=feats.coeffs[rows],
        centre_numbers=feats.centre_numbers[rows],
        molecule_index=torch.arange(rows.numel(), device=rows.device),
        atom_index=torch.zeros_like(rows),
        n_molecules=int(rows.numel()),
        config=feats.config,
    )


def concatenate(first: EnvironmentBatch, second: EnvironmentBatch) -> EnvironmentBatch:
    """The molecules of ``first`` followed by those of ``second`` (same feature config)."""
    if first.config != second.config:
        raise InputError("second", "has environments of another feature config than the first batch")
    return EnvironmentBatch(
        coeffs=torch.cat([first.coeffs, second.coeffs]),
        centre_numbers=torch.cat([first.centre_numbers, second.centre_numbers]),
        molecule_index=torch.cat([first.molecule_index, second.molecule_index + first.n_molecules]),
        atom_index=torch.cat([first.atom_index, second.atom_index]),
        n_molecules=first.n_molecules + second.n_molecules,
        config=first.config,
    )
