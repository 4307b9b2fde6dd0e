"""``task: emergent-ising``, ``task: emergent-so3`` and ``task: emergent-digits``: emergent
equivariance of augmented deep ensembles.

Theory (Gerken & Kessel, ICML 2024; docs/mathematics.md §4): networks trained on the full
orbits of their data under a group G have, at infinite width, a mean prediction over
initialisations equal at every training time to the NTK prediction μ_t of the augmented
data, which is the prediction of the orbit-averaged (GCNN) kernel and exactly
G-equivariant, on and off the data; single networks are not equivariant, the ensemble mean
becomes so as width and ensemble size grow.

The experiment (:mod:`~molntk.pipelines.emergent.ising`): one-hidden-layer MLPs on the 2-d
Ising model, targets the local energies, G = C4 lattice rotations; ensembles of
``ensemble.members`` networks per width trained by full-batch gradient descent
(:mod:`molntk.ensembles`) with the NTK's learning rate; against width: the ensemble mean's
distance from μ_t (fitted log-log slope); over training: the relative orbit std of the
ensemble, its members and μ_t, in distribution (±1 spins) and out of it (N(0, 1) spins);
optionally the same largest width trained without augmentation.

Files in the output folder (:mod:`molntk.pipelines.files`): ``report.json`` (one record per
augmentation × width × recorded step, the ``summary``, learning rate, seeds, timings),
``config.yaml``, ``metrics.csv``, ``width_convergence.png`` and ``orbit_std.png``.

``task: emergent-so3`` (:mod:`~molntk.pipelines.emergent.qm9`): the same on QM9 energies
with G = SO(3): per-atom MLPs on the environment feature maps, E(M) = Σ_a N(env_a), trained
with k Haar-random rotations per molecule; the rotation std of ensembles of every size, of
single members, of the augmented MLP NTK μ_s and of the (invariant) SO(3) NTK, against k
and width. Files: ``report.json``, ``config.yaml``, ``metrics.csv``, ``rotation_std.png``.
Modules: :mod:`~molntk.pipelines.emergent.so3_config`,
:mod:`~molntk.pipelines.emergent.atom_sum` (the finite atom-sum network),
:mod:`~molntk.pipelines.emergent.qm9`, :mod:`~molntk.pipelines.emergent.so3_plots`,
:mod:`~molntk.pipelines.emergent.so3_run` (``run_emergent_so3``).

``task: emergent-digits`` (:mod:`~molntk.pipelines.emergent.digits`): CNN-GAP ensembles on
scikit-learn's 8×8 digits (one-hot class scores) trained on the C_k orbits of the digits,
k ∈ {4, 8, 16} (only k = 4 rotates exactly; 45° and 22.5° interpolate), and without
augmentation; the relative orbit std and orbit-same predictions of ensemble, members, the
CNN NTK μ_s and the C_k GCNN NTK μ_s over training, in and out of distribution (Gaussian
noise), against k, width and ensemble size. Files: ``report.json``, ``config.yaml``,
``metrics.csv``, ``orbit_std.png``, ``orbit_same.png``, ``ensemble_size.png``,
``width_convergence.png``. Modules: :mod:`~molntk.pipelines.emergent.digits_config`,
:mod:`~molntk.pipelines.emergent.digits_data`, :mod:`~molntk.pipelines.emergent.digits`,
:mod:`~molntk.pipelines.emergent.digits_plots`, :mod:`~molntk.pipelines.emergent.digits_run`
(``run_emergent_digits``).

What the three share: :mod:`~molntk.pipelines.emergent.measures` (the NTK prediction on
evaluation inputs, the ensemble against it, log-log slopes) and
:mod:`~molntk.pipelines.emergent.runs` (a run's setup and the writing of its files).

Modules of emergent-ising: :mod:`~molntk.pipelines.emergent.config` (the schema),
:mod:`~molntk.pipelines.emergent.ising` (data, NTK prediction, measures),
:mod:`~molntk.pipelines.emergent.plots`, :mod:`~molntk.pipelines.emergent.run`
(``run_emergent_ising``).
"""

from molntk.pipelines.emergent.config import EmergentIsingConfig
from molntk.pipelines.emergent.digits_config import EmergentDigitsConfig
from molntk.pipelines.emergent.digits_run import run_emergent_digits
from molntk.pipelines.emergent.run import run_emergent_ising
from molntk.pipelines.emergent.so3_config import EmergentSO3Config
from molntk.pipelines.emergent.so3_run import run_emergent_so3

__all__ = [
    "EmergentDigitsConfig",
    "EmergentIsingConfig",
    "EmergentSO3Config",
    "run_emergent_digits",
    "run_emergent_ising",
    "run_emergent_so3",
]
