"""YAML configuration files: reading, ``--set`` overrides, validation, clear messages.

A configuration file is a YAML mapping whose ``task`` key picks the pydantic model that
validates it (see :data:`TASK_MODELS`)::

    task: qm9-summary
    data:
      source: qm9pack
      seed: 0
      split: {n_train: 110000, n_valid: 10000}

Every model forbids unknown keys and states its constraints, and every problem found
becomes one line ``<where>: <dotted.key>: <what is wrong>``; all problems of a file and
its overrides are reported together in one :class:`ConfigValidationError`::

    configs/x.yaml: data.seed: expected an integer, got 'abc'
    configs/x.yaml: data.split.n_trian: unknown key 'n_trian' (did you mean 'n_train'?)
    --set data.split.n_valid=-5: data.split.n_valid: must be > 0, got -5

Adding a task: write a :class:`TaskConfig` subclass with a ``task: Literal["<name>"]``
field and its sections, and decorate it with :func:`register_task`. ``molntk run``
then dispatches on the name (see :mod:`molntk.cli.run`).
"""

from __future__ import annotations

import copy
import difflib
import json
import os
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from molntk.errors import ConfigError

# ---------------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------------

#: A count of molecules: a strict integer > 0 (``1.0``, ``"5"`` and ``true`` are rejected).
Count = Annotated[int, Field(strict=True, gt=0)]
#: A file system path; a leading ``~`` is expanded, relative paths stay relative to the working directory.
UserPath = Annotated[Path, AfterValidator(Path.expanduser)]
#: A random seed: a strict integer in ``[0, 2**32)`` (valid for every RNG molntk uses).
Seed = Annotated[int, Field(strict=True, ge=0, le=2**32 - 1)]


def _no_path_separator(name: str) -> str:
    """Reject a name that would make a report path leave its directory."""
    if "/" in name or "\\" in name:
        raise ValueError("must not contain '/' or '\\' (it names report files)")
    return name


#: A run name: non-empty, no path separators (it names report files).
Name = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_path_separator)]


class Section(BaseModel):
    """Base of every configuration model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldError(ValueError):
    """Raised by a cross-field validator to blame one key of its section."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


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


