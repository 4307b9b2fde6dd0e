"""Image loaders: NCT-CRC-HE tiles (real samples), PathMNIST archives, rotated digits."""

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import tifffile

from molntk.data.images import (
    NCT_CLASSES,
    download_pathmnist,
    load_digits_rotated,
    load_nct_crc_he,
    load_pathmnist_npz,
    normalise_channels,
)
from molntk.errors import InputError


def test_nct_tiles_by_file_prefix(tiles):
    data = load_nct_crc_he(tiles, size=24)
    assert data.images.shape == (9, 3, 24, 24) and data.images.dtype == np.float64
    assert data.classes == NCT_CLASSES
    assert [NCT_CLASSES[label] for label in data.labels] == [s.split("-")[0] for s in data.sources]
    assert sorted(data.labels.tolist()) == list(range(9))
    np.testing.assert_allclose(data.images.mean(axis=(0, 2, 3)), 0, atol=1e-12)
    np.testing.assert_allclose(data.images.std(axis=(0, 2, 3)), 1, rtol=1e-12)
    raw = load_nct_crc_he(tiles, size=None, normalise=False)
    assert raw.images.shape == (9, 3, 224, 224) and 0 <= raw.images.min() and raw.images.max() <= 1
    np.testing.assert_allclose(data.mean, load_nct_crc_he(tiles, size=24, normalise=False).images.mean(axis=(0, 2, 3)))


def test_nct_class_folders_limit_and_given_statistics(tiles, tmp_path):
    for tile in sorted(tiles.glob("*.tif"))[:3]:
        folder = tmp_path / tile.name.split("-")[0]
        folder.mkdir()
        for copy in range(2):
            shutil.copy(tile, folder / f"tile{copy}.tif")
    (tmp_path / "README.txt").write_text("not an image")
    data = load_nct_crc_he(tmp_path, size=8, limit_per_class=1, mean=[0.5] * 3, std=[0.25] * 3)
    assert data.labels.tolist() == [0, 1, 2] and len(data) == 3
    assert data.sources[0] == str(Path("ADI") / "tile0.tif")
    np.testing.assert_array_equal(data.mean, [0.5] * 3)


def test_nct_bad_files_raise_input_error_naming_the_file(tmp_path):
    bad = tmp_path / "ADI-broken.tif"
    bad.write_bytes(b"this is not a TIFF file")
    with pytest.raises(InputError, match="ADI-broken.tif"):
        load_nct_crc_he(tmp_path)
    bad.unlink()
    gray = tmp_path / "TUM-gray.tif"
    tifffile.imwrite(gray, np.zeros((10, 10), np.uint8))
    with pytest.raises(InputError, match="TUM-gray.tif.*RGB"):
        load_nct_crc_he(tmp_path)
    gray.unlink()
    tifffile.imwrite(tmp_path / "XYZ-tile.tif", np.zeros((10, 10, 3), np.uint8))
    with pytest.raises(InputError, match="XYZ-tile.tif.*unknown class 'XYZ'"):
        load_nct_crc_he(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no image files"):
        load_nct_crc_he(empty)
    with pytest.raises(InputError, match="not a directory"):
        load_nct_crc_he(tmp_path / "missing")


def write_pathmnist(path: Path, n: int = 6, size: int = 28, **overrides) -> dict:
    rng = np.random.default_rng(0)
    arrays = {}
    for split in ("train", "val", "test"):
        arrays[f"{split}_images"] = rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)
        arrays[f"{split}_labels"] = rng.integers(0, 9, (n, 1))
    arrays.update(overrides)
    np.savez(path, **arrays)
    return arrays


def test_pathmnist_npz(tmp_path):
    path = tmp_path / "pathmnist.npz"
    arrays = write_pathmnist(path)
    data = load_pathmnist_npz(path, "val", normalise=False)
    assert data.images.shape == (6, 3, 28, 28)
    np.testing.assert_array_equal(data.images[2].transpose(1, 2, 0), arrays["val_images"][2] / 255.0)
    np.testing.assert_array_equal(data.labels, arrays["val_labels"][:, 0])
    assert data.sources[1] == "pathmnist.npz:val[1]" and data.classes == NCT_CLASSES
    small = load_pathmnist_npz(path, size=14, limit=4)
    assert small.images.shape == (4, 3, 14, 14)
    np.testing.assert_allclose(small.images.std(axis=(0, 2, 3)), 1, rtol=1e-12)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"train_images": np.zeros((6, 28, 28, 3), np.float32)}, "uint8"),
        ({"train_labels": np.full((6, 1), 9)}, "0..8"),
        ({"train_labels": np.zeros((5, 1), int)}, "5 labels for 6 images"),
    ],
)
def test_pathmnist_bad_arrays(tmp_path, overrides, message):
    path = tmp_path / "bad.npz"
    write_pathmnist(path, **overrides)
    with pytest.raises(InputError, match=f"bad.npz.*{message}"):
        load_pathmnist_npz(path)


def test_pathmnist_missing_split_and_unreadable(tmp_path):
    path = tmp_path / "partial.npz"
    np.savez(path, train_images=np.zeros((2, 28, 28, 3), np.uint8), train_labels=np.zeros((2, 1)))
    with pytest.raises(InputError, match="missing array 'test_images'"):
        load_pathmnist_npz(path, "test")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"no zip here")
    with pytest.raises(InputError, match="garbage.npz"):
        load_pathmnist_npz(garbage)


def test_download_pathmnist_needs_medmnist(tmp_path):
    try:
        import medmnist  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install medmnist"):
            download_pathmnist(tmp_path)
    else:
        pytest.skip("medmnist is installed; the download itself needs the network")


def test_digits_rotations():
    plain = load_digits_rotated(n=12, size=12, rotation="none", normalise=False)
    quarter = load_digits_rotated(n=12, size=12, rotation="quarter", seed=3, normalise=False)
    turns = np.round(quarter.angles / (math.pi / 2)).astype(int)
    for i, k in enumerate(turns):
        np.testing.assert_array_equal(quarter.images[i, 0], np.rot90(plain.images[i, 0], k))
    assert set(turns) <= {0, 1, 2, 3} and len(set(turns)) > 1
    cont = load_digits_rotated(n=12, size=16, seed=3)
    assert cont.images.shape == (12, 1, 16, 16) and cont.classes == tuple("0123456789")
    assert np.all((0 <= cont.angles) & (cont.angles < 2 * math.pi))
    np.testing.assert_array_equal(cont.labels, plain.labels)
    raw = load_digits_rotated(n=12, size=16, seed=3, normalise=False)
    border = np.concatenate([raw.images[..., 0, :], raw.images[..., -1, :]], axis=-1)
    assert np.abs(border).max() < 0.05  # the canvas keeps rotated digits inside the frame
    with pytest.raises(ValueError):
        load_digits_rotated(n=2, rotation="random")


def test_normalise_channels_constant_channel():
    images = np.ones((2, 2, 3, 3))
    images[:, 1] = np.arange(9).reshape(3, 3)
    out, mean, std = normalise_channels(images)
    np.testing.assert_array_equal(out[:, 0], 0)
    assert std[0] == 1 and mean[1] == 4
