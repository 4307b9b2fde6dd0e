"""molntk: equivariant neural tangent kernels for molecules and images.

Data flow: :mod:`molntk.data` (molecules, QM9) → :mod:`molntk.features` (spherical
feature maps) → :mod:`molntk.kernels` (NTK/NNGP recursions) → :mod:`molntk.molecular`
(molecular kernels and baselines) → :mod:`molntk.regression` (kernel regression, the NTK
predictor at training time t) → :mod:`molntk.ensembles` (finite networks trained by gradient
descent, against it) → :mod:`molntk.models` (end-to-end models:
:class:`~molntk.models.SO3NTKRegressor`) →
:mod:`molntk.scale` (kernel matrices in blocks: cache, GPUs, Dask) → :mod:`molntk.pipelines`
(configured jobs that return data and write files) → :mod:`molntk.cli` (the ``molntk``
command; the only place that prints). The mathematics: docs/mathematics.md.
"""

from molntk._version import __version__
from molntk.data.molecule import Molecule
from molntk.errors import ConfigError, InputError, MolntkError

__all__ = ["__version__", "Molecule", "InputError", "ConfigError", "MolntkError", "SO3NTKRegressor"]


def __getattr__(name: str):
    """``molntk.SO3NTKRegressor``, imported on first use (it pulls in torch and scikit-learn)."""
    if name == "SO3NTKRegressor":
        from molntk.models.so3_ntk import SO3NTKRegressor

        return SO3NTKRegressor
    raise AttributeError(f"module 'molntk' has no attribute {name!r}")