class TaskConfig(Section):
    """Keys shared by every task. Subclasses narrow ``task`` to ``Literal[...]`` and add their sections."""

    name: Name
    task: str

    def to_dict(self) -> dict[str, Any]:
        """The resolved configuration as plain JSON/YAML values (paths become strings)."""
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        """The resolved configuration as a YAML document, keys in schema order."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)


#: Task name → model validating configurations of that task (a discriminated union on ``task``).
TASK_MODELS: dict[str, type[TaskConfig]] = {}

_T = TypeVar("_T", bound=type[TaskConfig])


def register_task(model: _T) -> _T:
    """Class decorator: make ``model`` the schema of the task named by its ``task`` literal."""
    (name,) = get_args(model.model_fields["task"].annotation)
    TASK_MODELS[name] = model
    return model


@register_task
class QM9SummaryConfig(TaskConfig):
    """``task: qm9-summary``: load QM9 and report its size, target statistics and split."""

    task: Literal["qm9-summary"]
    data: QM9DataConfig = QM9DataConfig()


class ImageDataConfig(Section):
    """Images of ``image-classification`` (see :mod:`molntk.pipelines.image_data`).

    ``digits``: scikit-learn's digits with random ``rotation`` (offline); ``nct-crc-he``: a
    folder of NCT-CRC-HE tiles at ``path`` (at most ``limit_per_class`` per class);
    ``pathmnist``: a MedMNIST ``.npz`` at ``path``. Images are resized to ``size`` × ``size``;
    ``n_test`` test images; ``seed`` seeds the split, the training order and the rotations.
    """

    source: Literal["digits", "nct-crc-he", "pathmnist"] = "digits"
    path: UserPath | None = Field(default=None, description="NCT-CRC-HE folder or PathMNIST .npz")
    size: Count = 12
    rotation: Literal["continuous", "quarter", "none"] = "continuous"
    limit_per_class: Count | None = None
    n_test: Count = 100
    seed: Seed = 0

    @model_validator(mode="after")
    def _path_matches_source(self) -> ImageDataConfig:
        """``path`` is required by the file sources and meaningless for digits; likewise ``limit_per_class``."""
        if self.source != "digits" and self.path is None:
            raise FieldError("path", f"required with source {self.source!r} (the dataset's folder or .npz file)")
        if self.source == "digits" and self.path is not None:
            raise FieldError("path", "not used with source 'digits' (scikit-learn's bundled images)")
        if self.limit_per_class is not None and self.source != "nct-crc-he":
            raise FieldError("limit_per_class", f"only used with source 'nct-crc-he', not {self.source!r}")
        return self


class ImageNetworkConfig(Section):
    """Architecture shared by the image models (see :mod:`molntk.kernels.cn.models`).

    ``n``: rotation group C_n of the GCNN and the augmentation orbit; ``depth``: lifting +
    depth − 1 group convolutions (CNNs: depth convolutions), k × k filters, ``padding``;
    ``head``: hidden Dense layers before the readout; ``per_rotation_head``: apply the
    head to each rotation and average last (then the augmented CNN kernel equals the GCNN
    kernel for n ∈ {1, 2, 4}), else pool over rotations before the head.
    """

    n: Count = 4
    depth: Count = 2
    k: Count = 3
    padding: Literal["valid", "same", "circular"] = "valid"
    activation: Literal["relu", "erf"] = "relu"
    head: Annotated[int, Field(strict=True, ge=0)] = 1
    per_rotation_head: bool = True
    sigma_w: Annotated[float, Field(gt=0)] = 1.0
    sigma_b: Annotated[float, Field(ge=0)] = 0.0

    @model_validator(mode="after")
    def _odd_filter(self) -> ImageNetworkConfig:
        """Filters rotate about their centre pixel: k must be odd."""
        if self.k % 2 == 0:
            raise FieldError("k", f"the filter size must be odd, got {self.k}")
        return self


class ImageComputeConfig(Section):
    """Where and how image kernels are computed: ``block`` images per kernel block (progress
    steps); ``threads``: torch CPU threads during the run (null: torch's default; 1 is faster
    on a CPU shared with other jobs, where waiting OpenMP threads waste their cores)."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["float64", "float32"] = "float64"
    memory_mb: Annotated[float, Field(gt=0)] = 768.0
    block: Count = 50
    threads: Count | None = None


#: Models of ``image-classification``, in the order of its tables.
IMAGE_MODELS = ("gcnn", "augmented-cnn", "cnn-gap", "cnn-flatten", "mlp")


@register_task
class ImageClassificationConfig(TaskConfig):
    """``task: image-classification``: NTK classification of images by the C_n GCNN and baselines.

    ``n_train``: learning-curve sizes (increasing; nested training sets); ``n_orbit``:
    test images whose n rotated copies are classified too (default: all ``data.n_test``);
    ``cv``: how λ is chosen on the training data; ``output``: default ``results/<name>/``.
    """

    task: Literal["image-classification"]
    data: ImageDataConfig = ImageDataConfig()
    n_train: Annotated[list[Count], Field(min_length=1)] = [25, 50, 100]
    n_orbit: Count | None = None
    network: ImageNetworkConfig = ImageNetworkConfig()
    models: Annotated[list[Literal[IMAGE_MODELS]], Field(min_length=1)] = list(IMAGE_MODELS)  # type: ignore[valid-type]
    cv: Literal["loo", "kfold", "gcv"] = "loo"
    compute: ImageComputeConfig = ImageComputeConfig()
    output: UserPath | None = None

    @model_validator(mode="after")
    def _consistent_sizes(self) -> ImageClassificationConfig:
        """``n_train`` strictly increasing, ``models`` without repeats, ``n_orbit`` ≤ ``data.n_test``."""
        if any(a >= b for a, b in zip(self.n_train, self.n_train[1:])):
            raise FieldError("n_train", f"must be strictly increasing, got {self.n_train}")
        if len(set(self.models)) != len(self.models):
            raise FieldError("models", f"lists a model twice: {self.models}")
        if self.n_orbit is not None and self.n_orbit > self.data.n_test:
            raise FieldError("n_orbit", f"{self.n_orbit} exceeds data.n_test = {self.data.n_test}")
        return self


# ----- task: qm9-property ---------------------------------------------------------------

#: A positive float (scales, widths).
Positive = Annotated[float, Field(gt=0)]
#: A non-negative float.
NonNegative = Annotated[float, Field(ge=0)]


