"""``SO3NTKRegressor``: the SO(3) NTK regressor of molecules as a scikit-learn estimator.

    from molntk import SO3NTKRegressor
    model = SO3NTKRegressor(layers="lift:3 erf pool dense").fit(molecules, energies)
    mean, std = model.predict(new_molecules, return_std=True)
    model.save("u0.molntk.npz");  SO3NTKRegressor.load("u0.molntk.npz").predict(new_molecules)

The parameters name a :class:`~molntk.models.so3_recipe.SO3ModelRecipe` (:meth:`SO3NTKRegressor.recipe`),
whose defaults they take (the main QM9 job's model), plus the regression's. ``fit`` computes
environment feature maps (:mod:`molntk.features.environments`), the
element-resolved molecular NTK and NNGP of the SO(3) network ``layers``
(:mod:`molntk.kernels.so3.spec`, :class:`~molntk.molecular.so3.SO3MolecularKernel`),
optionally subtracts the dressed-atom linear model (extensive energies), and fits
:class:`~molntk.regression.KernelRegressor` (NTK mean at t = ∞, λ by cross-validation on
the training data). ``predict(..., return_std=True)`` adds the standard deviation of the GP
whose posterior mean the prediction is (prior σ_f² Θ, noise σ_f² λ; σ_f² fitted by leave-one-out
on the training data, :mod:`molntk.regression.calibration`), of y (``std_of="y"``, what test
errors are compared with) or of the latent f (``"f"``).

Sparse mode (``inducing=m``): m inducing environments s_1 … s_m are chosen among the training
molecules' environments (:func:`~molntk.features.inducing.inducing_environments`, ``"fps"`` or
``"random"``; all of them when m exceeds their number), each treated as a molecule of its own, and

    E(M) = E_dressed(M) + Σ_j w_j Θ(M, {s_j}),   Θ(M, {s}) = Σ_{a∈M} [Z_a = Z_s] k(env_a, s),

with w = W_S of :class:`~molntk.regression.sparse.SparseKernelRegressor`: kernel ridge on the
Nyström kernel Θ̃ = K_nm K_mm⁺ K_mn (K_nm = Θ(train, S), K_mm = Θ(S, S); eigenvalues of K_mm
below ``rank_rtol`` · s_max dropped), λ by closed-form LOO or GCV. Only n × m and m × m kernels
are computed (never n × n), and ``predict`` needs Θ(test, S) only. With every training
environment inducing, K_mm = K (the environment kernel) and K_nm = A K (A the atom-to-molecule
sum), so Θ̃ = A K K⁺ K Aᵀ = A K Aᵀ = Θ for a PSD K, up to its eigenvalues ≤ rank_rtol · s_max
(and the quadrature's negative ones): the exact model. No predictive variance.

Δ-learning (``baseline="gfn2-xtb"``, :mod:`molntk.models.delta`): the model adds a physical
baseline to the above, E(M) = E_B(M) + E_dressed(M) + E_kernel(M), and fits the dressed-atom and
kernel parts to y − E_B; ``predict``, ``predict_forces`` (F = F_B + F_kernel) and the ASE
calculator add it back. The target must be one energy, y of shape (n,), with its ``unit`` (the
baseline is converted into it).

Works with ``cross_val_score``, ``GridSearchCV`` and ``clone``. Inputs (:func:`as_molecules`):
:class:`~molntk.data.molecule.Molecule`, ``ase.Atoms``, SMILES strings, torch-geometric
``Data`` and molecule files (xyz, extxyz, SDF/MOL, SMILES files; a file of several molecules
counts as all of them), one or a list of them. ``device="auto"`` is CUDA when torch sees a
GPU, else the CPU, resolved at ``fit`` (and at ``load``) into ``device_``. ``verbose=True``
logs the steps and kernel-block progress of ``fit`` and ``predict`` at INFO level on the
``molntk.models.so3_ntk`` logger (the library never prints; configure logging to see them,
e.g. ``logging.basicConfig(level=logging.INFO)``).

Model files (``save``/``load``) are one ``.npz`` archive of plain arrays read with
``allow_pickle=False`` (no code is ever unpickled): the format name and version, the
estimator's parameters, the target's name and unit, the training elements and the
training set's provenance as JSON metadata (the parameters name the ``baseline``, which a
loaded model adds back), the training molecules, and the fitted regression state
(``regressor_*`` arrays). Sparse models (version 1 still; absent arrays mean an exact model)
add ``inducing_rows`` (int64, rows of the inducing environments in the training molecules'
environment features, which ``load`` recomputes) and store the sparse regressor's state
(``regressor_solver = "sparse"``, W_S, target scaling, λ, rank). Files without the newer
parameters (``sampling``, ``inducing``, …) load with the values they were fitted with, files
without target, unit or provenance with None, None and {}.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ase
import numpy as np
import torch
from sklearn.base import BaseEstimator, RegressorMixin

from molntk._version import __version__
from molntk.data.molecule import Molecule
from molntk.data.readers import ReadResult, names_molecule_file, read_molecules, read_smiles
from molntk.errors import InputError, ModelFileError
from molntk.features.domain import EnvironmentDomain
from molntk.features.environments import EnvironmentBatch, FeatureConfig
from molntk.features.inducing import SELECTIONS, environments_as_molecules, inducing_environments
from molntk.features.radial import radial_basis_from_dict
from molntk.models.delta import baseline_results, check_baseline, check_energy_unit
from molntk.models.forces import KernelExpansion, energies_and_forces, kernel_expansion
from molntk.models.model_files import (dressed_atom_arrays, dressed_atom_from_arrays, load_model_file, molecule_arrays,
                                       molecules_from_arrays, optional_text, provenance_from_meta, training_provenance,
                                       write_model_archive)
from molntk.models.so3_recipe import SO3ModelRecipe
from molntk.molecular.so3 import SO3MolecularKernel
from molntk.regression.dressed_atom import DressedAtomModel, element_counts
from molntk.regression.estimator import KernelRegressor
from molntk.regression.sparse import SPARSE_CRITERIA, SparseKernelRegressor
from molntk.scale.devices import resolve_device

logger = logging.getLogger(__name__)

#: The estimator's defaults: the recipe's (the main QM9 job's model, configs/qm9_u0.yaml).
DEFAULTS = SO3ModelRecipe()
#: Parameters that are the recipe's settings of the same name (all but its ``features``).
RECIPE_PARAMS = tuple(f.name for f in dataclasses.fields(SO3ModelRecipe) if f.name != "features")

#: Name and version of the model file format.
FORMAT = "molntk-so3-ntk-regressor"
FORMAT_VERSION = 1


#: What :func:`as_molecules` accepts, for its error message.
ACCEPTED = "a Molecule, ase.Atoms, SMILES string, molecule file path or torch_geometric Data"


def check_inducing(inducing: Any, selection: Any, seed: Any) -> int | None:
    """The validated number of inducing environments of a sparse model (None: exact model), with
    its ``inducing_selection`` and ``inducing_seed``; InputError naming the bad parameter."""
    if inducing is None:
        return None
    if isinstance(inducing, bool) or not isinstance(inducing, numbers.Integral) or inducing < 1:
        raise InputError("inducing", f"must be None or a whole number ≥ 1, got {inducing!r}")
    if selection not in SELECTIONS:
        raise InputError("inducing_selection", f"must be one of {SELECTIONS}, got {selection!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise InputError("inducing_seed", f"must be an integer, got {seed!r}")
    return int(inducing)


def _is_pyg(item: Any) -> bool:
    return type(item).__module__.startswith("torch_geometric")


def as_molecules(X: Any, name: str = "X") -> list[Molecule]:
    """A list of :class:`Molecule` from one input or a sequence of them: molecules, ``ase.Atoms``,
    torch-geometric ``Data``, file paths (``Path``, or a string that
    :func:`~molntk.data.readers.names_molecule_file`; every molecule of
    the file, in order) and SMILES strings (any other string; embedded as in
    :func:`~molntk.data.readers.molecule_from_smiles`). A bad item is an
    :class:`InputError` naming it (``X[i]``) and the reader's reason."""
    if isinstance(X, (Molecule, ase.Atoms, str, os.PathLike)) or _is_pyg(X):
        X = [X]
    out = []
    for i, item in enumerate(X):
        if not isinstance(item, (Molecule, ase.Atoms, str, os.PathLike)) and not _is_pyg(item):
            raise InputError(f"{name}[{i}]", f"expected {ACCEPTED}, got {type(item).__name__}")
        read: ReadResult = read_smiles([item]) if isinstance(item, str) and not names_molecule_file(item) else read_molecules([item])
        if read.failures:
            raise InputError(f"{name}[{i}]", read.failures[0].message)
        out.extend(read.molecules)
    return out


