"""Position derivatives of the molecular NTK in closed form, for one-hidden-layer pooled networks.

For the network Lift(L, σ₁, β₁) → σ → Pool → Dense(σ₂, β₂) (the recipe's ``lift:3 erf pool
dense`` and its variants) the environment NTK of a pair (a, b) is

    k_ab = σ₂² Σ_u w_u g(C_ab(u); v_a, v_b) + β₂²,        g(c; v, v') = F(c; v, v') + c Ḟ(c; v, v'),

(F, Ḟ) the activation's dual, (u, w_u) the discretisation's measure, the lift's cross kernel
C_ab(u) = σ₁²/C Σ_{l<L} ⟨M^l(f̂_a, f̂_b), D^l(u)⟩ + β₁², bilinear in the two feature maps
(M^l(x, y)_{mm'} = Σ_c x^l_{c,m} y^l_{c,m'}, C channels), and the variances
v_a = C_aa(e) = σ₁²/C ‖f̂_a‖² + β₁² (:mod:`molntk.kernels.so3.lift`, ``dense``, ``pool``).
With the tangent feature maps T_e(a) = ∂f̂_a/∂r_e (query coordinate e) and T'_ε(b) = ∂f̂_b/∂r'_ε
(reference coordinate ε), write C[x, y] for the bilinear part of C and

    Ċ_e = C[T_e(a), f̂_b],   Ċ'_ε = C[f̂_a, T'_ε(b)],   C̈_eε = C[T_e(a), T'_ε(b)],
    v̇_e = 2σ₁²/C ⟨f̂_a, T_e(a)⟩,   v̇'_ε = 2σ₁²/C ⟨f̂_b, T'_ε(b)⟩.

Then, with the partial derivatives of g taken at (C_ab(u), v_a, v_b),

    ∂k_ab/∂r_e        = σ₂² Σ_u w_u (g_c Ċ_e + g_v v̇_e),
    ∂k_ab/∂r'_ε       = σ₂² Σ_u w_u (g_c Ċ'_ε + g_v' v̇'_ε),
    ∂²k_ab/∂r_e ∂r'_ε = σ₂² Σ_u w_u (g_c C̈_eε + g_cc Ċ_e Ċ'_ε + g_cv' Ċ_e v̇'_ε + g_cv v̇_e Ċ'_ε + g_vv' v̇_e v̇'_ε).

g is elementwise in u, so every partial derivative is one value per (pair, u)
(:mod:`molntk.kernels.pooled_ntk_derivatives`: closed forms for erf and exp, autograd for
other activations). Writing Ċ_e(u) = σ₁²/C m_e · D(u) with the moments m_e = M(T_e(a), f̂_b)
flattened over l (L3 = Σ_{l<L}(2l+1)² values), every sum over u becomes a projection on the
Wigner table: Σ_u w_u g_c Ċ_e = σ₁²/C m_e · A with A = Σ_u w_u g_c(u) D(u), the C̈ term is
σ₁²/C Σ_l Σ_c T_e(a)^l_cᵀ A^l T'_ε(b)^l_c, and the g_cc term is (σ₁²/C)² m_eᵀ H m'_ε with
H = Σ_u w_u g_cc(u) D(u) D(u)ᵀ; no (e, ε, u) array is formed. The molecular blocks are the
sums over environment pairs (``element`` pairing: Z_a = Z_b; ``shared``: all); T_e(a) is
zero unless atom e/3 is in a's environment (:mod:`molntk.features.pair_jacobians`).

The autograd route (:mod:`molntk.molecular.derivative_kernels`) computes the same numbers for
every network, with 3n second-order backward passes through the feature maps. Cost here, per
environment pair with K support points and 3n, 3n' coordinates: K·r + r·L3² multiply-adds
for H (two GEMMs through the r = 165 products' basis of the measure, instead of K·L3² = 1.3
million on the grid of band limit 7; with few reference tangents 2·3n'·K·L3 instead), the g-values on
the support (K points), and (3n + 3n')·C·L3 for the moments: ≈ 4.5 ms per ethanol pair on
the Lebedev grid of band limit 7 (K = 1,036) on one CPU thread, against ≈ 70 ms for
autograd (``benchmarks/derivative_kernels.py``). The mean of a fitted energy+force model
needs only Σ_j a_j Θ + Σ_j b_jᵀ ∂Θ/∂r'_j and its gradient (:func:`closed_form_expansion`):
every term is then a u-sum against C[·, f̂_b] or C[·, T'_b] along the query tangents, pulled
back through the lift once per query environment (4·K·L3 per pair, no per-coordinate moments).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from molntk.data.molecule import Molecule
from molntk.features.environments import environment_features
from molntk.features.elements import mix_elements
from molntk.features.pair_jacobians import pair_jacobians
from molntk.kernels.pooled_ntk_derivatives import pooled_terms
from molntk.kernels.so3.dense import Dense
from molntk.kernels.so3.lift import Lift
from molntk.kernels.so3.nonlinearity import Nonlinearity
from molntk.kernels.so3.pool import Pool
from molntk.kernels.so3.wigner import coeff_slices
from molntk.molecular.so3 import SO3MolecularKernel


#: Values of the per-pair temporaries of one chunk of reference molecules on the CPU (float64:
#: 2²⁴ values = 128 MiB).
VALUE_BUDGET = 2**24


def value_budget(device: torch.device | str) -> int:
    """Values of the per-pair temporaries per chunk on ``device``: :data:`VALUE_BUDGET` on the
    CPU; on a CUDA device 1/64 of its free memory in float64 values (at least
    :data:`VALUE_BUDGET`; the uncounted intermediates of a chunk are about as large again):
    fewer, larger chunks, where small ones leave the GPU waiting on kernel launches (measured
    on an H200: 0.94 ms per ethanol pair with the CPU's budget)."""
    device = torch.device(device)
    if device.type != "cuda":
        return VALUE_BUDGET
    free, _ = torch.cuda.mem_get_info(device)
    return max(VALUE_BUDGET, free // (8 * 64))


def closed_form_supported(kernel: SO3MolecularKernel) -> bool:
    """Whether the kernel's network is Lift → nonlinearity → Pool → Dense (module docstring)."""
    kinds = (Lift, Nonlinearity, Pool, Dense)
    layers = kernel.network.layers
    return len(layers) == len(kinds) and all(isinstance(layer, kind) for layer, kind in zip(layers, kinds))


@dataclass(frozen=True)
class TangentFeatures:
    """The lift's coefficients of each environment of a list of molecules and their derivatives
    with respect to the positions of the environment's own molecule:

    - ``coeffs`` (n_env, C, b²): f̂ for l below the lift's band limit b;
    - ``tangents`` (n_env, 3n_max, C, b²): T_e = ∂f̂/∂r_e, coordinates atom-major within the
      molecule (e = 3·atom + axis), zero-padded to the largest molecule of the list;
    - ``variance`` (n_env,): v = σ₁²/C ‖f̂‖² + β₁², and ``variance_dot`` (n_env, 3n_max): ∂v/∂r_e;
    - ``numbers`` (n_env,): Z of the centre; ``molecule_index`` (n_env,); ``n_atoms`` per molecule.
    """

    coeffs: Tensor
    tangents: Tensor
    variance: Tensor
    variance_dot: Tensor
    numbers: Tensor
    molecule_index: Tensor
    n_atoms: list[int]

    def contracted(self, coef: Tensor) -> TangentFeatures:
        """One tangent per molecule, Σ_ε b_ε T'_ε (and Σ_ε b_ε ∂v/∂r'_ε), for the coefficients
        ``coef`` (3Σn,) atom-major per molecule: the reference side of an expansion
        Σ_j b_jᵀ ∂Θ(M, M_j)/∂r_j (:func:`closed_form_expansion`)."""
        coords = self.tangents.shape[1]
        offsets = np.concatenate([[0], np.cumsum(self.n_atoms)]) * 3
        padded = coef.new_zeros(len(self.n_atoms), coords)
        for j, (start, stop) in enumerate(zip(offsets[:-1], offsets[1:])):
            padded[j, : stop - start] = coef[start:stop]
        per_env = padded[self.molecule_index]  # (n_env, 3n_max)
        tangents = torch.einsum("ne,necf->ncf", per_env, self.tangents)[:, None]
        variance_dot = (per_env * self.variance_dot).sum(1, keepdim=True)
        return TangentFeatures(self.coeffs, tangents, self.variance, variance_dot, self.numbers, self.molecule_index,
                               self.n_atoms)

    def molecules(self, start: int, stop: int) -> TangentFeatures:
        """The same for molecules start … stop − 1, padded to the largest of them."""
        offsets = np.concatenate([[0], np.cumsum(self.n_atoms)])
        rows = slice(int(offsets[start]), int(offsets[stop]))
        n_atoms = self.n_atoms[start:stop]
        coords = min(3 * max(n_atoms), self.tangents.shape[1])
        return TangentFeatures(self.coeffs[rows], self.tangents[rows, :coords], self.variance[rows],
                               self.variance_dot[rows, :coords], self.numbers[rows], self.molecule_index[rows] - start,
                               n_atoms)


def tangent_features(kernel: SO3MolecularKernel, molecules: Sequence[Molecule]) -> TangentFeatures:
    """:class:`TangentFeatures` of ``molecules`` for ``kernel`` (float64 on its device): the
    pair Jacobians J_ab' placed at the neighbour's coordinates (its element's channels) and,
    negated, at the centre's."""
    ctx, cfg, lift = kernel.ctx, kernel.features, kernel.network.layers[0]
    band2 = lift.band_limit**2
    feats = environment_features(list(molecules), cfg, dtype=ctx.dtype, device=ctx.device)
    coeffs = feats.coeffs[..., :band2].contiguous()
    pairs = pair_jacobians(list(molecules), cfg, n_coeffs=band2, dtype=ctx.dtype, device=ctx.device)
    n_atoms = [m.n_atoms for m in molecules]
    n_env, n_max = feats.n_env, max(n_atoms)
    n_elements, n_radial = len(cfg.elements), cfg.n_radial
    tangents = coeffs.new_zeros(n_env, n_max, n_elements, 3, n_radial, band2)
    jac = pairs.jacobian.permute(0, 3, 1, 2)  # (P, 3, K, b²)
    local = feats.atom_index
    for atom, sign in ((local[pairs.neighbour], 1.0), (local[pairs.centre], -1.0)):
        tangents.index_put_((pairs.centre, atom, pairs.slot), sign * jac, accumulate=True)
    tangents = mix_elements(tangents, cfg.element_mixing(), 2)  # the mixed maps' tangents: A along the elements
    # (env, atom, element, axis, K, b²) → (env, 3·atom + axis, element·K + k, b²)
    tangents = tangents.permute(0, 1, 3, 2, 4, 5).reshape(n_env, 3 * n_max, n_elements * n_radial, band2)
    scale = lift.sigma_w**2 / coeffs.shape[1]
    variance = scale * coeffs.square().sum((1, 2)) + lift.sigma_b**2
    variance_dot = 2 * scale * torch.einsum("ncf,necf->ne", coeffs, tangents)
    return TangentFeatures(coeffs, tangents, variance, variance_dot, feats.centre_numbers, feats.molecule_index, n_atoms)


def contracted_tangent_features(kernel: SO3MolecularKernel, molecules: Sequence[Molecule], coef: Tensor, *,
                                batch: int = 256) -> TangentFeatures:
    """``tangent_features(kernel, molecules).contracted(coef)`` computed ``batch`` molecules at a
    time (the full tangents of every molecule are never held at once)."""
    offsets = np.concatenate([[0], np.cumsum([3 * m.n_atoms for m in molecules])])
    parts = [tangent_features(kernel, molecules[i : i + batch]).contracted(coef[offsets[i] : offsets[min(i + batch, len(molecules))]])
             for i in range(0, len(molecules), batch)]
    shift = np.concatenate([[0], np.cumsum([len(p.n_atoms) for p in parts])])
    return TangentFeatures(torch.cat([p.coeffs for p in parts]), torch.cat([p.tangents for p in parts]),
                           torch.cat([p.variance for p in parts]), torch.cat([p.variance_dot for p in parts]),
                           torch.cat([p.numbers for p in parts]),
                           torch.cat([p.molecule_index + int(k) for p, k in zip(parts, shift)]),
                           [n for p in parts for n in p.n_atoms])


@dataclass
class PairDerivatives:
    """Per reference molecule j: ``theta`` (J,) Θ(M, M'_j); ``d_query`` (3n, J) ∂Θ/∂r;
    ``d_ref`` (J, 3n'_max) ∂Θ/∂r'_j; ``mixed`` (J, 3n, 3n'_max) ∂²Θ/∂r ∂r'_j (None unless
    asked for), reference coordinates zero-padded to the largest reference molecule."""

    theta: Tensor
    d_query: Tensor
    d_ref: Tensor
    mixed: Tensor | None


def pair_derivatives(kernel: SO3MolecularKernel, query: TangentFeatures, refs: TangentFeatures, *,
                     second: bool = True) -> PairDerivatives:
    """Θ(M, M'_j) and its position derivatives (module docstring) for the one molecule of
    ``query`` against every molecule of ``refs``; requires :func:`closed_form_supported`."""
    ctx, net = kernel.ctx, kernel.network
    lift, act, dense = net.layers[0], net.layers[1].name, net.layers[3]
    n_ref, e3, r3 = len(refs.n_atoms), query.tangents.shape[1], refs.tangents.shape[1]
    table = ctx.measure.table(lift.band_limit, ctx.dtype, ctx.device)[:-1]  # (K, L3), identity dropped
    weights = ctx.measure.mean_weights(ctx.dtype, ctx.device)[:-1] * dense.sigma_w**2  # σ₂² w_u
    scale = lift.sigma_w**2 / query.coeffs.shape[1]
    zeros = lambda *shape: query.coeffs.new_zeros(*shape)  # noqa: E731
    theta, d_query, d_ref = zeros(n_ref), zeros(e3, n_ref), zeros(n_ref, r3)
    mixed = zeros(n_ref, e3, r3) if second else None
    products = ctx.measure.support_product_basis(lift.band_limit, ctx.dtype, ctx.device) if second else None
    if products is not None and not _curvature_through_basis(e3, r3, *table.shape, products[0].shape[1]):
        products = None  # few reference coordinates: the projection (:func:`_curvature_term`)
    for a_rows, b_rows in _groups(kernel.pairing, query.numbers, refs.numbers):
        xa, xb, ta, tb = query.coeffs[a_rows], refs.coeffs[b_rows], query.tangents[a_rows], refs.tangents[b_rows]
        n_a, n_b = len(a_rows), len(b_rows)
        mol = refs.molecule_index[b_rows]
        c = lift.cross(xa, xb, ctx)[..., :-1]  # (A, B, K)
        g = pooled_terms(act, c, query.variance[a_rows], refs.variance[b_rows], weights, second=second)
        vq, vr = query.variance_dot[a_rows], refs.variance_dot[b_rows]  # (A, 3n), (B, 3n')
        # Ċ_e(u) = scale · m_e · D(u): the moments with the tangents, (A, B, 3n, L3) and (A, B, 3n', L3)
        m_q = _moments(ta, xb, lift.band_limit, query_side=True).view(n_a, n_b, e3, -1)
        m_r = _moments(xa, tb, lift.band_limit, query_side=False).view(n_a, n_b, r3, -1)
        # Σ_u σ₂² w_u g_*(u) D(u) for g_c (and g_cv', g_cv): (kinds, A, B, L3)
        proj = torch.stack([g.c, g.cvb, g.cva] if second else [g.c]) @ table
        theta.index_add_(0, mol, g.g.sum(0))
        d_query.index_add_(1, mol, scale * torch.einsum("abem,abm->eb", m_q, proj[0]) + torch.einsum("ae,ab->eb", vq, g.va))
        d_ref.index_add_(0, mol, scale * torch.einsum("abfm,abm->bf", m_r, proj[0]) + g.vb.sum(0)[:, None] * vr)
        if not second:
            continue
        block = _curvature_term(m_q, m_r, g.cc, table, products).mul_(scale**2)  # (B, 3n, 3n')
        block += scale * torch.einsum("abem,abm,bf->bef", m_q, proj[1], vr)
        block += scale * torch.einsum("ae,abfm,abm->bef", vq, m_r, proj[2])
        block += torch.einsum("ae,ab,bf->bef", vq, g.vavb, vr)
        block += _second_lift_term(lift, proj[0], ta, tb, scale)
        mixed.index_add_(0, mol, block)
    sums = theta + dense.sigma_b**2 * _pair_counts(kernel.pairing, query.numbers, refs.numbers, refs.molecule_index, n_ref)
    if kernel.reduce == "mean":
        norm = float(query.n_atoms[0]) * torch.as_tensor(refs.n_atoms, dtype=sums.dtype, device=sums.device)
        sums, d_query, d_ref = sums / norm, d_query / norm, d_ref / norm[:, None]
        mixed = None if mixed is None else mixed / norm[:, None, None]
    return PairDerivatives(sums, d_query, d_ref, mixed)


def _curvature_term(m_q: Tensor, m_r: Tensor, h: Tensor, table: Tensor,
                    products: tuple[Tensor, Tensor] | None) -> Tensor:
    """Σ_a Σ_u h_ab(u) (m_e · D(u)) (m'_ε · D(u)) per reference environment b, (B, 3n, 3n'), for
    the moments m_q (A, B, 3n, L3), m_r (A, B, 3n', L3) and weights h (A, B, K). With many
    reference tangents as m_eᵀ H m'_ε, H = Σ_u h(u) D(u) D(u)ᵀ = (h · basis) · coefficients
    (``products``: the measure's ``support_product_basis``, two GEMMs of K × r and r × L3² per
    pair, r = 165 for L = 3); with few (:func:`_curvature_through_basis`: small reference
    molecules; ``products`` None), by synthesising m'_ε · D(u) on the support, weighting it by h
    and projecting it back (2 · 3n' · K · L3 per pair)."""
    n_a, n_b, r3, side = m_r.shape
    if products is None:
        projected = ((m_r @ table.T) * h[:, :, None]) @ table  # (A, B, 3n', L3)
        return (m_q @ projected.transpose(-1, -2)).sum(0)
    basis, coefficients = products
    curvature = ((h.flatten(0, 1) @ basis) @ coefficients).view(n_a, n_b, side, side)
    return ((m_q @ curvature) @ m_r.transpose(-1, -2)).sum(0)


def _curvature_through_basis(query_coords: int, ref_coords: int, support: int, side: int, rank: int) -> bool:
    """Whether the curvature term through H (K·r + r·L3² to form it, 3n·L3² more to apply it,
    per environment pair) costs at most its projection on the support (2·3n'·K·L3): from 3
    reference atoms on, on the grid of band limit 7 (K = 1,036, L3 = 35, r = 165, 3n = 63)."""
    return support * rank + (rank + query_coords) * side**2 <= 2 * ref_coords * support * side


def _moments(x: Tensor, y: Tensor, band_limit: int, *, query_side: bool) -> Tensor:
    """The lift's moments of every environment pair with one side's tangents, (A·B·3n, L3) in the
    order (a, b, e): M^l(T_e(a), f̂_b) for ``query_side`` (x the tangents (A, 3n, C, b²), y the
    coefficients (B, C, b²)), else M^l(f̂_a, T'_e(b)) (x coefficients, y tangents)."""
    parts = []
    for s in coeff_slices(band_limit):
        if query_side:
            parts.append(torch.einsum("aecm,bcn->abemn", x[..., s], y[..., s]).flatten(-2))
        else:
            parts.append(torch.einsum("acm,becn->abemn", x[..., s], y[..., s]).flatten(-2))
    return torch.cat(parts, -1).flatten(0, 2)


def _second_lift_term(lift: Lift, proj: Tensor, ta: Tensor, tb: Tensor, scale: float) -> Tensor:
    """σ₁²/C Σ_a Σ_l Σ_c T_e(a)^l_cᵀ A^l_ab T'_ε(b)^l_c per reference environment b, (B, 3n, 3n'),
    with A_ab = Σ_u σ₂² w_u g_c(u) D(u), flattened over l in ``proj`` (A, B, L3)."""
    n_a, e3, channels = ta.shape[:3]
    n_b, r3 = tb.shape[:2]
    out, start = None, 0
    for s in coeff_slices(lift.band_limit):
        width = s.stop - s.start
        a_l = proj[..., start : start + width * width].reshape(n_a, n_b, width, width)
        start += width * width
        # Z[(e, c), (b, n)] = Σ_a Σ_m T_e(a)_{c,m} A^l_ab,mn: one GEMM over (a, m), no A-sized array
        left = ta[..., s].permute(0, 3, 1, 2).reshape(n_a * width, e3 * channels)
        z = (left.T @ a_l.permute(0, 2, 1, 3).reshape(n_a * width, n_b * width)).view(e3, channels, n_b, width)
        part = torch.bmm(z.permute(2, 0, 1, 3).reshape(n_b, e3, channels * width), tb[..., s].reshape(n_b, r3, channels * width).transpose(1, 2))
        out = part if out is None else out + part
    return out * scale


def _groups(pairing: str, query_numbers: Tensor, ref_numbers: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Rows (query, reference) of the environments paired with each other: one group per shared
    element (``element`` pairing) or all of them (``shared``)."""
    if pairing == "shared":
        return [(torch.arange(len(query_numbers), device=query_numbers.device),
                 torch.arange(len(ref_numbers), device=ref_numbers.device))]
    out = []
    for z in torch.unique(query_numbers).tolist():
        a, b = torch.nonzero(query_numbers == z).flatten(), torch.nonzero(ref_numbers == z).flatten()
        if len(b):
            out.append((a, b))
    return out


def _pair_counts(pairing: str, query_numbers: Tensor, ref_numbers: Tensor, ref_molecule: Tensor, n_ref: int) -> Tensor:
    """Number of environment pairs of the query with each reference molecule (the β₂² terms)."""
    if pairing == "shared":
        per_env = torch.full_like(ref_numbers, len(query_numbers), dtype=torch.float64)
    else:
        per_env = (query_numbers[None, :] == ref_numbers[:, None]).sum(1).to(torch.float64)
    return per_env.new_zeros(n_ref).index_add_(0, ref_molecule, per_env)


def _chunks(kernel: SO3MolecularKernel, query: TangentFeatures, refs: TangentFeatures, budget: int) -> list[tuple[int, int]]:
    """Consecutive reference molecules (start, stop) whose environment pairs with the query hold
    at most ``budget`` values of the per-pair temporaries (the g-derivatives on the support,
    the curvature matrix, the tangent moments)."""
    side = sum((2 * l + 1) ** 2 for l in range(kernel.network.layers[0].band_limit))
    per_pair = 10 * kernel.ctx.support_size + side * (side + query.tangents.shape[1] + refs.tangents.shape[1])
    per_atom = query.n_atoms[0] * per_pair
    out, start = [], 0
    while start < len(refs.n_atoms):
        stop, atoms = start, 0
        while stop < len(refs.n_atoms) and (stop == start or (atoms + refs.n_atoms[stop]) * per_atom <= budget):
            atoms += refs.n_atoms[stop]
            stop += 1
        out.append((start, stop))
        start = stop
    return out


def closed_form_expansion(kernel: SO3MolecularKernel, query: TangentFeatures, refs: TangentFeatures, energy_coef: Tensor, *,
                          budget: int | None = None) -> tuple[float, np.ndarray]:
    """s(M) = Σ_j a_j Θ(M, M_j) + Σ_j b_jᵀ ∂Θ(M, M_j)/∂r_j and ∂s/∂r (3n,) for the one molecule
    of ``query``, a = ``energy_coef`` (J,) and ``refs`` already :meth:`TangentFeatures.contracted`
    with b (one tangent T'_b = Σ_ε b_ε T'_ε(b) per reference environment), in chunks of
    reference molecules (:func:`_expansion_chunk`). ``budget``: :func:`_chunks`'s (None:
    :func:`value_budget` of the kernel's device)."""
    value, grad = 0.0, None
    for start, stop in _chunks(kernel, query, refs, budget or value_budget(kernel.ctx.device)):
        part_value, part = _expansion_chunk(kernel, query, refs.molecules(start, stop), energy_coef[start:stop])
        value += float(part_value)
        grad = part if grad is None else grad + part
    return value, grad[: 3 * query.n_atoms[0]].detach().cpu().numpy()


def _expansion_chunk(kernel: SO3MolecularKernel, query: TangentFeatures, refs: TangentFeatures,
                     energy_coef: Tensor) -> tuple[Tensor, Tensor]:
    """s and ∂s/∂r of :func:`closed_form_expansion` for one chunk of contracted references,
    without the per-coordinate moments of :func:`pair_derivatives`. With α_b = a_j/N_j and
    ν_b = 1/N_j for the molecule j of reference environment b (N_j = n n'_j for ``reduce="mean"``,
    else 1), Ċ'_ab(u) = C[f̂_a, T'_b](u) and v̇'_b = ∂v_b along b (the module docstring's terms
    contracted with b and a):

        s     = Σ_ab [α_b Σ_u g + ν_b (Σ_u g_c Ċ'_ab + g_v' v̇'_b)] + β₂² Σ_j α_j P_j,
        ∂s/∂r_e = Σ_ab Σ_u (Ċ_e R¹_ab + C̈_e R²_ab) + Σ_a v̇_e(a) s_a,

    P_j the environment pairs of M with M_j, R¹ = α_b g_c + ν_b (g_cc Ċ'_ab + g_cv' v̇'_b),
    R² = ν_b g_c and s_a = Σ_b [α_b g_v + ν_b (Σ_u g_cv Ċ'_ab + g_vv' v̇'_b)] (u-sums weighted by σ₂² w_u).
    Ċ_e and C̈_e are C[·, f̂_b] and C[·, T'_b] along T_e(a), so the u-sums are one pass of the
    lift's transposed synthesis (:meth:`~molntk.kernels.so3.lift.Lift.cross_gradients`, summed
    over b) against [f̂_b, T'_b], then one contraction with the query tangents: per pair
    4·K·L3 multiply-adds for the table products instead of the 6 of :func:`pair_derivatives`,
    and no (pair, coordinate, L3) moments."""
    ctx, net = kernel.ctx, kernel.network
    lift, act, dense = net.layers[0], net.layers[1].name, net.layers[3]
    table = ctx.measure.table(lift.band_limit, ctx.dtype, ctx.device)[:-1]  # (K, L3), identity dropped
    weights = ctx.measure.mean_weights(ctx.dtype, ctx.device)[:-1] * dense.sigma_w**2  # σ₂² w_u
    channels = query.coeffs.shape[1]
    scale = lift.sigma_w**2 / channels
    per_molecule = query.coeffs.new_ones(len(refs.n_atoms))
    if kernel.reduce == "mean":
        per_molecule = 1.0 / (float(query.n_atoms[0]) * torch.as_tensor(refs.n_atoms, dtype=per_molecule.dtype,
                                                                          device=per_molecule.device))
    alpha = energy_coef * per_molecule
    counts = _pair_counts(kernel.pairing, query.numbers, refs.numbers, refs.molecule_index, len(refs.n_atoms))
    value = dense.sigma_b**2 * (counts @ alpha)
    grad = query.coeffs.new_zeros(query.tangents.shape[1])
    alpha_env, nu_env = alpha[refs.molecule_index], per_molecule[refs.molecule_index]
    for a_rows, b_rows in _groups(kernel.pairing, query.numbers, refs.numbers):
        xa, xb, ta, tb = query.coeffs[a_rows], refs.coeffs[b_rows], query.tangents[a_rows], refs.tangents[b_rows, 0]
        al, nu, vr = alpha_env[b_rows], nu_env[b_rows], refs.variance_dot[b_rows, 0]
        g = pooled_terms(act, lift.cross(xa, xb, ctx)[..., :-1], query.variance[a_rows], refs.variance[b_rows], weights)
        c_ref = scale * (_moments(xa, tb[:, None], lift.band_limit, query_side=False).view(len(a_rows), len(b_rows), -1) @ table.T)
        value = value + (g.g @ al).sum() + ((torch.einsum("abk,abk->ab", g.c, c_ref) + g.vb * vr) @ nu).sum()
        s_a = g.va @ al + (torch.einsum("abk,abk->ab", g.cva, c_ref) + g.vavb * vr) @ nu
        r1 = al[:, None] * g.c + nu[:, None] * (g.cc * c_ref + g.cvb * vr[:, None])
        cotangent = torch.nn.functional.pad(torch.cat([r1, nu[:, None] * g.c], 1), (0, 1))  # (A, 2B, K + 1), identity 0
        pulled = lift.cross_gradients(cotangent, torch.cat([xb, tb]), ctx, channels, summed=True)[0]  # (A, b², C)
        grad += torch.einsum("aeck,akc->e", ta, pulled) + query.variance_dot[a_rows].T @ s_a
    return value, grad


def closed_form_rows(kernel: SO3MolecularKernel, query: TangentFeatures, refs: TangentFeatures, *, second: bool = True,
                     budget: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(theta (J,), d_ref (3Σn'_j,), d_query (3n, J), mixed (3n, 3Σn'_j) or None): the layout of
    :class:`~molntk.molecular.derivative_kernels.DerivativeRows`, for the one molecule of
    ``query`` against the molecules of ``refs``, in chunks of reference molecules whose largest
    temporaries stay under ``budget`` values (None: :func:`value_budget` of the kernel's device)."""
    parts = []
    for start, stop in _chunks(kernel, query, refs, budget or value_budget(kernel.ctx.device)):
        chunk = refs.molecules(start, stop)
        parts.append(_as_numpy(pair_derivatives(kernel, query, chunk, second=second), query.n_atoms[0], chunk.n_atoms))
    mixed = None if not second else np.concatenate([p[3] for p in parts], axis=1)
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts], axis=1), mixed)


def _as_numpy(out: PairDerivatives, query_atoms: int, ref_atoms: Sequence[int]) -> tuple[np.ndarray, ...]:
    """(theta, d_ref, d_query, mixed) of one chunk with the padding of the reference coordinates removed."""
    sizes = [3 * n for n in ref_atoms]
    to_np = lambda t: t.detach().cpu().numpy()  # noqa: E731  (one transfer per array, then host slices)
    d_ref_all = to_np(out.d_ref)
    d_ref = np.concatenate([d_ref_all[j, :s] for j, s in enumerate(sizes)])
    mixed = None
    if out.mixed is not None:
        mixed_all = to_np(out.mixed)
        mixed = np.concatenate([mixed_all[j, :, :s] for j, s in enumerate(sizes)], axis=1)
    return to_np(out.theta), d_ref, to_np(out.d_query[: 3 * query_atoms]), mixed
