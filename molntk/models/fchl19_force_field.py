"""FCHL19 with force kernels, the second force-field baseline of the SO(3) NTK force fields
(optional package ``qmllib``), exact (:class:`FCHL19ForceField`) and on inducing atoms
(:class:`SparseFCHL19ForceField`, the form that reaches thousands of training frames).

    from molntk.models.fchl19_force_field import FCHL19ForceField, SparseFCHL19ForceField
    model = FCHL19ForceField().fit(frames, energies, forces)       # or SparseFCHL19ForceField(inducing=2000)
    energies = model.predict(new_frames);  forces = model.predict_forces(new_frames)

The "GP" form of FCHL19 (Christensen, Bratholm, Faber, von Lilienfeld, J. Chem. Phys. 152,
044107, 2020), through qmllib: a Gaussian process on the energy of a molecule whose kernel
is the local FCHL19 kernel

    k(x, x') = Σ_{i ∈ x} Σ_{j ∈ x'} [Z_i = Z_j] exp(−‖q_i − q'_j‖² / (2σ²)),

q_i the FCHL19 vector of atom i (``generate_fchl19`` with qmllib's default hyperparameters,
element channels those of the training molecules: the channels of absent elements are zero,
so the kernel is that of qmllib's default element list, computed on a shorter vector),
conditioned jointly on the energies and the forces of M training molecules. With the
training labels y = [E_b − e_0(x_b); F_{b,c}] (b a molecule, c one of its 3n_b force
components) the model is

    E(x) = e_0(x) + Σ_b α_b k(x, x_b) + Σ_{b,c} β_{b,c} ∂k(x, x_b)/∂(−r_{b,c}),
    F(x) = −∇_r E(x),
    ([[K_EE, K_EF], [K_FE, K_FF]] + λ I) [α; β] = y,

K_EE = k(x_a, x_b), K_EF = −∂k/∂r_b, K_FF = ∂²k/∂r_a∂r_b: the covariances of energies and
forces under the prior E ~ GP(0, k); qmllib's ``get_symmetric_gp_kernel`` (training) and
``get_gp_kernel`` (query × training) compute these blocks analytically from the
representations' gradients. qmllib's sign convention, checked by finite differences in the
tests: its gradient blocks are derivatives with respect to −r, i.e. covariances with the
*forces*, so the labels are the forces themselves (not −F). The energy of a query (``predict``)
needs only its rows of K_EE (``get_local_kernel``) and K_EF (``get_local_gradient_kernel``,
the training molecules' gradients); its forces need the Hessian block as well.
e_0 are dressed atoms: per-element energies least-squares fitted to the training energies
(:class:`~molntk.regression.dressed_atom.DressedAtomModel`; on frames of one molecule, the
training mean).

σ and λ are chosen on held-out training frames: a seeded ``validation_fraction`` of the
training molecules is held out, a model fitted on the rest for each (σ, λ), and the pair
with the lowest criterion mean(r_E²)/mean((E − e_0)²) + mean(r_F²)/mean(F²) (e_0 fitted on
the rest; on one molecule mean((E − Ē)²): the criterion of
:class:`~molntk.models.sgdml_baseline.SGDMLForceField`) is refitted on every training
molecule. λ is relative: λ = ``lambdas`` × mean(diag K), so one grid fits every σ and size.
The σ grid is wide and doubling: on ethanol the FCHL19 distances ‖q_i − q_j‖ between
same-element environments run from 0.07 to 2.2 (an atom in two frames: median 0.25; two
atoms of one element: median 0.6); the grid spans the local regime (σ ≈ 0.5, about those
distances) to far beyond them (σ = 64, where the kernel tends to a low-order polynomial in
q and only λ limits it; qmllib suggests σ ≈ 21 for FCHL19 kernel ridge), and factors of two
suffice since the criterion varies slowly in log σ. ``sigma_at_grid_edge_`` says whether the
choice fell on an end of the grid (then widen it). Every σ is a new kernel; λ costs one
Cholesky each. Small λ with large σ gives large coefficients of both signs (|c| ~ 1e5 at
σ = 8, λ = 1e-8: an energy a sum of ±1e8 eV terms), accurate but only to ~1e-8 eV.

Cost: the training kernel has (M(1 + 3n))² entries (float64: 6.3 GB for 1,000 frames of a
9-atom molecule, 33 GB for 21 atoms) and qmllib computes its Hessian block with ~P·d²·3n
operations per pair of molecules (P same-element atom pairs, d = 312 for H, C, O), so the
fit grows as M² per σ and prediction of forces as M_query·M: on one core, 40 ethanol frames'
kernel takes ≈ 10 s, forces of 50 frames from 50 training frames ≈ 30 s (energies alone,
without the Hessian block, ≈ 1 s). Molecules may differ (the kernel is local; shorter ones
are zero padded); units are the caller's (positions Å, forces in energy unit per Å).

The sparse model expands the energy in m training atoms s_j instead of the training frames,
E(x) = e_0(x) + Σ_j w_j Σ_{i∈x} k(q_i, s_j), and needs only the rows of the frames' energies
and forces against those atoms (qmllib's local and atomic gradient kernels: first derivatives,
no Hessian block) and K_mm; w solves the projected-process problem of
:mod:`molntk.regression.sparse_joint` (:class:`SparseFCHL19ForceField`).
"""