class FeaturesConfig(Section):
    """Environment feature maps (:class:`~molntk.features.environments.FeatureConfig`):
    band limit L, angular smearing σ (rad) and radial basis (``kind: gaussian`` with
    ``n``, ``r_min``, ``r_cut``, ``width``; or ``kind: coulomb`` with ``powers``)."""

    band_limit: Annotated[int, Field(strict=True, ge=1, le=13)] = 4
    smearing_width: NonNegative = 0.5
    radial: dict[str, Any] = {"kind": "gaussian", "n": 6, "r_min": 0.5, "r_cut": 5.0}

    @model_validator(mode="after")
    def _valid_radial(self) -> FeaturesConfig:
        try:
            self.feature_config()
        except ValueError as err:
            raise FieldError("radial", str(err)) from None
        return self

    def feature_config(self) -> Any:
        from molntk.features.environments import FeatureConfig

        return FeatureConfig.from_dict(self.model_dump())


class KernelEngineConfig(Section):
    """How SO(3) kernels are evaluated: ``mode`` (fast: invariant recursion; exact: the
    discretised network), the SO(3) grid (``grid_band_limit``, ``sampling``), atom
    ``pairing`` (element-resolved or shared network), ``dtype``, ``device`` (auto: CUDA
    when present), environments per kernel block, and CPU ``threads`` (null: torch's default).
    ``atom-index`` (the published reference's unshared per-atom-index branches on 29 padded
    atoms; not permutation invariant) applies to the SO(3) NTK only; the baselines then
    use element pairing."""

    mode: Literal["fast", "exact"] = "fast"
    grid_band_limit: Annotated[int, Field(strict=True, ge=1, le=12)] = 2
    sampling: Literal["gauss-legendre", "driscoll-healy", "lebedev"] = "gauss-legendre"
    pairing: Literal["element", "shared", "atom-index"] = "element"
    dtype: Literal["float64", "float32"] = "float64"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    block_size: Count = 512
    threads: Count | None = None


class SO3Candidate(Section):
    """One SO(3) architecture (:mod:`molntk.kernels.so3.spec`), e.g. ``lift:3 relu pool dense``;
    ``smearing_width`` (rad) replaces the feature maps' angular smearing for this candidate."""

    layers: str
    sigma_w: Positive = 1.0
    sigma_b: NonNegative = 0.0
    smearing_width: NonNegative | None = None

    @model_validator(mode="after")
    def _parses(self) -> SO3Candidate:
        from molntk.kernels.so3.spec import parse_architecture

        try:
            parse_architecture(self.layers)
        except ValueError as err:
            raise FieldError("layers", str(err)) from None
        return self


class MLPCandidate(Section):
    """One per-atom MLP architecture: ``depth`` hidden layers of ``activation``."""

    depth: Count = 1
    activation: Literal["relu", "erf"] = "relu"
    sigma_w: Positive = 1.0
    sigma_b: NonNegative = 0.0


class SO3ModelConfig(Section):
    """The SO(3) NTK: architectures to choose from on training data."""

    candidates: Annotated[list[SO3Candidate], Field(min_length=1)] = [
        SO3Candidate(layers="lift:3 relu pool dense", sigma_w=1.0, sigma_b=0.1)
    ]


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
    """SOAP-type power-spectrum kernel (p̂·p̂')^ζ on the feature maps, ζ chosen from ``zetas``."""

    zetas: Annotated[list[Count], Field(min_length=1)] = [1, 2, 3, 4]


class LaplacianModelConfig(Section):
    """Laplacian kernel on a global descriptor, σ = factor × median L1 distance (factor chosen)."""

    width_factors: Annotated[list[Positive], Field(min_length=1)] = [0.5, 1.0, 2.0, 4.0, 8.0]


class SOAPModelConfig(Section):
    """SOAP from DScribe (optional package): r_cut (Å), radial/angular sizes, width σ, ζ chosen."""

    r_cut: Positive = 5.0
    n_max: Count = 6
    l_max: Count = 4
    sigma: Positive = 0.5
    zetas: Annotated[list[Count], Field(min_length=1)] = [2]


