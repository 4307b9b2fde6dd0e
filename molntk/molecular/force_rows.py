"""Energy and force rows of a molecular SO(3) kernel against fixed reference environments.

For query molecules M (atoms at r) and reference molecules s_1 … s_m (in a sparse model the
inducing environments, each a molecule of its own:
:func:`~molntk.features.inducing.environments_as_molecules`), :func:`force_rows` returns

    Θ(M, s_j) = Σ_{a∈M} Σ_{b∈s_j} [Z_a = Z_b] k(env_a, b)       (``element`` pairing; ``shared``: all pairs)
    ∂Θ(M, s_j)/∂r                                               (3n per molecule, atom-major)

for every j at once (the energy and force rows of a sparse energy–force model:
K_E = Θ, K_F = −∂Θ/∂r). Only first derivatives with respect to the query side are needed, and
the environment kernel factors through the network's first layer, the Lift: for a pair (a, b)
its cross kernel on the measure's support is C_ab(u) = σ_w²/C Σ_l ⟨M^l_ab, D^l(u)⟩ + σ_b² with
the moments M^l_ab = Σ_c f̂^l_c(a) f̂^l_c(b)ᵀ, and every later layer maps (C_ab, v_s(a), v_s(b))
pair by pair, v_s(a) the variance ψ^{aa}(e) that step s of the network reads (a function of
f̂(a) alone, from a's self-kernel). Hence, per pair,

    ∂k_ab/∂f̂(a) = Σ_{m'} ∂M^l_{ab,mm'} f̂^l_{c,m'}(b) + Σ_s (∂k_ab/∂v_s(a)) ∇v_s(a),
    ∂M_ab = σ_w²/C · (∂k_ab/∂C_ab) D(u)

(:meth:`~molntk.kernels.so3.lift.Lift.cross_gradients`), where ∂k_ab/∂C_ab and ∂k_ab/∂v_s(a) of
ALL pairs come from one reverse-mode pass with C and the per-pair copies of v_s(a) as leaves
(each pair's output depends on its own row only; the erf/exp activation-then-mean steps run
their compiled backward, :mod:`molntk.kernels.pooled_gradients`), and ∇v_s(a) from one
backward pass per step through the query environments' self-kernels. The chain to the
positions goes pair by pair through the feature maps (:mod:`molntk.features.pair_jacobians`):
with t_{ab'j} = Σ_{k,(l,m)} ∂k_aj/∂f̂_{(Z_b',k)}(a) J_ab' for each neighbour b' of a,

    ∂Θ(M, s_j)/∂r_b' += t_{ab'j},    ∂Θ(M, s_j)/∂r_a −= t_{ab'j}.

Any network that :class:`~molntk.kernels.so3.network.SO3Network` accepts is handled (the
variance terms cover every layer that reads them); only the erf and exp activation-then-mean
steps have the compiled backward, others are differentiated through torch's formulas (correct,
several times slower).

Cost: per environment pair, the energy kernel's forward (moments, synthesis GEMM, fused
activation pass) plus the compiled backward pass, the transposed synthesis GEMM, the moments'
bilinear form (C · b² per pair) and the pair contraction (K · b² · 3 per neighbour). Measured
with the recipe's default model (``lift:3 erf pool dense``, Lebedev grid of band limit 5,
8 radial Gaussians, elements H C N O F), m = 1,000 inducing environments (FPS), float64, one
thread on a 2-core machine shared with a heavy benchmark (load ≈ 5: upper bounds): ethanol
(9 atoms) 116 ms per molecule for both kinds of rows against 30 ms for the energy rows alone
(``kernel(molecules, inducing)``), 3.9×; aspirin (21 atoms) 217 ms against 52 ms, 4.1×.
Contracted with weights (the forces of a fitted expansion, ``weights=``): 82 ms against 32 ms
for ethanol, 2.5×.

Molecules are processed in batches of at most :data:`ATOM_BATCH` atoms (features, pair
Jacobians and a (atoms, m, 3) accumulator per batch), their environment pairs with the
references in the kernel's blocks (:func:`~molntk.molecular.pair_sum.pair_sum`), each block in
tiles of at most :func:`~molntk.kernels.so3.network.tile_elements` group values (as the
energy kernel). float64; the kernel's device (the compiled backward is CPU-only, on CUDA
torch's formulas are differentiated; CUDA = CPU checked by
``tests/models/test_force_field.py::test_cuda_force_field_matches_cpu``, which needs a GPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.features.environments import EnvironmentBatch, environment_features, molecule_rows
from molntk.features.elements import mix_elements
from molntk.features.pair_jacobians import PairJacobians, pair_jacobians
from molntk.kernels.so3.network import tile_elements, tile_shape
from molntk.molecular.derivative_kernels import check_kernel
from molntk.molecular.pair_sum import atom_counts, pair_sum
from molntk.molecular.so3 import SO3MolecularKernel

#: Query atoms per batch: bounds the features, pair Jacobians and the (atoms, m, 3) accumulator.
ATOM_BATCH = 2**11


@dataclass(frozen=True)
class ForceRows:
    """``energy`` (N, m): Θ(M_i, s_j); ``gradient`` (3Σn_i, m): ∂Θ(M_i, s_j)/∂r_i, the rows of
    molecule 1 (atom-major: row 3a + d is component d of atom a), then molecule 2, …"""

    energy: np.ndarray
    gradient: np.ndarray


@dataclass(frozen=True)
class _Query:
    """One batch of query molecules: their feature maps, the coefficients the lift reads
    (l below its band limit b), their self-kernel traces (one (n,) tensor per network step,
    then the output), the pair Jacobians with the per-pair order (pair, (l, m), k, axis), and
    for each step the variance term of each pair's contribution, u_s[p] = ∇v_s(a) · J_ab
    ((P, 3); None where the variance does not depend on the input)."""

    feats: EnvironmentBatch
    coeffs: Tensor
    trace: list[Tensor]
    pairs: PairJacobians
    jacobian: Tensor
    variance_terms: list[Tensor | None]


def force_rows(kernel: SO3MolecularKernel, molecules: Sequence[Molecule], references: EnvironmentBatch,
               weights: np.ndarray | None = None) -> ForceRows:
    """Θ(M_i, s_j) and ∂Θ(M_i, s_j)/∂r_i of ``molecules`` against the reference molecules of
    ``references`` (feature maps of ``kernel.features``), see the module docstring.

    With ``weights`` w (one per reference molecule) the rows are contracted with w as they are
    computed: ``energy`` (N, 1) = Σ_j w_j Θ(M_i, s_j) and ``gradient`` (3Σn, 1) = Σ_j w_j ∂Θ(M_i, s_j)/∂r_i,
    the energy and minus the forces of the expansion Σ_j w_j Θ(·, s_j). The reverse pass then
    carries w as its cotangent and the chain to the positions runs once per query atom pair
    instead of once per (pair, s_j)."""
    check_kernel(kernel)
    if not molecules:
        raise InputError("molecules", "no molecules")
    if references.n_molecules == 0:
        raise InputError("references", "no reference molecules")
    if references.config != kernel.features:
        raise InputError("references", "has feature maps of another feature config than the kernel's")
    ctx, net = kernel.ctx, kernel.network
    band2 = net.layers[0].band_limit ** 2
    ref = references.to(ctx.device)
    x2 = ref.coeffs[..., :band2].to(ctx.dtype)
    trace2 = net.self_kernels(x2, ctx=ctx)
    counts2 = atom_counts(ref).to(ctx.dtype)
    per_molecule = None if weights is None else _weights(weights, ref.n_molecules, ctx.device)
    if per_molecule is not None and kernel.reduce == "mean":
        per_molecule = per_molecule / counts2
    per_env = None if per_molecule is None else per_molecule[ref.molecule_index]
    energy, gradient = [], []
    for batch in _batches(molecules):
        query = _query(kernel, batch, band2)
        feats = query.feats
        grad = torch.zeros(feats.n_env, ref.n_env if per_env is None else 1, 3, dtype=ctx.dtype, device=ctx.device)

        def block(i1: Tensor, i2: Tensor, diagonal: bool) -> tuple[Tensor]:
            return (_block(kernel, query, x2, trace2, i1, i2, per_env, grad),)

        (theta,) = pair_sum(block, feats, ref, n_outputs=1, mirror=False, pairing=kernel.pairing,
                            block_size=kernel.block_size, dtype=ctx.dtype, device=ctx.device)
        if per_env is None:
            grad = torch.zeros(feats.n_env, ref.n_molecules, 3, dtype=ctx.dtype, device=ctx.device).index_add_(1, ref.molecule_index, grad)
            norm = counts2[None, :]
        else:
            theta, norm = theta @ per_molecule[:, None], counts2.new_ones(1, 1)
        if kernel.reduce == "mean":
            norm = atom_counts(feats).to(ctx.dtype)[:, None] * norm
            theta, grad = theta / norm, grad / norm[feats.molecule_index][..., None]
        energy.append(theta.cpu().numpy())
        gradient.append(grad.permute(0, 2, 1).reshape(-1, grad.shape[1]).cpu().numpy())
    return ForceRows(np.concatenate(energy), np.concatenate(gradient))


def _weights(weights: np.ndarray, n: int, device: torch.device | str) -> Tensor:
    """``weights`` as a float64 tensor of length n on ``device`` (InputError otherwise)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or not np.all(np.isfinite(w)):
        raise InputError("weights", f"must be {n} finite numbers, one per reference molecule, got shape {w.shape}")
    return torch.as_tensor(w, device=device)


