"""Configuration schema of ``task: emergent-so3`` (:mod:`molntk.pipelines.emergent.qm9`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from molntk.config import Count, FieldError, Section, Seed, TaskConfig, UserPath, check_increasing
from molntk.pipelines.emergent.config import IsingComputeConfig


class SO3DataConfig(Section):
    """A random QM9 subset (``seed``): ``n_train`` training and ``n_test`` test molecules
    (QM9's own orientations: in distribution); the first ``n_rotated`` test molecules are
    also evaluated under ``rotations`` Haar-random rotations each (the rotation std). Target:
    U0 atomization energy minus a dressed-atom fit on the training molecules, divided by the
    standard deviation of that residual over them."""

    n_train: Count = 32
    n_test: Count = 32
    n_rotated: Count = 8
    rotations: Annotated[int, Field(strict=True, ge=2)] = 8
    seed: Seed = 0

    @model_validator(mode="after")
    def _rotated_are_test(self) -> SO3DataConfig:
        if self.n_rotated > self.n_test:
            raise FieldError("n_rotated", f"must be at most n_test ({self.n_test}), got {self.n_rotated}")
        return self


class SO3FeaturesConfig(Section):
    """Environment feature maps (:class:`~molntk.features.environments.FeatureConfig`): degrees
    l < ``band_limit``, ``n_radial`` Gaussians on [0.5 Å, ``r_cut``] per neighbour element,
    angular smearing ``smearing_width`` (rad)."""

    band_limit: Annotated[int, Field(strict=True, ge=1, le=13)] = 3
    n_radial: Count = 2
    r_cut: Annotated[float, Field(gt=0.5)] = 3.0
    smearing_width: Annotated[float, Field(ge=0)] = 0.3


class SO3NetworkConfig(Section):
    """The per-atom network, shared by all centre elements: one hidden layer, NTK
    parametrisation (:class:`~molntk.molecular.baselines.mlp.FiniteMLP`); the SO(3) network
    ``lift:L σ pool dense`` has the same σ, σ_w, σ_b, L = ``features.band_limit`` and its
    kernel on the Gauss–Legendre grid of band limit ``grid``."""

    activation: Literal["relu", "erf"] = "erf"
    sigma_w: Annotated[float, Field(gt=0)] = 1.0
    sigma_b: Annotated[float, Field(ge=0)] = 0.0
    grid: Count = 4


class SO3AugmentationConfig(Section):
    """Each training molecule replaced by k Haar-random rotations of it, for every k in ``k``
    (strictly increasing; the rotations of a smaller k are the first of a larger one), from
    ``seed``; the width sweep runs at ``width_k`` (one of ``k``)."""

    k: Annotated[list[Count], Field(min_length=1)] = [1, 2, 4, 8]
    width_k: Count = 2
    seed: Seed = 1

    @model_validator(mode="after")
    def _check(self) -> SO3AugmentationConfig:
        check_increasing(self.k, "k")
        if self.width_k not in self.k:
            raise FieldError("width_k", f"must be one of k {self.k}, got {self.width_k}")
        return self


class SO3EnsembleConfig(Section):
    """``members`` networks per (k, width), seeds ``seed`` … ``seed + members − 1``; the k
    sweep at ``width``, the width sweep over ``widths`` (strictly increasing) at
    ``augmentation.width_k``; ensemble ``sizes`` (each ≤ members): the rotation std of the
    mean of ⌊members / size⌋ disjoint groups of that many members; ``chunk``: members trained
    together (null: all)."""

    width: Count = 128
    widths: Annotated[list[Count], Field(min_length=1)] = [32, 128, 512]
    members: Count = 32
    sizes: Annotated[list[Count], Field(min_length=1)] = [1, 2, 4, 8, 16, 32]
    seed: Seed = 0
    chunk: Count | None = 8

    @model_validator(mode="after")
    def _check(self) -> SO3EnsembleConfig:
        check_increasing(self.widths, "widths")
        check_increasing(self.sizes, "sizes")
        if self.sizes[-1] > self.members:
            raise FieldError("sizes", f"must be at most members ({self.members}), got {self.sizes}")
        return self

    def plan(self, ks: list[int], width_k: int) -> list[tuple[int, int]]:
        """(k, width) of every ensemble: the k sweep over ``ks`` at ``width``, then the other
        widths at ``width_k``."""
        return [(k, self.width) for k in ks] + [(width_k, w) for w in self.widths if w != self.width]


class SO3TrainingConfig(Section):
    """Full-batch gradient descent on the mean squared error for ``steps`` steps with
    η = ``lr_scale`` · min n / λ_max(Θ) over the training kernels (augmented MLP NTKs, SO(3)
    NTK), the same for every run; predictions at about ``records`` log-spaced step counts."""

    steps: Count = 40
    lr_scale: Annotated[float, Field(gt=0, lt=2)] = 1.0
    records: Annotated[int, Field(strict=True, ge=2)] = 4


class EmergentSO3Config(TaskConfig):
    """``task: emergent-so3``: rotation-augmented per-atom MLP ensembles on QM9 energies, their
    rotation std against k, width and ensemble size, beside the augmented MLP NTK and the
    SO(3) NTK predictions. ``output``: default ``results/<name>/``."""

    task: Literal["emergent-so3"]
    data: SO3DataConfig = SO3DataConfig()
    features: SO3FeaturesConfig = SO3FeaturesConfig()
    network: SO3NetworkConfig = SO3NetworkConfig()
    augmentation: SO3AugmentationConfig = SO3AugmentationConfig()
    ensemble: SO3EnsembleConfig = SO3EnsembleConfig()
    training: SO3TrainingConfig = SO3TrainingConfig()
    compute: IsingComputeConfig = IsingComputeConfig()
    output: UserPath | None = None
