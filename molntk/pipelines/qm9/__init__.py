"""``task: qm9-property``: learning curves of the SO(3) NTK and its baselines on QM9.

Steps (everything a model sees of the data is training data, except its final test
predictions):

1. Standard split (seed); the training sizes are nested prefixes of the training split
   (:func:`~molntk.data.splits.nested_subsets`); the test set is the first ``n_test``
   molecules of the test split; the invariance set is the first ``n_molecules`` of the
   test set, each under ``n_rotations`` Haar-random rotations.
2. Hyperparameters of every kernel model are chosen on the first ``n_select`` training
   molecules: each candidate's kernel, its λ and its score by cross-validation
   (:class:`~molntk.regression.KernelRegressor`), lowest CV error wins. The search is in
   the report.
3. The chosen kernel is computed by the block engine (:mod:`molntk.scale`: blocks under a
   memory budget, an on-disk cache, GPUs or Dask as ``compute`` says): K(train, train)
   of the largest training set and K(test and rotated copies, train), with a block
   boundary at every training size. The kernel of training size n_k is the top-left
   block, and its cost is the measured compute time of the blocks inside it, so
   ``fit_seconds`` (kernel of the training set + regression fit) and
   ``predict_seconds`` (test × train kernel + product) are measured, not extrapolated;
   a rerun finds the blocks (and their recorded times) in the cache.
4. Per target and training size: the dressed-atom model is fitted (floor, and the
   baseline whose residual the kernels learn for extensive energies), then kernel ridge
   on the residual with λ by CV; MAE (with its bootstrap 95 % interval), RMSE, R² on the
   test set, and at each size the lowest-MAE model against every other with the paired
   bootstrap interval of the MAE difference on the same test molecules; the invariance error is
   the standard deviation of a molecule's predictions over its original and rotated
   copies, averaged over the invariance set, in target units. With ``models.so3_ntk_sum``
   the sum of several SO(3) networks' NTKs is fitted the same way, its weights chosen with
   λ by CV at every size (each term's kernel from the block engine, as in step 3), and its
   model is the saved model of each target.
5. With a ``sparse`` section: the listed models again as sparse models on inducing atom
   environments, at every training size (:mod:`~molntk.pipelines.qm9.sparse`); the exact
   models then stop at ``sparse.exact_up_to``.

Modules (data flows down the list; each imports only those above it):

- :mod:`~molntk.pipelines.qm9.config`: the schema (``QM9PropertyConfig``; ``QM9DataConfig``
  is shared with ``task: qm9-summary``);
- :mod:`~molntk.pipelines.qm9.sets`: step 1 (``load_sets`` → ``QM9Sets``, ``rotated_copies``);
- :mod:`~molntk.pipelines.qm9.candidates`: the models and their hyperparameter candidates
  (``build_candidates``);
- :mod:`~molntk.pipelines.qm9.evaluate`: dressed atoms, records, invariance error (step 4);
- :mod:`~molntk.pipelines.qm9.assembly`: the block engine's settings (``BlockAssembler``) and
  ``block_kernel``;
- :mod:`~molntk.pipelines.qm9.exact`: candidate selection (step 2), the chosen kernel
  (step 3) and the exact fits (step 4);
- :mod:`~molntk.pipelines.qm9.sparse`: the sparse models (step 5);
- :mod:`~molntk.pipelines.qm9.models`: the SO(3) model files (estimator from the config,
  provenance, fitted on computed kernels);
- :mod:`~molntk.pipelines.qm9.run`: ``run_qm9_property``, the run, returning its results as data;
- :mod:`~molntk.pipelines.qm9.files`: ``run_and_write``, the task's entry point: the run,
  then ``report.json``, ``metrics.csv``, ``predictions.csv``, ``config.yaml``, the plots and
  ``models/``;
- :mod:`~molntk.pipelines.qm9.fit`: ``fit_so3_models``, the model files alone (``molntk fit``), and
  ``fit_labelled_file``, one model from a labelled file without a config.
"""

from molntk.pipelines.qm9.config import QM9DataConfig, QM9PropertyConfig
from molntk.pipelines.qm9.files import run_and_write
from molntk.pipelines.qm9.fit import fit_labelled_file, fit_so3_models
from molntk.pipelines.qm9.run import run_qm9_property

__all__ = ["QM9DataConfig", "QM9PropertyConfig", "fit_labelled_file", "fit_so3_models", "run_and_write", "run_qm9_property"]