class FCHL19ModelConfig(Section):
    """FCHL19 from qmllib (optional package) with a Gaussian kernel, width σ chosen from ``sigmas``."""

    sigmas: Annotated[list[Positive], Field(min_length=1)] = [1.0, 2.0, 4.0]


class QM9ModelsConfig(Section):
    """The models compared side by side; ``null`` leaves one out (SOAP and FCHL19 are off
    unless given: they need the ``baselines`` extra). The dressed-atom linear model is
    always fitted (it is the floor every model must beat)."""

    so3_ntk: SO3ModelConfig | None = SO3ModelConfig()
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
        if any(a >= b for a, b in zip(self.n_train, self.n_train[1:])):
            raise FieldError("n_train", f"must be strictly increasing, got {self.n_train}")
        if self.n_select > self.n_train[-1]:
            raise FieldError("n_select", f"{self.n_select} exceeds the largest n_train {self.n_train[-1]}")
        return self


class QM9RegressionConfig(Section):
    """λ by ``cv`` on training data; ``residual``: learn the residual of the dressed-atom
    model (auto: for extensive energies); ``reduce``: sum or mean over atom pairs (auto:
    mean for intensive targets HOMO/LUMO/gap, sum otherwise). ``psd_rtol``: the relative
    accuracy assumed of quadrature kernels (fast-mode SO(3), rotation-averaged MLP):
    train-kernel eigenvalues down to −psd_rtol × the largest are clipped to 0 (measured on
    QM9 at grid band limit 2, ReLU: kernel error ≈ 2e-4, smallest eigenvalue ≈ −1e-5 ×
    largest), and their λ is not chosen below psd_rtol × mean(diag K).

    Large training sets: λ is chosen by CV (one O(n³) eigendecomposition) on sizes up to
    ``eigh_max``; a larger size reuses the relative λ (λ / mean diag K) of the largest
    size ≤ eigh_max and is solved by ``large_solver``: Cholesky, PCG (relative residual
    ``pcg_tol``), or auto (Cholesky when its n² · 8-byte factor fits a quarter of the RAM)."""

    cv: Literal["loo", "kfold", "gcv"] = "loo"
    residual: Literal["auto", "dressed-atom", "none"] = "auto"
    reduce: Literal["auto", "sum", "mean"] = "auto"
    psd_rtol: Annotated[float, Field(gt=0, lt=1)] = 1e-4
    eigh_max: Count = 5000
    large_solver: Literal["auto", "cholesky", "pcg"] = "auto"
    pcg_tol: Annotated[float, Field(gt=0, lt=1)] = 1e-8


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


#: QM9 models whose kernel is a sum over environment pairs: they have sparse versions.
SPARSE_MODELS = ("so3_ntk", "mlp_ntk", "augmented_mlp_ntk", "power_spectrum")


class SparseConfig(Section):
    """Sparse (inducing-environment) versions of local kernel models, for training sets
    whose n × n kernel is out of reach. Each of ``models`` is also fitted as
    E(M) = Σ_j w_j Θ(M, {s_j}) on ``environments`` inducing environments s_j drawn from the
    training molecules (``selection``: farthest-point ``fps`` or ``random`` with ``seed``,
    per element in proportion to its environments), λ by closed-form leave-one-out; it
    needs n × m kernel entries instead of n²/2 (:mod:`molntk.features.inducing`,
    :mod:`molntk.regression.sparse`), with the candidate chosen for the exact model.
    ``exact_up_to``: the exact models run only on training sizes up to this (null: all),
    so a learning curve can go on where only the sparse models reach. ``rank_rtol``:
    eigenvalues of Θ(inducing, inducing) below rank_rtol × the largest are dropped from
    its pseudo-inverse; 1e-10 stays above the quadrature error of the main job's kernels
    (≈ 5e-11 relative per entry) and, measured on QM9 U0 at N = 1,000
    (benchmarks/sparse_inducing.py), loses nothing against 1e-12, while 3e-8 (the λ floor)
    cut the rank to ≈ 300 and raised the MAE from 70 to 105 meV. Reported as
    ``<model>-sparse``."""

    models: Annotated[list[Literal[SPARSE_MODELS]], Field(min_length=1)] = ["so3_ntk"]  # type: ignore[valid-type]
    environments: Count = 2000
    selection: Literal["fps", "random"] = "fps"
    seed: Seed = 0
    exact_up_to: Count | None = None
    rank_rtol: Annotated[float, Field(gt=0, lt=1)] = 1e-10