def present_elements(numbers: np.ndarray) -> tuple[int, ...]:
    """The distinct atomic numbers among ``numbers``, ascending."""
    return tuple(int(z) for z in np.unique(numbers))


@dataclass(eq=False, repr=False)
class SO3NetworkParams:
    """The parameters of the SO(3) model that every SO(3) estimator takes, with the recipe's
    defaults (:data:`DEFAULTS`): the network (``layers``, ``sigma_w``, ``sigma_b``), the feature
    maps (``band_limit``, ``smearing_width``, ``radial`` (a radial-basis dict; None: the
    recipe's), ``elements``, ``element_width`` (None: elements apart)) and the kernel engine (``grid_band_limit``, ``sampling``, ``mode``,
    ``pairing``)."""

    layers: str = DEFAULTS.layers
    sigma_w: float = DEFAULTS.sigma_w
    sigma_b: float = DEFAULTS.sigma_b
    band_limit: int = DEFAULTS.features.band_limit
    smearing_width: float | None = DEFAULTS.features.smearing_width
    radial: dict[str, Any] | None = None
    elements: Sequence[int] = DEFAULTS.features.elements
    element_width: float | None = DEFAULTS.features.element_width
    grid_band_limit: int = DEFAULTS.grid_band_limit
    sampling: str = DEFAULTS.sampling
    mode: str = DEFAULTS.mode
    pairing: str = DEFAULTS.pairing

    def feature_config(self) -> FeatureConfig:
        """The feature maps these parameters describe (``radial=None``: the recipe's radial basis)."""
        radial = DEFAULTS.features.radial if self.radial is None else radial_basis_from_dict(self.radial)
        return FeatureConfig(tuple(self.elements), self.band_limit, self.smearing_width, radial, self.element_width)


