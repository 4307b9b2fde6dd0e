"""Dressed-atom baseline: a per-element linear model of an extensive molecular property.

With n_e(M) the number of atoms of element e in molecule M,

    y(M) ≈ Σ_e n_e(M) w_e  (+ b with ``intercept=True``).

The weights solve the ridge problem min ‖C w - y‖² + λ ‖w‖² (C the (N, E) count matrix,
centred together with y when there is an intercept, which is not penalised) with a tiny
λ = ``ridge`` · mean(diag CᵀC): it only removes the indeterminacy of element columns that
are absent or collinear (λ → 0 gives the minimum-norm least-squares solution). It is solved
as the least-squares problem [C; √λ I] w ≈ [y; 0] (no normal equations, so no squared
condition number). Kernels then learn the residual y - ŷ.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Protocol

import numpy as np

from sklearn.base import BaseEstimator, RegressorMixin, clone

from molntk.data.molecule import Molecule, element_number, element_symbol
from molntk.errors import InputError
from molntk.regression import validation


class HasNumbers(Protocol):
    """Anything with atomic numbers: :class:`~molntk.data.Molecule`, ``ase.Atoms``."""

    @property
    def numbers(self) -> np.ndarray: ...


def element_counts(molecules: Iterable[HasNumbers], elements: Sequence[int | str]) -> np.ndarray:
    """Count matrix C (N, E): C[i, j] = number of atoms of ``elements[j]`` in molecule i.

    ``molecules`` have ``.numbers`` (atomic numbers: :class:`~molntk.data.Molecule`, ``ase.Atoms``);
    ``elements`` are atomic numbers or symbols. An atom of an element not listed is an
    :class:`InputError` naming the molecule.
    """
    zs = [element_number(e, source="elements") if isinstance(e, str) else int(e) for e in elements]
    symbols = [element_symbol(z) for z in zs]
    if len(set(zs)) != len(zs) or not zs:
        raise InputError("elements", f"must be a non-empty list of distinct elements, got {list(elements)}")
    column = {z: j for j, z in enumerate(zs)}
    rows = []
    for i, molecule in enumerate(molecules):
        numbers = np.asarray(molecule.numbers, dtype=np.int64)
        unknown = sorted(set(numbers.tolist()) - column.keys())
        if unknown:
            name = molecule.describe() if isinstance(molecule, Molecule) else f"molecules[{i}]"
            raise InputError(name, f"has element(s) {[element_symbol(z) for z in unknown]} not in elements {symbols}")
        rows.append(np.bincount([column[z] for z in numbers.tolist()], minlength=len(zs)))
    return np.array(rows, dtype=np.int64).reshape(-1, len(zs))


@dataclass(eq=False, repr=False)
class DressedAtomModel(RegressorMixin, BaseEstimator):
    """Per-element linear model y ≈ C w (+ b), a scikit-learn estimator: ``fit(counts, y)``,
    ``predict(counts)`` with counts the (N, E) matrix of :func:`element_counts`.

    ``intercept``: fit b too; ``ridge``: the relative λ of the module docstring (≥ 0). The
    parameters are stored as given and checked by ``fit`` (InputError naming ``ridge``).
    Fitted attributes: ``coef_`` (E,) or (E, k) and ``intercept_`` (0-d or (k,); zero
    without ``intercept``), shaped like the targets.
    """

    _: KW_ONLY
    intercept: bool = False
    ridge: float = 1e-12

    @staticmethod
    def _counts(counts: object, *, columns: int | None = None) -> np.ndarray:
        """The (N, E) count matrix as float64, ≥ 0, with E = ``columns`` when given."""
        array = validation.matrix(counts, "counts")
        if (array < 0).any():
            raise InputError("counts", "element counts must be ≥ 0")
        if columns is not None and array.shape[1] != columns:
            raise InputError("counts", f"must have {columns} element columns, got shape {array.shape}")
        return array

    def fit(self, counts: object, y: object) -> DressedAtomModel:
        """Least-squares (tiny ridge) fit of y ((N,) or (N, k)) on counts (N, E)."""
        ridge = validation.nonnegative(self.ridge, "ridge")
        C = self._counts(counts)
        Y, was_1d = validation.targets(y, "y", rows=C.shape[0])
        c_mean = C.mean(axis=0) if self.intercept else np.zeros(C.shape[1])
        y_mean = Y.mean(axis=0) if self.intercept else np.zeros(Y.shape[1])
        Cc, Yc = C - c_mean, Y - y_mean
        lam = ridge * float(np.mean(Cc**2)) * C.shape[0]
        design = np.vstack([Cc, np.sqrt(lam) * np.eye(C.shape[1])])
        rhs = np.vstack([Yc, np.zeros((C.shape[1], Y.shape[1]))])
        coef = np.linalg.lstsq(design, rhs, rcond=None)[0]
        intercept = y_mean - c_mean @ coef
        self.coef_ = coef[:, 0] if was_1d else coef
        self.intercept_ = np.asarray(intercept[0]) if was_1d else intercept
        return self

    def predict(self, counts: object) -> np.ndarray:
        """ŷ = C w + b, shaped (N,) or (N, k) like the fitted targets."""
        if not hasattr(self, "coef_"):
            raise InputError("DressedAtomModel", "predict called before fit")
        return self._counts(counts, columns=self.coef_.shape[0]) @ self.coef_ + self.intercept_

    def leave_one_out_predictions(self, counts: object, y: object) -> np.ndarray:
        """Row i: the predictions at all N points of this model refitted without point i,
        (N, N) or (N, N, k) (N refits of N − 1 points; what a leave-one-out of a model built
        on the dressed atoms refits)."""
        C = self._counts(counts)
        Y = validation.as_float64(y, "y")
        validation.targets(Y, "y", rows=C.shape[0])
        return np.stack([clone(self).fit(np.delete(C, i, 0), np.delete(Y, i, 0)).predict(C) for i in range(C.shape[0])])

    def residual(self, counts: object, y: object) -> np.ndarray:
        """y - ŷ: what a kernel model learns on top of the dressed atoms."""
        prediction = self.predict(counts)
        target = validation.as_float64(y, "y")
        if target.shape != prediction.shape:
            raise InputError("y", f"must have shape {prediction.shape} like the prediction, got {target.shape}")
        return target - prediction
