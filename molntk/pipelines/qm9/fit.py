"""``molntk fit CONFIG``: the SO(3) model files of a ``qm9-property`` configuration, without
its learning curve.

For each target, the model ``molntk run`` saves (:mod:`molntk.pipelines.qm9.models`): the
SO(3) candidate chosen on the first ``n_select`` training molecules by cross-validation as
in the run (the only one when the config lists one), fitted on the training molecules of
the largest ``n_train`` (from the run's set loader, :func:`~molntk.pipelines.qm9.sets.load_sets`),
its NTK computed by the block engine as configured (``compute``: GPUs, Dask). A config with
``models.so3_ntk_sum`` gives the sum of its networks instead
(:class:`~molntk.models.SO3NTKSumRegressor`: every term's kernel, the weights and λ chosen
by the config's CV on those training molecules).
Targets that share a reduction share the kernels. The files ``<target>.molntk.npz`` go to
``out`` (default: ``<output>/models/``, beside a run's report), checked writable before
any work and moved into place together at the end.

:func:`fit_labelled_file` is the short form without a config (``molntk fit --data FILE
--target KEY``): the estimator's defaults (the main QM9 job's model) with the file's
element set, fitted on every molecule of the file that could be read (no test split).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from molntk.config import ConfigProblem, ConfigValidationError
from molntk.data.labelled import read_labelled
from molntk.errors import InputError
from molntk.models import SO3NTKRegressor
from molntk.molecular import MoleculeSet
from molntk.pipelines.files import output_dir, result_set
from molntk.pipelines.qm9.assembly import BlockAssembler, block_kernel
from molntk.pipelines.qm9.candidates import dtype_and_device, so3_candidate, so3_candidates
from molntk.pipelines.qm9.config import QM9PropertyConfig, SO3Candidate
from molntk.pipelines.qm9.evaluate import residual_targets
from molntk.pipelines.qm9.exact import select_candidate
from molntk.pipelines.qm9.models import model_from_kernels, so3_estimator, so3_sum_estimator, write_models
from molntk.pipelines.qm9.run import target_settings, targets_by_reduce
from molntk.pipelines.qm9.sets import QM9Sets, load_sets
from molntk.scale import open_executor, torch_threads
from molntk.scale.progress import Progress, labelled


def models_folder(config: QM9PropertyConfig, out: str | Path | None) -> Path:
    """Where ``fit`` writes: ``out``, else ``models/`` in the config's output folder (created, checked writable)."""
    if out is not None:
        return output_dir(config.name, out)
    return output_dir(config.name, output_dir(config.name, config.output) / "models")


def fit_so3_models(config: QM9PropertyConfig, source: str, out: str | Path | None = None,
                   progress: Progress | None = None) -> dict[str, Any]:
    """Fit and write the config's SO(3) model of each target (module docstring); returns
    ``{"output", "model_files": {target: path}, "n_train", "read_failures" (molecules of a
    data file that could not be read), "candidates": {reduction: label}, "device", "dtype"}``.
    ConfigValidationError naming ``models.so3_ntk`` when it and ``models.so3_ntk_sum`` are null."""
    if config.models.so3_ntk is None and config.models.so3_ntk_sum is None:
        raise ConfigValidationError([ConfigProblem(source, "models.so3_ntk",
                                                   "is null (and so is models.so3_ntk_sum): there is no SO(3) model to fit")])
    folder = models_folder(config, out)
    dtype, device = dtype_and_device(config)
    compute = config.compute
    models, chosen_labels = {}, {}
    with torch_threads(config.kernel.threads):
        sets = load_sets(config, source, dtype, device)
        n, n_select = sets.n_train, config.learning_curve.n_select
        train = MoleculeSet(sets.train_molecules, dtype, device)
        with open_executor(compute.executor, device=device, workers=compute.workers, scheduler=compute.scheduler) as executor:
            assembler = BlockAssembler(executor, None, compute.block_molecules, compute.memory_budget_mb, None)
            for reduce, targets in targets_by_reduce(config).items():
                residual = {t: target_settings(config, t)[1] for t in targets}
                if config.models.so3_ntk_sum is not None:
                    chosen_labels[reduce], sums = _fit_sums(config, source, sets, train, assembler, progress, reduce, targets, residual)
                    models |= sums
                    continue
                candidates = so3_candidates(config, reduce, sets.composition.elements)
                y_select = np.stack([residual_targets(sets, t, residual[t], n_select) for t in targets], axis=1)
                selection = MoleculeSet(sets.train_molecules[:n_select], dtype, device)
                best, _ = select_candidate(candidates, selection, y_select, config, assembler)
                chosen = candidates[best]
                chosen_labels[reduce] = chosen.label
                assembly = assembler.assemble(block_kernel(chosen, train), np.arange(n),
                                              progress=labelled(progress, f"so3-ntk-{reduce}"))
                ntk = assembly.matrices[f"{chosen.matrix}_train"]
                candidate = SO3Candidate(**chosen.params)
                for target in targets:
                    estimator = so3_estimator(config, candidate, reduce, residual[target], sets.composition.elements)
                    models[target] = model_from_kernels(config, source, estimator, candidate.model_dump(mode="json"), target,
                                                        sets.units[target], sets.train_molecules, sets.train_targets[target], ntk)
    with result_set(folder) as stage:
        files = write_models(stage, models)
    return {
        "output": str(folder),
        "model_files": {target: str(folder / Path(path).name) for target, path in files.items()},
        "n_train": n,
        "read_failures": sets.read_failures,
        "candidates": chosen_labels,
        "device": device,
        "dtype": str(dtype).removeprefix("torch."),
    }


