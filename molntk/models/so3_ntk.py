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
Works with ``cross_val_score``, ``GridSearchCV`` and ``clone`` (inputs: lists of
:class:`~molntk.data.molecule.Molecule` or ``ase.Atoms``).

Model files (``save``/``load``) are one ``.npz`` archive of plain arrays read with
``allow_pickle=False`` (no code is ever unpickled): the format name and version, the
estimator's parameters as JSON, the training molecules, and the fitted regression state
(``regressor_*`` arrays). Sparse models (version 1 still; absent arrays mean an exact model)
add ``inducing_rows`` (int64, rows of the inducing environments in the training molecules'
environment features, which ``load`` recomputes) and store the sparse regressor's state
(``regressor_solver = "sparse"``, W_S, target scaling, λ, rank). Files without the newer
parameters (``sampling``, ``inducing``, …) load with the values they were fitted with.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, RegressorMixin

from molntk._version import __version__
from molntk.data.molecule import Molecule
from molntk.data.readers import molecule_from_atoms
from molntk.errors import InputError
from molntk.features.domain import EnvironmentDomain
from molntk.features.environments import EnvironmentBatch, FeatureConfig
from molntk.features.inducing import SELECTIONS, environments_as_molecules, inducing_environments
from molntk.features.radial import radial_basis_from_dict
from molntk.models.so3_recipe import SO3ModelRecipe
from molntk.regression.dressed_atom import DressedAtomModel, element_counts
from molntk.regression.estimator import KernelRegressor
from molntk.regression.sparse import SPARSE_CRITERIA, SparseKernelRegressor
from molntk.utils.files import atomic_path

#: The estimator's defaults: the recipe's (the main QM9 job's model, configs/qm9_u0.yaml).
DEFAULTS = SO3ModelRecipe()
#: Parameters that are the recipe's settings of the same name (all but its ``features``).
RECIPE_PARAMS = tuple(f.name for f in dataclasses.fields(SO3ModelRecipe) if f.name != "features")

#: Name and version of the model file format.
FORMAT = "molntk-so3-ntk-regressor"
FORMAT_VERSION = 1


def as_molecules(X: Any, name: str = "X") -> list[Molecule]:
    """A list of :class:`Molecule` from molecules or ``ase.Atoms`` (InputError naming the item otherwise)."""
    if isinstance(X, Molecule):
        X = [X]
    out = []
    for i, item in enumerate(X):
        if isinstance(item, Molecule):
            out.append(item)
        elif type(item).__name__ == "Atoms":
            out.append(molecule_from_atoms(item, source=f"{name}[{i}]"))
        else:
            raise InputError(f"{name}[{i}]", f"expected a molntk Molecule or ase.Atoms, got {type(item).__name__}")
    return out


def present_elements(numbers: np.ndarray) -> tuple[int, ...]:
    """The distinct atomic numbers among ``numbers``, ascending."""
    return tuple(int(z) for z in np.unique(numbers))


