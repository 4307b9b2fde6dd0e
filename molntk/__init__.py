"""molntk: equivariant neural tangent kernels for molecules and images.

Data flow: :mod:`molntk.data` (molecules, QM9) → :mod:`molntk.features` (spherical
feature maps) → :mod:`molntk.kernels` (NTK/NNGP recursions) → :mod:`molntk.regression`
(kernel regression) → :mod:`molntk.pipelines` (reports, CLI jobs).
"""

from molntk._version import __version__
from molntk.data.molecule import Molecule
from molntk.errors import ConfigError, InputError, MolntkError

__all__ = ["__version__", "Molecule", "InputError", "ConfigError", "MolntkError"]
