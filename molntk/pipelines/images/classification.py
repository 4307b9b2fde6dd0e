"""Classification by one-hot kernel regression, orbit-same predictions, confusion matrices.

One-hot regression: with Y ∈ {0, 1}^{n×C} the one-hot training labels, the NTK mean of the
converged infinite network (t = ∞) is Ŷ(x) = Θ(x, X) (Θ(X, X) + λI)⁻¹ Y (per class column,
after standardisation), λ chosen on the training data by cross-validation
(:class:`~molntk.regression.KernelRegressor`); the predicted label is argmax_c Ŷ_c(x).

Orbit-same predictions of a test image x under C_n: with ŷ_g the predicted label of
ρ(g) x (g = 0..n−1, ρ(0) x = x),

    s(x) = Σ_{g=0}^{n−1} [ŷ_g = ŷ_0]  ∈ {1, …, n},

and the reported number is its mean over test images: n for a C_n-invariant classifier.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from molntk.errors import InputError
from molntk.pipelines.files import figure, save_figure
from molntk.regression import KernelRegressor


def one_hot(labels: np.ndarray, n_classes: int) -> np.ndarray:
    """(n,) integer labels in 0..n_classes−1 → (n, n_classes) float64 one-hot rows."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        raise InputError("labels", f"expected a 1-d array of labels in 0..{n_classes - 1}")
    return np.eye(n_classes)[labels]


@dataclass(frozen=True, eq=False)
class Fit:
    """Class scores Ŷ (m, C) of the test rows, the fitted regressor (λ in ``reg_``, the CV
    curve in ``cv_result_``, ...) and the seconds to predict."""

    scores: np.ndarray
    regressor: KernelRegressor
    predict_seconds: float

    @property
    def labels(self) -> np.ndarray:
        """Predicted labels argmax_c Ŷ_c, (m,)."""
        return self.scores.argmax(axis=1)


def fit_predict(K_train: np.ndarray, labels: np.ndarray, K_test: np.ndarray, n_classes: int, *, cv: str) -> Fit:
    """One-hot NTK regression (t = ∞) on K_train (n, n), predicted for K_test (m, n); λ by ``cv``."""
    regressor = KernelRegressor("ntk", reg="cv", cv=cv).fit(K_train, one_hot(labels, n_classes))
    start = time.perf_counter()
    scores = regressor.predict(K_test)
    return Fit(np.asarray(scores), regressor, time.perf_counter() - start)


def orbit_same_predictions(orbit_labels: np.ndarray) -> float:
    """Mean over test images of s(x) = #{g : ŷ_g = ŷ_0}; ``orbit_labels`` is (n, m) with row g = labels of ρ(g) x."""
    orbit_labels = np.asarray(orbit_labels)
    if orbit_labels.ndim != 2 or orbit_labels.shape[1] == 0:
        raise InputError("orbit_labels", f"expected (n rotations, m > 0 images), got shape {orbit_labels.shape}")
    return float((orbit_labels == orbit_labels[0]).sum(axis=0).mean())


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> np.ndarray:
    """(C, C) counts: entry (i, j) = number of test images of class i predicted as j."""
    matrix = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(matrix, (np.asarray(y_true), np.asarray(y_pred)), 1)
    return matrix


def plot_confusion(path: str | Path, matrix: np.ndarray, classes: tuple[str, ...], title: str) -> Path:
    """Row-normalised confusion matrix (true class per row) as a PNG at ``path``, counts in the cells."""

    totals = matrix.sum(axis=1, keepdims=True)
    rates = matrix / np.where(totals > 0, totals, 1)
    size = 1.6 + 0.45 * len(classes)
    with figure(figsize=(size + 1.0, size), dpi=120) as (fig, ax):
        image = ax.imshow(rates, cmap="Blues", vmin=0.0, vmax=1.0)
        for i in range(len(classes)):
            for j in range(len(classes)):
                if matrix[i, j]:
                    colour = "white" if rates[i, j] > 0.5 else "black"
                    ax.text(j, i, str(matrix[i, j]), ha="center", va="center", fontsize=7, color=colour)
        ax.set_xticks(range(len(classes)), classes, rotation=45 if max(map(len, classes)) > 2 else 0)
        ax.set_yticks(range(len(classes)), classes)
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
        ax.set_title(title, fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.046, label="fraction of the true class")
        fig.tight_layout()
        return save_figure(fig, path)