def read_model_archive(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and the JSON metadata of a model file (``numpy.savez``, no pickles);
    :class:`InputError` naming ``path`` when it is not such a file."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise InputError(str(path), "not a molntk model file (a single numpy array, not a model archive)")
        with loaded as archive:
            arrays = {key: archive[key] for key in archive.files}
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except EOFError:
        raise InputError(str(path), "not a molntk model file (the file is empty)") from None
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        reason = "it holds pickled objects, which model files never do" if "allow_pickle" in str(err) else str(err)
        raise InputError(str(path), f"not a molntk model file ({reason})") from None
    if "metadata" not in arrays:
        raise InputError(str(path), "not a molntk model file (no metadata)")
    try:
        meta = json.loads(arrays.pop("metadata").tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(str(path), f"damaged model file (metadata is not JSON: {err})") from None
    if not isinstance(meta, dict):
        raise InputError(str(path), "damaged model file (metadata is not a JSON object)")
    return arrays, meta


@dataclass(eq=False, repr=False)
class SO3NTKRegressor(RegressorMixin, BaseEstimator):
    """Kernel regression with the NTK of an SO(3) group-convolutional network (module docstring).

    Parameters: ``layers``, ``sigma_w``, ``sigma_b`` (the network); ``band_limit``,
    ``smearing_width``, ``radial`` (dict, None: the recipe's, 8 Gaussians on [0.5, 3] Å),
    ``elements`` (the feature maps and the element set the model accepts); ``grid_band_limit``,
    ``sampling``, ``mode``, ``pairing``, ``reduce`` (the kernel engine; the default Lebedev grid
    of band limit 5 as in configs/qm9_u0.yaml); ``residual`` (learn the residual of the
    dressed-atom model); ``reg`` ("cv" or λ ≥ 0), ``cv``, ``psd_rtol`` (regression: the
    accuracy of the fast-mode quadrature, 3e-8 suits erf networks on the default grid,
    whose kernels are accurate to ≈ 5e-11);
    ``dtype``, ``device``, ``block_size`` (computation);
    ``inducing`` (None: the exact model; an int m ≥ 1: the sparse model on m inducing
    environments, module docstring), ``inducing_selection`` ("fps" or "random"),
    ``inducing_seed`` (of "random"), ``rank_rtol`` (sparse: K_mm eigenvalues ≤ rank_rtol · s_max
    are dropped; 1e-10 stays above the ≈ 5e-11 quadrature error of the default grid; measured
    on QM9 it loses nothing against 1e-12, while 3e-8 cut the rank and raised the error).
    ``reg`` as a number is the absolute λ in both modes; ``cv`` must be "loo" or "gcv" in
    sparse mode. Every default is :data:`DEFAULTS`' (:class:`~molntk.models.so3_recipe.SO3ModelRecipe`).

    Fitted attributes: ``regressor_`` (:class:`~molntk.regression.KernelRegressor`, or
    :class:`~molntk.regression.sparse.SparseKernelRegressor` in sparse mode, with fitted
    ``n_inducing_`` and ``rank_``), ``dressed_atom_``, ``train_molecules_``,
    ``training_elements_`` (atomic numbers present in them, ascending); sparse mode
    also ``inducing_rows_`` (int64) and ``inducing_`` (the inducing environments, an
    :class:`~molntk.features.environments.EnvironmentBatch` of one-environment molecules).
    """

    layers: str = DEFAULTS.layers
    sigma_w: float = DEFAULTS.sigma_w
    sigma_b: float = DEFAULTS.sigma_b
    band_limit: int = DEFAULTS.features.band_limit
    smearing_width: float | None = DEFAULTS.features.smearing_width
    radial: dict[str, Any] | None = None
    elements: Sequence[int] = DEFAULTS.features.elements
    grid_band_limit: int = DEFAULTS.grid_band_limit
    sampling: str = DEFAULTS.sampling
    mode: str = DEFAULTS.mode
    pairing: str = DEFAULTS.pairing
    reduce: str = DEFAULTS.reduce
    residual: bool = True
    reg: float | str = "cv"
    cv: str = "loo"
    psd_rtol: float = DEFAULTS.psd_rtol
    dtype: str = DEFAULTS.dtype
    device: str = "cpu"
    block_size: int = DEFAULTS.block_size
    inducing: int | None = None
    inducing_selection: str = "fps"
    inducing_seed: int = 0
    rank_rtol: float = DEFAULTS.rank_rtol

    # -- pieces built from the parameters ------------------------------------------------

    def recipe(self) -> SO3ModelRecipe:
        """The model these parameters describe (``radial=None``: the recipe's radial basis)."""
        radial = DEFAULTS.features.radial if self.radial is None else radial_basis_from_dict(self.radial)
        features = FeatureConfig(tuple(self.elements), self.band_limit, self.smearing_width, radial)
        return SO3ModelRecipe(features=features, **{name: getattr(self, name) for name in RECIPE_PARAMS})

    def _regressor(self, recipe: SO3ModelRecipe) -> KernelRegressor:
        """Kernel ridge with the recipe's λ grid (fast mode: down to psd_rtol · mean(diag K))."""
        return KernelRegressor("ntk", reg=self.reg, cv=self.cv, psd_rtol=self.psd_rtol, relative_grid=recipe.relative_grid)

    def _check_sparse(self) -> int | None:
        """The validated number of inducing environments (None: exact model)."""
        if self.inducing is None:
            return None
        if isinstance(self.inducing, bool) or not isinstance(self.inducing, numbers.Integral) or self.inducing < 1:
            raise InputError("inducing", f"must be None or a whole number ≥ 1, got {self.inducing!r}")
        if self.inducing_selection not in SELECTIONS:
            raise InputError("inducing_selection", f"must be one of {SELECTIONS}, got {self.inducing_selection!r}")
        if isinstance(self.inducing_seed, bool) or not isinstance(self.inducing_seed, numbers.Integral):
            raise InputError("inducing_seed", f"must be an integer, got {self.inducing_seed!r}")
        if self.cv not in SPARSE_CRITERIA:
            raise InputError("cv", f"must be one of {SPARSE_CRITERIA} for a sparse model (inducing={self.inducing}), got {self.cv!r}")
        if self.pairing == "atom-index":
            raise InputError("pairing", "'atom-index' has no single-environment kernel; a sparse model needs 'element' or 'shared'")
        return int(self.inducing)

    def _sparse_regressor(self, recipe: SO3ModelRecipe) -> SparseKernelRegressor:
        """Nyström kernel ridge with the exact path's λ grid and the recipe's rank_rtol."""
        return SparseKernelRegressor(reg=self.reg, cv=self.cv, relative_grid=recipe.relative_grid, rank_rtol=recipe.rank_rtol)

    def _set_inducing(self, train_feats: EnvironmentBatch, rows: Any) -> None:
        """``inducing_rows_`` and ``inducing_``: environments ``rows`` of the training features."""
        self.inducing_rows_ = np.asarray(torch.as_tensor(rows).cpu(), dtype=np.int64)
        self.inducing_ = environments_as_molecules(train_feats, torch.from_numpy(self.inducing_rows_))

    # -- scikit-learn interface ----------------------------------------------------------

    def fit(self, X: Any, y: Any) -> SO3NTKRegressor:
        """Fit on molecules X and targets y ((n,) or (n, k))."""
        molecules = as_molecules(X)
        y = np.asarray(y, dtype=np.float64)
        if y.shape[0] != len(molecules):
            raise InputError("y", f"has {y.shape[0]} rows for {len(molecules)} molecules")
        for m in molecules:
            m.check_elements(self.elements)
        n_inducing = self._check_sparse()
        self.__dict__.pop("domain_", None)  # of an earlier fit
        recipe = self.recipe()
        sparse = None if n_inducing is None else self._sparse_regressor(recipe)
        if sparse is not None:
            sparse.check_params()  # reg, cv, rank_rtol before any kernel is computed
        kern = recipe.molecular_kernel(self.device)
        feats = recipe.environments(molecules, self.device)
        self.dressed_atom_ = DressedAtomModel().fit(element_counts(molecules, self.elements), y) if self.residual else None
        base = self.dressed_atom_.predict(element_counts(molecules, self.elements)) if self.residual else 0.0
        if sparse is None:
            k = kern(feats)
            ntk = k.ntk.detach().cpu().double().numpy()
            self.regressor_ = self._regressor(recipe).fit(ntk, y - base)
            self._calibrate(molecules, y, base)
            for name in ("inducing_", "inducing_rows_"):  # a refit in exact mode
                self.__dict__.pop(name, None)
        else:
            rows = inducing_environments(feats, n_inducing, method=self.inducing_selection, seed=int(self.inducing_seed))
            self._set_inducing(feats, rows)
            K_mm = kern(self.inducing_).ntk.detach().cpu().double().numpy()
            K_nm = kern(feats, self.inducing_).ntk.detach().cpu().double().numpy()
            self.regressor_ = sparse.fit(K_nm, K_mm, y - base)
        self.train_molecules_ = molecules
        self.training_elements_ = present_elements(np.concatenate([m.numbers for m in molecules]))
        self.n_features_in_ = 1
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

    def predict(self, X: Any, return_std: bool = False, *, std_of: str = "y") -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Predictions for molecules X; with ``return_std`` also the calibrated standard deviation
        of y or of f (``std_of``; module docstring; exact mode only). Sparse mode computes only Θ(X, inducing_). A molecule with an
        element outside ``training_elements_`` (the atomic numbers present in the training
        molecules; the model knows nothing of others) is an :class:`InputError` naming it."""
        if not hasattr(self, "regressor_"):
            raise InputError("SO3NTKRegressor", "predict called before fit")
        sparse = isinstance(self.regressor_, SparseKernelRegressor)
        if sparse and return_std:
            raise InputError("return_std", "a sparse model (inducing is set) has no NTK-GP variance; use inducing=None")
        molecules = as_molecules(X)
        for m in molecules:  # an element never seen in training would get a zero kernel and coefficient
            m.check_elements(self.training_elements_, "the elements of the training molecules")
        recipe = self.recipe()
        kern = recipe.molecular_kernel(self.device)
        test = recipe.environments(molecules, self.device)
        base = self.dressed_atom_.predict(element_counts(molecules, self.elements)) if self.dressed_atom_ is not None else 0.0
        if sparse:
            return base + self.regressor_.predict(kern(test, self.inducing_).ntk.detach().cpu().double().numpy())
        ntk = kern(test, recipe.environments(self.train_molecules_, self.device)).ntk.detach().cpu().double().numpy()
        if not return_std:
            return base + self.regressor_.predict(ntk)
        diag = np.array([float(kern(recipe.environments([m], self.device)).ntk[0, 0]) for m in molecules])  # prior Θ(x, x)
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
            self.domain_ = EnvironmentDomain.fit(recipe.environments(self.train_molecules_, self.device))
        return self.domain_.scores(recipe.environments(as_molecules(X), self.device))

    # -- files ---------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the fitted model to ``path`` (``.npz``, atomically; see the module docstring)."""
        if not hasattr(self, "regressor_"):
            raise InputError("SO3NTKRegressor", "save called before fit")
        mols = self.train_molecules_
        meta = {"format": FORMAT, "version": FORMAT_VERSION, "molntk": __version__, "params": self.get_params(),
                "ids": [m.id for m in mols]}
        arrays = {f"regressor_{k}": v for k, v in self.regressor_.fitted_arrays().items()}
        if isinstance(self.regressor_, SparseKernelRegressor):
            arrays["inducing_rows"] = np.asarray(self.inducing_rows_, dtype=np.int64)
        if self.dressed_atom_ is not None:
            arrays["dressed_atom_coef"] = np.asarray(self.dressed_atom_.coef_)
            arrays["dressed_atom_intercept"] = np.asarray(self.dressed_atom_.intercept_)
        arrays["numbers"] = np.concatenate([m.numbers for m in mols]).astype(np.int64)
        arrays["positions"] = np.concatenate([m.positions for m in mols]).astype(np.float64)
        arrays["n_atoms"] = np.array([m.n_atoms for m in mols], dtype=np.int64)
        arrays["metadata"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
        path = Path(path)
        with atomic_path(path, suffix=".npz") as tmp:
            np.savez(tmp, **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> SO3NTKRegressor:
        """Read a model written by :meth:`save`. A file that is not one (missing, empty,
        truncated, another format, pickled data, metadata or arrays missing or of the wrong
        kind) is an :class:`InputError` naming the file and the problem."""
        path = Path(path)
        arrays, meta = read_model_archive(path)
        if meta.get("format") != FORMAT:
            raise InputError(str(path), f"not a molntk SO(3) NTK model (format {meta.get('format')!r})")
        if meta.get("version") != FORMAT_VERSION:
            raise InputError(str(path), f"model format version {meta.get('version')} is not supported (expected {FORMAT_VERSION})")
        try:
            return cls._from_archive(path, arrays, meta)
        except InputError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            missing = f"missing {err}" if isinstance(err, KeyError) else f"{type(err).__name__}: {err}"
            raise InputError(str(path), f"damaged model file ({missing})") from None

    @classmethod
    def _from_archive(cls, path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> SO3NTKRegressor:
        """The fitted model held by a model file's arrays and metadata (:meth:`load`)."""
        params = dict(meta["params"])
        params["elements"] = tuple(params["elements"])
        params.setdefault("sampling", "gauss-legendre")  # files from before the sampling parameter
        model = cls(**params)
        ends = np.cumsum(arrays["n_atoms"])
        model.train_molecules_ = [
            Molecule(arrays["numbers"][e - n : e], arrays["positions"][e - n : e], id=mol_id)
            for e, n, mol_id in zip(ends, arrays["n_atoms"], meta["ids"])
        ]
        model.training_elements_ = present_elements(arrays["numbers"])
        model.dressed_atom_ = None
        if "dressed_atom_coef" in arrays:
            model.dressed_atom_ = DressedAtomModel()
            model.dressed_atom_.coef_ = arrays["dressed_atom_coef"]
            model.dressed_atom_.intercept_ = arrays["dressed_atom_intercept"]
        state = {k.removeprefix("regressor_"): v for k, v in arrays.items() if k.startswith("regressor_")}
        sparse = str(state.get("solver", "")) == "sparse"
        if sparse != (model.inducing is not None) or sparse != ("inducing_rows" in arrays):
            raise InputError(str(path), f"inconsistent model file: inducing={model.inducing!r} but "
                             f"{'a sparse' if sparse else 'an exact'} regression state")
        recipe = model.recipe()
        if not sparse:
            model.regressor_ = model._regressor(recipe).load_fitted_arrays(state)
        else:
            model._check_sparse()
            feats = recipe.environments(model.train_molecules_, model.device)  # deterministic: the rows index them as at fit
            rows = arrays["inducing_rows"]
            if rows.ndim != 1 or rows.size == 0 or rows.min() < 0 or rows.max() >= feats.n_env:
                raise InputError(str(path), f"inducing_rows do not index the {feats.n_env} training environments")
            model._set_inducing(feats, rows)
            model.regressor_ = model._sparse_regressor(recipe).load_fitted_arrays(state)
            if model.regressor_.n_inducing_ != rows.size:
                raise InputError(str(path), f"{rows.size} inducing rows for {model.regressor_.n_inducing_} inducing weights")
        model.n_features_in_ = 1
        return model