from __future__ import annotations

import functools
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, RegressorMixin

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.features.inducing import inducing_rows
from molntk.models.force_field import joint_rows, noise_levels
from molntk.models.so3_ntk import as_molecules, check_inducing
from molntk.regression.blocked_cholesky import SymmetricBackup, cholesky_solve_in_place
from molntk.regression.dressed_atom import DressedAtomModel, element_counts
from molntk.regression.sparse_joint import fit_sparse_joint

logger = logging.getLogger(__name__)

#: σ grid of the validation search (module docstring: wide, doubling).
SIGMAS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
#: λ grid, relative to mean(diag K) (noise-free labels: the regularisation is numerical).
LAMBDAS: tuple[float, ...] = (1e-10, 1e-8, 1e-6, 1e-4)


#: Molecules per call of qmllib's atomic gradient kernel in :func:`basis_rows`.
ROWS_CHUNK = 100


@functools.cache
def _qmllib() -> tuple[Any, Any]:
    """qmllib's representations and kernels modules (InputError naming the extra when the
    package is missing)."""
    try:
        from qmllib import kernels, representations
    except ImportError as exc:  # pragma: no cover - the dev install has it
        raise InputError("qmllib", "the FCHL19 force field needs the package qmllib: "
                         'pip install "molntk[baselines]"') from exc
    return representations, kernels


class _Reps:
    """FCHL19 vectors X (M, n_max, d), with ``gradients`` their gradients dX (M, n_max, d,
    n_max, 3) (else None; zero padded to the largest molecule), the atomic numbers Q of the
    molecules and their element counts (M, len(elements))
    (:func:`~molntk.regression.dressed_atom.element_counts`)."""

    def __init__(self, molecules: list[Molecule], elements: tuple[int, ...], gradients: bool = True) -> None:
        generate = _qmllib()[0].generate_fchl19
        pad = max(m.n_atoms for m in molecules)
        self.X = self.dX = None
        for b, m in enumerate(molecules):  # written in place: no list of per-molecule copies
            rep = generate(m.numbers, m.positions, elements=list(elements), pad=pad, gradients=gradients)
            x, dx = rep if gradients else (rep, None)
            if self.X is None:
                self.X = np.empty((len(molecules), *np.shape(x)))
                self.dX = np.empty((len(molecules), *np.shape(dx))) if gradients else None
            self.X[b] = x
            if gradients:
                self.dX[b] = dx
        self.Q = [m.numbers.astype(np.int32) for m in molecules]
        self.counts = element_counts(molecules, elements)

    def take(self, rows: np.ndarray) -> _Reps:
        out = object.__new__(_Reps)
        out.X, out.counts = self.X[rows], self.counts[rows]
        out.dX = None if self.dX is None else self.dX[rows]
        out.Q = [self.Q[i] for i in rows]
        return out


def training_kernel(reps: _Reps, sigma: float) -> np.ndarray:
    """The joint kernel [[K_EE, K_EF], [K_FE, K_FF]] of molecules ``reps``: (M + 3N)², N the
    total number of atoms; the rows: the M energies, then each molecule's forces (atom by
    atom, x y z)."""
    return _qmllib()[1].get_symmetric_gp_kernel(reps.X, reps.dX, reps.Q, float(sigma))


