"""The run of ``task: image-classification`` (steps 1–2 of :mod:`molntk.pipelines.images`):
kernels per model, one-hot regression per training size, then ``report.json``,
``config.yaml``, ``metrics.csv``, ``learning_curve.png`` and ``confusion.png``."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from molntk.pipelines.files import output_dir, plot_learning_curve, result_set, write_metrics_csv, write_report
from molntk.pipelines.images.classification import confusion_matrix, fit_predict, orbit_same_predictions, plot_confusion
from molntk.pipelines.images.config import ImageClassificationConfig
from molntk.pipelines.images.data import load_image_split, orbit_images
from molntk.pipelines.images.models import build_model, model_kernels, model_name
from molntk.scale.devices import resolve_device, torch_threads
from molntk.scale.executors import open_executor
from molntk.scale.progress import Progress, labelled

def run_image_classification(
    config: ImageClassificationConfig, source: str, progress: Progress | None = None
) -> dict[str, Any]:
    """Run the pipeline, write its files and return ``{"output", "data", "results", "wall_seconds"}``;
    ``progress(label, done, total)`` after each kernel block, one label per model."""
    start = time.perf_counter()
    out = output_dir(config.name, config.output)  # checked before any work
    net, n_max = config.network, max(config.n_train)
    split = load_image_split(config.data, n_max, source)
    device, dtype = resolve_device(config.compute.device, "compute.device"), getattr(torch, config.compute.dtype)
    x_train = torch.as_tensor(split.x_train, dtype=dtype, device=device)
    x_test = torch.as_tensor(split.x_test, dtype=dtype, device=device)
    n_test, n_orbit, n_classes = len(split.y_test), config.n_orbit or len(split.y_test), len(split.classes)
    x_eval = torch.cat([x_test, orbit_images(x_test[:n_orbit], net.n)])
    y_orbit = np.tile(split.y_test[:n_orbit], net.n)
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
    }
    with result_set(out) as stage:  # the files move into the folder together
        plot_confusion(
            stage / "confusion.png",
            confusions[best],
            split.classes,
            f"{config.name}: {best}, n_train = {n_max}, {n_test} test images",
        )
        plot_learning_curve(
            stage, records, metric="error_rate", ylabel="test error (1 − accuracy)", hline=(1 - 1 / n_classes, "chance")
        )
        extra["wall_seconds"] = time.perf_counter() - start
        write_report(stage, config=config.to_dict(), records=records, extra=extra)
        write_metrics_csv(stage, records)
    return {"output": str(out), "data": split.description, "results": records, "wall_seconds": extra["wall_seconds"]}


def _confusion_model(records: list[dict[str, Any]], n: int, n_max: int) -> str:
    """The GCNN if it ran, else the most accurate model at the largest training set."""
    final = [r for r in records if r["n_train"] == n_max]
    names = [r["model"] for r in final]
    gcnn_name = model_name("gcnn", n)
    return gcnn_name if gcnn_name in names else max(final, key=lambda r: r["accuracy"])["model"]
