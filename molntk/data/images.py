"""Images for the C_n ⋉ R² kernels: histology tiles, PathMNIST, rotated handwritten digits.

Every loader returns an :class:`ImageSet`: float64 images (N, C, H, W), integer labels,
the class names, and the source of each image (file name, ``file.npz:split[i]`` or
``digits[i]``). Per-channel normalisation (x − mean_c) / std_c uses the set's own
statistics unless ``mean``/``std`` are given (e.g. a training set's, for its test set);
the statistics used are kept on the set.

Sources:
- NCT-CRC-HE-100K (Kather et al. 2018): 224×224 RGB TIF tiles, nine tissue classes; the
  class is the folder name (the dataset's layout) or the file-name prefix before the
  first "-" (``ADI-AAQEFMRI.tif``).
- PathMNIST (MedMNIST): the same nine classes as 28×28 tiles in one ``.npz`` with keys
  ``{split}_images`` (N, H, W, 3) uint8 and ``{split}_labels`` (N, 1);
  :func:`download_pathmnist` fetches it through the ``medmnist`` package.
- scikit-learn's handwritten digits (8×8, bundled with scikit-learn, no network), centred
  on a canvas large enough to rotate without clipping, resized, and rotated by random
  continuous angles (scipy.ndimage.rotate, bilinear) or random exact quarter turns.

Unreadable files, images of the wrong shape and unknown classes raise
:class:`~molntk.errors.InputError` naming the file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tifffile
from PIL import Image
from scipy import ndimage
from sklearn.datasets import load_digits

from molntk.errors import InputError

#: NCT-CRC-HE-100K classes; PathMNIST labels 0..8 are these, in this order.
NCT_CLASSES = ("ADI", "BACK", "DEB", "LYM", "MUC", "MUS", "NORM", "STR", "TUM")
#: File suffixes read as images (case-insensitive); other files in a folder are ignored.
IMAGE_SUFFIXES = (".tif", ".tiff", ".png", ".jpg", ".jpeg")
#: Side of the square canvas a digit is centred on: ≥ 8√2, so rotations never clip it.
DIGIT_CANVAS = 12


@dataclass(frozen=True, eq=False)
class ImageSet:
    """Images (N, C, H, W) float64 with labels (N,) int64 indexing ``classes``."""

    images: np.ndarray
    labels: np.ndarray
    classes: tuple[str, ...]
    sources: tuple[str, ...]
    mean: np.ndarray | None = None
    std: np.ndarray | None = None
    angles: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def normalise_channels(
    images: np.ndarray, mean: Sequence[float] | None = None, std: Sequence[float] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x − mean_c) / std_c per channel of (N, C, H, W) images; statistics over N, H, W by default.

    A channel with zero spread keeps std 1. Returns (normalised, mean, std).
    """
    mean = images.mean(axis=(0, 2, 3)) if mean is None else np.asarray(mean, dtype=np.float64)
    std = images.std(axis=(0, 2, 3)) if std is None else np.asarray(std, dtype=np.float64)
    std = np.where(std > 0, std, 1.0)
    return (images - mean[None, :, None, None]) / std[None, :, None, None], mean, std


def _finish(
    images: np.ndarray,
    labels: np.ndarray,
    classes: tuple[str, ...],
    sources: Sequence[str],
    normalise: bool,
    mean: Sequence[float] | None,
    std: Sequence[float] | None,
    angles: np.ndarray | None = None,
) -> ImageSet:
    stats_mean = stats_std = None
    if normalise and len(images):
        images, stats_mean, stats_std = normalise_channels(images, mean, std)
    return ImageSet(images, labels.astype(np.int64), classes, tuple(sources), stats_mean, stats_std, angles)


def _resize(image: np.ndarray, size: int | None) -> np.ndarray:
    """(H, W, C) uint8 → (size, size, C) float64 in [0, 1] (bilinear, antialiased by pillow)."""
    if size is not None and image.shape[:2] != (size, size):
        channels = [Image.fromarray(image[..., c]).resize((size, size), Image.BILINEAR) for c in range(image.shape[2])]
        image = np.stack([np.asarray(c) for c in channels], axis=-1)
    return image.astype(np.float64) / 255.0


def read_tile(path: str | Path) -> np.ndarray:
    """An RGB tile as (H, W, 3) uint8 (TIF via tifffile, other formats via pillow; alpha dropped)."""
    path = Path(path)
    try:
        if path.suffix.lower() in (".tif", ".tiff"):
            image = tifffile.imread(path)
        else:
            with Image.open(path) as img:
                image = np.asarray(img)
    except Exception as err:  # any reader failure: the file is not a readable image
        raise InputError(str(path), f"cannot read image: {err}") from None
    if image.ndim != 3 or image.shape[2] not in (3, 4):
        raise InputError(str(path), f"expected an RGB image (H, W, 3), got shape {image.shape}")
    if image.dtype != np.uint8:
        raise InputError(str(path), f"expected 8-bit pixels, got {image.dtype}")
    return image[..., :3]


def _class_of(path: Path, root: Path, classes: tuple[str, ...]) -> int:
    name = path.parent.name if path.parent != root else path.name.split("-", 1)[0]
    if name not in classes:
        raise InputError(str(path), f"unknown class {name!r}; expected one of {', '.join(classes)}")
    return classes.index(name)


