"""The tasks of ``molntk run``, registered here and nowhere else.

A task is a :class:`~molntk.config.Task`: its schema (a :class:`~molntk.config.TaskConfig`
whose ``task`` literal names it) and ``run(config, source, progress=None)``, which
performs the job, writes its files and returns the result as JSON-serialisable data.
``TASKS.load(path, overrides)`` reads and validates a configuration file;
``TASKS[config.task].run(config, path)`` runs it. How a result is printed is decided in
:mod:`molntk.cli.show`.
"""

from __future__ import annotations

from molntk.config import Task, TaskRegistry
from molntk.pipelines.emergent import (
    EmergentDigitsConfig,
    EmergentIsingConfig,
    EmergentSO3Config,
    run_emergent_digits,
    run_emergent_ising,
    run_emergent_so3,
)
from molntk.pipelines.images import ImageClassificationConfig, run_image_classification
from molntk.pipelines.md import MDForceFieldConfig, run_md_force_field
from molntk.pipelines.qm9 import QM9PropertyConfig, run_and_write
from molntk.pipelines.qm9_summary import QM9SummaryConfig, run_qm9_summary

#: Every task, in the order ``molntk`` lists them.
TASKS = TaskRegistry(
    [
        Task(QM9SummaryConfig, run_qm9_summary),
        Task(ImageClassificationConfig, run_image_classification),
        Task(QM9PropertyConfig, run_and_write),
        Task(EmergentIsingConfig, run_emergent_ising),
        Task(EmergentSO3Config, run_emergent_so3),
        Task(EmergentDigitsConfig, run_emergent_digits),
        Task(MDForceFieldConfig, run_md_force_field),
    ]
)