def _fit_sums(config: QM9PropertyConfig, source: str, sets: QM9Sets, train: MoleculeSet, assembler: BlockAssembler,
              progress: Progress | None, reduce: str, targets: list[str],
              residual: dict[str, bool]) -> tuple[str, dict[str, SO3NTKRegressor]]:
    """The sum of ``models.so3_ntk_sum``'s networks for each of ``targets``: each term's
    training kernel by the block engine, the weights and λ by the config's CV; returns the
    sum's label and target → fitted model."""
    section = config.models.so3_ntk_sum
    terms = [so3_candidate(config, term, reduce, sets.composition.elements) for term in section.terms]
    ntks = [assembler.assemble(block_kernel(term, train), np.arange(sets.n_train),
                               progress=labelled(progress, f"so3-ntk-sum-term{i + 1}-{reduce}")).matrices[f"{term.matrix}_train"]
            for i, term in enumerate(terms)]
    models = {}
    for target in targets:
        estimator = so3_sum_estimator(config, section, reduce, residual[target], sets.composition.elements)
        models[target] = model_from_kernels(config, source, estimator, section.model_dump(mode="json"), target,
                                            sets.units[target], sets.train_molecules, sets.train_targets[target], ntks)
    return " + ".join(f"[{term.label}]" for term in terms), models


def fit_labelled_file(path: str | Path, target: str, out: str | Path, *, unit: str = "unknown",
                      inducing: int | None = None, baseline: str | None = None, device: str = "auto",
                      verbose: bool = False, **read: Any) -> dict[str, Any]:
    """Fit :class:`~molntk.models.SO3NTKRegressor` (its defaults; ``elements`` the file's,
    ``inducing`` m for the sparse model, ``baseline`` the physical baseline of Δ-learning) on target ``target`` of every readable molecule of
    the labelled file ``path`` (:func:`~molntk.data.labelled.read_labelled`, ``read``: its
    column and SDF options) and write ``out/<target>.molntk.npz``. ``out`` is checked
    writable before the file is read. Returns ``{"output", "model_files": {target: path},
    "n_train", "read_failures"}``; an InputError when no molecule could be read."""
    folder = output_dir(Path(path).stem, out)
    data = read_labelled(path, target, **read)
    if not data.molecules:
        raise InputError(str(path), f"no molecule with a value of {target!r} could be read ({len(data.failures)} failed)")
    model = SO3NTKRegressor(elements=data.elements, inducing=inducing, baseline=baseline, device=device, verbose=verbose)
    model.fit(data.molecules, data.targets[target], target=target, unit=unit,
              provenance=data.provenance(read))
    with result_set(folder) as stage:
        files = write_models(stage, {target: model})
    return {
        "output": str(folder),
        "model_files": {name: str(folder / Path(file).name) for name, file in files.items()},
        "n_train": len(data.molecules),
        "read_failures": [failure.message for failure in data.failures],
    }
