"""``task: image-classification``: C_n GCNN NTK against non-equivariant and augmented baselines.

All models see identical data (:mod:`molntk.pipelines.image_data`): the same nested
training sets of each size in ``n_train`` and the same test set. Per model:

1. kernels, once, at the largest training set: the NTK Θ(X, X) and Θ(X_eval, X), where
   X_eval is the test set followed by ρ(g) x for g = 1..n−1 of its first ``n_orbit``
   images (ρ(g): rotation by 2πg/n, :func:`~molntk.kernels.cn.rotate_images`; exact
   ``rot90`` for quarter turns, bilinear with zero fill otherwise), in blocks of
   ``compute.block`` images with a progress bar;
2. per training size m: one-hot NTK regression on the first m training images, λ by
   cross-validation on them only (:mod:`molntk.pipelines.classification`), predicted
   labels of X_eval.

Records (one per model × n_train): ``model``, ``n_train``, ``n_test``, ``accuracy`` and
``error_rate`` on the test set, ``orbit_same_predictions`` (mean count out of
``n_rotations``), ``n_orbit``, ``orbit_accuracy`` (accuracy over all n copies ρ(g) x,
g = 0..n−1, of the ``n_orbit`` images), ``reg`` and ``reg_relative`` (λ and λ / mean diag),
``cv_at_grid_edge``, ``kernel_seconds`` (the model's kernels at the largest n_train, shared
by its rows), ``fit_seconds`` and ``predict_seconds``.

Models (``models``): ``gcnn`` (C_n GCNN, :func:`~molntk.kernels.cn.gcnn`),
``augmented-cnn`` (the CNN-GAP kernel averaged over the C_n orbit,
K_aug(f, f') = (1/n) Σ_g K(f, ρ(g) f')), ``cnn-gap``, ``cnn-flatten`` and ``mlp`` (depth
+ head hidden layers), all with the configured ``network``. With ``per_rotation_head``
and n ∈ {1, 2, 4} the augmented CNN kernel equals the GCNN kernel (DESIGN §5), so the
two rows must agree.

Files in the output folder (:mod:`molntk.pipelines.report`): ``report.json`` (one record
per model × n_train), ``config.yaml``, ``metrics.csv``, ``learning_curve.png`` (test
error 1 − accuracy against n_train) and ``confusion.png`` (the GCNN's, else the most
accurate model's, at the largest n_train).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from molntk.config import ImageClassificationConfig, ImageNetworkConfig
from molntk.kernels.cn import Augmented, CnNetwork, augmented, cnn_flatten, cnn_gap, gcnn, mlp, rotate_images
from molntk.pipelines.classification import confusion_matrix, fit_predict, orbit_same_predictions, plot_confusion
from molntk.pipelines.image_data import load_image_split
from molntk.pipelines.report import (
    output_dir,
    plot_learning_curve,
    print_results_table,
    write_metrics_csv,
    write_report,
)

Kernel = CnNetwork | Augmented

#: Columns of the terminal table: (record key, header, format).
TABLE_COLUMNS = [
    ("model", "model", ""),
    ("n_train", "n_train", "d"),
    ("accuracy", "accuracy", ".3f"),
    ("orbit_same_predictions", "orbit same", ".2f"),
    ("n_rotations", "of n", "d"),
    ("orbit_accuracy", "orbit acc.", ".3f"),
    ("reg_relative", "λ/mean diag", ".0e"),
    ("kernel_seconds", "kernel s", ".1f"),
    ("fit_seconds", "fit s", ".3f"),
    ("predict_seconds", "predict s", ".4f"),
]


def model_name(model: str, n: int) -> str:
    """Record name of a configured model: the group order is part of the equivariant ones."""
    return f"{model}-c{n}" if model in ("gcnn", "augmented-cnn") else model


def build_model(model: str, net: ImageNetworkConfig) -> Kernel:
    """The kernel of one configured model (see the module docstring)."""
    conv = dict(k=net.k, padding=net.padding, activation=net.activation, sigma_w=net.sigma_w, sigma_b=net.sigma_b)
    if model == "gcnn":
        return gcnn(net.n, net.depth, head=net.head, per_rotation_head=net.per_rotation_head, **conv)
    if model == "augmented-cnn":
        return augmented(cnn_gap(net.depth, head=net.head, **conv), net.n)
    if model == "cnn-gap":
        return cnn_gap(net.depth, head=net.head, **conv)
    if model == "cnn-flatten":
        return cnn_flatten(net.depth, head=net.head, **conv)
    if model == "mlp":
        return mlp(net.depth + net.head, activation=net.activation, sigma_w=net.sigma_w, sigma_b=net.sigma_b)
    raise ValueError(f"unknown image model {model!r}")


def orbit_images(x: torch.Tensor, n: int) -> torch.Tensor:
    """ρ(g) x for g = 1..n−1, stacked g-major: ((n−1)·m, C, H, W)."""
    return torch.cat([rotate_images(x, 2 * math.pi * g / n) for g in range(1, n)]) if n > 1 else x[:0]


def _blocks(n: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


def model_kernels(
    kernel: Kernel,
    x_train: torch.Tensor,
    x_eval: torch.Tensor,
    *,
    block: int,
    memory_mb: float,
    advance: Callable[[int], object],
) -> tuple[np.ndarray, np.ndarray]:
    """NTK Θ(X, X) (each block pair once) and Θ(X_eval, X) as float64 numpy arrays.

    ``advance(pairs)`` is called after each block with its number of image pairs.
    """
    n = x_train.shape[0]
    train = np.empty((n, n))
    rows = _blocks(n, block)
    for i, r in enumerate(rows):
        for c in rows[i:]:
            other = None if c == r else x_train[c]
            part = kernel.kernel(x_train[r], other, memory_mb=memory_mb).ntk.cpu().double().numpy()
            train[r, c] = part
            train[c, r] = part.T
            rows_in, cols_in = r.stop - r.start, c.stop - c.start
            advance(rows_in * cols_in if c != r else rows_in * (rows_in + 1) // 2)
    test = np.empty((x_eval.shape[0], n))
    for r in _blocks(x_eval.shape[0], block):
        test[r] = kernel.kernel(x_eval[r], x_train, memory_mb=memory_mb).ntk.cpu().double().numpy()
        advance((r.stop - r.start) * n)
    return train, test


@contextmanager
def _progress() -> Iterator[Progress]:
    from molntk.cli.output import stderr

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("image pairs"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=stderr(), transient=True) as progress:
        yield progress


@contextmanager
def _threads(threads: int | None) -> Iterator[None]:
    """torch's CPU thread count set to ``threads`` (None: unchanged) for the block, then restored."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("compute.device is 'cuda' but torch sees no CUDA device")
    return torch.device(name)