def _batches(molecules: Sequence[Molecule]) -> list[list[Molecule]]:
    """Consecutive molecules, at most :data:`ATOM_BATCH` atoms per batch (one molecule at least)."""
    out, size = [[]], 0
    for m in molecules:
        if out[-1] and size + m.n_atoms > ATOM_BATCH:
            out.append([])
            size = 0
        out[-1].append(m)
        size += m.n_atoms
    return out


def _query(kernel: SO3MolecularKernel, batch: list[Molecule], band2: int) -> _Query:
    """Feature maps, self-kernel trace, pair Jacobians and variance terms of a batch."""
    ctx, net, cfg = kernel.ctx, kernel.network, kernel.features
    feats = environment_features(batch, cfg, dtype=ctx.dtype, device=ctx.device)
    x1 = feats.coeffs[..., :band2].detach().requires_grad_(True)
    pairs = pair_jacobians(batch, cfg, n_coeffs=band2, dtype=ctx.dtype, device=ctx.device)
    with torch.enable_grad():
        trace = net.self_kernels(x1, ctx=ctx)
        grads = [torch.autograd.grad(v.sum(), x1, retain_graph=True)[0] if v.requires_grad else None for v in trace[:-1]]
    mixing = cfg.element_mixing()  # ∂f̂_(e,k)(a)/∂r_b = A_{e Z_b} J_ab[k]: pull back by A (symmetric)
    blocks = lambda t: mix_elements(t.unflatten(1, (len(cfg.elements), cfg.n_radial)), mixing, 1)[pairs.centre, pairs.slot]  # noqa: E731  (P, K, b²)
    terms = [None if v is None else torch.einsum("pkf,pkfx->px", blocks(v), pairs.jacobian) for v in grads]
    jacobian = pairs.jacobian.permute(0, 2, 1, 3).flatten(1, 2)  # (P, b²·K, 3)
    return _Query(feats, x1.detach(), [t.detach() for t in trace], pairs, jacobian, terms)