class InvarianceConfig(Section):
    """Rotation-invariance check: ``n_molecules`` test molecules, each under ``n_rotations``
    Haar-random rotations (``seed``); 0 molecules turns it off."""

    n_molecules: Annotated[int, Field(strict=True, ge=0)] = 100
    n_rotations: Count = 3
    seed: Seed = 0


def _known_qm9_targets(targets: list[str]) -> list[str]:
    """Every target is a QM9 target (:data:`molntk.data.qm9.QM9_TARGETS`), none twice."""
    from molntk.data.qm9 import QM9_TARGETS

    for target in targets:
        if target not in QM9_TARGETS:
            raise ValueError(f"unknown QM9 target {target!r}" + _did_you_mean(target, list(QM9_TARGETS), "targets"))
    if len(set(targets)) != len(targets):
        raise ValueError(f"lists a target twice: {targets}")
    return targets


@register_task
class QM9PropertyConfig(TaskConfig):
    """``task: qm9-property``: learning curves of the SO(3) NTK and its baselines on QM9."""

    task: Literal["qm9-property"]
    data: QM9DataConfig = QM9DataConfig()
    targets: Annotated[list[str], Field(min_length=1), AfterValidator(_known_qm9_targets)] = ["u0_atom"]
    learning_curve: LearningCurveConfig = LearningCurveConfig()
    features: FeaturesConfig = FeaturesConfig()
    kernel: KernelEngineConfig = KernelEngineConfig()
    models: QM9ModelsConfig = QM9ModelsConfig()
    regression: QM9RegressionConfig = QM9RegressionConfig()
    invariance: InvarianceConfig = InvarianceConfig()
    compute: ComputeConfig = ComputeConfig()
    sparse: SparseConfig | None = None
    output: UserPath | None = Field(default=None, description="output folder (default results/<name>/)")
    cache: bool = Field(default=True, description="keep kernel blocks in <output>/kernel_cache: a killed run resumes")

    @model_validator(mode="after")
    def _sparse_models_present(self) -> QM9PropertyConfig:
        for name in [] if self.sparse is None else self.sparse.models:
            if getattr(self.models, name) is None:
                raise FieldError("sparse.models", f"lists {name!r}, but models.{name} is null")
            if name == "so3_ntk" and self.kernel.pairing == "atom-index":
                raise FieldError("sparse.models", "a sparse so3_ntk needs kernel.pairing 'element' or 'shared', not 'atom-index'")
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

# ---------------------------------------------------------------------------------------
# Problems and their messages
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a configuration: where (file or override), which key, what."""

    source: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.key}: {self.message}" if self.key else f"{self.source}: {self.message}"


class ConfigValidationError(ConfigError):
    """A configuration has one or more problems; ``str()`` gives one line per problem."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def _show(value: Any) -> str:
    """A value as the user wrote it: strings quoted, the rest in YAML/JSON spelling."""
    if isinstance(value, str):
        return repr(value)
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _closest(word: Any, choices: Sequence[str]) -> str | None:
    """The choice closest to ``word`` (difflib), if any is close enough."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def _did_you_mean(word: Any, choices: Sequence[str], noun: str) -> str:
    """`` (did you mean 'x'?)`` for a close match, else `` (<noun>: a, b, c)``."""
    close = _closest(word, choices)
    if close is not None:
        return f" (did you mean {close!r}?)"
    return f" ({noun}: {', '.join(choices)})" if choices else ""


def _dotted(loc: Sequence[str | int]) -> str:
    """``('data', 'split', 'n_train')`` → ``data.split.n_train``; list indices as ``[i]``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class inside an annotation (``SplitConfig``, ``SplitConfig | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _model_at(root: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The model class that validates the section at ``loc`` (``()`` is ``root``)."""
    model: type[BaseModel] | None = root
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        model = _model_in(model.model_fields[part].annotation)
    return model


def _literal_values(root: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The allowed values of a ``Literal`` field at ``loc``, as strings."""
    parent = _model_at(root, loc[:-1])
    field = parent.model_fields.get(str(loc[-1])) if parent is not None and loc else None
    if field is None:
        return []
    annotation = field.annotation
    literal = (
        annotation
        if get_origin(annotation) is Literal
        else next((a for a in get_args(annotation) if get_origin(a) is Literal), None)
    )
    return [str(v) for v in get_args(literal)] if literal is not None else []


#: Pydantic error type → what was expected (the message adds ``, got <input>``).
_EXPECTED = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "path_type": "expected a path (a string)",
    "list_type": "expected a list",
    "dict_type": "expected a section (a mapping of keys)",
    "model_type": "expected a section (a mapping of keys)",
    "model_attributes_type": "expected a section (a mapping of keys)",
}

#: Pydantic constraint error type → the constraint, formatted with the error's ``ctx``.
_CONSTRAINTS = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "string_too_short": "must have at least {min_length} character(s)",
    "string_too_long": "must have at most {max_length} characters",
    "too_short": "must have at least {min_length} item(s)",
    "too_long": "must have at most {max_length} items",
}


