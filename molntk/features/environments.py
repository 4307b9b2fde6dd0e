"""Per-atom environment feature maps of molecules, directly in Fourier space (docs/mathematics.md §1).

Environment of atom a of a molecule: every other atom b ≠ a of the same molecule (only
those with r_ab < r_cut when the radial basis has a cutoff), seen along the unit vector
r̂_ab = (x_b − x_a)/r_ab at distance r_ab. Channels c = (e, k): neighbour element e (in
the order of ``config.elements``) and radial function k, element-major (c = e·K + k,
C = len(elements)·K). The feature map of the environment is the smeared neighbour density

    f_c(x) = Σ_b [Z_b = e] R_k(r_ab, Z_a, Z_b) · h_{r̂_ab}(x),   x ∈ S²,

with h_n the normalised von Mises–Fisher density of width σ around n
(:mod:`molntk.features.smearing`), and its coefficients ``coeffs[a, c, (l, m)]`` are

    f̂^l_c(a) = ∫_{S²} Y^l(x) f_c(x) dx = Σ_b [Z_b = e] R_k(r_ab, Z_a, Z_b) · s_l · Y^l(r̂_ab),   l < L,

Y^l e3nn's real orthonormal spherical harmonics (``normalization="integral"``, l-blocks of
width 2l+1 concatenated in e3nn order, L² entries) and s_l = i_l(κ)/i_0(κ). One neighbour
at R = 1 thus has l = 0 coefficient s_0 Y^0 = 1/√(4π). Without smearing (σ = 0/None)
the map is the band-limited projection of the point density Σ_b R δ_{r̂_ab}. With
``config.element_width`` the element blocks are then mixed, f̂_{(e,k)} ← Σ_e' A_ee' f̂_{(e',k)}
(:mod:`molntk.features.elements`).

Rotating a molecule by R maps every coefficient block by the e3nn Wigner matrix:
f̂^l(R·mol) = D^l(R) f̂^l(mol); translations leave the maps unchanged, and permuting the
atoms permutes the environments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from e3nn import o3
from torch import Tensor

from molntk.data.molecule import MAX_Z, Molecule
from molntk.data.qm9 import QM9_ELEMENTS, QM9_MAX_ATOMS
from molntk.errors import InputError
from molntk.features.elements import element_mixing, mix_elements
from molntk.features.radial import CoulombBasis, GaussianBasis, RadialBasis, check_float, check_int, radial_basis_from_dict
from molntk.features.smearing import smearing_coefficients, smearing_vector

#: Largest band limit: e3nn's spherical harmonics stop at l = 12.
MAX_BAND_LIMIT = 13
_DTYPES = (torch.float32, torch.float64)

# Defaults of :class:`FeatureConfig`: the SO(3) NTK's default feature maps, chosen by
# leave-one-out CV of the SO(3) NTK on 200 QM9 training molecules (the main QM9 job,
# configs/qm9_u0.yaml, replaces the radial basis by width-growth Gaussians, chosen on 1,000).
#: Band limit L (degrees l < 4).
DEFAULT_BAND_LIMIT = 4
#: Angular smearing σ (rad).
DEFAULT_SMEARING_WIDTH = 0.3
#: Radial basis: 8 Gaussians on [0.5, 3] Å with a cosine cutoff at 3 Å.
DEFAULT_RADIAL = GaussianBasis(n=8, r_min=0.5, r_cut=3.0)


@dataclass(frozen=True)
class FeatureConfig:
    """Everything that defines the environment feature maps.

    - ``elements``: atomic numbers of the neighbour channels, in channel order (default
      QM9's H, C, N, O, F). Molecules with other elements are rejected.
    - ``band_limit`` L: degrees l < L are kept (L² coefficients per channel), 1 ≤ L ≤ 13.
      Default :data:`DEFAULT_BAND_LIMIT` = 4, cheap for the SO(3) recursions downstream.
    - ``smearing_width`` σ (radians, ≥ 0; 0 or ``None``: no smearing). Default
      :data:`DEFAULT_SMEARING_WIDTH` = 0.3, chosen with the radial basis by leave-one-out CV
      of the SO(3) NTK on QM9 training molecules. At L = 4 it keeps
      s_1..s_3 ≈ 0.91, 0.75, 0.57 and the first degree dropped has s_4 ≈ 0.39; its peak,
      of full width at half maximum ≈ 0.7 rad, resolves the ≈ 1.9 rad between bonded
      neighbours of a tetrahedral centre. A wider σ (≈ 2/L) makes the band-limited
      coefficients a more faithful picture of the smeared density (σ = 0.5: s_4 ≈ 0.08).
    - ``radial``: :class:`~molntk.features.radial.GaussianBasis` (default
      :data:`DEFAULT_RADIAL`: 8 Gaussians on [0.5, 3] Å, cosine cutoff at 3 Å) or
      :class:`~molntk.features.radial.CoulombBasis`.
    - ``element_width`` w (> 0, in periodic-table steps; ``None``: each neighbour element
      its own channels): neighbour elements overlap by S_ee' = exp(−|(p, g)_e − (p, g)_e'|² /
      (2w²)), period p and group g (:mod:`molntk.features.elements`).
    """

    elements: tuple[int, ...] = QM9_ELEMENTS
    band_limit: int = DEFAULT_BAND_LIMIT
    smearing_width: float | None = DEFAULT_SMEARING_WIDTH
    radial: RadialBasis = DEFAULT_RADIAL
    element_width: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.elements, (str, bytes)) or not hasattr(self.elements, "__iter__"):
            raise ValueError(f"elements must be a list of atomic numbers, got {self.elements!r}")
        elements = tuple(check_int("element", z, 1) for z in self.elements)
        if not elements:
            raise ValueError("elements must not be empty")
        if max(elements) > MAX_Z:
            raise ValueError(f"element {max(elements)} is not an atomic number (1..{MAX_Z})")
        if len(set(elements)) != len(elements):
            raise ValueError(f"elements must be distinct, got {list(elements)}")
        object.__setattr__(self, "elements", elements)
        band_limit = check_int("band_limit", self.band_limit, 1)
        if band_limit > MAX_BAND_LIMIT:
            raise ValueError(f"band_limit must be <= {MAX_BAND_LIMIT} (e3nn's spherical harmonics stop at l = 12), got {band_limit}")
        object.__setattr__(self, "band_limit", band_limit)
        if self.smearing_width is not None:
            object.__setattr__(self, "smearing_width", check_float("smearing_width", self.smearing_width, nonnegative=True))
        if not isinstance(self.radial, (GaussianBasis, CoulombBasis)):
            raise ValueError(f"radial must be a radial basis (GaussianBasis or CoulombBasis), got {self.radial!r}")
        if self.element_width is not None:
            object.__setattr__(self, "element_width", check_float("element_width", self.element_width, positive=True))

    @property
    def n_radial(self) -> int:
        """K, radial functions per element."""
        return self.radial.n_functions

    @property
    def n_channels(self) -> int:
        """C = len(elements) · K."""
        return len(self.elements) * self.n_radial

    @property
    def n_coeffs(self) -> int:
        """L², coefficients per channel."""
        return self.band_limit**2

    @property
    def channels(self) -> list[tuple[int, int]]:
        """(neighbour element Z, radial index k) of each channel c, element-major."""
        return [(z, k) for z in self.elements for k in range(self.n_radial)]

    def element_mixing(self) -> np.ndarray | None:
        """A = S^{1/2} mixing the element blocks of the channels (None without ``element_width``)."""
        return None if self.element_width is None else element_mixing(self.elements, self.element_width)

    def smearing_coefficients(self) -> np.ndarray:
        """s_l, l < L (float64)."""
        return smearing_coefficients(self.band_limit, self.smearing_width)

    def to_dict(self) -> dict[str, Any]:
        """The keys of :meth:`from_dict`; ``element_width`` only when set, so that maps without
        it keep the content hashes (kernel caches, saved models) they had before it existed."""
        keys = {
            "elements": list(self.elements),
            "band_limit": self.band_limit,
            "smearing_width": self.smearing_width,
            "radial": self.radial.to_dict(),
        }
        return keys if self.element_width is None else {**keys, "element_width": self.element_width}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureConfig:
        """Inverse of :meth:`to_dict`; missing keys take their defaults, unknown keys are errors."""
        allowed = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ValueError(f"unknown feature config key(s) {unknown}; allowed: {sorted(allowed)}")
        params = dict(data)
        if "radial" in params:
            params["radial"] = radial_basis_from_dict(params["radial"])
        return cls(**params)


@dataclass
class EnvironmentBatch:
    """Feature maps of all atom environments of a list of molecules.

    ``coeffs`` (n_env, C, L²): f̂^l_c of each environment; environments are ordered by
    molecule, then by atom. ``centre_numbers`` (n_env,): Z of the centre atom;
    ``molecule_index`` (n_env,): position of its molecule in the input list;
    ``atom_index`` (n_env,): position of the atom in its molecule. Index tensors are int64
    on the device of ``coeffs``.
    """

    coeffs: Tensor
    centre_numbers: Tensor
    molecule_index: Tensor
    atom_index: Tensor
    n_molecules: int
    config: FeatureConfig

    @property
    def n_env(self) -> int:
        return int(self.coeffs.shape[0])

    def select(self, indices: Sequence[int] | np.ndarray | Tensor) -> EnvironmentBatch:
        """The features of molecules ``indices`` (in that order, repeats allowed), equal to those
        computed for that list: compute features once for a molecule set, then take subsets."""
        idx = _molecule_indices(indices, self.n_molecules, self.molecule_index.device)
        rows, new_index = molecule_rows(self.molecule_index, self.n_molecules, idx)
        return EnvironmentBatch(
            coeffs=self.coeffs[rows],
            centre_numbers=self.centre_numbers[rows],
            molecule_index=new_index,
            atom_index=self.atom_index[rows],
            n_molecules=int(idx.numel()),
            config=self.config,
        )

    def to(self, device: torch.device | str) -> EnvironmentBatch:
        """The same features with every tensor on ``device``."""
        return EnvironmentBatch(self.coeffs.to(device), self.centre_numbers.to(device), self.molecule_index.to(device),
                                self.atom_index.to(device), self.n_molecules, self.config)


@dataclass
class PaddedFeatures:
    """Environments in the reference's per-atom-index layout.

    ``coeffs`` (n_mol, n_atoms, C, L²): environment of atom i of molecule m at [m, i], zeros
    where molecule m has fewer atoms; ``mask`` (n_mol, n_atoms) bool: where an atom is;
    ``centre_numbers`` (n_mol, n_atoms): its Z (0 for padding).
    """

    coeffs: Tensor
    mask: Tensor
    centre_numbers: Tensor
    config: FeatureConfig

    def to(self, device: torch.device | str) -> PaddedFeatures:
        """The same features with every tensor on ``device``."""
        return PaddedFeatures(self.coeffs.to(device), self.mask.to(device), self.centre_numbers.to(device), self.config)

    def select(self, indices: Sequence[int] | np.ndarray | Tensor) -> PaddedFeatures:
        """The padded features of molecules ``indices`` (in that order, repeats allowed)."""
        idx = _molecule_indices(indices, self.n_molecules, self.coeffs.device)
        return PaddedFeatures(self.coeffs[idx], self.mask[idx], self.centre_numbers[idx], self.config)

    @property
    def n_molecules(self) -> int:
        return int(self.coeffs.shape[0])


def _as_list(molecules: Molecule | Sequence[Molecule]) -> list[Molecule]:
    return [molecules] if isinstance(molecules, Molecule) else list(molecules)


def _check_elements(molecules: list[Molecule], numbers: np.ndarray, n_atoms: np.ndarray, elements: Sequence[int]) -> None:
    """InputError naming the first molecule with an element outside ``elements``."""
    bad = ~np.isin(numbers, elements)
    if bad.any():
        first = int(np.searchsorted(np.cumsum(n_atoms), int(np.flatnonzero(bad)[0]), side="right"))
        molecules[first].check_elements(elements)


def pair_indices(n_atoms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All ordered pairs (a, b), a ≠ b, of atoms of the same molecule, as indices into the
    concatenated atoms of molecules with ``n_atoms`` atoms each (no loop over molecules)."""
    n_atoms = np.asarray(n_atoms, dtype=np.int64)
    offsets = np.cumsum(n_atoms) - n_atoms
    molecule = np.repeat(np.arange(n_atoms.size), n_atoms)
    per_atom = n_atoms[molecule]
    centre = np.repeat(np.arange(molecule.size), per_atom)
    first = np.repeat(np.cumsum(per_atom) - per_atom, per_atom)
    neighbour = offsets[molecule[centre]] + np.arange(centre.size) - first
    keep = centre != neighbour
    return centre[keep], neighbour[keep]


