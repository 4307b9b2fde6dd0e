"""Configuration schema of ``task: emergent-digits`` (:mod:`molntk.pipelines.emergent.digits`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from molntk.config import Count, FieldError, Section, Seed, TaskConfig, UserPath, check_increasing
from molntk.pipelines.emergent.config import IsingComputeConfig
from molntk.pipelines.emergent.so3_config import SO3EnsembleConfig

#: Side of scikit-learn's digit images.
DIGIT_SIDE = 8


class DigitsDataConfig(Section):
    """A random subset (``seed``) of scikit-learn's 8×8 digits: ``n_train`` training digits
    and ``n_test`` test digits (in distribution), and ``n_test`` images of Gaussian pixel
    noise (out of distribution); ``pad`` zero pixels around every image before it is
    rotated (room for the corners; 2 keeps the whole digit for every angle)."""

    n_train: Count = 32
    n_test: Count = 16
    pad: Annotated[int, Field(strict=True, ge=0)] = 0
    seed: Seed = 0


class DigitsNetworkConfig(Section):
    """The CNN-GAP of the ensembles (:func:`~molntk.kernels.cn.cnn_gap`): ``depth``
    ``filter`` × ``filter`` convolutions with ``padding``, each followed by σ, a global
    average pool, ``head`` hidden Dense layers with σ and a Dense readout of the 10 class
    scores; NTK parametrisation with σ_w, σ_b. The C_k GCNN beside it has the same layers,
    its head applied per rotation and averaged last (``gcnn(k, per_rotation_head=True)``)."""

    depth: Count = 1
    filter: Count = 3
    padding: Literal["valid", "same", "circular"] = "valid"
    activation: Literal["relu", "erf"] = "erf"
    head: Annotated[int, Field(strict=True, ge=0)] = 1
    sigma_w: Annotated[float, Field(gt=0)] = 1.5
    sigma_b: Annotated[float, Field(ge=0)] = 0.0

    @model_validator(mode="after")
    def _odd_filter(self) -> DigitsNetworkConfig:
        """Filters rotate about their centre pixel: the size must be odd."""
        if self.filter % 2 == 0:
            raise FieldError("filter", f"the filter size must be odd, got {self.filter}")
        return self


class DigitsAugmentationConfig(Section):
    """The groups C_k of the sweep: every training digit replaced by its k rotations by
    2πg/k, for every k in ``k`` (strictly increasing, each ≥ 2 and a divisor of the largest,
    whose orbit then holds all the others); the width sweep runs at ``width_k`` (one of
    ``k``). Only k ∈ {2, 4} rotate exactly (pixel permutations); other angles interpolate
    bilinearly (:func:`~molntk.kernels.cn.rotate_images`)."""

    k: Annotated[list[Annotated[int, Field(strict=True, ge=2)]], Field(min_length=1)] = [4, 8, 16]
    width_k: Count = 4

    @model_validator(mode="after")
    def _check(self) -> DigitsAugmentationConfig:
        check_increasing(self.k, "k")
        if any(self.k[-1] % k for k in self.k):
            raise FieldError("k", f"every k must divide the largest ({self.k[-1]}), got {self.k}")
        if self.width_k not in self.k:
            raise FieldError("width_k", f"must be one of k {self.k}, got {self.width_k}")
        return self


class DigitsEnsembleConfig(SO3EnsembleConfig):
    """The keys of :class:`~molntk.pipelines.emergent.so3_config.SO3EnsembleConfig` (the k
    sweep at ``width``, the width sweep over ``widths`` at ``augmentation.width_k``,
    ensemble ``sizes``), with defaults for the digits and at least two ``members`` (the
    Monte Carlo error needs their sample variance)."""

    width: Count = 64
    widths: Annotated[list[Count], Field(min_length=1)] = [16, 64, 256]
    members: Annotated[int, Field(strict=True, ge=2)] = 16
    sizes: Annotated[list[Count], Field(min_length=1)] = [1, 2, 4, 8, 16]
    chunk: Count | None = 4


class DigitsTrainingConfig(Section):
    """Full-batch gradient descent on the mean squared error of the one-hot class scores for
    ``steps`` steps with η = ``lr_scale`` · min n / λ_max(Θ) over the training kernels
    (the CNN NTK on every training set, the C_k GCNN NTKs), the same for every run;
    predictions at about ``records`` log-spaced step counts."""

    steps: Count = 100
    lr_scale: Annotated[float, Field(gt=0, lt=2)] = 1.0
    records: Annotated[int, Field(strict=True, ge=2)] = 6


class EmergentDigitsConfig(TaskConfig):
    """``task: emergent-digits``: C_k-augmented CNN ensembles on scikit-learn's digits, their
    orbit std and orbit-same predictions over training against k, width and ensemble size,
    beside the NTK predictions of the augmented CNN and of the C_k GCNN.

    ``unaugmented``: also train ``ensemble.width`` on the un-rotated digits (the control);
    ``output``: default ``results/<name>/``.
    """

    task: Literal["emergent-digits"]
    data: DigitsDataConfig = DigitsDataConfig()
    network: DigitsNetworkConfig = DigitsNetworkConfig()
    augmentation: DigitsAugmentationConfig = DigitsAugmentationConfig()
    ensemble: DigitsEnsembleConfig = DigitsEnsembleConfig()
    training: DigitsTrainingConfig = DigitsTrainingConfig()
    unaugmented: bool = True
    compute: IsingComputeConfig = IsingComputeConfig()
    output: UserPath | None = None

    @model_validator(mode="after")
    def _image_survives_the_convolutions(self) -> EmergentDigitsConfig:
        """With "valid" padding every convolution shrinks the image by filter − 1 pixels."""
        net = self.network
        side = DIGIT_SIDE + 2 * self.data.pad
        if net.padding == "valid" and side - net.depth * (net.filter - 1) < 1:
            raise FieldError(
                "network.depth", f"{net.depth} valid {net.filter}×{net.filter} convolutions leave nothing of {side}×{side} images"
            )
        return self
