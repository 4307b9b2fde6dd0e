"""Configuration schema of ``task: image-classification`` (:mod:`molntk.pipelines.images`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from molntk.config import Count, FieldError, Section, Seed, TaskConfig, UserPath


class ImageDataConfig(Section):
    """Images of ``image-classification`` (see :mod:`molntk.pipelines.images.data`).

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
