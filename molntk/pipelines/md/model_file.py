"""``molntk fit --data FILE --target KEY --forces``: a force-field model file from one labelled file.

:class:`~molntk.models.force_field.SO3ForceFieldRegressor` (its defaults; ``elements`` the
file's) fitted on the energies (target ``target``) and per-atom forces of every frame of
the file that could be read (:func:`~molntk.data.labelled.read_labelled` with
``forces=True``: extended xyz, ASE database, MD17/rMD17 ``.npz``), written to
``out/<target>.molntk.npz``. Energies in eV and forces in eV/Å (the readers' unit for
forces; MD17's kcal/mol are converted on reading). Without ``inducing`` the exact model (the
joint kernel of every frame's energy and forces, its noise levels by
``noise_search="local"``: the whole grid on the leading frames, then a local search; for up
to a few hundred frames of a small molecule on a CPU), with ``inducing`` = m the sparse
model on m inducing environments for thousands of frames, with ``inducing_frames`` = m the
exact model's form on m of the frames, fitted to all of them (the environment-sparse model
searches its whole noise grid, the frames model its noise ratio locally: one SVD of its m +
3Σn_j functions per visited ratio, docs/force-fields.md). The exact model's memory is checked before any kernel is
computed (:func:`~molntk.models.force_field.check_exact_memory`); with ``kernel_storage="upper"``
it holds only the upper triangle of its joint kernel (half the memory, the noise levels by
the grid on the leading frames: a thousand frames of a 20-atom molecule on a 24 GB machine).
Its joint kernel (with
``inducing_frames``, the frames' rows against the inducing ones) is stored row block by row
block in ``out/kernel_cache/`` as it is computed, so the same command after a kill (or a refit
of the same frames) resumes from it; deleting the folder frees its space, about
(N(1 + 3n))²/2 float64 values (N(1 + 3n) × m(1 + 3n) with inducing frames).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from molntk.data.labelled import read_labelled
from molntk.errors import InputError
from molntk.models.force_field import SO3ForceFieldRegressor
from molntk.models.model_files import MODEL_SUFFIX
from molntk.pipelines.files import output_dir, result_set
from molntk.pipelines.md.fits import KERNEL_FOLDER
from molntk.scale.devices import resolve_device
from molntk.scale.progress import Progress, labelled

#: The energy unit a force field is fitted in: the readers give forces in eV/Å.
FORCE_FIELD_UNIT = "eV"


def fit_force_field_file(path: str | Path, target: str, out: str | Path, *, inducing: int | None = None,
                         inducing_frames: int | None = None, kernel_storage: str = "full", baseline: str | None = None,
                         device: str = "auto", progress: Progress | None = None, **read: Any) -> dict[str, Any]:
    """Fit and write the force field of the labelled file ``path`` (module docstring); returns
    ``{"output", "model_files": {target: path}, "n_train", "read_failures", "sparse",
    "inducing_frames", "kernel_storage", "reg_energy", "reg_force"}``. ``out`` is checked writable before the file is read; an InputError names
    the file when no frame with an energy and forces could be read. ``progress``: the joint
    kernel's blocks, labelled ``"kernel"``, and the upper storage's factorisation, ``"factor"``
    (:meth:`SO3ForceFieldRegressor.fit`)."""
    folder = output_dir(Path(path).stem, out)
    data = read_labelled(path, target, forces=True, **read)
    if not data.molecules:
        raise InputError(str(path), f"no frame with a value of {target!r} and forces could be read ({len(data.failures)} failed)")
    model = SO3ForceFieldRegressor(elements=data.elements, inducing=inducing, inducing_frames=inducing_frames,
                                   kernel_storage=kernel_storage, baseline=baseline, unit=FORCE_FIELD_UNIT,
                                   device=str(resolve_device(device)), noise_search="grid" if inducing is not None else "local")
    model.fit(data.molecules, data.targets[target], data.forces, target=target, provenance=data.provenance(read),
              kernel_cache=folder / KERNEL_FOLDER if inducing is None else None, progress=labelled(progress, "kernel"),
              factor_progress=labelled(progress, "factor"))
    with result_set(folder) as stage:
        model.save(stage / f"{target}{MODEL_SUFFIX}")
    return {
        "output": str(folder),
        "model_files": {target: str(folder / f"{target}{MODEL_SUFFIX}")},
        "n_train": len(data.molecules),
        "read_failures": [failure.message for failure in data.failures],
        "sparse": model.sparse_,
        "inducing_frames": None if model.inducing_frame_rows_ is None else len(model.inducing_frame_rows_),
        "kernel_storage": model.kernel_storage,
        "reg_energy": model.reg_energy_,
        "reg_force": model.reg_force_,
    }
