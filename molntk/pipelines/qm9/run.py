"""The run of ``task: qm9-property`` (:mod:`molntk.pipelines.qm9`, steps 1–5): returns its
results as data; :mod:`molntk.pipelines.qm9.files` writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from molntk.models import SO3NTKRegressor
from molntk.molecular import MoleculeSet
from molntk.pipelines.qm9.assembly import BlockAssembler, block_kernel
from molntk.pipelines.qm9.candidates import CONFIG_KEYS, build_candidates, dtype_and_device, so3_candidate
from molntk.pipelines.qm9.config import FileDataConfig, QM9PropertyConfig, SO3Candidate
from molntk.pipelines.qm9.evaluate import dressed_atom_records, paired_comparisons, residual_targets
from molntk.pipelines.qm9.exact import exact_records, select_candidate, shell_kernels, sum_label, sum_records
from molntk.pipelines.qm9.models import model_from_kernels, so3_estimator, so3_sum_estimator
from molntk.pipelines.qm9.sets import QM9Sets, load_sets
from molntk.pipelines.qm9.sparse import (SUFFIX, ChosenSets, sparse_kernels, sparse_records, sparse_sum_kernels,
                                         sum_inducing_set, sum_scales)
from molntk.scale import open_executor, torch_threads
from molntk.scale.progress import Progress

#: Targets whose kernels average over atom pairs when ``reduce: auto`` (intensive).
INTENSIVE_TARGETS = frozenset({"homo", "lumo", "gap"})
#: Targets learned as residuals of the dressed-atom model when ``residual: auto`` (extensive energies).
DRESSED_ATOM_TARGETS = frozenset({"u0", "u", "h", "g", "u0_atom", "u_atom", "h_atom", "g_atom", "zpve"})


def target_settings(config: QM9PropertyConfig, target: str) -> tuple[str, bool]:
    """(reduce, dressed-atom residual) for ``target`` under the config's ``auto`` rules: by
    name for QM9 targets; sum and the dressed-atom residual for a file's targets (their
    nature is unknown, and the dressed-atom model is fitted on training data only)."""
    reg = config.regression
    qm9 = not isinstance(config.data, FileDataConfig)
    reduce = reg.reduce if reg.reduce != "auto" else ("mean" if qm9 and target in INTENSIVE_TARGETS else "sum")
    residual = reg.residual == "dressed-atom" or (reg.residual == "auto" and (not qm9 or target in DRESSED_ATOM_TARGETS))
    return reduce, residual


def targets_by_reduce(config: QM9PropertyConfig) -> dict[str, list[str]]:
    """The config's targets grouped by their reduction (targets that share one share the kernels)."""
    by_reduce: dict[str, list[str]] = {}
    for target in config.targets:
        by_reduce.setdefault(target_settings(config, target)[0], []).append(target)
    return by_reduce


def run_qm9_property(
    config: QM9PropertyConfig,
    source: str,
    progress: Progress | None = None,
    cache_dir: Path | None = None,
    matrices_dir: Path | None = None,
) -> dict[str, Any]:
    """Run the pipeline; returns ``{"records", "comparisons"`` (:func:`~molntk.pipelines.qm9.evaluate.paired_comparisons`),
    ``"search", "predictions", "kernel_seconds",
    "kernel_blocks", "sizes", …, "models"}`` (``kernel_blocks``: {computed, from_cache}
    counts of the kernel blocks; ``models``: target → its fitted SO(3) model,
    :func:`saves_so3_model`). Kernel blocks are cached under ``cache_dir`` when given; with
    ``compute.storage: disk`` the chosen kernels are ``.npy`` memory maps under ``matrices_dir``."""
    compute = config.compute
    if compute.storage == "disk" and matrices_dir is None:
        raise ValueError("compute.storage 'disk' needs a folder for the kernel matrices (matrices_dir)")
    dtype, device = dtype_and_device(config)
    with torch_threads(config.kernel.threads):
        threads = torch.get_num_threads()
        sets = load_sets(config, source, dtype, device)
        with open_executor(compute.executor, device=device, workers=compute.workers, scheduler=compute.scheduler) as executor:
            assembler = BlockAssembler(executor, cache_dir, compute.block_molecules, compute.memory_budget_mb,
                            matrices_dir if compute.storage == "disk" else None)
            records, search, predictions, kernel_seconds, models = _run_models(config, source, sets, assembler, progress)
    comparisons = paired_comparisons(records)
    return {
        "records": records,
        "comparisons": comparisons,
        "search": search,
        "predictions": predictions,
        "kernel_seconds": kernel_seconds,
        "kernel_blocks": {"computed": assembler.tally.computed, "from_cache": assembler.tally.from_cache},
        "sizes": sets.sizes,
        "n_test": sets.n_test,
        "n_invariance_molecules": sets.n_rotated // sets.n_rotations,
        "device": device,
        "executor": type(executor).__name__,
        "dtype": str(dtype).removeprefix("torch."),
        "threads": threads,
        "test_targets": {t: sets.test_targets[t].tolist() for t in config.targets},
        "units": sets.units,
        "elements": list(sets.composition.elements),
        "read_failures": sets.read_failures,
        "models": models,
    }


