"""Jobs that ``molntk run CONFIG`` starts: per pipeline, its configuration schema and a
``run(config, source, progress=None)`` that writes its files and returns its result as data
(printing is done by :mod:`molntk.cli`).

- :mod:`~molntk.pipelines.tasks`: the registry of tasks (``TASKS``);
- :mod:`~molntk.pipelines.report`: output folder, ``report.json``, ``config.yaml``,
  ``metrics.csv`` and learning-curve plot (every pipeline);
- ``task: qm9-summary``: :mod:`~molntk.pipelines.qm9_summary` (schema and run);
- ``task: qm9-property``: schema :mod:`~molntk.pipelines.qm9_config`, learning curves of
  the SO(3) NTK and its baselines on QM9 :mod:`~molntk.pipelines.qm9` (kernels from
  :mod:`molntk.molecular`, sparse models in :mod:`~molntk.pipelines.qm9_sparse`), run and files :mod:`~molntk.pipelines.qm9_report`;
- ``task: image-classification``: schema :mod:`~molntk.pipelines.images_config`, C_n ⋉ R²
  NTK image classification :mod:`~molntk.pipelines.images` (rotated digits, NCT-CRC-HE,
  PathMNIST).
"""
