"""Paired comparisons of a run's models on the same test items (QM9 molecules, MD frames).

Within a group of records scored on the same items (a target and training size; an MD
quantity and training size): the model of the lowest MAE against every other one,

    MAE(other) − MAE(lowest) = Σ_i (e^other_i − e^lowest_i) / Σ_i c_i    (≥ 0),

with e_i an item's sum of absolute errors and c_i their count, and its paired bootstrap 95 %
interval, items resampled whole (:func:`~molntk.regression.paired_error_difference`);
``resolved`` when the interval lies above 0, i.e. the test items tell the two models apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from molntk.regression import paired_error_difference


def lowest_against_others(scores: Sequence[tuple[str, float, np.ndarray]],
                          counts: np.ndarray | None = None) -> list[dict[str, Any]]:
    """Rows ``{"model", "against", "mae_difference", "ci95_low", "ci95_high", "resolved"}`` of
    one group, from each model's (name, MAE, per-item absolute-error sums); ``counts``: the
    errors per item (None: one each). No rows for a group of fewer than two models."""
    if len(scores) < 2:
        return []
    best, _, best_errors = min(scores, key=lambda score: score[1])
    rows = []
    for other, _, errors in scores:
        if other == best:
            continue
        diff = paired_error_difference(errors, best_errors, counts)
        rows.append({"model": best, "against": other, "mae_difference": diff["mae_difference"],
                     "ci95_low": diff["ci_low"], "ci95_high": diff["ci_high"], "resolved": diff["ci_low"] > 0})
    return rows