def saves_so3_model(config: QM9PropertyConfig, exact_sizes: list[int]) -> bool:
    """Whether the run saves its chosen SO(3) model of each target: fitted at the largest
    exact training size, which must be one λ is chosen at by CV (≤ ``regression.eigh_max``)."""
    return bool(exact_sizes) and exact_sizes[-1] <= config.regression.eigh_max


def _run_models(config: QM9PropertyConfig, source: str, sets: QM9Sets, assembler: BlockAssembler,
                progress: Progress | None) -> tuple[list, list, dict, list, dict[str, SO3NTKRegressor]]:
    """Dressed atoms, then every model: candidates chosen on the selection set, the chosen
    kernel on the learning curve; targets that share a reduction share the kernels. The
    chosen SO(3) model of each target is refitted on the kernel of the largest exact
    size (with its NNGP, computed in the same blocks) to be saved (:func:`saves_so3_model`);
    the sum of SO(3) NTKs (``models.so3_ntk_sum``) comes last, on the exact sizes, and when
    the config has one, its model is the saved one instead; its sparse model after it."""
    records: list[dict[str, Any]] = []
    search: list[dict[str, Any]] = []
    predictions: dict[str, dict[str, list[float]]] = {}
    kernel_seconds: list[dict[str, Any]] = []
    models: dict[str, SO3NTKRegressor] = {}
    inducing: ChosenSets = {}
    by_reduce = targets_by_reduce(config)
    residual = {t: target_settings(config, t)[1] for t in config.targets}
    dressed_atom_records(sets, config.targets, records, predictions)
    exact_up_to = None if config.sparse is None else config.sparse.exact_up_to
    exact_sizes = [n for n in sets.sizes if exact_up_to is None or n <= exact_up_to]
    n_select = config.learning_curve.n_select
    selection = MoleculeSet(sets.train_molecules[:n_select], sets.molecules.dtype, sets.molecules.device)
    for reduce, targets in by_reduce.items():
        y_sel = np.stack([residual_targets(sets, t, residual[t], n_select) for t in targets], axis=1)
        for name, candidates in build_candidates(config, reduce, sets.train_molecules[:n_select], sets.composition).items():
            best, rows = select_candidate(candidates, selection, y_sel, config, assembler)
            selection.release()  # every candidate's feature maps or descriptors (GBs for a wide baseline grid)
            search += [{"model": name, "targets": targets, "reduce": reduce, **row} for row in rows]
            chosen = candidates[best]
            if exact_sizes:
                # a config with a sum saves the sum instead (_sum_records): no refit of this network for a file
                saved = name == "so3-ntk" and config.models.so3_ntk_sum is None and saves_so3_model(config, exact_sizes)
                kernel = block_kernel(chosen, sets.molecules)
                shells = shell_kernels(kernel, sets, assembler, progress, f"{name}-{reduce}", exact_sizes)
                kernel_seconds.append({"model": name, "reduce": reduce, "train": float(shells.train_seconds[-1]),
                                       "test": float(shells.test_seconds[-1]), "storage": shells.storage})
                for target in targets:
                    records += exact_records(config, sets, shells, name, chosen, target, residual[target], exact_sizes,
                                             predictions)
                    if saved:
                        n, candidate = exact_sizes[-1], SO3Candidate(**chosen.params)
                        estimator = so3_estimator(config, candidate, reduce, residual[target], sets.composition.elements)
                        models[target] = model_from_kernels(
                            config, source, estimator, candidate.model_dump(mode="json"), target, sets.units[target],
                            sets.train_molecules[:n], sets.train_targets[target][:n], shells.train)
                shells.release()
                del kernel  # its descriptors (GBs at large N; a baseline's own stay in sets.molecules for its sparse model)
            if config.sparse is not None and CONFIG_KEYS[name] in config.sparse.models:
                label = f"{name}{SUFFIX}-{reduce}"
                sparse = sparse_kernels(chosen, sets, config.sparse, inducing, assembler, progress, label)
                kernel_seconds.append(sparse.seconds_entry(name + SUFFIX, reduce, sets))
                for target in targets:
                    records += sparse_records(config, sets, sparse, name, chosen.label, chosen.quadrature, target,
                                              residual[target], predictions)
                sparse.release()
            sets.molecules.release()  # feature maps and descriptors: computed again by a model that needs them
        sum_records_: list[dict[str, Any]] = []
        if config.models.so3_ntk_sum is not None and exact_sizes:
            sum_records_, sum_models = _sum_records(config, source, sets, assembler, progress, reduce, targets, residual,
                                                    exact_sizes, predictions, kernel_seconds)
            records += sum_records_
            models |= sum_models
        if config.sparse is not None and "so3_ntk_sum" in config.sparse.models:
            records += _sparse_sum_records(config, sets, assembler, progress, reduce, targets, residual, sum_records_,
                                           predictions, kernel_seconds, inducing)
    return records, search, predictions, kernel_seconds, models