def _block(kernel: SO3MolecularKernel, query: _Query, x2: Tensor, trace2: list[Tensor], i1: Tensor, i2: Tensor,
           weights: Tensor | None, grad: Tensor) -> Tensor:
    """k(a, b) for the query environments i1 × reference environments i2, (len(i1), len(i2));
    adds each pair's position gradient into ``grad`` (query atoms, reference environments, 3),
    or with ``weights`` (one per reference environment) their weighted sum into ``grad``
    (query atoms, 1, 3)."""
    ctx = kernel.ctx
    out = x2.new_empty(len(i1), len(i2))
    height, width = tile_shape(len(i1), len(i2), max(1, tile_elements(ctx.device) // ctx.support_size), square=False)
    for r in range(0, len(i1), height):
        rows = i1[r : r + height]
        for c in range(0, len(i2), width):
            cols = i2[c : c + width]
            theta, g, d_vars = _tile(kernel, query, x2, trace2, rows, cols, None if weights is None else weights[cols])
            out[r : r + height, c : c + width] = theta
            _chain_to_positions(kernel, query, g, d_vars, rows, cols if weights is None else cols.new_zeros(1), grad)
    return out


def _tile(kernel: SO3MolecularKernel, query: _Query, x2: Tensor, trace2: list[Tensor], rows: Tensor, cols: Tensor,
          weights: Tensor | None) -> tuple[Tensor, Tensor, list[Tensor | None]]:
    """k(a, b) (n1, n2), ∂k(a, b)/∂C_ab pulled back to f̂(a) by the lift ((n2, n1, b², C),
    :meth:`~molntk.kernels.so3.lift.Lift.cross_gradients`) and ∂k(a, b)/∂v_s(a) ((n1, n2) or
    None) of one tile of pairs, by one reverse-mode pass with the lift's cross kernels and
    per-pair copies of the query's variances as leaves (module docstring). With ``weights``
    (n2,) the derivatives are those of Σ_b w_b k(a, b), summed over b ((1, n1, b², C), (n1, 1))."""
    ctx, net = kernel.ctx, kernel.network
    lift, x1, right = net.layers[0], query.coeffs[rows], x2[cols]
    with torch.enable_grad():
        lifted = lift.cross(x1, right, ctx).requires_grad_(True)
        leaves = [v[rows, None].expand(len(rows), len(cols)).clone().requires_grad_(True) for v in query.trace[:-1]]
        nngp, theta, on_group = lifted, lifted, True
        for (rule, pools), v1, v2 in zip(net.steps(ctx), leaves, trace2[:-1]):
            v2 = v2[cols]
            nngp, theta = rule(nngp, theta, v1[..., None] if on_group else v1, v2[None, :, None] if on_group else v2[None, :], ctx)
            on_group = on_group and not pools
        cotangent = torch.ones_like(theta) if weights is None else weights[None, :].expand_as(theta)
        d_lifted, *d_vars = torch.autograd.grad(theta, [lifted, *leaves], cotangent, allow_unused=True)
    g = lift.cross_gradients(d_lifted, right, ctx, x1.shape[1], summed=weights is not None)
    if weights is not None:
        d_vars = [None if d is None else d.sum(1, keepdim=True) for d in d_vars]
    return theta.detach(), g, d_vars


def _chain_to_positions(kernel: SO3MolecularKernel, query: _Query, g: Tensor, d_vars: list[Tensor | None], rows: Tensor,
                        cols: Tensor, grad: Tensor) -> None:
    """grad[b', j] += t_{ab'j}, grad[a, j] −= Σ_b' t_{ab'j} for the query environments a = ``rows``
    and reference environments j = ``cols`` (module docstring), from the lift's part ``g``
    (n2, n1, b², C) and the variance derivatives ``d_vars`` of :func:`_tile`."""
    pairs = query.pairs
    index, local = molecule_rows(pairs.centre, query.feats.n_env, rows)  # the pairs centred in `rows`
    if not len(index):
        return
    cfg = kernel.features
    blocks = mix_elements(g.unflatten(3, (len(cfg.elements), cfg.n_radial)), cfg.element_mixing(), 3)  # (n2, n1, b², E, K)
    picked = blocks[:, local, :, pairs.slot[index]].flatten(2)  # (P, n2, b²·K): the neighbour element's channels
    t = torch.bmm(picked, query.jacobian[index])  # (P, n2, 3)
    for d, u in zip(d_vars, query.variance_terms):
        if d is not None and u is not None:
            t += d[local][:, :, None] * u[index][:, None, :]
    grad.index_put_((pairs.neighbour[index][:, None], cols[None, :]), t, accumulate=True)
    per_centre = torch.zeros(len(rows), len(cols), 3, dtype=t.dtype, device=t.device).index_add_(0, local, t)
    grad.index_put_((rows[:, None], cols[None, :]), -per_centre, accumulate=True)