def query_kernel(train: _Reps, query: _Reps, sigma: float) -> np.ndarray:
    """Rows: the query molecules' energies then forces (as :func:`training_kernel`);
    columns: the training labels."""
    return _qmllib()[1].get_gp_kernel(train.X, query.X, train.dX, query.dX, train.Q, query.Q, float(sigma))


def energy_kernel(train: _Reps, query: _Reps, sigma: float) -> np.ndarray:
    """The energy rows of :func:`query_kernel`, without the query gradients: K_EE (qmllib's
    local kernel) beside K_EF (its gradient kernel on the training molecules)."""
    kernels = _qmllib()[1]
    k_ee = kernels.get_local_kernel(train.X, query.X, train.Q, query.Q, float(sigma))  # (M_query, M_train)
    # (3N_train, M_query): the forces of the training molecules against the query energies
    k_ef = kernels.get_local_gradient_kernel(query.X, train.X, train.dX, query.Q, train.Q, float(sigma))
    return np.hstack([k_ee, k_ef.T])


class _FCHL19Estimator(RegressorMixin, BaseEstimator, ABC):
    """What both FCHL19 force fields share: the kernel-width grid, the training frames with
    their energies and forces, and query frames, each validated (InputError naming the input)."""

    @staticmethod
    def _grid(values: Any, name: str, what: str) -> list[float]:
        try:
            grid = [float(v) for v in np.atleast_1d(np.asarray(values, dtype=np.float64))]
        except (TypeError, ValueError) as exc:
            raise InputError(name, f"must be {what}, got {values!r}") from exc
        if not grid or not all(np.isfinite(grid)) or min(grid) <= 0:
            raise InputError(name, f"must be {what}, got {values!r}")
        return grid

    def _molecules(self, X: Any, name: str = "X", check_elements: bool = True) -> list[Molecule]:
        molecules = as_molecules(X, name)
        if not molecules:
            raise InputError(name, "no molecules")
        if check_elements:
            for i, m in enumerate(molecules):
                extra = sorted(set(m.numbers.tolist()) - set(self.elements_))
                if extra:
                    raise InputError(f"{name}[{i}]", f"elements {extra} are not among the training elements "
                                     f"{list(self.elements_)}")
        return molecules

    def _labelled(self, X: Any, energies: Any, forces: Any) -> tuple[list[Molecule], np.ndarray, list[np.ndarray]]:
        """The training molecules, energies (M,) and forces (M × (n, 3)), validated; sets
        ``elements_`` (the training elements)."""
        molecules = self._molecules(X, check_elements=False)
        E = np.asarray(energies, dtype=np.float64)
        if E.shape != (len(molecules),) or not np.all(np.isfinite(E)):
            raise InputError("energies",
                             f"must be {len(molecules)} finite numbers, one per molecule, got shape {E.shape}")
        if isinstance(forces, np.ndarray) and forces.ndim == 3:
            forces = list(forces)
        if not isinstance(forces, Sequence) or len(forces) != len(molecules):
            raise InputError("forces", f"must be {len(molecules)} arrays (n, 3), one per molecule, got "
                             f"{len(forces) if isinstance(forces, Sequence) else type(forces).__name__}")
        F = [np.asarray(f, dtype=np.float64) for f in forces]
        for i, (f, m) in enumerate(zip(F, molecules)):
            if f.shape != (m.n_atoms, 3) or not np.all(np.isfinite(f)):
                raise InputError(f"forces[{i}]", f"must be finite, of shape ({m.n_atoms}, 3), got {f.shape}")
        self.elements_ = tuple(int(z) for z in np.unique(np.concatenate([m.numbers for m in molecules])))
        return molecules, E, F

    def _query(self, X: Any, caller: str, forces: bool) -> tuple[list[Molecule], _Reps]:
        """The query molecules and their FCHL19 vectors (with gradients only for ``forces``)."""
        if not hasattr(self, "dressed_atom_"):
            raise InputError(type(self).__name__, f"{caller} called before fit")
        molecules = self._molecules(X)
        return molecules, _Reps(molecules, self.elements_, gradients=forces)

    @abstractmethod
    def _rows(self, reps: _Reps, forces: bool) -> tuple[np.ndarray, np.ndarray]:
        """The fitted model's rows of molecules ``reps`` (their energies, then with ``forces``
        their force components, atom by atom, x y z) and the coefficients they multiply."""

    def predict(self, X: Any) -> np.ndarray:
        """Energies (M,) of molecules X."""
        _, reps = self._query(X, "predict", forces=False)
        rows, coef = self._rows(reps, forces=False)
        return rows @ coef + self.dressed_atom_.predict(reps.counts)

    def predict_forces(self, X: Any, return_energy: bool = False
                       ) -> list[np.ndarray] | tuple[np.ndarray, list[np.ndarray]]:
        """Forces, a list of (n, 3) arrays; with ``return_energy`` also the energies (M,)."""
        molecules, reps = self._query(X, "predict_forces", forces=True)
        rows, coef = self._rows(reps, forces=True)
        pred = rows @ coef
        energies = pred[: len(molecules)] + self.dressed_atom_.predict(reps.counts)
        ends = np.cumsum([3 * m.n_atoms for m in molecules])[:-1]
        forces = [f.reshape(-1, 3) for f in np.split(pred[len(molecules):], ends)]
        return (energies, forces) if return_energy else forces