def load_nct_crc_he(
    root: str | Path,
    *,
    size: int | None = 32,
    classes: Sequence[str] = NCT_CLASSES,
    limit_per_class: int | None = None,
    normalise: bool = True,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
) -> ImageSet:
    """NCT-CRC-HE tiles under ``root`` (class folders, or files named ``CLASS-...``), resized to size × size.

    Files are taken in sorted order, at most ``limit_per_class`` per class; ``size=None``
    keeps the tiles' own size (they must then all agree).
    """
    root = Path(root)
    if not root.is_dir():
        raise InputError(str(root), "not a directory of NCT-CRC-HE tiles")
    classes = tuple(classes)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise InputError(str(root), f"no image files ({', '.join(IMAGE_SUFFIXES)}) found")
    images, labels, sources, taken = [], [], [], dict.fromkeys(range(len(classes)), 0)
    for path in files:
        label = _class_of(path, root, classes)
        if limit_per_class is not None and taken[label] >= limit_per_class:
            continue
        image = _resize(read_tile(path), size)
        if images and image.shape != images[0].shape:
            raise InputError(str(path), f"tile of shape {image.shape[:2]} differs from {images[0].shape[:2]}: pass size=")
        taken[label] += 1
        images.append(image)
        labels.append(label)
        sources.append(str(path.relative_to(root)))
    stacked = np.stack(images).transpose(0, 3, 1, 2)
    return _finish(stacked, np.array(labels), classes, sources, normalise, mean, std)


def load_pathmnist_npz(
    path: str | Path,
    split: str = "train",
    *,
    size: int | None = None,
    limit: int | None = None,
    normalise: bool = True,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
) -> ImageSet:
    """One split ("train", "val", "test") of a MedMNIST-format PathMNIST ``.npz``."""
    path = Path(path)
    try:
        data = np.load(path)
    except Exception as err:  # missing, truncated or not an npz archive
        raise InputError(str(path), f"cannot read PathMNIST archive: {err}") from None
    with data:
        keys = (f"{split}_images", f"{split}_labels")
        missing = [key for key in keys if key not in data.files]
        if missing:
            raise InputError(str(path), f"missing array {missing[0]!r} (has {', '.join(sorted(data.files))})")
        images, labels = data[keys[0]], data[keys[1]]
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or images.shape[-1] not in (1, 3) or images.dtype != np.uint8:
        raise InputError(str(path), f"{keys[0]} must be uint8 (N, H, W, 3), got {images.dtype} {images.shape}")
    labels = labels.reshape(-1)
    if labels.shape[0] != images.shape[0]:
        raise InputError(str(path), f"{keys[1]} has {labels.shape[0]} labels for {images.shape[0]} images")
    if labels.size and (labels.min() < 0 or labels.max() >= len(NCT_CLASSES)):
        raise InputError(str(path), f"{keys[1]} must lie in 0..{len(NCT_CLASSES) - 1}")
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    resized = np.stack([_resize(image, size) for image in images]) if len(images) else images.astype(np.float64)
    sources = [f"{path.name}:{split}[{i}]" for i in range(len(labels))]
    return _finish(resized.transpose(0, 3, 1, 2), labels, NCT_CLASSES, sources, normalise, mean, std)


def download_pathmnist(root: str | Path, *, size: int = 28) -> Path:
    """Download PathMNIST with the ``medmnist`` package into ``root``; returns the ``.npz`` path."""
    try:
        import medmnist
    except ImportError:
        raise ImportError("downloading PathMNIST needs the medmnist package: pip install medmnist") from None
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    medmnist.PathMNIST(split="train", download=True, root=str(root), size=size)
    name = "pathmnist.npz" if size == 28 else f"pathmnist_{size}.npz"
    return root / name


def load_digits_rotated(
    *,
    n: int | None = None,
    size: int = 16,
    rotation: str = "continuous",
    seed: int = 0,
    normalise: bool = True,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
) -> ImageSet:
    """scikit-learn's 8×8 digits on a 12×12 canvas, resized to size × size and randomly rotated.

    ``rotation``: "continuous" (angle uniform in [0, 2π), scipy.ndimage.rotate, bilinear),
    "quarter" (exact np.rot90 by a uniform multiple of 90°) or "none". The first ``n``
    digits (all 1797 by default); ``angles`` holds each image's angle in radians.
    """
    if rotation not in ("continuous", "quarter", "none"):
        raise ValueError(f"rotation must be 'continuous', 'quarter' or 'none', got {rotation!r}")
    digits = load_digits()
    pixels, labels = digits.images[:n] / 16.0, digits.target[:n]
    pad = (DIGIT_CANVAS - 8) // 2
    canvas = np.pad(pixels, ((0, 0), (pad, pad), (pad, pad)))
    canvas = np.stack([ndimage.zoom(img, size / DIGIT_CANVAS, order=1, grid_mode=True, mode="grid-constant") for img in canvas])
    rng = np.random.default_rng(seed)
    if rotation == "continuous":
        angles = rng.uniform(0.0, 2 * math.pi, len(canvas))
        turned = [ndimage.rotate(img, math.degrees(a), reshape=False, order=1) for img, a in zip(canvas, angles)]
    elif rotation == "quarter":
        turns = rng.integers(0, 4, len(canvas))
        angles = turns * (math.pi / 2)
        turned = [np.rot90(img, k) for img, k in zip(canvas, turns)]
    else:
        angles = np.zeros(len(canvas))
        turned = list(canvas)
    images = np.stack(turned)[:, None].astype(np.float64)
    sources = [f"digits[{i}]" for i in range(len(labels))]
    classes = tuple(str(d) for d in range(10))
    return _finish(images, labels, classes, sources, normalise, mean, std, angles)