def _sum_records(config: QM9PropertyConfig, source: str, sets: QM9Sets, assembler: BlockAssembler,
                 progress: Progress | None, reduce: str, targets: list[str], residual: dict[str, bool], sizes: list[int],
                 predictions: dict, kernel_seconds: list) -> tuple[list[dict[str, Any]], dict[str, SO3NTKRegressor]]:
    """The sum of SO(3) NTKs (``models.so3_ntk_sum``): each term's kernel from the block
    assembler (its blocks shared with an ``so3_ntk`` candidate of the same network), then
    the weighted sum's records of each target (:func:`~molntk.pipelines.qm9.exact.sum_records`)
    and, when the run saves models (:func:`saves_so3_model`), each target's sum model
    (:class:`~molntk.models.SO3NTKSumRegressor`) with the weights its record chose at the
    largest size: the saved SO(3) model of a config with a sum."""
    section = config.models.so3_ntk_sum
    terms = [so3_candidate(config, term, reduce, sets.composition.elements) for term in section.terms]
    shells = []
    for i, term in enumerate(terms):
        shells.append(shell_kernels(block_kernel(term, sets.molecules), sets, assembler, progress,
                                    f"so3-ntk-sum-term{i + 1}-{reduce}", sizes))
        sets.molecules.release()
    kernel_seconds.append({"model": "so3-ntk-sum", "reduce": reduce, "train": sum(float(s.train_seconds[-1]) for s in shells),
                           "test": sum(float(s.test_seconds[-1]) for s in shells), "storage": shells[0].storage})
    records, models = [], {}
    for target in targets:
        records += sum_records(config, sets, shells, "so3-ntk-sum", terms, section.searched, target, residual[target],
                               sizes, predictions)
        if saves_so3_model(config, sizes):
            n, chosen = sizes[-1], records[-1]["term_weights"][1:]
            estimator = so3_sum_estimator(config, section, reduce, residual[target], sets.composition.elements, weights=[chosen])
            models[target] = model_from_kernels(
                config, source, estimator, section.model_dump(mode="json") | {"chosen_weights": chosen}, target,
                sets.units[target], sets.train_molecules[:n], sets.train_targets[target][:n], [s.train for s in shells])
    for s in shells:
        s.release()
    return records, models


def _sparse_sum_records(config: QM9PropertyConfig, sets: QM9Sets, assembler: BlockAssembler, progress: Progress | None,
                        reduce: str, targets: list[str], residual: dict[str, bool], exact: list[dict[str, Any]],
                        predictions: dict, kernel_seconds: list, chosen_sets: ChosenSets) -> list[dict[str, Any]]:
    """The sparse sum of SO(3) NTKs (``so3_ntk_sum`` in ``sparse.models``) of each target on
    Θ = Σ_i (c_i / τ_i) Θ_i: the weights c_i and scales τ_i of the exact sum's record at its
    largest size ≤ ``regression.eigh_max`` (``exact``, its records), else the section's one
    point and :func:`~molntk.pipelines.qm9.sparse.sum_scales`; one inducing set for every
    target, and targets with the same weights share one kernel
    (:func:`~molntk.pipelines.qm9.sparse.sparse_sum_kernels`)."""
    section = config.models.so3_ntk_sum
    terms = [so3_candidate(config, term, reduce, sets.composition.elements) for term in section.terms]
    chosen: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {}
    fallback = None
    for target in targets:
        fitted = [r for r in exact if r["target"] == target and r["n_train"] <= config.regression.eigh_max]
        if fitted:
            chosen[target] = (tuple(fitted[-1]["term_weights"]), tuple(fitted[-1]["term_scales"]))
        else:
            fallback = fallback or (section.first_point, tuple(sum_scales(terms, sets)))
            chosen[target] = fallback
    name, records, quadrature = "so3-ntk-sum", [], any(term.quadrature for term in terms)
    inducing = sum_inducing_set(terms, sets, config.sparse, chosen_sets)
    for weights, scales in dict.fromkeys(chosen.values()):
        coefficients = [c / tau for c, tau in zip(weights, scales)]
        kernels = sparse_sum_kernels(terms, coefficients, inducing, sets, config.sparse, assembler, progress,
                                     f"{name}{SUFFIX}-{reduce}")
        kernel_seconds.append(kernels.seconds_entry(name + SUFFIX, reduce, sets))
        for target in (t for t in targets if chosen[t] == (weights, scales)):
            records += sparse_records(config, sets, kernels, name, sum_label(weights, terms), quadrature, target,
                                      residual[target], predictions, term_weights=list(weights), term_scales=list(scales),
                                      inducing_maps=config.sparse.sum_maps)
        kernels.release()
    return records