class FCHL19ForceField(_FCHL19Estimator):
    """FCHL19 with force kernels through ``qmllib`` (module docstring): ``sigmas`` (the kernel
    width grid, or one value), ``lambdas`` (the regularisation grid relative to mean(diag K),
    or one value), ``validation_fraction`` and ``seed`` (the held-out molecules of the
    search). On one core, 50 training frames of ethanol (the committed sample) fit in ≈ 140 s
    with the default 8 × 4 grid (≈ 17 s per σ) and predict 50 frames' forces in ≈ 30 s.

    Fitted attributes: ``sigma_``, ``sigma_at_grid_edge_``, ``reg_relative_`` (λ chosen,
    relative), ``reg_`` (λ absolute), ``reg_at_grid_edge_``, ``search_`` ((σ, λ relative) →
    validation criterion), ``elements_`` (the training elements), ``dressed_atom_`` (the
    dressed atoms e_0, per element of ``elements_``), ``coef_`` ([α; β]).
    """

    def __init__(self, sigmas: Sequence[float] = SIGMAS, lambdas: Sequence[float] = LAMBDAS,
                 validation_fraction: float = 0.2, seed: int = 0) -> None:
        self.sigmas = sigmas
        self.lambdas = lambdas
        self.validation_fraction = validation_fraction
        self.seed = seed

    # ------------------------------------------------------------------ fitting
    def _fit_labels(self, reps: _Reps, E: np.ndarray, F: list[np.ndarray], sigma: float,
                    lambdas: list[float], escalate: bool = False
                    ) -> tuple[np.ndarray, list[tuple[np.ndarray | None, float, float]]]:
        """Dressed atoms on these molecules and, for each λ relative, the coefficients [α; β]
        (None where K + λI is not positive definite), λ relative and λ absolute; ``escalate``: raise
        such a λ a hundredfold until it is, with a warning, instead."""
        counts = reps.counts
        dressed_atom = DressedAtomModel().fit(counts, E)
        y = np.concatenate([dressed_atom.residual(counts, E)] + [f.ravel() for f in F])
        K = training_kernel(reps, sigma)
        backup = SymmetricBackup(K)
        scale = float(np.mean(backup.diagonal))
        out = []
        for lam in lambdas:
            coef = cholesky_solve_in_place(K, y, lam * scale, backup)
            while coef is None and escalate and lam < 1.0:
                logger.warning("FCHL19 force field: K + λI is not positive definite at λ = %.3g × mean(diag K) "
                               "(σ = %g); raising λ a hundredfold", lam, sigma)
                lam *= 100.0
                coef = cholesky_solve_in_place(K, y, lam * scale, backup)
            if coef is None and escalate:
                raise InputError("lambdas", f"K + λI is not positive definite even at λ = {lam:g} × mean(diag K) "
                                 f"(σ = {sigma:g}): the kernel is not finite or not a kernel")
            out.append((coef, lam, lam * scale))
        return dressed_atom, out

    def fit(self, X: Any, energies: Any, forces: Sequence[Any]) -> FCHL19ForceField:
        """Fit on molecules X (frames), their energies (M,) and forces (M × (n, 3))."""
        sigmas = self._grid(self.sigmas, "sigmas", "positive finite kernel widths")
        lambdas = self._grid(self.lambdas, "lambdas", "positive finite relative regularisations")
        if not 0 < self.validation_fraction < 1:
            raise InputError("validation_fraction",
                             f"must lie strictly between 0 and 1, got {self.validation_fraction!r}")
        molecules, E, F = self._labelled(X, energies, forces)
        reps = _Reps(molecules, self.elements_)
        self.search_ = {}
        if len(sigmas) * len(lambdas) > 1:
            n_val = int(round(self.validation_fraction * len(molecules)))
            if n_val < 1 or n_val >= len(molecules):
                raise InputError("X", f"{len(molecules)} molecules are too few to hold out "
                                 f"{self.validation_fraction:.0%} for the σ, λ search")
            order = np.random.default_rng(self.seed).permutation(len(molecules))
            val, rest = order[:n_val], order[n_val:]
            train_reps, val_reps = reps.take(rest), reps.take(val)
            counts_val = val_reps.counts
            F_val = np.concatenate([F[i].ravel() for i in val])
            for sigma in sigmas:
                dressed_atom, solutions = self._fit_labels(train_reps, E[rest], [F[i] for i in rest], sigma, lambdas)
                norm_e = max(float(np.mean(dressed_atom.residual(counts_val, E[val]) ** 2)), 1e-300)
                norm_f = max(float(np.mean(F_val**2)), 1e-300)
                K_query = query_kernel(train_reps, val_reps, sigma)
                for lam, (coef, _, _) in zip(lambdas, solutions):
                    if coef is None:  # not positive definite: this λ is numerically unusable
                        self.search_[sigma, lam] = float("inf")
                        continue
                    pred = K_query @ coef
                    r_e = pred[:n_val] - dressed_atom.residual(counts_val, E[val])
                    r_f = pred[n_val:] - F_val
                    self.search_[sigma, lam] = float(np.mean(r_e**2) / norm_e + np.mean(r_f**2) / norm_f)
            self.sigma_, self.reg_relative_ = min(self.search_, key=self.search_.get)
            self.sigma_at_grid_edge_ = self.sigma_ in (min(sigmas), max(sigmas)) if len(sigmas) > 1 else None
            self.reg_at_grid_edge_ = self.reg_relative_ in (min(lambdas), max(lambdas)) if len(lambdas) > 1 else None
        else:
            self.sigma_, self.reg_relative_ = sigmas[0], lambdas[0]
            self.sigma_at_grid_edge_ = self.reg_at_grid_edge_ = None
        self.dressed_atom_, [(self.coef_, self.reg_relative_, self.reg_)] = self._fit_labels(
            reps, E, F, self.sigma_, [self.reg_relative_], escalate=True)
        self.train_reps_ = reps
        self.n_features_in_ = 1
        return self

    # ------------------------------------------------------------------ prediction
    def _rows(self, reps: _Reps, forces: bool) -> tuple[np.ndarray, np.ndarray]:
        if forces:
            return query_kernel(self.train_reps_, reps, self.sigma_), self.coef_
        return energy_kernel(self.train_reps_, reps, self.sigma_), self.coef_


