"""``task: image-classification``: C_n GCNN NTK against non-equivariant and augmented baselines.

All models see identical data (:mod:`~molntk.pipelines.images.data`): the same nested
training sets of each size in ``n_train`` and the same test set. Per model:

1. kernels, once, at the largest training set: the NTK Θ(X, X) and Θ(X_eval, X), where
   X_eval is the test set followed by ρ(g) x for g = 1..n−1 of its first ``n_orbit``
   images (ρ(g): rotation by 2πg/n, :func:`~molntk.kernels.cn.rotate_images`; exact
   ``rot90`` for quarter turns, bilinear with zero fill otherwise), in blocks of at most
   ``compute.block`` images by the block engine of :mod:`molntk.scale` (on every visible
   GPU when ``compute.device`` resolves to CUDA), reporting each block to ``progress``;
2. per training size m: one-hot NTK regression on the first m training images, λ by
   cross-validation on them only (:mod:`~molntk.pipelines.images.classification`), predicted
   labels of X_eval.

Records (one per model × n_train): ``model``, ``n_train``, ``n_test``, ``accuracy`` and
``error_rate`` on the test set, ``orbit_same_predictions`` (mean count out of
``n_rotations``), ``n_orbit``, ``orbit_accuracy`` (accuracy over all n copies ρ(g) x,
g = 0..n−1, of the ``n_orbit`` images), ``reg`` and ``reg_relative`` (λ and λ / mean diag),
``cv_at_grid_edge``, ``kernel_seconds`` (the model's kernels at the largest n_train, shared
by its rows), ``fit_seconds`` and ``predict_seconds``.

Models (``models``): ``gcnn`` (C_n GCNN, :func:`~molntk.kernels.cn.gcnn`),
``augmented-cnn`` (the CNN-GAP kernel averaged over the C_n orbit,
K_aug(f, f') = (1/n) Σ_g K(f, ρ(g) f')), ``cnn-gap``, ``cnn-flatten`` and ``mlp`` (depth
+ head hidden layers), all with the configured ``network`` (:mod:`~molntk.pipelines.images.models`).
With ``per_rotation_head`` and n ∈ {1, 2, 4} the augmented CNN kernel equals the GCNN
kernel (docs/verification.md), so the two rows must agree.

Files in the output folder (:mod:`molntk.pipelines.files`): ``report.json`` (one record
per model × n_train), ``config.yaml``, ``metrics.csv``, ``learning_curve.png`` (test
error 1 − accuracy against n_train) and ``confusion.png`` (the GCNN's, else the most
accurate model's, at the largest n_train).

Modules (data flows down the list): :mod:`~molntk.pipelines.images.config` (the schema),
:mod:`~molntk.pipelines.images.data` (images, split, normalisation, rotated copies),
:mod:`~molntk.pipelines.images.models` (the models' kernels through :mod:`molntk.scale`),
:mod:`~molntk.pipelines.images.classification` (one-hot kernel regression, orbit-same
predictions, confusion matrices), :mod:`~molntk.pipelines.images.run`
(``run_image_classification``: the run and its files).
"""

from molntk.pipelines.images.config import ImageClassificationConfig
from molntk.pipelines.images.run import run_image_classification

__all__ = ["ImageClassificationConfig", "run_image_classification"]