def _problem_text(root: type[BaseModel], err: Mapping[str, Any]) -> tuple[tuple[str | int, ...], str]:
    """The key path and the message of one pydantic error."""
    kind, loc, ctx = err["type"], tuple(err["loc"]), err.get("ctx", {})
    got = _show(err.get("input"))
    if kind == "missing":
        return loc, "missing required key"
    if kind == "extra_forbidden":
        parent = _model_at(root, loc[:-1])
        keys = list(parent.model_fields) if parent is not None else []
        return loc, f"unknown key {str(loc[-1])!r}" + _did_you_mean(loc[-1], keys, "known keys")
    if kind == "literal_error":
        values = _literal_values(root, loc)
        listed = ", ".join(repr(v) for v in values) or ctx.get("expected", "")
        close = _closest(err.get("input"), values)
        hint = f" (did you mean {close!r}?)" if close is not None else ""
        return loc, f"expected one of {listed}, got {got}{hint}"
    if kind == "invalid_key":  # the key itself ends ``loc``; an int key is no list index
        return (*loc[:-1], str(loc[-1])), f"expected a string key, got {got}"
    if kind in _EXPECTED:
        return loc, f"{_EXPECTED[kind]}, got {got}"
    if kind in _CONSTRAINTS:
        return loc, f"{_CONSTRAINTS[kind].format(**ctx)}, got {got}"
    if kind == "value_error" and isinstance(ctx.get("error"), FieldError):
        problem = ctx["error"]
        return (*loc, problem.key), str(problem)
    if kind == "value_error":
        return loc, str(ctx.get("error", err["msg"]))
    msg = str(err["msg"])
    return loc, f"{msg[:1].lower()}{msg[1:]}, got {got}"