# ---------------------------------------------------------------------------- the sparse model

@dataclass(frozen=True)
class _Atoms:
    """The atoms of training molecules, one row each in molecule order (the
    :class:`~molntk.features.inducing.AtomRows` of :func:`~molntk.features.inducing.inducing_rows`):
    their FCHL19 vectors (n, d), atomic numbers and molecules."""

    vectors: np.ndarray
    centre_numbers: torch.Tensor
    molecule_index: torch.Tensor
    n_molecules: int

    @classmethod
    def of(cls, reps: _Reps) -> _Atoms:
        sizes = [len(q) for q in reps.Q]
        vectors = np.concatenate([reps.X[b, :n] for b, n in enumerate(sizes)])
        numbers = torch.from_numpy(np.concatenate(reps.Q).astype(np.int64))
        owner = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
        return cls(vectors, numbers, owner, len(sizes))


@dataclass(frozen=True)
class _Basis:
    """m atomic environments, each a one-atom "molecule" for qmllib's kernels: X (m, 1, d), Q."""

    X: np.ndarray
    Q: list[np.ndarray]

    @classmethod
    def pick(cls, atoms: _Atoms, m: int, method: str, seed: int) -> _Basis:
        """m inducing atoms by :func:`~molntk.features.inducing.inducing_rows` (per element in
        proportion to its atoms; farthest-point sampling on the FCHL19 vectors, or at random)."""
        rows = inducing_rows(atoms, m, lambda r: torch.from_numpy(atoms.vectors[r.numpy()]), method=method,
                             seed=seed).numpy()
        numbers = atoms.centre_numbers.numpy()[rows].astype(np.int32)
        return cls(np.ascontiguousarray(atoms.vectors[rows, None, :]), [numbers[i : i + 1] for i in range(len(rows))])