def element_slots(config: FeatureConfig, device: torch.device | str) -> Tensor:
    """The channel block of each atomic number: slot[Z] = position of Z in ``config.elements``
    (−1 for other elements), int64 of length MAX_Z + 1 on ``device``."""
    slots = np.full(MAX_Z + 1, -1, dtype=np.int64)
    slots[list(config.elements)] = np.arange(len(config.elements))
    return torch.as_tensor(slots, device=device)


def neighbour_pairs(pos: Tensor, centre: np.ndarray, neighbour: np.ndarray, config: FeatureConfig,
                    dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """The atom pairs (``centre``, ``neighbour``) (indices into the rows of ``pos``, float64
    (atoms, 3)) that are in each other's environment, r_ab < cutoff (all without a cutoff): their
    indices as tensors on ``pos``'s device and their vectors r_b − r_a (formed in float64, then
    cast to ``dtype``)."""
    centre, neighbour = torch.as_tensor(centre, device=pos.device), torch.as_tensor(neighbour, device=pos.device)
    vec = (pos[neighbour] - pos[centre]).to(dtype)
    if config.radial.cutoff is not None:
        inside = torch.linalg.vector_norm(vec, dim=1) < config.radial.cutoff
        centre, neighbour, vec = centre[inside], neighbour[inside], vec[inside]
    return centre, neighbour, vec


def pair_terms(vec: Tensor, z_centre: Tensor, z_neighbour: Tensor, config: FeatureConfig, smearing: Tensor) -> Tensor:
    """The contribution R_k(r_ab, Z_a, Z_b) · s_l Y^l(r̂_ab) of each atom pair (a, b) to the
    channels (Z_b, k) of environment a: shape (P, K, L²), from the pair vectors r_b − r_a
    ``vec`` (P, 3), the centre and neighbour atomic numbers (P,) and s_l (``smearing``, (L²,));
    a differentiable function of ``vec``, each pair's terms of its own vector only."""
    r = torch.linalg.vector_norm(vec, dim=1)
    radial = config.radial(r, z_centre.to(vec.dtype), z_neighbour.to(vec.dtype))  # (P, K)
    sh = o3.spherical_harmonics(list(range(config.band_limit)), vec, normalize=True, normalization="integral")
    return radial[:, :, None] * (sh * smearing)[:, None, :]


#: Atom pairs per step of :func:`environment_features` (its (pairs, K, L²) temporary: 2¹⁹ pairs
#: × 8 × 16 float64 values = 512 MiB for the default features, whatever the number of molecules).
PAIR_CHUNK = 2**19


def environment_features(
    molecules: Molecule | Sequence[Molecule],
    config: FeatureConfig | None = None,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    positions: Tensor | None = None,
) -> EnvironmentBatch:
    """Fourier coefficients f̂^l_c(a) of every atom environment of ``molecules`` (see module doc).

    Vectorised over the atom pairs of all molecules, in steps of :data:`PAIR_CHUNK` pairs:
    one spherical-harmonics call and one scatter-add into the environments per step (the
    pairs in the same order as one step would take them). Pair vectors are formed in float64
    and then cast to ``dtype`` (float32 or float64). A single-atom molecule gives an
    all-zero environment. Raises :class:`InputError` for an element outside
    ``config.elements``.

    ``positions``: a tensor (total atoms, 3) in Å, the molecules' atoms in order, used
    instead of their positions; every step is a differentiable torch operation (the radial
    basis, e3nn's spherical harmonics, the scatter-add), so autograd carries gradients from
    the coefficients back to it (forces, :mod:`molntk.models.forces`).
    """
    config = FeatureConfig() if config is None else config
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    molecules = _as_list(molecules)
    n_atoms = np.array([m.n_atoms for m in molecules], dtype=np.int64)
    numbers = np.concatenate([m.numbers for m in molecules]) if molecules else np.zeros(0, np.int64)
    coordinates = np.concatenate([m.positions for m in molecules]) if molecules else np.zeros((0, 3))
    _check_elements(molecules, numbers, n_atoms, config.elements)

    n_elem, n_rad, n_coef = len(config.elements), config.n_radial, config.n_coeffs
    if positions is not None and tuple(positions.shape) != (numbers.size, 3):
        raise ValueError(f"positions must have shape ({numbers.size}, 3) for these molecules, got {tuple(positions.shape)}")
    pos = torch.as_tensor(positions if positions is not None else coordinates, dtype=torch.float64, device=device)
    z = torch.as_tensor(numbers, device=device)
    smearing = smearing_vector(config.band_limit, config.smearing_width, dtype=dtype, device=device)
    slot_of_element = element_slots(config, device)
    coeffs = torch.zeros(numbers.size * n_elem, n_rad, n_coef, dtype=dtype, device=device)
    all_centres, all_neighbours = pair_indices(n_atoms)
    for start in range(0, all_centres.size, PAIR_CHUNK):  # pairs in order: the same sums, bounded memory
        stop = start + PAIR_CHUNK
        centre, neighbour, vec = neighbour_pairs(pos, all_centres[start:stop], all_neighbours[start:stop], config, dtype)
        slot = centre * n_elem + slot_of_element[z[neighbour]]
        coeffs.index_add_(0, slot, pair_terms(vec, z[centre], z[neighbour], config, smearing))

    coeffs = mix_elements(coeffs.reshape(numbers.size, n_elem, n_rad, n_coef), config.element_mixing(), dim=1)
    molecule_index = np.repeat(np.arange(n_atoms.size), n_atoms)
    atom_index = np.arange(numbers.size) - np.repeat(np.cumsum(n_atoms) - n_atoms, n_atoms)
    return EnvironmentBatch(
        coeffs=coeffs.reshape(numbers.size, n_elem * n_rad, n_coef),
        centre_numbers=z,
        molecule_index=torch.as_tensor(molecule_index, device=device),
        atom_index=torch.as_tensor(atom_index, device=device),
        n_molecules=len(molecules),
        config=config,
    )


def _molecule_indices(indices: Sequence[int] | np.ndarray | Tensor, n_molecules: int, device: torch.device) -> Tensor:
    """``indices`` as a flat int64 tensor on ``device``; ValueError outside 0..n_molecules-1."""
    idx = indices if isinstance(indices, Tensor) else torch.as_tensor(np.asarray(indices, dtype=np.int64).reshape(-1))
    idx = idx.to(device=device, dtype=torch.int64).flatten()
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n_molecules):
        raise ValueError(f"molecule indices must lie in 0..{n_molecules - 1}, got min {int(idx.min())}, max {int(idx.max())}")
    return idx


