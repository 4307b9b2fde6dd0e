"""``task: md-force-field``: force fields learned from the frames of one molecule.

Frames with energies and forces (a GFN2-xTB trajectory of the molntk cache, or the user's
file: extended xyz, ASE database, MD17/rMD17 ``.npz``), a seeded split into test frames and a
training pool, and at each training size every model of the config fitted and evaluated on
the same test frames: the SO(3) NTK trained on energies and forces
(:class:`~molntk.models.force_field.SO3ForceFieldRegressor`), the SO(3) NTK trained on
energies only (its forces are −∂E/∂r of the fitted energy), and sGDML
(:class:`~molntk.models.sgdml_baseline.SGDMLForceField`). Records: energy and force
component MAE/RMSE, fit and predict seconds, the hyperparameters each model chose on its
training frames.

Files in the output folder (:mod:`molntk.pipelines.files`): ``report.json``,
``config.yaml``, ``metrics.csv``, ``learning_curve_energy.png``, ``learning_curve_forces.png``.
Modules: :mod:`~molntk.pipelines.md.config` (the schema), :mod:`~molntk.pipelines.md.run`
(``run_md_force_field``), :mod:`~molntk.pipelines.md.fits` (the fit cache),
:mod:`~molntk.pipelines.md.model_file` (``molntk fit --data FILE --forces``: a force-field
model file from one labelled file).
"""

from molntk.pipelines.md.config import MDForceFieldConfig
from molntk.pipelines.md.run import run_md_force_field

__all__ = ["MDForceFieldConfig", "run_md_force_field"]