def basis_kernel(basis: _Basis, sigma: float) -> np.ndarray:
    """K_mm: k(s_i, s_j) = [Z_i = Z_j] exp(−‖q_i − q_j‖²/2σ²) among the inducing atoms (symmetrised)."""
    K = _qmllib()[1].get_local_kernel(basis.X, basis.X, basis.Q, basis.Q, float(sigma))
    return (K + K.T) / 2


def basis_rows(basis: _Basis, reps: _Reps, sigma: float, forces: bool = True,
               chunk: int = ROWS_CHUNK) -> np.ndarray:
    """Rows of molecules ``reps`` against the inducing atoms s_j: the energies
    Σ_{i∈x} k(q_i, s_j) (M, m), then with ``forces`` each molecule's force components
    −∂/∂r Σ_{i∈x} k(q_i, s_j) (atom by atom, x y z; qmllib's atomic gradient kernel, a
    covariance with the forces). The force rows are computed ``chunk`` molecules at a time,
    so qmllib's working copies of the gradients stay those of one chunk."""
    kernels = _qmllib()[1]
    energy = kernels.get_local_kernel(basis.X, reps.X, basis.Q, reps.Q, float(sigma))
    if not forces:
        return energy
    ends = np.cumsum([0] + [3 * len(q) for q in reps.Q])
    rows = np.empty((len(reps.Q) + ends[-1], energy.shape[1]))
    rows[: len(reps.Q)] = energy
    for start in range(0, len(reps.Q), chunk):
        part = reps.take(np.arange(start, min(start + chunk, len(reps.Q))))
        stop = start + len(part.Q)
        rows[len(reps.Q) + ends[start] : len(reps.Q) + ends[stop]] = kernels.get_atomic_local_gradient_kernel(
            basis.X, part.X, part.dX, basis.Q, part.Q, float(sigma))
    return rows


