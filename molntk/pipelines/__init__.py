"""Jobs that ``molntk run CONFIG`` starts, and the result files they share.

- :mod:`~molntk.pipelines.report`: output folder, ``report.json``, ``config.yaml``,
  ``metrics.csv``, learning-curve plot and terminal table (every pipeline);
- :mod:`~molntk.pipelines.qm9`: ``task: qm9-property``, learning curves of the SO(3) NTK
  and its baselines on QM9 (kernels from :mod:`molntk.molecular`, files
  and tables in :mod:`~molntk.pipelines.qm9_report`);
- :mod:`~molntk.pipelines.images`: C_n ⋉ R² NTK image classification
  (``task: image-classification``: rotated digits, NCT-CRC-HE, PathMNIST).
"""