def run_image_classification(config: ImageClassificationConfig, source: str) -> dict[str, Any]:
    """Run the pipeline, write its files and return ``{"output", "data", "results", ...}``."""
    start = time.perf_counter()
    net, n_max = config.network, max(config.n_train)
    split = load_image_split(config.data, n_max, source)
    device, dtype = _device(config.compute.device), getattr(torch, config.compute.dtype)
    x_train = torch.as_tensor(split.x_train, dtype=dtype, device=device)
    x_test = torch.as_tensor(split.x_test, dtype=dtype, device=device)
    n_test, n_orbit, n_classes = len(split.y_test), config.n_orbit or len(split.y_test), len(split.classes)
    x_eval = torch.cat([x_test, orbit_images(x_test[:n_orbit], net.n)])
    y_orbit = np.tile(split.y_test[:n_orbit], net.n)
    out = output_dir(config.name, config.output)
    pairs = n_max * (n_max + 1) // 2 + x_eval.shape[0] * n_max
    records: list[dict[str, Any]] = []
    confusions: dict[str, np.ndarray] = {}
    with _threads(config.compute.threads), _progress() as progress:
        for model in config.models:
            name = model_name(model, net.n)
            task = progress.add_task(f"{name} kernels", total=pairs)
            tic = time.perf_counter()
            K_train, K_eval = model_kernels(
                build_model(model, net),
                x_train,
                x_eval,
                block=config.compute.block,
                memory_mb=config.compute.memory_mb,
                advance=lambda done, task=task: progress.advance(task, done),
            )
            kernel_seconds = time.perf_counter() - tic
            progress.remove_task(task)
            for m in config.n_train:
                fit = fit_predict(K_train[:m, :m], split.y_train[:m], K_eval[:, :m], n_classes, cv=config.cv)
                labels = fit.labels
                orbit = np.concatenate([labels[:n_orbit], labels[n_test:]]).reshape(net.n, n_orbit)
                records.append(
                    {
                        "model": name,
                        "n_train": m,
                        "n_test": n_test,
                        "accuracy": float(np.mean(labels[:n_test] == split.y_test)),
                        "error_rate": float(np.mean(labels[:n_test] != split.y_test)),
                        "orbit_same_predictions": orbit_same_predictions(orbit),
                        "n_rotations": net.n,
                        "n_orbit": n_orbit,
                        "orbit_accuracy": float(np.mean(orbit.reshape(-1) == y_orbit)),
                        "reg": fit.regressor.reg_,
                        "reg_relative": fit.regressor.reg_relative_,
                        "cv_at_grid_edge": fit.regressor.cv_result_.at_grid_edge,
                        "kernel_seconds": kernel_seconds,
                        "fit_seconds": fit.regressor.fit_seconds_,
                        "predict_seconds": fit.predict_seconds,
                    }
                )
            confusions[name] = confusion_matrix(split.y_test, labels[:n_test], n_classes)
    best = _confusion_model(records, net.n, n_max)
    plot_confusion(
        out / "confusion.png",
        confusions[best],
        split.classes,
        f"{config.name}: {best}, n_train = {n_max}, {n_test} test images",
    )
    plot_learning_curve(
        out, records, metric="error_rate", ylabel="test error (1 − accuracy)", hline=(1 - 1 / n_classes, "chance")
    )
    extra = {
        "data": {
            "description": split.description,
            "classes": list(split.classes),
            "image_shape": list(split.x_train.shape[1:]),
            "n_train_pool": n_max,
            "n_test": n_test,
        },
        "device": str(device),
        "confusion": {"model": best, "n_train": n_max, "matrix": confusions[best]},
        "wall_seconds": time.perf_counter() - start,
    }
    write_report(out, config=config.to_dict(), records=records, extra=extra)
    write_metrics_csv(out, records)
    return {"output": str(out), "data": split.description, "results": records, "wall_seconds": extra["wall_seconds"]}


def _confusion_model(records: list[dict[str, Any]], n: int, n_max: int) -> str:
    """The GCNN if it ran, else the most accurate model at the largest training set."""
    final = [r for r in records if r["n_train"] == n_max]
    names = [r["model"] for r in final]
    gcnn_name = model_name("gcnn", n)
    return gcnn_name if gcnn_name in names else max(final, key=lambda r: r["accuracy"])["model"]


def show_image_classification(config: ImageClassificationConfig, result: dict[str, Any]) -> None:
    """The records as a table, then where the files are."""
    from molntk.cli.output import stdout

    print_results_table(result["results"], TABLE_COLUMNS, f"{config.name}: {result['data']}")
    stdout().print(f"{result['wall_seconds']:.1f} s; report, metrics.csv and plots in {result['output']}/")
