"""Finite ensembles trained by gradient descent, against their NTK predictions.

- :mod:`~molntk.ensembles.stacked`: :class:`StackedEnsemble`, E finite networks (e.g. the
  finite twins ``net.finite(...)`` of :mod:`molntk.kernels.cn`) with stacked parameters,
  evaluated together by ``torch.func.vmap`` over ``functional_call``; :func:`group_means`,
  the outputs of its sub-ensembles;
- :mod:`~molntk.ensembles.training`: full-batch gradient descent on the mean squared error
  (:func:`train_full_batch`; :func:`train_ensemble` builds and trains in chunks), the learning rate from the NTK (:func:`kernel_learning_rate`)
  and the kernel dynamics it follows as the width grows;
- :mod:`~molntk.ensembles.orbits`: the relative orbit standard deviation std_g / |mean_g|
  that measures (emergent) equivariance.
"""

from molntk.ensembles.orbits import member_relative_orbit_std, orbit_spread, relative_orbit_std
from molntk.ensembles.stacked import StackedEnsemble, group_means
from molntk.ensembles.training import TrainingRun, kernel_learning_rate, record_steps, train_ensemble, train_full_batch

__all__ = [
    "StackedEnsemble",
    "TrainingRun",
    "group_means",
    "kernel_learning_rate",
    "member_relative_orbit_std",
    "orbit_spread",
    "record_steps",
    "relative_orbit_std",
    "train_ensemble",
    "train_full_batch",
]