@dataclass(eq=False, repr=False)
class SO3SolverParams:
    """The regression parameters every SO(3) estimator shares: ``psd_rtol`` (the λ floor,
    relative to the mean kernel diagonal), ``block_size`` (molecules per kernel block),
    ``inducing`` (None: the exact model; m: the sparse model on m inducing environments),
    ``inducing_selection`` and ``inducing_seed`` (how they are chosen), ``rank_rtol``
    (K_mm's eigenvalues kept above rank_rtol · s_max) and ``baseline`` (None, or the physical
    baseline of Δ-learning, :mod:`molntk.models.delta`)."""

    psd_rtol: float = DEFAULTS.psd_rtol
    block_size: int = DEFAULTS.block_size
    inducing: int | None = None
    inducing_selection: str = "fps"
    inducing_seed: int = 0
    rank_rtol: float = DEFAULTS.rank_rtol
    baseline: str | None = None


@dataclass(eq=False, repr=False)
class SO3NTKRegressor(SO3NetworkParams, SO3SolverParams, RegressorMixin, BaseEstimator):
    """Kernel regression with the NTK of an SO(3) group-convolutional network (module docstring).

    Parameters: ``layers``, ``sigma_w``, ``sigma_b`` (the network); ``band_limit``,
    ``smearing_width``, ``radial`` (dict, None: the recipe's, 8 Gaussians on [0.5, 3] Å),
    ``elements`` (the feature maps and the element set the model accepts), ``element_width``
    (neighbour elements' overlap, :mod:`molntk.features.elements`; None: none); ``grid_band_limit``,
    ``sampling``, ``mode``, ``pairing``, ``reduce`` (the kernel engine; the default Lebedev grid
    of band limit 5 as in configs/qm9_u0.yaml); ``residual`` (learn the residual of the
    dressed-atom model); ``baseline`` (None, or the physical baseline of
    :data:`~molntk.models.delta.BASELINES` whose residual the model learns, module docstring);
    ``reg`` ("cv" or λ ≥ 0), ``cv``, ``cv_loss`` ("squared": λ minimises the mean squared
    CV residual, "absolute": the mean absolute one), ``psd_rtol`` (regression: the
    accuracy of the fast-mode quadrature, 3e-8 suits erf networks on the default grid,
    whose kernels are accurate to ≈ 5e-11);
    ``dtype``, ``device`` ("auto": CUDA when available, else the CPU), ``block_size``
    (computation); ``verbose`` (log progress, module docstring);
    ``inducing`` (None: the exact model; an int m ≥ 1: the sparse model on m inducing
    environments, module docstring), ``inducing_selection`` ("fps" or "random"),
    ``inducing_seed`` (of "random"), ``rank_rtol`` (sparse: K_mm eigenvalues ≤ rank_rtol · s_max
    are dropped; 1e-10 stays above the ≈ 5e-11 quadrature error of the default grid; measured
    on QM9 it loses nothing against 1e-12, while 3e-8 cut the rank and raised the error).
    ``reg`` as a number is the absolute λ in both modes; ``cv`` must be "loo" or "gcv" in
    sparse mode. Every default is :data:`DEFAULTS`' (:class:`~molntk.models.so3_recipe.SO3ModelRecipe`).

    Fitted attributes: ``device_`` (the resolved device), ``regressor_`` (:class:`~molntk.regression.KernelRegressor`, or
    :class:`~molntk.regression.sparse.SparseKernelRegressor` in sparse mode, with fitted
    ``n_inducing_`` and ``rank_``), ``dressed_atom_``, ``train_molecules_``,
    ``training_elements_`` (atomic numbers present in them, ascending), ``target_`` and
    ``unit_`` (the target's name and unit, or None), ``provenance_`` (a JSON-ready dict:
    ``n_train``, ``molntk`` version, ``created`` and what ``fit`` was given); sparse mode
    also ``inducing_rows_`` (int64) and ``inducing_`` (the inducing environments, an
    :class:`~molntk.features.environments.EnvironmentBatch` of one-environment molecules).

    ``predict_forces`` gives F = −∂E/∂r (:mod:`molntk.models.forces`). What predictions need
    besides the query (the molecular kernel and the feature maps of the training molecules,
    or the inducing environments) is built once and kept (``_reference``) until ``fit``,
    ``load`` or a parameter change.
    """

    #: The model file format this estimator writes and reads, and what its errors call it.
    FILE_FORMAT = FORMAT
    FILE_DESCRIPTION = "SO(3) NTK model"

    reduce: str = DEFAULTS.reduce
    residual: bool = True
    reg: float | str = "cv"
    cv: str = "loo"
    cv_loss: str = "squared"
    dtype: str = DEFAULTS.dtype
    device: str = "auto"
    verbose: bool = False

    @classmethod
    def from_recipe(cls, recipe: SO3ModelRecipe, **params: Any) -> SO3NTKRegressor:
        """The estimator of ``recipe`` (network, feature maps, kernel engine, psd_rtol,
        rank_rtol: ``recipe()`` gives it back); ``params`` sets the others (``residual``,
        ``reg``, ``cv``, ``device``, …)."""
        features = recipe.features.to_dict()
        return cls(**{name: getattr(recipe, name) for name in RECIPE_PARAMS}, elements=tuple(features["elements"]),
                   band_limit=features["band_limit"], smearing_width=features["smearing_width"],
                   radial=features["radial"], element_width=features.get("element_width"), **params)

    # -- pieces built from the parameters ------------------------------------------------

    def recipe(self) -> SO3ModelRecipe:
        """The model these parameters describe (``radial=None``: the recipe's radial basis)."""
        return SO3ModelRecipe(features=self.feature_config(), **{name: getattr(self, name) for name in RECIPE_PARAMS})

    def recipes(self) -> list[SO3ModelRecipe]:
        """The networks whose NTKs the model's kernel is made of: this one (a sum of several,
        :class:`~molntk.models.so3_ntk_sum.SO3NTKSumRegressor`, lists each)."""
        return [self.recipe()]

    def _kernel_input(self, kernels: list[np.ndarray]) -> Any:
        """What the regressor takes of the recipes' kernels (one per recipe): the one kernel."""
        (kernel,) = kernels
        return kernel

    def _regressor(self, recipe: SO3ModelRecipe) -> KernelRegressor:
        """Kernel ridge with the recipe's λ grid (fast mode: down to psd_rtol · mean(diag K))."""
        return KernelRegressor("ntk", reg=self.reg, cv=self.cv, cv_loss=self.cv_loss, psd_rtol=self.psd_rtol,
                               relative_grid=recipe.relative_grid)

    def _check_sparse(self) -> int | None:
        """The validated number of inducing environments (None: exact model)."""
        if check_inducing(self.inducing, self.inducing_selection, self.inducing_seed) is None:
            return None
        if self.cv not in SPARSE_CRITERIA:
            raise InputError("cv", f"must be one of {SPARSE_CRITERIA} for a sparse model (inducing={self.inducing}), got {self.cv!r}")
        if self.pairing == "atom-index":
            raise InputError("pairing", "'atom-index' has no single-environment kernel; a sparse model needs 'element' or 'shared'")
        return int(self.inducing)

    def _sparse_regressor(self, recipe: SO3ModelRecipe) -> SparseKernelRegressor:
        """Nyström kernel ridge with the exact path's λ grid and the recipe's rank_rtol."""
        return SparseKernelRegressor(reg=self.reg, cv=self.cv, cv_loss=self.cv_loss, relative_grid=recipe.relative_grid,
                                     rank_rtol=recipe.rank_rtol)

    def _set_inducing(self, train_feats: EnvironmentBatch, rows: Any) -> None:
        """``inducing_rows_`` and ``inducing_``: environments ``rows`` of the training features."""
        self.inducing_rows_ = np.asarray(torch.as_tensor(rows).cpu(), dtype=np.int64)
        self.inducing_ = environments_as_molecules(train_feats, torch.from_numpy(self.inducing_rows_))

    def _resolve_device(self) -> str:
        """``device`` as a torch device name (``auto`` → cuda or cpu); InputError naming ``device``."""
        try:
            return str(resolve_device(self.device, "device"))
        except (ValueError, RuntimeError) as err:
            raise InputError("device", f"{self.device!r}: {err}") from None

    def _log(self, message: str, *args: Any) -> None:
        """An INFO record of the estimator's logger when ``verbose``."""
        if self.verbose:
            logger.info(message, *args)

    def _progress(self, what: str) -> Callable[[int, int], None] | None:
        """Kernel-block progress ``(done, total)`` of ``what`` as log records when ``verbose``."""
        if not self.verbose:
            return None
        start = time.perf_counter()

        def report(done: int, total: int) -> None:
            logger.info("%s: %d/%d blocks, %.1f s", what, done, total, time.perf_counter() - start)

        return report

    # -- scikit-learn interface ----------------------------------------------------------

    def fit(self, X: Any, y: Any, *, target: str | None = None, unit: str | None = None,
            provenance: dict[str, Any] | None = None, baseline_energies: np.ndarray | None = None) -> SO3NTKRegressor:
        """Fit on molecules X and targets y ((n,) or (n, k)). ``target`` (its name), ``unit``
        and ``provenance`` (JSON-ready facts about the training set) are kept with the model
        (:meth:`describe_training`). With a ``baseline`` the model learns y − E_B(X)
        (:meth:`_residual_target`; ``baseline_energies``: E_B(X) in ``unit`` computed elsewhere,
        e.g. cached)."""
        molecules, y = self._training_data(X, y)
        y = self._residual_target(molecules, y, unit, baseline_energies)
        n_inducing = self._check_sparse()
        recipe = self.recipe()
        sparse = None if n_inducing is None else self._sparse_regressor(recipe)
        if sparse is not None:
            sparse.check_params()  # reg, cv, rank_rtol before any kernel is computed
        self.device_ = device = self._resolve_device()
        self._log("fit: %d molecules on %s; feature maps", len(molecules), device)
        if sparse is None:
            kerns, feats = self._kernels_and_maps(molecules, device)
            progress = self._progress(f"fit: kernel {len(molecules)} × {len(molecules)}")
            ntks = [kern(f, progress=progress).ntk.detach().cpu().double().numpy() for kern, f in zip(kerns, feats)]
            self._fit_exact(molecules, y, self._kernel_input(ntks), target, unit, provenance)
            self._reference_cache = (self.regressor_, self.get_params(), kerns, feats)
        else:
            kern, feats = recipe.molecular_kernel(device), recipe.environments(molecules, device)
            base = self._fit_dressed_atoms(molecules, y)
            rows = inducing_environments(feats, n_inducing, method=self.inducing_selection, seed=int(self.inducing_seed))
            self._set_inducing(feats, rows)
            m = len(self.inducing_rows_)
            K_mm = kern(self.inducing_, progress=self._progress(f"fit: kernel {m} × {m} inducing")).ntk.detach().cpu().double().numpy()
            K_nm = kern(feats, self.inducing_, progress=self._progress(f"fit: kernel {len(molecules)} × {m} inducing"))
            K_nm = K_nm.ntk.detach().cpu().double().numpy()
            self._log("fit: sparse kernel ridge, λ by %s", self.cv if self.reg == "cv" else f"reg={self.reg}")
            self.regressor_ = sparse.fit(K_nm, K_mm, y - base)
            self.describe_training(molecules, target, unit, provenance)
            self._reference_cache = (self.regressor_, self.get_params(), [kern], [self.inducing_])
        self._log("fit: done")
        return self

    def fit_kernels(self, X: Any, y: Any, ntk: np.ndarray, *, target: str | None = None, unit: str | None = None,
                    provenance: dict[str, Any] | None = None, baseline_energies: np.ndarray | None = None) -> SO3NTKRegressor:
        """The exact model's ``fit`` on a training kernel computed elsewhere (a pipeline's
        cached blocks): ``ntk`` = Θ(X, X), (n, n), of this model's kernel
        (``self.recipe().molecular_kernel()``; a sum of networks takes the list of its
        recipes' kernels). Same result as ``fit``."""
        molecules, y = self._training_data(X, y)
        if self._check_sparse() is not None:
            raise InputError("inducing", "fit_kernels fits the exact model; a sparse model computes its own kernels in fit")
        return self._fit_exact(molecules, self._residual_target(molecules, y, unit, baseline_energies), ntk, target, unit, provenance)

    def _kernels_and_maps(self, molecules: list[Molecule], device: str) -> tuple[list[SO3MolecularKernel], list[EnvironmentBatch]]:
        """Each recipe's molecular kernel and the feature maps of ``molecules`` under it."""
        recipes = self.recipes()
        return [r.molecular_kernel(device) for r in recipes], [r.environments(molecules, device) for r in recipes]

    def _fit_exact(self, molecules: list[Molecule], y: np.ndarray, ntk: np.ndarray, target: str | None,
                   unit: str | None, provenance: dict[str, Any] | None) -> SO3NTKRegressor:
        """The exact model on the training kernel ``ntk`` and the targets y less the baseline."""
        self.device_ = self._resolve_device()  # of the predictions
        base = self._fit_dressed_atoms(molecules, y)
        self._log("fit: kernel ridge, λ by %s", self.cv if self.reg == "cv" else f"reg={self.reg}")
        self.regressor_ = self._regressor(self.recipe()).fit(ntk, y - base)
        self._calibrate(molecules, y, base)
        for name in ("inducing_", "inducing_rows_"):  # a refit in exact mode
            self.__dict__.pop(name, None)
        self.describe_training(molecules, target, unit, provenance)
        return self

    def _calibrate(self, molecules: list[Molecule], y: np.ndarray, base: np.ndarray | float) -> None:
        """The std's amplitude by leave-one-out over the whole model: each left-out molecule is
        also left out of the dressed-atom fit (:meth:`KernelRegressor.refit_loo_amplitude`), so
        that two training molecules, whose kernel residuals are all 0, still measure the error."""
        n = len(molecules)
        if n < 2:
            return
        if self.dressed_atom_ is None:
            shifts = np.zeros((n, n, *y.shape[1:]))
        else:
            counts = element_counts(molecules, self.elements)
            shifts = base[None] - self.dressed_atom_.leave_one_out_predictions(counts, y)
        self.regressor_.refit_loo_amplitude(shifts, reference=float(np.max(np.abs(y))))

    def _residual_target(self, molecules: list[Molecule], y: np.ndarray, unit: str | None, given: np.ndarray | None) -> np.ndarray:
        """y − E_B(molecules) in ``unit`` for a model with a ``baseline`` (``given``: E_B computed
        elsewhere, (n,)), else y. InputError naming the baseline, ``unit`` (None or not an
        energy unit), ``y`` (not of shape (n,)) or ``baseline_energies``."""
        check_baseline(self.baseline)
        if self.baseline is None:
            if given is not None:
                raise InputError("baseline_energies", "given, but the model has no baseline (baseline=None)")
            return y
        check_energy_unit(unit, self.baseline)
        if y.ndim != 1:
            raise InputError("y", f"a model with a baseline learns one energy per molecule, shape (n,); y has shape {y.shape}")
        base = baseline_results(self.baseline, molecules, unit).energies if given is None else np.asarray(given, dtype=np.float64)
        if base.shape != (len(molecules),):
            raise InputError("baseline_energies", f"has shape {base.shape} for {len(molecules)} molecules")
        return y - base

    def _training_data(self, X: Any, y: Any) -> tuple[list[Molecule], np.ndarray]:
        """X as molecules (each within ``elements``) and y as float64 with one row per molecule."""
        molecules = as_molecules(X)
        y = np.asarray(y, dtype=np.float64)
        if y.shape[0] != len(molecules):
            raise InputError("y", f"has {y.shape[0]} rows for {len(molecules)} molecules")
        for m in molecules:
            m.check_elements(self.elements)
        return molecules, y

    def _fit_dressed_atoms(self, molecules: list[Molecule], y: np.ndarray) -> np.ndarray | float:
        """``dressed_atom_`` (None unless ``residual``) and its fit of y, which the kernel model learns the residual of."""
        if not self.residual:
            self.dressed_atom_ = None
            return 0.0
        counts = element_counts(molecules, self.elements)
        self.dressed_atom_ = DressedAtomModel().fit(counts, y)
        return self.dressed_atom_.predict(counts)

    def describe_training(self, molecules: list[Molecule], target: str | None = None, unit: str | None = None,
                          provenance: dict[str, Any] | None = None) -> None:
        """The fitted attributes that describe the training set: ``train_molecules_``,
        ``training_elements_``, ``target_``, ``unit_`` and ``provenance_`` (``n_train``, the
        molntk ``version`` and ``created`` (UTC), updated by ``provenance``)."""
        self.train_molecules_ = molecules
        self.__dict__.pop("domain_", None)  # of an earlier fit
        self.training_elements_ = present_elements(np.concatenate([m.numbers for m in molecules]))
        self.target_, self.unit_ = target, unit
        self.provenance_ = training_provenance(len(molecules), provenance)
        self.n_features_in_ = 1

    def predict(self, X: Any, return_std: bool = False, *, std_of: str = "y") -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Predictions for molecules X; with ``return_std`` also the calibrated standard deviation
        of y or of f (``std_of``; module docstring; exact mode only). Sparse mode computes only Θ(X, inducing_). A molecule with an
        element outside ``training_elements_`` (the atomic numbers present in the training
        molecules; the model knows nothing of others) is an :class:`InputError` naming it."""
        molecules, base, _ = self._query(X, "predict")
        sparse = isinstance(self.regressor_, SparseKernelRegressor)
        if sparse and return_std:
            raise InputError("return_std", "a sparse model (inducing is set) has no predictive variance; use inducing=None")
        device = self.device_
        self._log("predict: %d molecules on %s", len(molecules), device)
        recipes, (kerns, references) = self.recipes(), self._reference()
        n_reference = len(self.inducing_rows_) if sparse else len(self.train_molecules_)
        progress = self._progress(f"predict: kernel {len(molecules)} × {n_reference}{' inducing' if sparse else ''}")
        ntk = self._kernel_input([kern(r.environments(molecules, device), ref, progress=progress).ntk.detach().cpu().double().numpy()
                                  for r, kern, ref in zip(recipes, kerns, references)])
        if not return_std:
            return base + self.regressor_.predict(ntk)
        diag = self._kernel_input([np.array([float(kern(r.environments([m], device)).ntk[0, 0]) for m in molecules])  # prior Θ(x, x)
                                   for r, kern in zip(recipes, kerns)])
        mean, std = self.regressor_.predict(ntk, diag, return_std=True, std_of=std_of)
        return base + mean, std

    def domain_scores(self, X: Any) -> np.ndarray:
        """Out-of-domain score of each molecule of X, (n,) (:mod:`molntk.features.domain`): the
        largest distance of one of its atom environments to the nearest training environment
        of its element, relative to what training molecules score against the others (left
        out one at a time). Above 1: farther out than 99 % of training molecules, flag it;
        inf: an element no training molecule has (``predict`` refuses those). The reference
        is built from ``train_molecules_`` on the first call and kept as ``domain_``."""
        if not hasattr(self, "regressor_"):
            raise InputError("SO3NTKRegressor", "domain_scores called before fit")
        recipe = self.recipe()
        if getattr(self, "domain_", None) is None:
            self.domain_ = EnvironmentDomain.fit(recipe.environments(self.train_molecules_, self.device_))
        return self.domain_.scores(recipe.environments(as_molecules(X), self.device_))

    def predict_forces(self, X: Any, return_energy: bool = False) -> list[np.ndarray] | tuple[np.ndarray, list[np.ndarray]]:
        """Forces F_a = −∂E/∂r_a on the atoms of each molecule of X: a list of (n_atoms, 3)
        float64 arrays in the target's unit per Å (meV/Å for QM9 energies), by autograd
        through the feature maps, the kernel and the linear prediction (exact and sparse
        mode; :mod:`molntk.models.forces` gives the formula), plus the baseline's forces for a
        model with a ``baseline``. With ``return_energy`` also the energies (n,) of the same
        pass, equal to :meth:`predict` up to rounding. The model must have one target, which
        must be an energy for F to be a force."""
        molecules, base, base_forces = self._query(X, "predict_forces")
        if self.pairing == "atom-index":
            raise InputError("pairing", "'atom-index' (the reference comparison's padded layout) has no forces; use 'element' or 'shared'")
        parts = [energies_and_forces(expansion, molecules) for expansion in self._expansions()]
        energies = sum(e for e, _ in parts)
        forces = [sum(term) for term in zip(*(f for _, f in parts))]
        if base_forces is not None:
            forces = [f + f_base for f, f_base in zip(forces, base_forces)]
        return (base + energies, forces) if return_energy else forces

    def _query(self, X: Any, caller: str) -> tuple[list[Molecule], np.ndarray | float, list[np.ndarray] | None]:
        """The molecules of X, their energies besides the kernel part (the dressed-atom
        energies, 0 without ``residual``, plus the baseline's) and the baseline's forces (None
        without a baseline). A molecule with an element outside ``training_elements_`` (the
        model knows nothing of others: zero kernel and coefficient) is an :class:`InputError`
        naming it."""
        if not hasattr(self, "regressor_"):
            raise InputError("SO3NTKRegressor", f"{caller} called before fit")
        molecules = as_molecules(X)
        for m in molecules:
            m.check_elements(self.training_elements_, "the elements of the training molecules")
        base = self.dressed_atom_.predict(element_counts(molecules, self.elements)) if self.dressed_atom_ is not None else 0.0
        if self.baseline is None:
            return molecules, base, None
        physical = baseline_results(self.baseline, molecules, self.unit_)
        return molecules, base + physical.energies, physical.forces

    def _expansions(self) -> list[KernelExpansion]:
        """The kernel part of the energy as expansions in the recipes' kernels (their energies
        add up): E − E_dressed = μ + σ Σ_i W_i Θ(M, R_i) (:mod:`molntk.models.forces`)."""
        (kern,), (reference,) = self._reference()
        return [kernel_expansion(kern, reference, self.regressor_.fitted_arrays())]

    def _reference(self) -> tuple[list[SO3MolecularKernel], list[EnvironmentBatch]]:
        """Per recipe, the molecular kernel and the reference side of every prediction: the
        feature maps of the training molecules (exact mode) or the inducing environments
        (sparse mode). Built on first use and kept with the regressor and the parameters it was
        built for, so that ``fit``, ``load`` and ``set_params`` make it anew."""
        cached = self.__dict__.get("_reference_cache")
        params = self.get_params()
        if cached is not None and cached[0] is self.regressor_ and cached[1] == params:
            return cached[2], cached[3]
        if isinstance(self.regressor_, SparseKernelRegressor):
            kerns, references = [self.recipe().molecular_kernel(self.device_)], [self.inducing_]
        else:
            kerns, references = self._kernels_and_maps(self.train_molecules_, self.device_)
        self._reference_cache = (self.regressor_, params, kerns, references)
        return kerns, references

    # -- files ---------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the fitted model to ``path`` (``.npz``, atomically; see the module docstring)."""
        if not hasattr(self, "regressor_"):
            raise InputError("SO3NTKRegressor", "save called before fit")
        mols = self.train_molecules_
        meta = {"format": self.FILE_FORMAT, "version": FORMAT_VERSION, "molntk": __version__, "params": self.get_params(),
                "ids": [m.id for m in mols], "target": self.target_, "unit": self.unit_,
                "training_elements": list(self.training_elements_), "provenance": self.provenance_}
        arrays = {f"regressor_{k}": v for k, v in self.regressor_.fitted_arrays().items()}
        if isinstance(self.regressor_, SparseKernelRegressor):
            arrays["inducing_rows"] = np.asarray(self.inducing_rows_, dtype=np.int64)
        return write_model_archive(path, meta, {**arrays, **dressed_atom_arrays(self.dressed_atom_), **molecule_arrays(mols)})

    @classmethod
    def load(cls, path: str | Path) -> SO3NTKRegressor:
        """Read a model written by :meth:`save`. A file that is not one (missing, empty,
        truncated, another format, pickled data, metadata or arrays missing or of the wrong
        kind) is an :class:`InputError` naming the file and the problem."""
        return load_model_file(path, cls.FILE_FORMAT, FORMAT_VERSION, cls.FILE_DESCRIPTION, cls._from_archive)

    @classmethod
    def _from_archive(cls, path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> SO3NTKRegressor:
        """The fitted model held by a model file's arrays and metadata (:meth:`load`)."""
        params = dict(meta["params"])
        params["elements"] = tuple(params["elements"])
        params.setdefault("sampling", "gauss-legendre")  # files from before the sampling parameter
        model = cls(**params)
        check_baseline(model.baseline)
        model.device_ = model._resolve_device()  # "auto" resolves on the machine that loads the file
        model.train_molecules_ = molecules_from_arrays(arrays, meta["ids"])
        model.training_elements_ = present_elements(arrays["numbers"])
        model.target_, model.unit_ = optional_text(meta, "target"), optional_text(meta, "unit")
        model.provenance_ = provenance_from_meta(path, meta)
        model.dressed_atom_ = dressed_atom_from_arrays(arrays)
        state = {k.removeprefix("regressor_"): v for k, v in arrays.items() if k.startswith("regressor_")}
        sparse = str(state.get("solver", "")) == "sparse"
        if sparse != (model.inducing is not None) or sparse != ("inducing_rows" in arrays):
            raise ModelFileError(str(path), f"inconsistent model file: inducing={model.inducing!r} but "
                             f"{'a sparse' if sparse else 'an exact'} regression state")
        recipe = model.recipe()
        if not sparse:
            model.regressor_ = model._regressor(recipe).load_fitted_arrays(state)
        else:
            model._check_sparse()
            feats = recipe.environments(model.train_molecules_, model.device_)  # deterministic: the rows index them as at fit
            rows = arrays["inducing_rows"]
            if rows.ndim != 1 or rows.size == 0 or rows.min() < 0 or rows.max() >= feats.n_env:
                raise ModelFileError(str(path), f"inducing_rows do not index the {feats.n_env} training environments")
            model._set_inducing(feats, rows)
            model.regressor_ = model._sparse_regressor(recipe).load_fitted_arrays(state)
            if model.regressor_.n_inducing_ != rows.size:
                raise ModelFileError(str(path), f"{rows.size} inducing rows for {model.regressor_.n_inducing_} inducing weights")
        model.n_features_in_ = 1
        return model