class SparseFCHL19ForceField(_FCHL19Estimator):
    """FCHL19 with force kernels on m inducing atoms: the projected-process (GAP-style) model of
    :mod:`molntk.regression.sparse_joint` with the local FCHL19 kernel (module docstring), the
    form that scales to thousands of training frames,

        E(x) = e_0(x) + Σ_j w_j Σ_{i∈x} k(q_i, s_j),   F(x) = −∇_r E(x),
        w = argmin Σ_E (E − Ê)²/λ_E + Σ_F (F − F̂)²/λ_F + wᵀ K_mm w,

    s_1 … s_m the FCHL19 vectors of m training atoms (``inducing``; per element in proportion
    to its atoms, by farthest-point sampling on the vectors or at random, ``inducing_selection``,
    ``inducing_seed``), e_0 the dressed atoms. λ_E and λ_F are chosen together by the grouped
    leave-one-configuration-out criterion of :func:`~molntk.regression.noise_search.search_noise`
    (``reg_energy`` / ``reg_force`` "cv", above ``psd_rtol`` times their mean diagonals; or
    both numbers), and σ from ``sigmas`` by the same criterion at its λ's: the SO(3) NTK's
    sparse force field's solver and criterion (:class:`~molntk.models.force_field.SO3ForceFieldRegressor`
    with ``inducing``), so the two differ only in the kernel. ``rank_rtol``: eigenvalues of
    K_mm below this fraction of the largest are dropped. The defaults (floor 1e-12, rank cut
    1e-13) are those of the md configs' SO(3) force fields: both kernels are exact to rounding.

    Cost per σ: the force rows need qmllib's atomic gradient kernel, ~m · M · n · d · 3n
    operations for M training frames of n atoms (d = 312 for H, C, O): measured ≈ 1.3 s for
    100 ethanol frames against 200 atoms on two threads, so ≈ 2 min for 1,000 frames against
    2,000; the rows take (M(1 + 3n)) · m · 8 bytes (450 MB for 1,000 ethanol frames, m = 2,000).

    Fitted attributes: ``sigma_``, ``sigma_at_grid_edge_``, ``search_`` (σ → criterion),
    ``reg_energy_``, ``reg_force_``, ``cv_score_``, ``reg_at_grid_edge_``, ``rank_`` (of K_mm
    kept), ``n_inducing_``, ``elements_``, ``dressed_atom_``, ``inducing_weights_`` (w, (m,)).
    """

    def __init__(self, inducing: int = 2000, sigmas: Sequence[float] = SIGMAS, reg_energy: float | str = "cv",
                 reg_force: float | str = "cv", inducing_selection: str = "fps", inducing_seed: int = 0,
                 psd_rtol: float = 1e-12, rank_rtol: float = 1e-13) -> None:
        self.inducing = inducing
        self.sigmas = sigmas
        self.reg_energy = reg_energy
        self.reg_force = reg_force
        self.inducing_selection = inducing_selection
        self.inducing_seed = inducing_seed
        self.psd_rtol = psd_rtol
        self.rank_rtol = rank_rtol

    def fit(self, X: Any, energies: Any, forces: Sequence[Any]) -> SparseFCHL19ForceField:
        """Fit on molecules X (frames), their energies (M,) and forces (M × (n, 3))."""
        sigmas = self._grid(self.sigmas, "sigmas", "positive finite kernel widths")
        n_inducing = check_inducing(self.inducing, self.inducing_selection, self.inducing_seed)
        if n_inducing is None:
            raise InputError("inducing", "must be a whole number ≥ 1 (FCHL19ForceField is the exact model)")
        lam_e, lam_f = noise_levels(self.reg_energy, self.reg_force)
        if lam_e is not None and len(sigmas) > 1:
            raise InputError("sigmas", "a grid of σ is chosen by the LOO criterion at the λ's it chooses: give "
                             "reg_energy and reg_force 'cv', or one σ")
        molecules, E, F = self._labelled(X, energies, forces)
        reps = _Reps(molecules, self.elements_)
        self.dressed_atom_ = DressedAtomModel().fit(reps.counts, E)
        y = np.concatenate([self.dressed_atom_.residual(reps.counts, E)] + [f.ravel() for f in F])
        is_force, groups = joint_rows(len(molecules), [m.n_atoms for m in molecules])
        self.basis_ = _Basis.pick(_Atoms.of(reps), n_inducing, self.inducing_selection, int(self.inducing_seed))
        self.search_, best = {}, None
        for sigma in sigmas:
            fit = fit_sparse_joint(basis_rows(self.basis_, reps, sigma), basis_kernel(self.basis_, sigma), y, is_force,
                                   groups, reg_energy=lam_e, reg_force=lam_f, floor=self.psd_rtol,
                                   rank_rtol=self.rank_rtol)
            self.search_[sigma] = fit.cv_score
            if best is None or (fit.cv_score is not None and fit.cv_score < best[1].cv_score):
                best = sigma, fit
        self.sigma_, fit = best
        self.sigma_at_grid_edge_ = self.sigma_ in (min(sigmas), max(sigmas)) if len(sigmas) > 1 else None
        self.inducing_weights_, self.rank_, self.n_inducing_ = fit.weights, fit.rank, len(fit.weights)
        self.reg_energy_, self.reg_force_, self.cv_score_ = fit.reg_energy, fit.reg_force, fit.cv_score
        self.reg_at_grid_edge_ = fit.at_grid_edge
        self.n_features_in_ = 1
        return self

    def _rows(self, reps: _Reps, forces: bool) -> tuple[np.ndarray, np.ndarray]:
        return basis_rows(self.basis_, reps, self.sigma_, forces), self.inducing_weights_
