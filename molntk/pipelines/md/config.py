"""Configuration schema of ``task: md-force-field`` (:mod:`molntk.pipelines.md`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from molntk.config import Count, FieldError, Section, Seed, TaskConfig, UserPath, check_increasing
from molntk.data.md import MD_MOLECULES


class MDDataConfig(Section):
    """Frames of one molecule with energies and per-atom forces: ``molecule`` names a
    GFN2-xTB trajectory of the molntk cache (``<cache>/md/<molecule>.extxyz``, made by
    ``data/md/make_md_trajectories.py``), or ``path`` any file that
    :func:`~molntk.data.labelled.read_labelled` reads with forces (extended xyz, an ASE
    database, MD17/rMD17 ``.npz``); the energies under ``energy_key``, in ``energy_unit``,
    the forces in that unit per Å."""

    molecule: Literal[tuple(MD_MOLECULES)] | None = "ethanol"  # type: ignore[valid-type]
    path: UserPath | None = None
    energy_key: str = "energy"
    energy_unit: str = "eV"

    @model_validator(mode="after")
    def _one_source(self) -> MDDataConfig:
        if (self.molecule is None) == (self.path is None):
            raise FieldError("path", "give exactly one of molecule (a cached trajectory) and path (a file)")
        return self


class MDSplitConfig(Section):
    """A seeded permutation of the frames: its first ``n_test`` frames test every model, the
    next ones train, nested: the model at each size of ``n_train`` (strictly increasing)
    trains on the first n of them."""

    n_train: Annotated[list[Count], Field(min_length=1)] = [100, 250, 1000]
    n_test: Count = 1000
    seed: Seed = 0

    @model_validator(mode="after")
    def _increasing(self) -> MDSplitConfig:
        check_increasing(self.n_train, "n_train")
        return self


class MDModelSection(Section):
    """What every model section takes: ``max_n_train``, the largest training size the model
    is fitted at (null: every size of ``split.n_train``), a cap for models whose cost
    forbids the larger sizes; the sizes above it are listed in the report's ``skipped_fits``."""

    max_n_train: Count | None = None


class SO3ModelConfig(MDModelSection):
    """An SO(3) NTK model: ``params`` are the estimator's keyword arguments
    (:class:`~molntk.models.force_field.SO3ForceFieldRegressor` for ``so3_forces``,
    :class:`~molntk.models.so3_ntk.SO3NTKRegressor` for ``so3_energy``; their defaults where
    absent)."""

    params: dict[str, Any] = {}


class SGDMLModelConfig(MDModelSection):
    """The sGDML baseline (:class:`~molntk.models.sgdml_baseline.SGDMLForceField`): the σ
    grid searched on held-out training frames, the permutational symmetries, and the memory
    (GB) its package plans its solver for (null: the whole machine's; with less than its
    analytic solve needs it takes its iterative solver)."""

    sigmas: Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1)] = [2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 70.0]
    use_sym: bool = True
    validation_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    max_memory_gb: Annotated[int, Field(ge=1)] | None = None


class FCHL19ModelConfig(MDModelSection):
    """The FCHL19 baseline with force kernels (:class:`~molntk.models.fchl19_force_field.FCHL19ForceField`,
    needs qmllib): the kernel width grid and the regularisation grid (relative to
    mean(diag K)) searched on held-out training frames. Its kernel has (M(1 + 3n))² entries:
    1,000 frames of a 9-atom molecule take 6.3 GB and hours per σ."""

    sigmas: Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1)] = [
        0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    lambdas: Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1)] = [1e-10, 1e-8, 1e-6, 1e-4]
    validation_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2


class SparseFCHL19ModelConfig(MDModelSection):
    """The sparse FCHL19 baseline with force kernels
    (:class:`~molntk.models.fchl19_force_field.SparseFCHL19ForceField`, needs qmllib): ``inducing``
    training atoms by farthest-point sampling on their FCHL19 vectors, the solver and grouped-LOO
    noise search of the sparse SO(3) force field, σ from ``sigmas`` by the same criterion. Its
    rows cost ~m · N · n² per σ: it reaches the training sizes the exact FCHL19 cannot."""

    inducing: Count = 2000
    sigmas: Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1)] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]


class MDModelsConfig(Section):
    """The models side by side (null: left out): ``so3_forces`` the SO(3) NTK trained on
    energies and forces; ``so3_forces_exact`` the same with the exact joint kernel of every
    training frame's energy and forces (the GDML form, N(1 + 3n) functions; ``inducing`` not
    allowed; off unless given: its kernel has N²/2 molecule pairs); ``so3_forces_frames`` the
    same form on ``params.inducing_frames`` of the training frames, fitted to all of them (off
    unless given; N·m molecule pairs); ``so3_energy`` the SO(3)
    NTK trained on energies only (its forces are the gradient of its energy); ``sgdml`` the
    sGDML baseline; ``fchl19`` the FCHL19 baseline with force kernels (off unless given);
    ``fchl19_sparse`` the same on inducing atoms (off unless given)."""

    so3_forces: SO3ModelConfig | None = SO3ModelConfig()
    so3_forces_exact: SO3ModelConfig | None = None
    so3_forces_frames: SO3ModelConfig | None = None
    so3_energy: SO3ModelConfig | None = SO3ModelConfig()
    sgdml: SGDMLModelConfig | None = SGDMLModelConfig()
    fchl19: FCHL19ModelConfig | None = None
    fchl19_sparse: SparseFCHL19ModelConfig | None = None

    @model_validator(mode="after")
    def _some_model(self) -> MDModelsConfig:
        if all(getattr(self, key) is None for key in ("so3_forces", "so3_forces_exact", "so3_forces_frames", "so3_energy",
                                                      "sgdml", "fchl19", "fchl19_sparse")):
            raise FieldError("so3_forces", "every model is null: nothing to run")
        if self.so3_forces_exact is not None and self.so3_forces_exact.params.get("inducing") is not None:
            raise FieldError("so3_forces_exact.params.inducing", "the exact model has no inducing environments: leave it out "
                             "(so3_forces is the sparse model)")
        frames = self.so3_forces_frames
        if frames is not None and not frames.params.get("inducing_frames"):
            raise FieldError("so3_forces_frames.params.inducing_frames", "the number of inducing frames is needed "
                             "(e.g. 250)")
        return self


class MDComputeConfig(Section):
    """``threads``: torch CPU threads during the run (null: torch's default)."""

    threads: Count | None = None


class MDForceFieldConfig(TaskConfig):
    """``task: md-force-field``: force fields on the frames of one molecule, learning curves
    of energy and force errors, the SO(3) NTK beside sGDML; ``output``: default
    ``results/<name>/``; ``cache``: store each fit's record as it finishes, so that a killed
    run, rerun with the same command, fits only what it had not."""

    task: Literal["md-force-field"]
    data: MDDataConfig = MDDataConfig()
    split: MDSplitConfig = MDSplitConfig()
    models: MDModelsConfig = MDModelsConfig()
    compute: MDComputeConfig = MDComputeConfig()
    output: UserPath | None = None
    cache: bool = Field(default=True, description="keep each fit's record in <output>/fit_cache and the exact (or frames) force "
                        "field's kernel rows (and its noise choice) in <output>/kernel_cache, its predictions a batch at a time: "
                        "a killed run resumes")