# ---------------------------------------------------------------------------------------
# YAML
# ---------------------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML loader that rejects a key repeated in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader reports an unhashable key itself
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(source: str, exc: yaml.YAMLError) -> ConfigProblem:
    """One problem for a YAML syntax error, located as ``file:line:column``."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
    what = getattr(exc, "problem", None) or str(exc)
    return ConfigProblem(where, "", f"invalid YAML: {what}")


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The top-level mapping of a YAML file; :class:`ConfigValidationError` if unusable."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigValidationError([ConfigProblem(source, "", "no such file")]) from None
    except IsADirectoryError:
        raise ConfigValidationError([ConfigProblem(source, "", "is a directory, not a YAML file")]) from None
    except UnicodeDecodeError:
        raise ConfigValidationError([ConfigProblem(source, "", "is not a UTF-8 text file")]) from None
    except OSError as exc:
        raise ConfigValidationError([ConfigProblem(source, "", f"cannot be read ({exc.strerror})")]) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: safe
    except yaml.YAMLError as exc:
        raise ConfigValidationError([_yaml_problem(source, exc)]) from None
    if data is None:
        raise ConfigValidationError(
            [ConfigProblem(source, "", "the file is empty (expected a mapping with a 'task' key)")]
        )
    if not isinstance(data, dict):
        raise ConfigValidationError(
            [ConfigProblem(source, "", f"expected a mapping of keys at the top level, got {type(data).__name__}")]
        )
    return data


# ---------------------------------------------------------------------------------------
# Overrides
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Override:
    """One ``--set key.path=value``: the key path and the value parsed as YAML."""

    text: str
    path: tuple[str, ...]
    value: Any


def parse_override(text: str) -> Override:
    """Parse ``a.b.c=value`` (value as a YAML scalar or flow list/mapping)."""
    source = f"--set {text}"
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigValidationError([ConfigProblem(source, "", "expected KEY=VALUE, e.g. data.seed=1")])
    path = tuple(part.strip() for part in key.split("."))
    if not all(path):
        raise ConfigValidationError([ConfigProblem(source, key, "empty part in the key path")])
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        what = getattr(exc, "problem", None) or str(exc)
        raise ConfigValidationError([ConfigProblem(source, key, f"value is not valid YAML: {what}")]) from None
    return Override(text, path, value)


def _apply_override(data: dict[str, Any], override: Override) -> None:
    """Set ``override.value`` at ``override.path`` in ``data``, creating sections on the way."""
    node = data
    for depth, part in enumerate(override.path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            section = ".".join(override.path[: depth + 1])
            raise ConfigValidationError(
                [ConfigProblem(f"--set {override.text}", section, f"is {_show(child)}, not a section with keys")]
            )
        node = child
    node[override.path[-1]] = override.value


def _merge_overrides(
    data: Mapping[str, Any], overrides: Sequence[str]
) -> tuple[dict[str, Any], list[Override], list[ConfigProblem]]:
    """A copy of ``data`` with the well-formed overrides applied, those overrides, and the problems of the rest."""
    merged = copy.deepcopy(dict(data))
    parsed: list[Override] = []
    problems: list[ConfigProblem] = []
    for text in overrides:
        try:
            override = parse_override(text)
            _apply_override(merged, override)
        except ConfigValidationError as exc:
            problems.extend(exc.problems)
            continue
        parsed.append(override)
    return merged, parsed, problems


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of ``data`` with every ``key.path=value`` override applied in order.

    All malformed overrides are reported together in one :class:`ConfigValidationError`.
    """
    merged, _, problems = _merge_overrides(data, overrides)
    if problems:
        raise ConfigValidationError(problems)
    return merged


def _blame(loc: Sequence[str | int], overrides: Sequence[Override], source: str) -> str:
    """The override that set the key at ``loc`` (longest matching prefix, last wins), else ``source``."""
    best, best_len = source, 0
    for override in overrides:
        n = len(override.path)
        if n >= best_len and tuple(loc[:n]) == override.path:
            best, best_len = f"--set {override.text}", n
    return best


# ---------------------------------------------------------------------------------------
# Validation and loading
# ---------------------------------------------------------------------------------------


def task_model(data: Mapping[str, Any], source: str = "config") -> type[TaskConfig]:
    """The model for ``data['task']``; a :class:`ConfigValidationError` if missing or unknown."""
    known = list(TASK_MODELS)
    task = data.get("task")
    if "task" not in data:
        problem = f"missing required key (known tasks: {', '.join(known)})"
    elif not isinstance(task, str):
        problem = f"expected a task name (one of {', '.join(known)}), got {_show(task)}"
    elif task not in TASK_MODELS:
        problem = f"unknown task {task!r}" + _did_you_mean(task, known, "known tasks")
    else:
        return TASK_MODELS[task]
    raise ConfigValidationError([ConfigProblem(source, "task", problem)])


def validate_config(
    data: Mapping[str, Any], *, source: str = "config", overrides: Sequence[Override] = ()
) -> TaskConfig:
    """Validate a configuration mapping against the model of its task.

    Problems are attributed to the override that set the key, else to ``source``.
    """
    model = task_model(data, _blame(("task",), overrides, source))
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc, message = _problem_text(model, err)
            problems.append(ConfigProblem(_blame(loc, overrides, source), _dotted(loc), message))
        raise ConfigValidationError(problems) from None


def load_config(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> TaskConfig:
    """Read, override and validate a configuration file; all problems are reported at once.

    ``name`` defaults to the file name without its extension
    (``configs/qm9_summary.yaml`` → ``qm9_summary``).
    """
    data, parsed, problems = _merge_overrides(read_yaml(path), overrides)
    data.setdefault("name", Path(path).stem)
    try:
        config = validate_config(data, source=str(path), overrides=parsed)
    except ConfigValidationError as exc:
        problems.extend(exc.problems)
    if problems:
        raise ConfigValidationError(problems)
    return config
