"""The SO(3) model files of a ``qm9-property`` configuration (``molntk run`` and ``molntk fit``).

A model file is :meth:`~molntk.models.SO3NTKRegressor.save`'s archive of the estimator
built from the config (:func:`so3_estimator`: the candidate's network under the config's
``features``, ``kernel`` and ``regression`` sections, the target's reduction and
dressed-atom residual; with ``models.so3_ntk_sum``, :func:`so3_sum_estimator`: the sum of its
networks, :class:`~molntk.models.SO3NTKSumRegressor`), fitted on the training molecules of the largest ``n_train`` and
carrying the target's name and unit and the training set's provenance
(:func:`provenance`). ``molntk run`` fits it on the kernel blocks the run computed already
(:meth:`~molntk.models.SO3NTKRegressor.fit_kernels`), ``molntk fit`` computes them
(:mod:`molntk.pipelines.qm9.fit`). Files: ``<folder>/<target>.molntk.npz``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from molntk.data.molecule import Molecule
from molntk.models import SO3NTKRegressor, SO3NTKSumRegressor
from molntk.models.model_files import MODEL_SUFFIX
from molntk.models.so3_ntk_sum import TERM_PARAMS
from molntk.pipelines.qm9.candidates import so3_recipe
from molntk.pipelines.qm9.config import QM9PropertyConfig, SO3Candidate, SO3SumModelConfig


def so3_estimator(config: QM9PropertyConfig, candidate: SO3Candidate, reduce: str, residual: bool,
                  elements: Sequence[int] | None = None) -> SO3NTKRegressor:
    """The unfitted estimator of ``candidate`` under the config (λ by the config's CV and
    ``cv_loss``, as the run's own fits choose it) for
    the data's element set ``elements`` (None: QM9's). Its
    ``device`` is ``auto``: a model file predicts on the GPU of the machine that loads it,
    if it has one (not necessarily the run's device)."""
    return SO3NTKRegressor.from_recipe(so3_recipe(config, candidate, reduce, elements), residual=residual,
                                       cv=config.regression.cv, cv_loss=config.regression.cv_loss, device="auto")


def so3_sum_estimator(config: QM9PropertyConfig, section: SO3SumModelConfig, reduce: str, residual: bool,
                      elements: Sequence[int] | None = None,
                      weights: Sequence[float] | Sequence[Sequence[float]] | None = None) -> SO3NTKSumRegressor:
    """The unfitted sum of the section's networks: the first term's :func:`so3_estimator`
    parameters, each further term's network, feature maps and grid (:data:`TERM_PARAMS`) as
    its ``terms``; ``weights``: the section's grid or points (``searched``), or the points given (a run's choice)."""
    first, *rest = (so3_estimator(config, term, reduce, residual, elements) for term in section.terms)
    terms = [{k: v for k, v in est.get_params().items() if k in TERM_PARAMS} for est in rest]
    return SO3NTKSumRegressor(**first.get_params(), terms=terms, weights=section.searched if weights is None else weights)


def config_sha256(config: QM9PropertyConfig) -> str:
    """SHA-256 of the resolved configuration (its JSON with sorted keys)."""
    return hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode("utf-8")).hexdigest()


def split_seed(config: QM9PropertyConfig) -> int | None:
    """The seed of the data's split: QM9's permutation, a file's random split (None: a given split)."""
    data = config.data
    return getattr(data, "seed", getattr(getattr(data, "split", None), "seed", None))


def provenance(config: QM9PropertyConfig, source: str, network: dict[str, Any]) -> dict[str, Any]:
    """Where a model's training set comes from: the config (name, file, SHA-256), its
    ``data`` section (source, file or QM9 split) and split seed, and the model's networks
    (``network``: the candidate's or the sum section's JSON, as ``candidate``)."""
    return {
        "config": config.name,
        "config_file": source,
        "config_sha256": config_sha256(config),
        "data": config.data.model_dump(mode="json"),
        "split_seed": split_seed(config),
        "candidate": network,
    }


def write_models(folder: Path, models: Mapping[str, SO3NTKRegressor]) -> dict[str, str]:
    """Save each target's model as ``folder/<target>.molntk.npz``; target → path written."""
    return {target: str(model.save(folder / f"{target}{MODEL_SUFFIX}")) for target, model in models.items()}


def model_from_kernels(config: QM9PropertyConfig, source: str, model: SO3NTKRegressor, network: dict[str, Any],
                       target: str, unit: str, train: list[Molecule], y: np.ndarray,
                       ntk: np.ndarray | Sequence[np.ndarray]) -> SO3NTKRegressor:
    """The run's SO(3) model of ``target``: ``model`` (:func:`so3_estimator` or
    :func:`so3_sum_estimator`) fitted on the training kernels computed already (Θ = ``ntk``
    of the molecules ``train``, or the list of a sum's networks' kernels; their leading
    rows), targets ``y``; ``network``: its JSON description for the provenance."""
    n = len(train)
    kernels = ntk[:n, :n] if isinstance(ntk, np.ndarray) else [k[:n, :n] for k in ntk]
    return model.fit_kernels(train, y, kernels, target=target, unit=unit, provenance=provenance(config, source, network))
