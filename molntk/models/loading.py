"""Any molntk model file, by the format its metadata names: :func:`load_model`.

    from molntk.models.loading import load_model
    model = load_model("energy.molntk.npz")    # SO3NTKRegressor, SO3NTKSumRegressor or SO3ForceFieldRegressor
"""

from __future__ import annotations

from pathlib import Path

from molntk.errors import ModelFileError
from molntk.models import force_field, so3_ntk, so3_ntk_sum
from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.models.model_files import read_model_metadata
from molntk.models.so3_ntk import SO3NTKRegressor
from molntk.models.so3_ntk_sum import SO3NTKSumRegressor

#: Model file format → the estimator that reads it.
LOADERS = {so3_ntk.FORMAT: SO3NTKRegressor, so3_ntk_sum.FORMAT: SO3NTKSumRegressor, force_field.FORMAT: SO3ForceFieldRegressor}


def load_model(path: str | Path) -> SO3NTKRegressor | SO3NTKSumRegressor | SO3ForceFieldRegressor:
    """The fitted estimator of the model file at ``path``: the class :data:`LOADERS` names for
    its format (read from the file's metadata alone) reads it (``load``). A file that is no
    molntk model file, or of another format, is a :class:`~molntk.errors.ModelFileError`
    naming it."""
    meta = read_model_metadata(Path(path))
    estimator = LOADERS.get(meta.get("format"))
    if estimator is None:
        raise ModelFileError(str(path), f"not a molntk model file (format {meta.get('format')!r}; known: "
                             f"{', '.join(LOADERS)})")
    return estimator.load(path)
