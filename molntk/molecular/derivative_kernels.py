"""Derivative kernels of the molecular SO(3) NTK with respect to atom positions.

For an energy model whose prior covariance is the molecular NTK, Cov(E(M), E(M')) = Θ(M, M')
(:class:`~molntk.molecular.so3.SO3MolecularKernel`), the forces F_a = −∂E/∂r_a are jointly
Gaussian with the energies, with covariances (M with n atoms at r_1 … r_n, M' with n' atoms)

    Cov(E, E')      =  Θ(M, M')                      scalar
    Cov(E, F'_b)    = −∂Θ/∂r'_b                      (3n',)
    Cov(F_a, E')    = −∂Θ/∂r_a                       (3n,)
    Cov(F_a, F'_b)  =  ∂²Θ/∂r_a ∂r'_b                (3n, 3n')

(the GDML/GAP form; DESIGN.md §9). Coordinates are flattened atom-major: index 3a + d is
component d of atom a.

Two routes compute these blocks. For the one-hidden-layer pooled networks (Lift → σ → Pool →
Dense, the recipe's default) :mod:`~molntk.molecular.pooled_derivatives` evaluates them in
closed form from the lift's moments with the tangent feature maps (``method="closed-form"``,
the default where it applies: ≈ 4.5 ms per ethanol pair on the Lebedev grid of band limit 7,
one CPU thread, against ≈ 70 ms for autograd,
``benchmarks/derivative_kernels.py``). Every other network
takes the autograd route below (``method="autograd"``); the two agree to rounding
(tests/molecular/test_pooled_derivatives.py).

Autograd route (:func:`derivative_rows`): one query molecule M against a list of reference
molecules M'_1 … M'_N in one autograd graph through the feature maps
(:func:`~molntk.features.environments.environment_features` with ``positions`` as leaves)
and the kernel recursions. With weights w_j = 1 (leaves too) and S = Σ_j w_j Θ(M, M'_j):

- ∂S/∂r'_j = ∂Θ(M, M'_j)/∂r'_j (each reference molecule's positions appear in its own
  term only), so one backward pass gives every Cov(E, F'_j);
- G = ∂S/∂r (3n values, recorded with ``create_graph``), and for each of its 3n components
  one more backward pass with respect to (r', w): ∂G_i/∂r'_j = ∂²Θ(M, M'_j)/∂r_i∂r'_j and
  ∂G_i/∂w_j = ∂Θ(M, M'_j)/∂r_i.

Cost per query molecule: one forward pass of the kernel against all references (with graph,
through torch's recursion rather than the fused pass), one first-order backward pass and 3n
second-order backward passes (each ≈ 2–3 forward passes), so O(n) energy-kernel evaluations
per molecule pair, plus autograd overhead. Measured once on ethanol (9 atoms: 27 second-order
passes) at the recipe's defaults (``lift:3 erf pool dense``, Lebedev grid of band limit 5,
8 radial Gaussians, elements H C N O F), float64, one torch and one BLAS thread on a 2-core
machine shared with a heavy benchmark (load ≈ 9, so upper bounds): all four blocks
0.19–0.26 s per pair (chunks of 1–20 reference molecules), against ≈ 1.5–2.5 ms per pair for
Θ alone and 5–8 ms per pair for Θ with ∂Θ/∂r' (``second=False``); the fitted energy's
gradient (:func:`expansion_energy_and_gradient`) 13–15 ms per pair.

:func:`joint_kernel` assembles the (N + 3Σn) × (N' + 3Σn') block matrix of lists of molecules,
rows [E_1 … E_N, F_1 … F_N] (each F_i its 3n_i components); a symmetric call (second list
omitted) computes each pair once (row i against molecules i … N) and mirrors it.

The reference side is cut into chunks of at most :data:`PAIR_BUDGET` environment pairs with
the query (one graph per chunk). float64 throughout; the kernel's device (CUDA = CPU checked
through the exact force field by ``tests/models/test_force_field.py::test_cuda_force_field_matches_cpu``,
which needs a GPU).
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.features.environments import environment_features
from molntk.molecular.pooled_derivatives import (
    TangentFeatures,
    closed_form_expansion,
    closed_form_rows,
    closed_form_supported,
    contracted_tangent_features,
    tangent_features,
    value_budget,
)
from molntk.molecular.sets import molecule_digests
from molntk.molecular.so3 import SO3MolecularKernel
from molntk.scale.cache import BlockCache
from molntk.scale.devices import map_over_threads
from molntk.scale.progress import ProgressCallback
from molntk.utils.autograd import grads_or_zeros

#: Environment pairs (query × reference) per autograd graph (the graph of a second-order
#: pass holds several times the first-order one's temporaries: 2¹² pairs stay well under 1 GB).
PAIR_BUDGET = 2**12
#: The 3n second-order passes as one vmapped backward pass (``is_grads_batched``) instead of a
#: loop. Off: on CPU it was ≈ 20 % faster for chunks of ≲ 10 ethanol molecules but 3× slower
#: for chunks of 20 (its temporaries are 3n times larger), and the loop with large chunks was
#: fastest (measured on a loaded 2-core machine; the loop is also the fallback where vmap
#: cannot trace an operation).
BATCHED = False
#: How :func:`derivative_rows` computes the derivatives.
METHODS = ("auto", "closed-form", "autograd")



@dataclass
class DerivativeRows:
    """Derivatives of Θ(M, M'_j) for one query M (n atoms) and references M'_1 … M'_N (n'_j atoms):

    - ``theta`` (N,): Θ(M, M'_j);
    - ``d_ref`` (3Σn'_j,): ∂Θ(M, M'_j)/∂r'_j, concatenated over j (atom-major per molecule);
    - ``d_query`` (3n, N): ∂Θ(M, M'_j)/∂r (None when ``second=False``);
    - ``mixed`` (3n, 3Σn'_j): ∂²Θ(M, M'_j)/∂r ∂r'_j (None when ``second=False``).

    Covariances: Cov(E, E') = theta, Cov(E, F') = −d_ref, Cov(F, E') = −d_query, Cov(F, F') = mixed.
    """

    theta: np.ndarray
    d_ref: np.ndarray
    d_query: np.ndarray | None
    mixed: np.ndarray | None


def check_kernel(kernel: SO3MolecularKernel) -> None:
    if not isinstance(kernel, SO3MolecularKernel):
        raise InputError("kernel", f"expected an SO3MolecularKernel, got {type(kernel).__name__}")
    if kernel.pairing == "atom-index":
        raise InputError("kernel", "pairing 'atom-index' (padded layout) has no derivative kernels; use 'element' or 'shared'")
    if kernel.ctx.dtype != torch.float64:
        raise InputError("kernel", f"derivative kernels need a float64 kernel, got {kernel.ctx.dtype}")


def _chunks(molecules: Sequence[Molecule], n_query: int, budget: int) -> list[range]:
    """Consecutive reference molecules, at most ``budget`` / n_query atoms per chunk (one at least)."""
    per_chunk = max(1, budget // max(n_query, 1))
    chunks, start, size = [], 0, 0
    for i, m in enumerate(molecules):
        if size and size + m.n_atoms > per_chunk:
            chunks.append(range(start, i))
            start, size = i, 0
        size += m.n_atoms
    if start < len(molecules):
        chunks.append(range(start, len(molecules)))
    return chunks


def _rows_chunk(kernel: SO3MolecularKernel, query: Molecule, refs: Sequence[Molecule], second: bool) -> DerivativeRows:
    device, cfg = kernel.ctx.device, kernel.features
    r = torch.tensor(query.positions, dtype=torch.float64, device=device, requires_grad=True)
    r_ref = torch.tensor(np.concatenate([m.positions for m in refs]), dtype=torch.float64, device=device, requires_grad=True)
    w = torch.ones(len(refs), dtype=torch.float64, device=device, requires_grad=True)
    f_query = environment_features([query], cfg, dtype=torch.float64, device=device, positions=r)
    f_ref = environment_features(list(refs), cfg, dtype=torch.float64, device=device, positions=r_ref)
    theta = kernel(f_query, f_ref).ntk[0]
    total = (theta * w).sum()
    if not second:
        (d_ref,) = grads_or_zeros(total, [r_ref])
        return DerivativeRows(theta.detach().cpu().numpy(), d_ref.reshape(-1).detach().cpu().numpy(), None, None)
    g_query, d_ref = grads_or_zeros(total, [r, r_ref], create_graph=True)
    g_query = g_query.reshape(-1)
    n3, n_ref3 = g_query.numel(), r_ref.numel()
    mixed = torch.zeros(n3, n_ref3, dtype=torch.float64, device=device)
    d_query = torch.zeros(n3, len(refs), dtype=torch.float64, device=device)
    batched = BATCHED and g_query.requires_grad
    if batched:
        eye = torch.eye(n3, dtype=torch.float64, device=device)
        try:
            m_all, d_all = torch.autograd.grad(g_query, [r_ref, w], grad_outputs=eye, is_grads_batched=True,
                                               allow_unused=True, retain_graph=True)
        except RuntimeError:  # an operation vmap cannot batch: one pass per component
            batched = False
        else:
            if m_all is not None:
                mixed = m_all.reshape(n3, -1)
            if d_all is not None:
                d_query = d_all
    if not batched:
        for i in range(n3):
            m_i, d_i = grads_or_zeros(g_query[i], [r_ref, w], retain_graph=i + 1 < n3)
            mixed[i], d_query[i] = m_i.reshape(-1), d_i
    as_np = lambda t: t.detach().cpu().numpy()  # noqa: E731
    return DerivativeRows(as_np(theta), as_np(d_ref.reshape(-1)), as_np(d_query), as_np(mixed))


def derivative_rows(kernel: SO3MolecularKernel, query: Molecule, references: Sequence[Molecule], *,
                    second: bool = True, budget: int = PAIR_BUDGET, method: str = "auto") -> DerivativeRows:
    """Θ(M, M'_j) and its position derivatives for one query molecule M against ``references``
    (module docstring); ``second=False`` skips ``d_query`` and ``mixed`` (one backward pass
    instead of 3n + 1: enough for energies predicted from a joint model). ``method``:
    "autograd" (any network), "closed-form" (:mod:`~molntk.molecular.pooled_derivatives`:
    one-hidden-layer pooled networks, the same numbers at a fraction of the cost) or "auto"
    (closed form where the network allows it)."""
    check_kernel(kernel)
    if len(references) == 0:
        raise InputError("references", "no reference molecules")
    if _closed_form(kernel, method):
        rows = closed_form_rows(kernel, tangent_features(kernel, [query]), tangent_features(kernel, references), second=second)
        return DerivativeRows(*rows)
    parts = [_rows_chunk(kernel, query, [references[j] for j in c], second) for c in _chunks(references, query.n_atoms, budget)]
    cat = lambda name, axis: None if getattr(parts[0], name) is None else np.concatenate([getattr(p, name) for p in parts], axis=axis)  # noqa: E731
    return DerivativeRows(cat("theta", 0), cat("d_ref", 0), cat("d_query", 1), cat("mixed", 1))


def _closed_form(kernel: SO3MolecularKernel, method: str) -> bool:
    """Whether ``method`` ("auto", "closed-form", "autograd") selects the closed form for ``kernel``."""
    if method not in METHODS:
        raise InputError("method", f"must be one of {', '.join(METHODS)}, got {method!r}")
    supported = closed_form_supported(kernel)
    if method == "closed-form" and not supported:
        raise InputError("method", f"the closed form needs a Lift → nonlinearity → Pool → Dense network, got {kernel.network}")
    return method == "closed-form" or (method == "auto" and supported)


def force_offsets(molecules: Sequence[Molecule]) -> np.ndarray:
    """Start of each molecule's 3n force components within the force rows (length N + 1)."""
    return np.concatenate([[0], np.cumsum([3 * m.n_atoms for m in molecules])]).astype(np.int64)


def joint_kernel(kernel: SO3MolecularKernel, molecules: Sequence[Molecule],
                 others: Sequence[Molecule] | None = None, *, method: str = "auto",
                 cache_dir: str | Path | None = None, progress: ProgressCallback | None = None) -> np.ndarray:
    """The joint covariance of energies and forces, (N + 3Σn) × (N' + 3Σn') (module docstring):

        [[Θ,         −∂Θ/∂r'      ],
         [−∂Θ/∂r,     ∂²Θ/∂r∂r'   ]]

    rows E_1 … E_N then the forces of molecule 1 (atom-major), 2, …; columns alike for
    ``others`` (None: ``molecules``, a symmetric matrix, each pair computed once as
    Θ(M_i, M_j) with i ≤ j: the fast-mode quadrature is symmetric in its two molecules only to
    its accuracy, ≈ 1e-5 relative on the Lebedev grid of band limit 5). Assembled from
    :func:`joint_blocks` (``method``, ``cache_dir`` and ``progress`` are its), each block's
    rows placed and, when symmetric, mirrored into the rows of the later molecules."""
    same = others is None
    n, off = len(molecules), force_offsets(molecules)
    columns = off[-1] + n if same else len(others) + force_offsets(others)[-1]
    out = None
    for a, b, block in joint_blocks(kernel, molecules, others, method=method, cache_dir=cache_dir, progress=progress):
        if out is None:
            out = np.zeros((n + off[-1], columns))
        if same:
            rows, cols, later = block_indices(n, off, a, b)
            out[np.ix_(rows, cols)] = block
            out[np.ix_(cols[later], rows)] = block[:, later].T
        else:
            out[np.concatenate([np.arange(a, b), n + np.arange(off[a], off[b])])] = block
    return out


def joint_blocks(kernel: SO3MolecularKernel, molecules: Sequence[Molecule],
                 others: Sequence[Molecule] | None = None, *, method: str = "auto",
                 cache_dir: str | Path | None = None, progress: ProgressCallback | None = None,
                 stored: bool = True) -> Iterator[tuple[int, int, np.ndarray]]:
    """:func:`joint_kernel`'s matrix :data:`CACHED_MOLECULES` query molecules at a time, in order:
    (a, b, J) with J the rows of molecules a … b−1 (their energies, then their force
    components) against the columns of molecules a … N−1 (symmetric, ``others`` None:
    :func:`block_indices`) or of all ``others`` (their energies, then their forces). ``method``
    as :func:`derivative_rows`'s; the closed form computes each molecule's tangent feature maps
    once and holds those of ``others`` (of every molecule when symmetric) throughout, those of
    the query molecules a block at a time (1,000 aspirin frames' maps at 4 Å are 4.9 GiB: the
    inducing-frames model's K_nm is then the kernel's one large array).

    ``cache_dir``: each block is read from there when stored and stored there as it is
    computed (:class:`~molntk.scale.cache.BlockCache`, keyed by the kernel's settings, the
    route and the molecules' content), so a killed computation resumes where it stopped;
    ``stored=False`` skips (does not read or yield) the blocks already stored: the pass that
    completes the cache. ``progress(done, total)``: called once with the blocks already stored
    and after each block computed (in the symmetric matrix a block's rows meet only the later
    molecules, so the first blocks cost the most)."""
    check_kernel(kernel)
    same = others is None
    others = molecules if same else others
    if len(molecules) == 0:
        raise InputError("molecules", "no molecules")
    if len(others) == 0:
        raise InputError("others", "no molecules")
    n, n2 = len(molecules), len(others)
    closed = _closed_form(kernel, method)
    cache = None if cache_dir is None else joint_block_cache(cache_dir, kernel, molecules, closed, None if same else others)
    starts = range(0, n, CACHED_MOLECULES)

    def items(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """The block's row and column items in the cache."""
        return np.arange(a, b), np.arange(a, n) if same else n + np.arange(n2)

    is_stored = [cache is not None and cache.path(*items(a, min(a + CACHED_MOLECULES, n))).exists() for a in starts]
    done = sum(is_stored)
    if progress is not None:
        progress(done, len(starts))
    rows_of = _BlockRows(kernel, molecules, others, same, closed)
    for a, was_stored in zip(starts, is_stored):
        b = min(a + CACHED_MOLECULES, n)
        if was_stored and not stored:
            continue
        block = cache.load(*items(a, b)) if was_stored else None
        if block is not None:
            yield a, b, block["joint"]
            continue
        joint = rows_of(a, b)
        if cache is not None:
            cache.store(*items(a, b), {"joint": joint})
        if not was_stored:
            done += 1
            if progress is not None:
                progress(done, len(starts))
        yield a, b, joint


def complete_joint_cache(kernel: SO3MolecularKernel, molecules: Sequence[Molecule], cache_dir: str | Path, *,
                         progress: ProgressCallback | None = None) -> None:
    """Compute and store in ``cache_dir`` the blocks of the symmetric joint matrix of
    ``molecules`` that it lacks (:func:`joint_blocks` with ``stored=False``), holding none of
    them afterwards: a later call reads the whole matrix without the tangent feature maps."""
    deque(joint_blocks(kernel, molecules, cache_dir=cache_dir, progress=progress, stored=False), maxlen=0)


class _BlockRows:
    """The rows of :func:`joint_blocks`' blocks, computed (tangent feature maps made when first
    needed: the others' once, the query molecules' a block at a time)."""

    def __init__(self, kernel: SO3MolecularKernel, molecules: Sequence[Molecule], others: Sequence[Molecule],
                 same: bool, closed: bool) -> None:
        self.kernel, self.molecules, self.others, self.same, self.closed = kernel, molecules, others, same, closed
        self.off, self.off2 = force_offsets(molecules), force_offsets(others)
        self.tangents2: TangentFeatures | None = None

    def __call__(self, a: int, b: int) -> np.ndarray:
        """Rows of molecules a … b−1 (module docstring's signs); symmetric: each pair i ≤ j from
        row i, the block's own pairs i > j mirrored. The molecules' rows are computed side by
        side on the CPU's threads (:func:`~molntk.scale.devices.map_over_threads`)."""
        kernel, n2, off, off2 = self.kernel, len(self.others), self.off, self.off2
        first = a if self.same else 0  # the first column molecule
        energy_cols = n2 - first
        joint = np.zeros((b - a + off[b] - off[a], energy_cols + off2[-1] - off2[first]))
        if self.closed:
            if self.tangents2 is None:
                self.tangents2 = tangent_features(kernel, self.others)
            query = self.tangents2 if self.same else tangent_features(kernel, self.molecules[a:b])
            budget = value_budget(kernel.ctx.device)

        def place(i: int) -> tuple[np.ndarray, np.ndarray]:
            """Compute molecule i's rows into ``joint``; its rows and columns there."""
            start = i if self.same else 0
            if self.closed:
                q = query.molecules(i, i + 1) if self.same else query.molecules(i - a, i - a + 1)
                rows = DerivativeRows(*closed_form_rows(kernel, q, self.tangents2.molecules(start, n2), budget=budget))
            else:
                rows = derivative_rows(kernel, self.molecules[i], self.others[start:], method="autograd")
            r_e, r_f = i - a, slice(b - a + off[i] - off[a], b - a + off[i + 1] - off[a])
            c_e = slice(start - first, energy_cols)
            c_f = slice(energy_cols + off2[start] - off2[first], joint.shape[1])
            joint[r_e, c_e], joint[r_e, c_f] = rows.theta, -rows.d_ref
            joint[r_f, c_e], joint[r_f, c_f] = -rows.d_query, rows.mixed
            return (np.r_[r_e, np.arange(r_f.start, r_f.stop)],
                    np.r_[c_e.start, energy_cols + np.arange(off[i] - off[a], off[i + 1] - off[a])])

        spans = map_over_threads(place, range(a, b), kernel.ctx.device)  # disjoint rows of ``joint``
        if self.same:  # pairs i > j within the block: transposes of j < i
            for later, (rows_i, cols_i) in enumerate(spans):
                for rows_j, cols_j in spans[:later]:
                    joint[np.ix_(rows_i, cols_j)] = joint[np.ix_(rows_j, cols_i)].T
        return joint


#: Molecules per stored block of :func:`joint_kernel`'s cache (their rows against themselves
#: and every later molecule).
CACHED_MOLECULES = 16


def joint_block_cache(directory: str | Path, kernel: SO3MolecularKernel, molecules: Sequence[Molecule],
                      closed: bool, others: Sequence[Molecule] | None = None) -> BlockCache:
    """The :class:`~molntk.scale.cache.BlockCache` of ``kernel``'s joint kernel on ``molecules``
    (against ``others``: their items follow the molecules'): kernel key sha256(json{settings,
    "joint", route}), item keys the molecules' content digests."""
    material = {"kernel": kernel.settings(), "matrix": "joint energy-force", "closed_form": closed}
    key = hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()
    items = molecules if others is None else [*molecules, *others]
    return BlockCache(directory, key, molecule_digests(items))


def block_indices(n: int, off: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of molecules a … b−1 (energies, then their force components) and columns of
    molecules a … n−1 in the symmetric joint matrix of n molecules (force offsets ``off``),
    and which of those columns belong to molecules b … n−1 (a boolean mask)."""
    rows = np.concatenate([np.arange(a, b), n + np.arange(off[a], off[b])])
    cols = np.concatenate([np.arange(a, n), n + np.arange(off[a], off[n])])
    later = np.concatenate([np.arange(a, n) >= b, np.arange(off[a], off[n]) >= off[b]])
    return rows, cols, later


def expansion_energy_and_gradient(kernel: SO3MolecularKernel, query: Molecule, references: Sequence[Molecule],
                                  energy_coef: np.ndarray, force_coef: np.ndarray, *,
                                  budget: int = PAIR_BUDGET, method: str = "auto") -> tuple[float, np.ndarray]:
    """s(M) = Σ_j a_j Θ(M, M'_j) + Σ_j b_jᵀ ∂Θ(M, M'_j)/∂r'_j and its gradient ∂s/∂r (n, 3),
    a = ``energy_coef`` (N,), b = ``force_coef`` (3Σn'_j,, atom-major per molecule). The mean of
    a joint energy–force model is such an s (b = −α_F), and its forces −∂s/∂r; cost: one
    forward pass and two backward passes (one of them second-order) per chunk, against 3n + 2
    for the derivative rows. ``method`` as :func:`derivative_rows`'s (the closed form contracts
    the reference tangents with b first:
    :func:`~molntk.molecular.pooled_derivatives.closed_form_expansion`)."""
    check_kernel(kernel)
    device, cfg = kernel.ctx.device, kernel.features
    a = torch.as_tensor(np.asarray(energy_coef, dtype=np.float64), device=device)
    b = torch.as_tensor(np.asarray(force_coef, dtype=np.float64), device=device)
    if _closed_form(kernel, method):
        refs = contracted_tangent_features(kernel, references, b)
        value, grad = closed_form_expansion(kernel, tangent_features(kernel, [query]), refs, a)
        return value, grad.reshape(-1, 3)
    offsets = force_offsets(references)
    value, grad = 0.0, np.zeros((query.n_atoms, 3))
    for chunk in _chunks(references, query.n_atoms, budget):
        refs = [references[j] for j in chunk]
        r = torch.tensor(query.positions, dtype=torch.float64, device=device, requires_grad=True)
        r_ref = torch.tensor(np.concatenate([m.positions for m in refs]), dtype=torch.float64, device=device, requires_grad=True)
        f_query = environment_features([query], cfg, dtype=torch.float64, device=device, positions=r)
        f_ref = environment_features(refs, cfg, dtype=torch.float64, device=device, positions=r_ref)
        theta = kernel(f_query, f_ref).ntk[0]
        if not theta.requires_grad:  # no environment meets this chunk's: Θ and its derivatives are constant
            value += float(theta @ a[chunk.start : chunk.stop])
            continue
        (d_ref,) = grads_or_zeros(theta.sum(), [r_ref], create_graph=True)
        s = theta @ a[chunk.start : chunk.stop] + d_ref.reshape(-1) @ b[offsets[chunk.start] : offsets[chunk.stop]]
        (g,) = grads_or_zeros(s, [r])
        value += float(s.detach())
        grad += g.detach().cpu().numpy()
    return value, grad
