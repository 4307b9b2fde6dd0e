"""Configuration schema of ``task: qm9-property`` (:mod:`molntk.pipelines.qm9`) and the QM9
data section it shares with ``task: qm9-summary`` (:mod:`molntk.pipelines.qm9_summary`).

Sections: ``data`` (:class:`QM9DataConfig`), ``targets``, ``learning_curve``,
``features`` (:class:`FeatureMapsConfig`: the keys of a
:class:`~molntk.features.environments.FeatureConfig`), ``kernel``, ``models``,
``regression``, ``invariance``, ``compute``, ``sparse``, ``output``, ``cache``.

The SO(3) model's defaults (feature maps, grid, candidate network, psd_rtol, rank_rtol) are
those of :class:`~molntk.models.SO3ModelRecipe`, the one set the estimator shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from molntk.config import (
    Count,
    FieldError,
    NonNegative,
    Positive,
    Section,
    Seed,
    TaskConfig,
    UserPath,
    check_increasing,
    did_you_mean,
)
from molntk.data.qm9 import QM9_TARGETS
from molntk.features.environments import FeatureConfig
from molntk.features.radial import radial_basis_from_dict
from molntk.kernels.so3.spec import parse_architecture
from molntk.models import SO3ModelRecipe
from molntk.regression.kernel_sum import DEFAULT_WEIGHTS

#: The SO(3) model defaults every section below takes its own from.
RECIPE = SO3ModelRecipe()


class SplitConfig(Section):
    """Sizes of the training and validation sets; the test set is the rest of the data."""

    n_train: Count = 110_000
    n_valid: Count = 10_000


class QM9DataConfig(Section):
    """Where the QM9 molecules come from and how they are split.

    ``qm9pack`` reads the offline copy through the molntk cache (``cache_dir``, default
    ``$MOLNTK_CACHE_DIR`` or the user cache); ``torch-geometric`` reads (or downloads)
    PyG's QM9 in ``root``. ``seed`` seeds the train/valid/test permutation.
    ``n_train + n_valid`` must be smaller than the dataset; that is checked when the
    data is loaded, since the size depends on the source.
    """

    source: Literal["qm9pack", "torch-geometric"] = "qm9pack"
    root: UserPath | None = Field(default=None, description="PyG dataset directory (torch-geometric only)")
    cache_dir: UserPath | None = Field(
        default=None, description="molntk cache (default: $MOLNTK_CACHE_DIR, user cache)"
    )
    seed: Seed = 0
    split: SplitConfig = SplitConfig()

    @model_validator(mode="after")
    def _root_matches_source(self) -> QM9DataConfig:
        """``root`` is required with torch-geometric and meaningless with qm9pack."""
        if self.source == "torch-geometric" and self.root is None:
            raise FieldError("root", "required with source 'torch-geometric' (the PyG QM9 dataset directory)")
        if self.source != "torch-geometric" and self.root is not None:
            raise FieldError("root", f"only used with source 'torch-geometric', not {self.source!r}")
        return self


class RandomSplitConfig(Section):
    """``kind: random``: a random ``test_fraction`` of the molecules (numpy ``seed``) is the
    test set, the rest the training set (in random order: the training sizes are its prefixes)."""

    kind: Literal["random"]
    seed: Seed = 0
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2


class GivenSplitConfig(Section):
    """``kind: given``: each molecule's value of ``key`` (a CSV column, an extxyz comment-line
    key, an SDF tag, an ASE database key) is ``train`` or ``test``; file order is kept."""

    kind: Literal["given"]
    key: Annotated[str, Field(min_length=1)]


class FileDataConfig(Section):
    """``source: file``: the user's labelled molecules in ``path`` (extxyz/xyz, SDF, CSV, an
    ASE ``.db`` or an MD17/rMD17 ``.npz``; :func:`~molntk.data.labelled.read_labelled`). ``targets``: the value keys
    to learn and their units (``{U0: eV, gap: eV}``; a list of names means unit ``unknown``).
    CSV tables: ``smiles_column`` (default: a column named ``smiles``) or ``structure_column``
    (paths relative to the table). ``id_column``: the key naming each molecule.
    ``add_hs``: place missing hydrogens of SDF records. ``split``: random or given."""

    source: Literal["file"]
    path: UserPath
    targets: Annotated[dict[str, str], Field(min_length=1)]
    smiles_column: str | None = None
    structure_column: str | None = None
    id_column: str | None = None
    add_hs: bool = False
    split: Annotated[RandomSplitConfig | GivenSplitConfig, Field(discriminator="kind")] = RandomSplitConfig(kind="random")

    @field_validator("targets", mode="before")
    @classmethod
    def _units(cls, value: Any) -> Any:
        """A list of names, or a name without a unit, means unit ``unknown``."""
        if isinstance(value, list):
            return {name: "unknown" for name in value}
        if isinstance(value, dict):
            return {name: "unknown" if unit is None else unit for name, unit in value.items()}
        return value

    @model_validator(mode="after")
    def _table_columns(self) -> FileDataConfig:
        """SMILES/structure columns belong to CSV tables, and only one of them."""
        for key in ("smiles_column", "structure_column"):
            if getattr(self, key) is not None and self.path.suffix.lower() != ".csv":
                raise FieldError(key, f"only used with a CSV table, not {self.path.suffix or 'a file without suffix'!r}")
        if self.smiles_column is not None and self.structure_column is not None:
            raise FieldError("structure_column", "give smiles_column or structure_column, not both")
        return self


class FeatureMapsConfig(Section):
    """Environment feature maps (:class:`~molntk.features.environments.FeatureConfig`):
    band limit L, angular smearing σ (rad), radial basis (``kind: gaussian`` with
    ``n``, ``r_min``, ``r_cut``, ``width`` or ``width_growth``, ``scaling_r0``,
    ``scaling_power``; or ``kind: coulomb`` with ``powers``) and ``element_width`` (how much
    neighbour elements overlap, :mod:`molntk.features.elements`; null: not at all)."""

    band_limit: Annotated[int, Field(strict=True, ge=1, le=13)] = RECIPE.features.band_limit
    smearing_width: NonNegative = RECIPE.features.smearing_width
    radial: dict[str, Any] = RECIPE.features.to_dict()["radial"]
    element_width: Positive | None = RECIPE.features.element_width

    @model_validator(mode="after")
    def _valid_radial(self) -> FeatureMapsConfig:
        try:
            self.feature_config()
        except ValueError as err:
            raise FieldError("radial", str(err)) from None
        return self

    def feature_config(self, elements: Sequence[int] | None = None) -> FeatureConfig:
        """The :class:`~molntk.features.environments.FeatureConfig` these keys describe, for
        ``elements`` (atomic numbers; None: the default, QM9's)."""
        keys = self.model_dump() if elements is None else {**self.model_dump(), "elements": list(elements)}
        return FeatureConfig.from_dict(keys)


GridBandLimit = Annotated[int, Field(strict=True, ge=1, le=12)]


class KernelConfig(Section):
    """How SO(3) kernels are evaluated: ``mode`` (fast: invariant recursion; exact: the
    discretised network), the SO(3) grid (``grid_band_limit``, ``sampling``), atom
    ``pairing`` (element-resolved or shared network), ``dtype``, ``device`` (auto: CUDA
    when present), environments per kernel block, and CPU ``threads`` (null: torch's default).
    ``atom-index`` (the published reference's unshared per-atom-index branches on 29 padded
    atoms; not permutation invariant) applies to the SO(3) NTK only; the baselines then
    use element pairing."""

    mode: Literal["fast", "exact"] = RECIPE.mode
    grid_band_limit: GridBandLimit = RECIPE.grid_band_limit
    sampling: Literal["gauss-legendre", "driscoll-healy", "lebedev"] = RECIPE.sampling
    pairing: Literal["element", "shared", "atom-index"] = RECIPE.pairing
    dtype: Literal["float64", "float32"] = RECIPE.dtype
    device: Literal["auto", "cpu", "cuda"] = "auto"
    block_size: Count = RECIPE.block_size
    threads: Count | None = None


class SO3Candidate(Section):
    """One SO(3) architecture (:mod:`molntk.kernels.so3.spec`), e.g. ``lift:3 relu pool dense``;
    ``smearing_width`` (rad), ``radial`` (a radial basis, as the ``features`` section's) and
    ``element_width`` replace the feature maps' for this candidate, so that
    cross-validation chooses the feature maps with the network; ``grid_band_limit``
    replaces the ``kernel`` section's SO(3) grid for this candidate (a lift of a higher band
    limit on sharp densities needs a finer quadrature to stay rotation invariant)."""

    layers: str
    sigma_w: Positive = RECIPE.sigma_w
    sigma_b: NonNegative = RECIPE.sigma_b
    smearing_width: NonNegative | None = None
    radial: dict[str, Any] | None = None
    element_width: Positive | None = None
    grid_band_limit: GridBandLimit | None = None

    @model_validator(mode="after")
    def _parses(self) -> SO3Candidate:
        try:
            parse_architecture(self.layers)
        except ValueError as err:
            raise FieldError("layers", str(err)) from None
        if self.radial is not None:
            try:
                radial_basis_from_dict(self.radial)
            except ValueError as err:
                raise FieldError("radial", str(err)) from None
        return self


class MLPCandidate(Section):
    """One per-atom MLP architecture: ``depth`` hidden layers of ``activation``."""

    depth: Count = 1
    activation: Literal["relu", "erf"] = "relu"
    sigma_w: Positive = 1.0
    sigma_b: NonNegative = 0.0


class SO3ModelConfig(Section):
    """The SO(3) NTK: architectures to choose from on training data."""

    candidates: Annotated[list[SO3Candidate], Field(min_length=1)] = [SO3Candidate(layers=RECIPE.layers)]


class SO3SumModelConfig(Section):
    """The NTK of several SO(3) networks side by side (each network's own layers and,
    optionally, feature maps: a short and a long cutoff, two depths): kernel ridge on
    Θ = Σ_i c_i Θ_i / τ_i (τ_i the mean of Θ_i's training diagonal, c_1 = 1), each of
    c_2, … from ``weights``, chosen with λ by the ``regression`` section's CV on the training
    molecules at every training size (above ``regression.eigh_max``: the weights and relative
    λ of the largest size at or below it); :class:`~molntk.regression.kernel_sum.KernelSumRegressor`.
    ``weights`` is the grid of each c_i (its product is searched); ``points`` instead lists the
    points [c_2, …] to search (one entry per network after the first), for three or more
    networks whose product grid would be too large. Reported as ``so3-ntk-sum``. Cost: every
    term's kernel, and one eigendecomposition per point searched (``len(weights)``^(terms − 1)
    for the grid) per size. The saved model of each target (``molntk run``, ``molntk fit``)
    is then the sum, :class:`~molntk.models.SO3NTKSumRegressor`. Listed in ``sparse.models``,
    the sum also has a sparse model, ``so3-ntk-sum-sparse``: Σ_i c_i Θ_i / τ_i on one set of
    inducing environments, with the weights and τ_i the exact sum chose at its largest size
    ≤ ``regression.eigh_max``; a run without exact sizes gives it one point (τ_i then the mean
    self-kernel of the first 1,000 training molecules) (:mod:`molntk.pipelines.qm9.sparse`)."""

    terms: Annotated[list[SO3Candidate], Field(min_length=2)]
    weights: Annotated[list[NonNegative], Field(min_length=1)] = list(DEFAULT_WEIGHTS)
    points: Annotated[list[Annotated[list[NonNegative], Field(min_length=1)]], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _points_match_terms(self) -> SO3SumModelConfig:
        if self.points is None:
            return self
        if "weights" in self.model_fields_set:
            raise FieldError("points", "give either weights (a grid) or points, not both")
        wrong = [point for point in self.points if len(point) != len(self.terms) - 1]
        if wrong:
            raise FieldError("points", f"each point gives the weights c_2, … of the {len(self.terms) - 1} networks "
                                       f"after the first, got {wrong[0]}")
        return self

    @property
    def searched(self) -> list[float] | list[list[float]]:
        """What :class:`~molntk.regression.kernel_sum.KernelSumRegressor` searches: ``points``, else the ``weights`` grid."""
        return self.weights if self.points is None else self.points

    @property
    def n_points(self) -> int:
        """How many weight points are searched: ``len(points)``, else len(weights)^(terms − 1)."""
        return len(self.points) if self.points is not None else len(self.weights) ** (len(self.terms) - 1)

    @property
    def first_point(self) -> tuple[float, ...]:
        """(c_1 = 1, c_2, …) of the first point searched: ``points[0]``, else the first grid
        weight for every network after the first (a sparse sum without exact sizes has one)."""
        point = self.points[0] if self.points is not None else [self.weights[0]] * (len(self.terms) - 1)
        return (1.0, *map(float, point))


class MLPModelConfig(Section):
    """Per-atom MLP NTK on the flattened feature maps: architectures to choose from."""

    candidates: Annotated[list[MLPCandidate], Field(min_length=1)] = [MLPCandidate(sigma_b=0.1)]


class AugmentedMLPModelConfig(MLPModelConfig):
    """MLP NTK symmetrised over ``rotations`` Haar-random rotations and their inverses (a set
    S of 2 × rotations): the average of Θ(ρ(g) f, ρ(h) f') over g, h ∈ S, which is PSD and
    tends to the SO(3) GCNN kernel as S grows."""

    rotations: Count = 4
    seed: Seed = 0


class PowerSpectrumModelConfig(Section):
    """SOAP-type power-spectrum kernel (p̂·p̂')^ζ on the feature maps, ζ chosen from ``zetas``
    and, when ``radials`` lists radial bases (each as the ``features`` section's ``radial``,
    or null for that one), the maps' radial basis from them, as the SO(3) candidates choose
    theirs (``radials`` null: the ``features`` section's only); likewise, when
    ``element_widths`` lists widths w of the overlap of neighbour elements (as the
    ``features`` section's ``element_width``; null: elements apart), the width from them
    (``element_widths`` null: the ``features`` section's only). The grid is every radial ×
    width × ζ."""

    zetas: Annotated[list[Count], Field(min_length=1)] = [1, 2, 3, 4]
    radials: Annotated[list[dict[str, Any] | None], Field(min_length=1)] | None = None
    element_widths: Annotated[list[Positive | None], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _radials_parse(self) -> PowerSpectrumModelConfig:
        for i, radial in enumerate(self.radials or []):
            if radial is None:
                continue
            try:
                radial_basis_from_dict(radial)
            except ValueError as err:
                raise FieldError(f"radials[{i}]", str(err)) from None
        return self


class LaplacianModelConfig(Section):
    """Laplacian kernel on a global descriptor, σ = factor × median L1 distance (factor chosen).

    The default grid, 2⁻¹ … 2⁸: on QM9 U0 (``make run``, README) CV chose 1 for the Coulomb
    matrix and 32 for bag of bonds, inside it; on other targets bag of bonds can choose the top
    end, where its CV error has flattened towards the σ → ∞ limit (reported as a grid edge)."""

    width_factors: Annotated[list[Positive], Field(min_length=1)] = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]


class SOAPModelConfig(Section):
    """SOAP from DScribe (optional package): radial and angular sizes; the cutoff (Å), the
    atoms' Gaussian width σ (Å) and ζ chosen from ``r_cuts`` × ``sigmas`` × ``zetas``."""

    r_cuts: Annotated[list[Positive], Field(min_length=1)] = [5.0]
    n_max: Count = 6
    l_max: Count = 4
    sigmas: Annotated[list[Positive], Field(min_length=1)] = [0.5]
    zetas: Annotated[list[Count], Field(min_length=1)] = [2]


class FCHL19ModelConfig(Section):
    """FCHL19 from qmllib (optional package) with a Gaussian kernel, width σ chosen from ``sigmas``."""

    sigmas: Annotated[list[Positive], Field(min_length=1)] = [1.0, 2.0, 4.0]


class QM9ModelsConfig(Section):
    """The models compared side by side; ``null`` leaves one out (SOAP and FCHL19 are off
    unless given: they need the ``baselines`` extra; so is the sum of SO(3) NTKs, which
    computes a kernel per term). The dressed-atom linear model is
    always fitted (it is the floor every model must beat)."""

    so3_ntk: SO3ModelConfig | None = SO3ModelConfig()
    so3_ntk_sum: SO3SumModelConfig | None = None
    mlp_ntk: MLPModelConfig | None = MLPModelConfig()
    augmented_mlp_ntk: AugmentedMLPModelConfig | None = AugmentedMLPModelConfig()
    power_spectrum: PowerSpectrumModelConfig | None = PowerSpectrumModelConfig()
    coulomb_matrix: LaplacianModelConfig | None = LaplacianModelConfig()
    bag_of_bonds: LaplacianModelConfig | None = LaplacianModelConfig()
    soap: SOAPModelConfig | None = None
    fchl19: FCHL19ModelConfig | None = None


class LearningCurveConfig(Section):
    """Training sizes (nested subsets of the training split), the test subset (first
    ``n_test`` of the test split; null: all of it), and ``n_select`` training molecules on
    which hyperparameters are chosen (the first of the training split; ≤ max n_train)."""

    n_train: Annotated[list[Count], Field(min_length=1)] = [100, 250, 500, 1000]
    n_test: Count | None = 1000
    n_select: Count = 300

    @model_validator(mode="after")
    def _consistent(self) -> LearningCurveConfig:
        check_increasing(self.n_train, "n_train")
        if self.n_select > self.n_train[-1]:
            raise FieldError("n_select", f"{self.n_select} exceeds the largest n_train {self.n_train[-1]}")
        return self


class QM9RegressionConfig(Section):
    """λ (and the candidate) by ``cv`` on training data, scoring the residuals by ``cv_loss``:
    ``squared`` (the CV RMSE) or ``absolute`` (the CV MAE: the error the tables report,
    less dominated by a few molecules' large errors; LOO, k-fold and Falkon's hold-out, not
    GCV; benchmarks/qm9_kernel_mixture.py measures both); ``residual``: learn the residual
    of the dressed-atom model (auto: for extensive energies, and for every target of a
    file); ``reduce``: sum
    or mean over atom pairs (auto: mean for QM9's intensive targets HOMO/LUMO/gap, sum
    otherwise; set ``mean`` for a file's intensive targets). ``psd_rtol``: the relative
    accuracy assumed of quadrature kernels (fast-mode SO(3), rotation-averaged MLP):
    train-kernel eigenvalues down to −psd_rtol × the largest are clipped to 0 (measured on
    QM9 at grid band limit 2, ReLU: kernel error ≈ 2e-4, smallest eigenvalue ≈ −1e-5 ×
    largest), and their λ is not chosen below psd_rtol × mean(diag K).

    Large training sets: λ is chosen by CV (one O(n³) eigendecomposition) on sizes up to
    ``eigh_max``; a larger size reuses the relative λ (λ / mean diag K) of the largest
    size ≤ eigh_max and is solved by ``large_solver``: Cholesky, PCG (relative residual
    ``pcg_tol``), or auto (Cholesky when its n² · 8-byte factor fits a quarter of the RAM)."""

    cv: Literal["loo", "kfold", "gcv"] = "loo"
    cv_loss: Literal["squared", "absolute"] = "squared"
    residual: Literal["auto", "dressed-atom", "none"] = "auto"
    reduce: Literal["auto", "sum", "mean"] = "auto"
    psd_rtol: Annotated[float, Field(gt=0, lt=1)] = RECIPE.psd_rtol
    eigh_max: Count = 5000
    large_solver: Literal["auto", "cholesky", "pcg"] = "auto"
    pcg_tol: Annotated[float, Field(gt=0, lt=1)] = 1e-8

    @model_validator(mode="after")
    def _loss_of_criterion(self) -> QM9RegressionConfig:
        if self.cv_loss == "absolute" and self.cv == "gcv":
            raise FieldError("cv_loss", "GCV scores squared residuals only; use cv 'loo' or 'kfold' for the absolute loss")
        return self


class ComputeConfig(Section):
    """Where the kernel blocks are computed and where the matrices live; the numbers of a
    run do not depend on it (the blocks are the same, :mod:`molntk.scale`), so a config
    moves from a laptop to GPUs or a cluster with ``--set compute.…`` only.

    ``executor``: ``auto`` (every visible GPU when ``kernel.device`` resolves to CUDA, else
    this process), ``serial``, ``devices`` (all visible GPUs, one thread each) or ``dask``
    (``workers`` local worker processes, or the existing cluster at ``scheduler``, e.g.
    ``tcp://10.0.0.1:8786``). ``block_molecules``: largest block side; ``memory_budget_mb``:
    memory for one block (null: a quarter of the available RAM, half the free GPU memory).
    ``storage``: ``memory``, or ``disk``: the assembled matrices are ``.npy`` memory maps
    in ``<output>/kernel_matrices/`` (for training sets whose n² · 8 bytes exceed the RAM)."""

    executor: Literal["auto", "serial", "devices", "dask"] = "auto"
    workers: Count | None = None
    scheduler: str | None = None
    block_molecules: Count = 256
    memory_budget_mb: Positive | None = None
    storage: Literal["memory", "disk"] = "memory"

    @model_validator(mode="after")
    def _dask_settings(self) -> ComputeConfig:
        if self.executor == "dask" and (self.workers is None) == (self.scheduler is None):
            raise FieldError("executor", "'dask' needs exactly one of 'workers' (a local cluster) or 'scheduler' (an existing one)")
        if self.executor != "dask" and (self.workers is not None or self.scheduler is not None):
            raise FieldError("workers" if self.workers is not None else "scheduler", f"only used with executor 'dask', not {self.executor!r}")
        return self


#: QM9 models whose kernel is a sum over atom pairs: they have sparse versions.
SPARSE_MODELS = ("so3_ntk", "so3_ntk_sum", "mlp_ntk", "augmented_mlp_ntk", "power_spectrum", "soap", "fchl19")


class SparseConfig(Section):
    """Sparse (inducing-environment) versions of local kernel models, for training sets
    whose n × n kernel is out of reach. Each of ``models`` is also fitted as
    E(M) = Σ_j w_j Θ(M, {s_j}) on ``environments`` inducing environments s_j drawn from the
    training molecules (``selection``: farthest-point ``fps`` or ``random`` with ``seed``,
    per element in proportion to its environments), λ by closed-form leave-one-out; it
    needs n × m kernel entries instead of n²/2 (:mod:`molntk.features.inducing`,
    :mod:`molntk.regression.sparse`), with the candidate chosen for the exact model (the
    SO(3) architecture, ζ, FCHL19's σ). The models on molntk's feature maps pick by
    ``fps`` in the channel amplitudes of the feature maps; ``soap`` and ``fchl19`` pick in
    their own descriptor space (normalised SOAP vectors, FCHL19 vectors), with
    Θ(M, {s}) = Σ_{a∈M} [Z_a = Z_s] k(x_a, x_s) on those descriptors.
    ``pool``: draw them from the first ``pool`` training molecules (null: all molecules of
    the largest training size); a fixed pool keeps the inducing set, and with it every
    cached kernel block (:mod:`molntk.scale.cache`), when the learning curve is extended. It
    may reach beyond the largest training size (up to the training split): the curve is
    then run on the inducing set of the longer curve it will be extended to (their inputs
    only; no target of a molecule outside a training set is used).
    ``exact_up_to``: the exact models run only on training sizes up to this (null: all),
    so a learning curve can go on where only the sparse models reach. ``rank_rtol``:
    eigenvalues of Θ(inducing, inducing) below rank_rtol × the largest are dropped from
    its pseudo-inverse; 1e-10 stays above the quadrature error of the default model's kernels
    (≈ 5e-11 relative per entry) and, measured on QM9 U0 at N = 1,000
    (benchmarks/sparse_inducing.py), loses nothing against 1e-12, while 3e-8 (the λ floor)
    cut the rank to ≈ 300 and raised the MAE from 70 to 105 meV. ``solver``: ``nystrom``
    (:class:`~molntk.regression.sparse.SparseKernelRegressor`: thin SVD of the n × r Nyström
    factor, λ by closed-form leave-one-out; ``factorisation`` of Θ(inducing, inducing):
    ``eigh``, its eigendecomposition cut at ``rank_rtol``, or ``cholesky``, the Cholesky
    factor of Θ + j·mean(diag Θ)·I with j from ``rank_rtol`` up by factors of 10 until it
    succeeds, m³/3 flops against ≈ 9m³, for m in the tens of thousands on a CPU; either made
    once for every training size and target) or ``falkon``
    (:class:`~molntk.regression.falkon.FalkonRegressor`: preconditioned conjugate gradients,
    no n × m factorisation, λ on ``falkon_validation`` of the training molecules held out,
    ``falkon_tol``, ``falkon_max_iter``; on the kernel's device). ``sum_maps``: the sparse sum
    of SO(3) NTKs picks its inducing environments in the ``first`` network's channel
    amplitudes, or in ``every`` network's side by side, each scaled to unit mean square norm
    (:func:`~molntk.features.inducing.inducing_environments`; QM9 U0, 3 Å + 5 Å networks,
    m = N = 8,000: 3.2 % lower MAE, at N ≤ 4,000 1.3–2.3 % higher, docs/qm9-accuracy.md). Reported
    as ``<model>-sparse``."""

    models: Annotated[list[Literal[SPARSE_MODELS]], Field(min_length=1)] = ["so3_ntk"]  # type: ignore[valid-type]
    environments: Count = 2000
    selection: Literal["fps", "random"] = "fps"
    seed: Seed = 0
    pool: Count | None = None
    exact_up_to: Count | None = None
    rank_rtol: Annotated[float, Field(gt=0, lt=1)] = RECIPE.rank_rtol
    solver: Literal["nystrom", "falkon"] = "nystrom"
    factorisation: Literal["eigh", "cholesky"] = "eigh"
    falkon_validation: Annotated[float, Field(gt=0, lt=1)] = 0.2
    falkon_tol: Annotated[float, Field(gt=0, lt=1)] = 1e-8
    falkon_max_iter: Count = 500
    sum_maps: Literal["first", "every"] = "first"


class InvarianceConfig(Section):
    """Rotation-invariance check: ``n_molecules`` test molecules, each under ``n_rotations``
    Haar-random rotations (``seed``); 0 molecules turns it off."""

    n_molecules: Annotated[int, Field(strict=True, ge=0)] = 100
    n_rotations: Count = 3
    seed: Seed = 0


class QM9PropertyConfig(TaskConfig):
    """``task: qm9-property``: learning curves of the SO(3) NTK and its baselines on QM9."""

    task: Literal["qm9-property"]
    data: Annotated[QM9DataConfig | FileDataConfig, Field(discriminator="source")] = QM9DataConfig()
    targets: Annotated[list[str], Field(min_length=1)] = ["u0_atom"]
    learning_curve: LearningCurveConfig = LearningCurveConfig()
    features: FeatureMapsConfig = FeatureMapsConfig()
    kernel: KernelConfig = KernelConfig()
    models: QM9ModelsConfig = QM9ModelsConfig()
    regression: QM9RegressionConfig = QM9RegressionConfig()
    invariance: InvarianceConfig = InvarianceConfig()
    compute: ComputeConfig = ComputeConfig()
    sparse: SparseConfig | None = None
    output: UserPath | None = Field(default=None, description="output folder (default results/<name>/)")
    cache: bool = Field(default=True, description="keep kernel blocks in <output>/kernel_cache: a killed run resumes")

    @model_validator(mode="before")
    @classmethod
    def _file_targets_by_default(cls, raw: Any) -> Any:
        """A ``data`` section without ``source`` is QM9 (qm9pack); with ``source: file`` and no
        ``targets`` key, the targets are those of ``data.targets``."""
        if not isinstance(raw, dict) or not isinstance(raw.get("data"), dict):
            return raw
        data = raw["data"]
        if "source" not in data:
            return {**raw, "data": {"source": "qm9pack", **data}}
        if data["source"] == "file" and "targets" not in raw and isinstance(data.get("targets"), (dict, list)) and data["targets"]:
            return {**raw, "targets": list(data["targets"])}
        return raw

    @field_validator("targets")
    @classmethod
    def _known_targets(cls, targets: list[str], info: ValidationInfo) -> list[str]:
        """QM9 data: QM9 targets (:data:`molntk.data.qm9.QM9_TARGETS`); a file: keys of
        ``data.targets``; none twice."""
        if "data" not in info.data:  # the data section is invalid: its own errors say why
            return targets
        data = info.data["data"]
        from_file = isinstance(data, FileDataConfig)
        known = list(data.targets) if from_file else list(QM9_TARGETS)
        for target in targets:
            if target not in known:
                what = f"target {target!r} is not in data.targets" if from_file else f"unknown QM9 target {target!r}"
                raise ValueError(what + did_you_mean(target, known, "data.targets" if from_file else "targets"))
        if len(set(targets)) != len(targets):
            raise ValueError(f"lists a target twice: {targets}")
        return targets

    @model_validator(mode="after")
    def _sparse_models_present(self) -> QM9PropertyConfig:
        for name in [] if self.sparse is None else self.sparse.models:
            if getattr(self.models, name) is None:
                raise FieldError("sparse.models", f"lists {name!r}, but models.{name} is null")
            if name in ("so3_ntk", "so3_ntk_sum") and self.kernel.pairing == "atom-index":
                raise FieldError("sparse.models", f"a sparse {name} needs kernel.pairing 'element' or 'shared', not 'atom-index'")
        return self

    @model_validator(mode="after")
    def _sum_has_weights_at_every_size(self) -> QM9PropertyConfig:
        """Without an exact size (``sparse.exact_up_to`` below the smallest n_train) the sum
        has only its sparse model, which cannot choose among weight points: it must be listed
        in ``sparse.models`` and give one point."""
        section, sparse = self.models.so3_ntk_sum, self.sparse
        limit = None if sparse is None else sparse.exact_up_to
        if section is None or limit is None or limit >= self.learning_curve.n_train[0]:
            return self
        where = f"sparse.exact_up_to {limit} is below the smallest n_train {self.learning_curve.n_train[0]}"
        if "so3_ntk_sum" not in sparse.models:
            raise FieldError("models.so3_ntk_sum", f"has no exact training size ({where}) and is not in sparse.models")
        if section.n_points != 1:
            raise FieldError("models.so3_ntk_sum", f"has no exact training size to choose its weights on ({where}): "
                             f"give its sparse model one point (points: [[c_2, …]]), not {section.n_points}")
        return self

    @model_validator(mode="after")
    def _lambda_has_a_source(self) -> QM9PropertyConfig:
        """The exact models (the sizes up to ``sparse.exact_up_to``) choose λ by CV at a size ≤ eigh_max."""
        limit = None if self.sparse is None else self.sparse.exact_up_to
        exact = [n for n in self.learning_curve.n_train if limit is None or n <= limit]
        smallest = exact[0] if exact else None
        if smallest is not None and smallest > self.regression.eigh_max:
            raise FieldError(
                "regression.eigh_max",
                f"{self.regression.eigh_max} is below the smallest n_train {smallest}: λ is chosen by CV on a size ≤ eigh_max",
            )
        return self
