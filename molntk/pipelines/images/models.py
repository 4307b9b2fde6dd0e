"""The models of ``task: image-classification`` and their kernels as block kernels.

Models (``models``): ``gcnn`` (C_n GCNN, :func:`~molntk.kernels.cn.gcnn`),
``augmented-cnn`` (the CNN-GAP kernel averaged over the C_n orbit,
K_aug(f, f') = (1/n) Σ_g K(f, ρ(g) f')), ``cnn-gap``, ``cnn-flatten`` and ``mlp`` (depth
+ head hidden layers), all with the configured ``network``. :func:`model_kernels`
computes a model's NTK Θ(X, X) and Θ(X_eval, X) by the block engine of :mod:`molntk.scale`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from molntk.kernels.cn import Augmented, CnNetwork, augmented, cnn_flatten, cnn_gap, gcnn, mlp
from molntk.pipelines.images.config import ImageNetworkConfig
from molntk.scale.engine import kernel_matrices
from molntk.scale.executors import Executor
from molntk.scale.progress import ProgressCallback

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
