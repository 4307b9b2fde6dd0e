"""``task: image-classification``: C_n GCNN NTK against non-equivariant and augmented baselines.

All models see identical data (:mod:`molntk.pipelines.image_data`): the same nested
training sets of each size in ``n_train`` and the same test set. Per model:

1. kernels, once, at the largest training set: the NTK Θ(X, X) and Θ(X_eval, X), where
   X_eval is the test set followed by ρ(g) x for g = 1..n−1 of its first ``n_orbit``
   images (ρ(g): rotation by 2πg/n, :func:`~molntk.kernels.cn.rotate_images`; exact
   ``rot90`` for quarter turns, bilinear with zero fill otherwise), in blocks of at most
   ``compute.block`` images by the block engine of :mod:`molntk.scale` (on every visible
   GPU when ``compute.device`` resolves to CUDA), reporting each block to ``progress``;
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
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from molntk.kernels.cn import Augmented, CnNetwork, augmented, cnn_flatten, cnn_gap, gcnn, mlp, rotate_images
from molntk.pipelines.classification import confusion_matrix, fit_predict, orbit_same_predictions, plot_confusion
from molntk.pipelines.image_data import load_image_split
from molntk.pipelines.images_config import ImageClassificationConfig, ImageNetworkConfig
from molntk.pipelines.report import output_dir, plot_learning_curve, write_metrics_csv, write_report
from molntk.scale.devices import resolve_device, torch_threads
from molntk.scale.engine import kernel_matrices
from molntk.scale.executors import Executor, open_executor
from molntk.scale.progress import Progress, ProgressCallback, labelled

Kernel = CnNetwork | Augmented


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


@dataclass(frozen=True, eq=False)
class ImageBlockKernel:
    """Block kernel (:mod:`molntk.scale.blocks`) of one image model on a fixed stack of images:
    ``compute_block(rows, cols) = {"ntk": Θ(images[rows], images[cols])}`` as float64 numpy
    arrays; ``cols`` None: the symmetric block Θ(images[rows], images[rows]), each pair once.
    ``memory_mb`` bounds the working memory of one chunk of image pairs inside the kernel."""

    kernel: Kernel
    images: torch.Tensor
    memory_mb: float

    @property
    def n_molecules(self) -> int:
        """Number of images (the engine's name for the items a block kernel indexes)."""
        return self.images.shape[0]

    def compute_block(self, rows: np.ndarray, cols: np.ndarray | None) -> dict[str, np.ndarray]:
        """Θ(images[rows], images[cols]) (``cols`` None: rows × rows) under the name ``ntk``."""
        x1 = self.images[torch.from_numpy(rows)]
        x2 = None if cols is None else self.images[torch.from_numpy(cols)]
        return {"ntk": self.kernel.kernel(x1, x2, memory_mb=self.memory_mb).ntk.cpu().double().numpy()}

    def on(self, device: str) -> ImageBlockKernel:
        """The same block kernel with its images on ``device``."""
        return replace(self, images=self.images.to(device))


def model_kernels(
    kernel: Kernel,
    x_train: torch.Tensor,
    x_eval: torch.Tensor,
    *,
    block: int,
    memory_mb: float,
    executor: Executor | None = None,
    progress: ProgressCallback | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """NTK Θ(X, X) and Θ(X_eval, X) as float64 numpy arrays, by the block engine
    (:func:`molntk.scale.kernel_matrices`) in blocks of at most ``block`` images: training
    blocks B_i × B_j for i ≤ j (mirrored), evaluation blocks T_i × B_j; ``executor``: where
    the blocks run (default: :func:`molntk.scale.default_executor`); ``progress(done, total)``
    after each block."""
    n = x_train.shape[0]
    images = ImageBlockKernel(kernel, torch.cat([x_train, x_eval]), memory_mb)
    matrices = kernel_matrices(
        images, np.arange(n), np.arange(n, n + x_eval.shape[0]), block_size=block, executor=executor, progress=progress
    )
    return matrices["ntk_train"], matrices["ntk_test"]


def run_image_classification(
    config: ImageClassificationConfig, source: str, progress: Progress | None = None
) -> dict[str, Any]:
    """Run the pipeline, write its files and return ``{"output", "data", "results", "wall_seconds"}``;
    ``progress(label, done, total)`` after each kernel block, one label per model."""
    start = time.perf_counter()
    net, n_max = config.network, max(config.n_train)
    split = load_image_split(config.data, n_max, source)
    device, dtype = resolve_device(config.compute.device), getattr(torch, config.compute.dtype)
    x_train = torch.as_tensor(split.x_train, dtype=dtype, device=device)
    x_test = torch.as_tensor(split.x_test, dtype=dtype, device=device)
    n_test, n_orbit, n_classes = len(split.y_test), config.n_orbit or len(split.y_test), len(split.classes)
    x_eval = torch.cat([x_test, orbit_images(x_test[:n_orbit], net.n)])
    y_orbit = np.tile(split.y_test[:n_orbit], net.n)
    out = output_dir(config.name, config.output)
    records: list[dict[str, Any]] = []
    confusions: dict[str, np.ndarray] = {}
    with torch_threads(config.compute.threads), open_executor("auto", device=device.type) as executor:
        for model in config.models:
            name = model_name(model, net.n)
            tic = time.perf_counter()
            K_train, K_eval = model_kernels(
                build_model(model, net),
                x_train,
                x_eval,
                block=config.compute.block,
                memory_mb=config.compute.memory_mb,
                executor=executor,
                progress=labelled(progress, f"{name} kernels"),
            )
            kernel_seconds = time.perf_counter() - tic
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
