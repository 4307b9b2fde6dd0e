"""Configuration schema of ``task: emergent-ising`` (:mod:`molntk.pipelines.emergent`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from molntk.config import Count, Section, Seed, TaskConfig, UserPath, check_increasing


class IsingDataConfig(Section):
    """Spin configurations on a periodic ``lattice`` × ``lattice`` torus: ``n_train`` ±1
    configurations (augmented by their C4 orbits to 4 × n_train), ``n_test`` fresh ±1
    configurations (in distribution) and ``n_test`` with spins drawn from N(0, 1) (out of
    distribution); ``seed`` seeds all three sets."""

    lattice: Annotated[int, Field(strict=True, ge=3)] = 4
    n_train: Count = 128
    n_test: Count = 32
    seed: Seed = 0


class IsingNetworkConfig(Section):
    """One-hidden-layer MLP on the flattened lattice, one output per site (the local
    energies), NTK parametrisation: z = σ_w/√(L²) W x + σ_b b, f = σ_w/√width V σ(z) + σ_b c."""

    activation: Literal["relu", "erf"] = "relu"
    sigma_w: Annotated[float, Field(gt=0)] = 1.5
    sigma_b: Annotated[float, Field(ge=0)] = 0.1


class IsingEnsembleConfig(Section):
    """``members`` networks per width, seeds ``seed`` … ``seed + members − 1`` (the same at
    every width); ``widths`` strictly increasing (at least two, for the fitted slope);
    ``chunk``: members trained together (null: all at once; on a CPU small chunks are faster,
    their tensors are reused instead of freshly allocated every step)."""

    widths: Annotated[list[Count], Field(min_length=2)] = [16, 32, 64, 128, 256, 512]
    members: Annotated[int, Field(strict=True, ge=2)] = 160
    seed: Seed = 0
    chunk: Count | None = 16

    @model_validator(mode="after")
    def _increasing(self) -> IsingEnsembleConfig:
        check_increasing(self.widths, "widths")
        return self


class IsingTrainingConfig(Section):
    """Full-batch gradient descent on the mean squared error for ``steps`` steps; the step
    size η is set by ``lr_scale`` = η λ_max(Θ) / n (stable below 2), the smaller η of the
    augmented and (if it runs) the un-augmented training set, the same for every run; predictions recorded at about ``records`` step counts, log-spaced from 1."""

    steps: Count = 150
    lr_scale: Annotated[float, Field(gt=0, lt=2)] = 1.0
    records: Annotated[int, Field(strict=True, ge=2)] = 10


class IsingComputeConfig(Section):
    """``dtype`` of the finite networks (the NTK is always float64); ``threads``: torch CPU
    threads during the run (null: torch's default)."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["float32", "float64"] = "float32"
    threads: Count | None = None


class EmergentIsingConfig(TaskConfig):
    """``task: emergent-ising``: augmented MLP ensembles on Ising local energies against the
    NTK prediction, as the width grows and over training time.

    ``unaugmented``: also train the largest width without augmentation (the control whose
    ensemble mean is not equivariant); ``output``: default ``results/<name>/``.
    """

    task: Literal["emergent-ising"]
    data: IsingDataConfig = IsingDataConfig()
    network: IsingNetworkConfig = IsingNetworkConfig()
    ensemble: IsingEnsembleConfig = IsingEnsembleConfig()
    training: IsingTrainingConfig = IsingTrainingConfig()
    unaugmented: bool = True
    compute: IsingComputeConfig = IsingComputeConfig()
    output: UserPath | None = None
