"""``task: qm9-summary``: load QM9 and report its size, per-target statistics and split sizes."""

from __future__ import annotations

from typing import Any, Literal

from molntk.config import TaskConfig
from molntk.data.qm9 import qm9_summary
from molntk.data.splits import standard_split
from molntk.pipelines.qm9.config import QM9DataConfig
from molntk.pipelines.qm9.sets import load_qm9_data
from molntk.scale.progress import Progress


class QM9SummaryConfig(TaskConfig):
    """``task: qm9-summary``: load QM9 and report its size, target statistics and split."""

    task: Literal["qm9-summary"]
    data: QM9DataConfig = QM9DataConfig()


def run_qm9_summary(config: QM9SummaryConfig, source: str, progress: Progress | None = None) -> dict[str, Any]:
    """:func:`~molntk.data.qm9.qm9_summary` of the configured QM9 source, plus ``split``: the
    seed and the train/valid/test sizes of :func:`~molntk.data.splits.standard_split` with
    the configured ``n_train`` and ``n_valid`` (test = the rest). ``progress`` is not used
    (loading reports none)."""
    data = config.data
    molecules = load_qm9_data(data, source)
    summary = qm9_summary(molecules, seed=data.seed)
    split = standard_split(len(molecules), data.seed, data.split.n_train, data.split.n_valid)
    summary["split"] = {"seed": data.seed, **split.sizes()}
    return summary