def molecule_rows(molecule_index: Tensor, n_molecules: int, indices: Sequence[int] | np.ndarray | Tensor) -> tuple[Tensor, Tensor]:
    """Rows of the environments of molecules ``indices`` (in that order) and their new
    molecule index 0..len(indices)-1, for environments ordered by molecule.

    With counts c_m and offsets o_m = Σ_{m'<m} c_{m'}, molecule ``indices[k]`` contributes
    rows o_m … o_m + c_m − 1, all labelled k (vectorised: no loop over molecules).
    Raises ValueError for an index outside 0..n_molecules-1.
    """
    device = molecule_index.device
    idx = _molecule_indices(indices, n_molecules, device)
    counts = torch.bincount(molecule_index, minlength=n_molecules)
    offsets = torch.cumsum(counts, 0) - counts
    sel_counts = counts[idx]
    new_index = torch.repeat_interleave(torch.arange(idx.numel(), device=device), sel_counts)
    shift = torch.repeat_interleave(offsets[idx] - (torch.cumsum(sel_counts, 0) - sel_counts), sel_counts)
    return shift + torch.arange(new_index.numel(), device=device), new_index


def padded_features(
    molecules: Molecule | Sequence[Molecule],
    config: FeatureConfig | None = None,
    n_atoms: int = QM9_MAX_ATOMS,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
) -> PaddedFeatures:
    """:func:`environment_features` in the per-atom-index layout (n_mol, n_atoms, C, L²) plus a mask.

    Used by the reference-comparison model, whose branch i sees atom i of every molecule.
    A molecule with more than ``n_atoms`` atoms is an :class:`InputError`.
    """
    n_atoms = check_int("n_atoms", n_atoms, 1)
    molecules = _as_list(molecules)
    for m in molecules:
        if m.n_atoms > n_atoms:
            raise InputError(m.describe(), f"{m.n_atoms} atoms do not fit the padded layout of {n_atoms} atoms")
    batch = environment_features(molecules, config, dtype=dtype, device=device)
    n_mol, (n_chan, n_coef) = len(molecules), batch.coeffs.shape[1:]
    coeffs = torch.zeros(n_mol, n_atoms, n_chan, n_coef, dtype=dtype, device=device)
    mask = torch.zeros(n_mol, n_atoms, dtype=torch.bool, device=device)
    numbers = torch.zeros(n_mol, n_atoms, dtype=torch.int64, device=device)
    where = (batch.molecule_index, batch.atom_index)
    coeffs[where] = batch.coeffs
    mask[where] = True
    numbers[where] = batch.centre_numbers
    return PaddedFeatures(coeffs=coeffs, mask=mask, centre_numbers=numbers, config=batch.config)
