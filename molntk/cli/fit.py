"""``molntk fit``: SO(3) NTK model files, from a ``qm9-property`` config or from one labelled file.

* ``molntk fit CONFIG``: the model of each target of the config
  (:func:`molntk.pipelines.qm9.fit_so3_models`: its candidate selection, data and compute
  settings).
* ``molntk fit --data FILE --target KEY [--unit U] [--baseline gfn2-xtb]``: the estimator's
  defaults (8 Gaussians to 3 Å: the main job's width-growth maps fit equilibrium geometries
  only) with the file's elements, on every molecule of FILE that could be read
  (:func:`molntk.pipelines.qm9.fit_labelled_file`); ``--baseline``: Δ-learning
  on GFN2-xTB (:mod:`molntk.models.delta`; the target must be an energy in ``--unit``).
* ``molntk fit --data FILE --target KEY --forces [--inducing m | --inducing-frames m | --kernel-storage upper]``: a force field trained on
  the energies KEY (eV) and the per-atom forces (eV/Å) of every frame of FILE (extended xyz,
  ASE database, MD17/rMD17 ``.npz``;
  :func:`molntk.pipelines.md.model_file.fit_force_field_file`), for ``molntk predict`` and
  the ASE calculator.

Progress goes to stderr, the files written to stdout (a table, or one JSON document with
``--json``). Exit status 1 when molecules of the data file could not be read (each is
named; the model is fitted on the rest).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from molntk.cli.config_cmd import SetOption
from molntk.cli.output import EXIT_FAILED, print_json, print_results_table, stderr, stdout
from molntk.cli.progress import job_progress
from molntk.config import ConfigProblem, ConfigValidationError
from molntk.models.delta import BASELINES
from molntk.pipelines.md.model_file import FORCE_FIELD_UNIT, fit_force_field_file
from molntk.pipelines.qm9 import QM9PropertyConfig, fit_labelled_file, fit_so3_models
from molntk.pipelines.tasks import TASKS


def fit(
    config: Annotated[str | None, typer.Argument(metavar="[CONFIG]", help="A 'qm9-property' YAML configuration file.",
                                                 show_default=False)] = None,
    data: Annotated[Path | None, typer.Option("--data", help="A labelled file (extxyz/xyz, SDF, CSV, ASE .db, MD17/rMD17 .npz) instead of CONFIG.",
                                              show_default=False)] = None,
    target: Annotated[str | None, typer.Option("--target", help="With --data: the value key to learn.", show_default=False)] = None,
    unit: Annotated[str, typer.Option("--unit", help="With --data: the target's unit.")] = "unknown",
    smiles_column: Annotated[str | None, typer.Option("--smiles-column", help="With a CSV table: its SMILES column.",
                                                      show_default=False)] = None,
    inducing: Annotated[int | None, typer.Option("--inducing", min=1, help="With --data: m inducing environments "
                                                 "(the sparse model, for large files).", show_default=False)] = None,
    inducing_frames: Annotated[int | None, typer.Option("--inducing-frames", min=1, help="With --data and --forces: the "
                                                        "exact model's form on m of the frames, fitted to all of them "
                                                        "(for thousands of frames).", show_default=False)] = None,
    kernel_storage: Annotated[str, typer.Option("--kernel-storage", help="With --data and --forces, the exact model: 'full' "
                                                "(its joint kernel as a square) or 'upper' (its upper triangle only: half "
                                                "the memory, the noise levels chosen on the leading frames).")] = "full",
    baseline: Annotated[str | None, typer.Option("--baseline", help="With --data: learn the residual of this physical "
                                                 f"baseline ({', '.join(BASELINES)}); the target must be an energy in --unit.",
                                                 show_default=False)] = None,
    forces: Annotated[bool, typer.Option("--forces", help="With --data: a force field, trained on the energies KEY "
                                         f"({FORCE_FIELD_UNIT}) and the file's per-atom forces ({FORCE_FIELD_UNIT}/Å).")] = False,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Folder for the model files (default: models/ in the config's output folder; "
                     "with --data: models/).", show_default=False),
    ] = None,
    overrides: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table.")] = False,
) -> None:
    """Fit SO(3) NTK models and write <target>.molntk.npz files: from CONFIG, or from --data FILE --target KEY."""
    if (config is None) == (data is None):
        raise typer.BadParameter("give CONFIG or --data FILE (with --target KEY), not both or neither", param_hint="CONFIG")
    if data is not None:
        if target is None:
            raise typer.BadParameter("--data needs --target KEY, the value to learn", param_hint="--target")
        if overrides:
            raise typer.BadParameter("--set applies to CONFIG, not to --data", param_hint="--set")
        if baseline is not None and baseline not in BASELINES:
            raise typer.BadParameter(f"unknown baseline {baseline!r}; choose one of {', '.join(BASELINES)}", param_hint="--baseline")
        read = {"smiles_column": smiles_column} if smiles_column is not None else {}
        if inducing_frames is not None and not forces:
            raise typer.BadParameter("--inducing-frames applies to a force field (--forces)", param_hint="--inducing-frames")
        if kernel_storage not in ("full", "upper"):
            raise typer.BadParameter(f"must be 'full' or 'upper', got {kernel_storage!r}", param_hint="--kernel-storage")
        if kernel_storage == "upper" and (not forces or inducing is not None or inducing_frames is not None):
            raise typer.BadParameter("--kernel-storage upper applies to the exact force field (--forces without "
                                     "--inducing or --inducing-frames)", param_hint="--kernel-storage")
        if forces:
            if unit not in ("unknown", FORCE_FIELD_UNIT):
                raise typer.BadParameter(f"a force field is fitted in {FORCE_FIELD_UNIT} and {FORCE_FIELD_UNIT}/Å "
                                         f"(the readers' force unit), not {unit!r}", param_hint="--unit")
            with job_progress() as progress:
                result = fit_force_field_file(data, target, Path("models") if out is None else out, inducing=inducing,
                                              inducing_frames=inducing_frames, kernel_storage=kernel_storage,
                                              baseline=baseline, progress=progress, **read)
            kind = ("sparse" if result["sparse"] else f"on {result['inducing_frames']} inducing frames"
                    if result["inducing_frames"] is not None else
                    "exact, upper triangle" if result["kernel_storage"] == "upper" else "exact")
            _show(result, f"{data}: SO(3) NTK force field ({kind}) on {result['n_train']} frames", as_json,
                  {"data": str(data), "target": target, "unit": FORCE_FIELD_UNIT, "forces": True})
            return
        with _progress_log():
            result = fit_labelled_file(data, target, Path("models") if out is None else out, unit=unit, inducing=inducing,
                                       baseline=baseline, verbose=True, **read)
        title = f"{data}: SO(3) NTK model on {result['n_train']} molecules"
        _show(result, title, as_json, {"data": str(data), "target": target, "unit": unit})
        return
    for option, value in (("--target", target), ("--smiles-column", smiles_column), ("--inducing", inducing),
                          ("--inducing-frames", inducing_frames),
                          ("--kernel-storage", None if kernel_storage == "full" else kernel_storage),
                          ("--baseline", baseline), ("--forces", forces or None)):
        if value is not None:
            raise typer.BadParameter(f"{option} applies to --data, not to CONFIG", param_hint=option)
    resolved = TASKS.load(config, list(overrides or ()))
    if not isinstance(resolved, QM9PropertyConfig):
        problem = f"is {resolved.task!r}; molntk fit needs a 'qm9-property' configuration"
        raise ConfigValidationError([ConfigProblem(config, "task", problem)])
    with job_progress() as progress:
        result = fit_so3_models(resolved, config, out, progress)
    _show(result, f"{resolved.name}: SO(3) NTK models on {result['n_train']} training molecules", as_json,
          {"config": resolved.to_dict()})
    for reduce, label in result.get("candidates", {}).items():
        if not as_json:
            stdout().print(f"network ({reduce} over atom pairs): {label}")


def _show(result: dict[str, Any], title: str, as_json: bool, inputs: dict[str, Any]) -> None:
    """The files written (table or JSON) and the data items not used; exit 1 when there are any."""
    failures = result.get("read_failures", [])
    if as_json:
        print_json({**inputs, "result": result})
    else:
        rows = [{"target": name, "file": path} for name, path in result["model_files"].items()]
        print_results_table(rows, [("target", "target", "s"), ("file", "model file", "s")], title=title)
        for message in failures:
            stderr().print(f"not used: {message}", markup=False, highlight=False)
    if failures:
        raise typer.Exit(EXIT_FAILED)


@contextmanager
def _progress_log() -> Iterator[None]:
    """Show the estimator's progress log records (``verbose``) on stderr while fitting."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("molntk.models.so3_ntk")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
