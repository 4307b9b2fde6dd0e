"""Jobs that ``molntk run CONFIG`` starts: per pipeline, its configuration schema and a
``run(config, source, progress=None)`` that writes its files and returns its result as data
(printing is done by :mod:`molntk.cli`).

- :mod:`~molntk.pipelines.tasks`: the registry of tasks (``TASKS``);
- :mod:`~molntk.pipelines.files`: output folder, ``report.json``, ``config.yaml``,
  ``metrics.csv`` and learning-curve plot (every pipeline);
- :mod:`~molntk.pipelines.comparisons`: the lowest-MAE model against every other on the
  same test items, with paired bootstrap intervals (the QM9 and MD reports' ``comparisons``);
- ``task: qm9-summary``: :mod:`~molntk.pipelines.qm9_summary` (schema and run);
- ``task: qm9-property``: the package :mod:`~molntk.pipelines.qm9` (schema, data,
  candidates, exact and sparse models, records, run, files): learning curves of the SO(3)
  NTK and its baselines on QM9, kernels from :mod:`molntk.molecular` through :mod:`molntk.scale`;
- ``task: image-classification``: the package :mod:`~molntk.pipelines.images` (schema,
  data, models, classification, run): C_n ⋉ R² NTK image classification (rotated digits,
  NCT-CRC-HE, PathMNIST).
"""
