"""The SO(3) NTK estimator (``SO3NTKRegressor``) on real QM9 molecules: save / load,
model files of older versions, scikit-learn tools, files that are not models.
The fitted estimator is the session fixture ``fitted_so3`` (tests/conftest.py)."""

from __future__ import annotations

import dataclasses

import json

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import cross_val_score

from molntk.data.readers import read_smiles
from molntk.errors import InputError, ModelFileError
from molntk.models.loading import load_model
from molntk.models.so3_ntk import SO3NTKRegressor


def test_estimator_save_load_gives_identical_predictions(fitted_so3, tmp_path):
    model, mols, y = fitted_so3
    mean, std = model.predict(mols[30:], return_std=True)
    assert np.all(std >= 0) and np.isfinite(mean).all()
    assert np.abs(mean - y[30:]).mean() < np.abs(y[30:] - y[:30].mean()).mean()  # beats the mean predictor
    path = model.save(tmp_path / "u0.molntk.npz")
    loaded = SO3NTKRegressor.load(path)
    mean2, std2 = loaded.predict(mols[30:], return_std=True)
    assert np.array_equal(mean, mean2) and np.array_equal(std, std2)
    assert loaded.get_params() == model.get_params()


def test_model_files_without_a_sampling_load_with_the_grid_they_were_fitted_on(fitted_so3, tmp_path):
    """Files written before ``sampling`` existed were fitted on Gauss–Legendre grids: loading
    one must not switch it to the new default (a different kernel for the same weights)."""
    model, mols, y = fitted_so3
    gl = SO3NTKRegressor(**{**model.get_params(), "sampling": "gauss-legendre"}).fit(mols[:30], y[:30])
    path = gl.save(tmp_path / "gl.npz")
    with np.load(path, allow_pickle=False) as archive:
        arrays = dict(archive)
    meta = json.loads(arrays["metadata"].tobytes().decode("utf-8"))
    del meta["params"]["sampling"]
    arrays["metadata"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    old = tmp_path / "old.npz"
    np.savez(old, **arrays)
    loaded = SO3NTKRegressor.load(old)
    assert loaded.sampling == "gauss-legendre"
    assert np.array_equal(loaded.predict(mols[30:]), gl.predict(mols[30:]))


def test_estimator_works_with_scikit_learn_tools(qm9):
    mols = qm9.molecules(range(1, 31))
    y = np.asarray(qm9.target("u0_atom")[1:31])
    est = SO3NTKRegressor(grid_band_limit=2, psd_rtol=1e-4, sigma_b=0.2)
    assert clone(est).get_params()["sigma_b"] == 0.2
    scores = cross_val_score(est, mols, y, cv=3, scoring="neg_mean_absolute_error")
    assert scores.shape == (3,) and np.isfinite(scores).all()


def test_loading_a_file_that_is_not_a_model_names_it(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, metadata=np.frombuffer(b'{"format": "other"}', dtype=np.uint8))
    with pytest.raises(InputError, match="not a molntk SO\\(3\\) NTK model"):
        SO3NTKRegressor.load(bad)
    junk = tmp_path / "junk.npz"
    junk.write_text("hello")
    with pytest.raises(InputError, match="junk.npz"):
        SO3NTKRegressor.load(junk)


def _with_metadata(arrays: dict[str, np.ndarray], text: bytes) -> dict[str, np.ndarray]:
    return {**arrays, "metadata": np.frombuffer(text, dtype=np.uint8)}


DAMAGES = {
    "empty": ("the file is empty", lambda good, path: path.write_bytes(b"")),
    "truncated": ("not a molntk model file", lambda good, path: path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])),
    "pickled": ("pickled objects", lambda good, path: np.save(path.with_suffix(".npy"), np.array([{"a": 1}], dtype=object),
                                                                allow_pickle=True) or path.with_suffix(".npy").rename(path)),
    "pickled member": ("pickled objects", lambda good, path: np.savez(path, **_with_metadata(
        {"coef": np.array([{"a": 1}], dtype=object)}, b"{}"))),
    "one array": ("a single numpy array", lambda good, path: np.save(path.with_suffix(".npy"), np.zeros(3)) or path.with_suffix(".npy").rename(path)),
    "no metadata": ("no metadata", lambda good, path: np.savez(path, numbers=np.zeros(3))),
    "metadata not JSON": ("metadata is not JSON", lambda good, path: np.savez(path, **_with_metadata({}, b"\xff{"))),
    "metadata a list": ("not a JSON object", lambda good, path: np.savez(path, **_with_metadata({}, b"[1, 2]"))),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_or_foreign_model_files_are_one_input_error_naming_the_file(fitted_so3, tmp_path, damage):
    """Every kind of broken file is a ModelFileError (an InputError) with the path and the problem
    (never a BadZipFile, EOFError ("Aborted."), KeyError, TypeError or numpy's allow_pickle advice)."""
    good = fitted_so3[0].save(tmp_path / "good.npz")
    message, make = DAMAGES[damage]
    path = tmp_path / "broken.npz"
    make(good, path)
    with pytest.raises(ModelFileError) as info:
        SO3NTKRegressor.load(path)
    assert str(path) in str(info.value) and message in str(info.value)
    assert "allow_pickle" not in str(info.value)
    with pytest.raises(ModelFileError) as info:  # reads the metadata alone to choose the estimator
        load_model(path)
    assert str(path) in str(info.value) and "allow_pickle" not in str(info.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda meta, arrays: meta.pop("params"), "damaged model file (missing 'params')"),
        (lambda meta, arrays: meta["params"].update(unknown=1), "damaged model file (TypeError"),
        (lambda meta, arrays: arrays.pop("n_atoms"), "damaged model file (missing 'n_atoms')"),
        (lambda meta, arrays: meta.update(target=3), "metadata 'target' is a int, not a string"),
        (lambda meta, arrays: meta.update(provenance=[1]), "provenance is a list, not a JSON object"),
        (lambda meta, arrays: arrays.update(regressor_solver=np.asarray("bogus")), "damaged model file (solver: "),
    ],
)
def test_model_files_with_bad_metadata_or_arrays_are_damaged_files(fitted_so3, tmp_path, edit, message):
    good = fitted_so3[0].save(tmp_path / "good.npz")
    with np.load(good, allow_pickle=False) as archive:
        arrays = dict(archive)
    meta = json.loads(arrays.pop("metadata").tobytes().decode("utf-8"))
    edit(meta, arrays)
    path = tmp_path / "edited.npz"
    np.savez(path, **_with_metadata(arrays, json.dumps(meta).encode("utf-8")))
    with pytest.raises(ModelFileError, match=str(path).replace("\\", "\\\\").replace(".", "\\.")) as info:
        SO3NTKRegressor.load(path)
    assert message in str(info.value)


def test_molecules_with_elements_never_seen_in_training_are_refused(fitted_so3):
    """Trained on H, C, N, O only: fluoromethane would get a zero kernel and a zero dressed-atom
    weight for F, i.e. a silent wrong prediction; it is an InputError naming the molecule and F."""
    model, mols, _ = fitted_so3
    assert model.training_elements_ == (1, 6, 7, 8)
    fluoromethane = read_smiles(["CF"]).molecules[0]
    with pytest.raises(InputError, match=r"CF.*element\(s\) F outside the elements of the training molecules \(H, C, N, O\)"):
        model.predict([mols[30], fluoromethane])
    assert np.isfinite(model.predict([mols[30]])).all()


@pytest.fixture(scope="module")
def train_kernel(fitted_so3) -> np.ndarray:
    """Θ of the fixture's 30 training molecules, computed here from its recipe (as a pipeline would)."""
    model, mols, _ = fitted_so3
    recipe = model.recipe()
    return recipe.molecular_kernel()(recipe.environments(mols[:30])).ntk.double().numpy()


def test_target_unit_and_provenance_survive_save_and_load(fitted_so3, train_kernel, tmp_path):
    model, mols, y = fitted_so3
    described = SO3NTKRegressor(**model.get_params()).fit_kernels(
        mols[:30], y[:30], train_kernel, target="u0_atom", unit="meV", provenance={"data": "qm9 rows 1-30"})
    loaded = SO3NTKRegressor.load(described.save(tmp_path / "u0.npz"))
    assert (loaded.target_, loaded.unit_) == ("u0_atom", "meV")
    assert loaded.provenance_ == described.provenance_
    assert loaded.provenance_["n_train"] == 30 and loaded.provenance_["data"] == "qm9 rows 1-30"
    assert {"molntk", "created"} <= loaded.provenance_.keys()
    with np.load(tmp_path / "u0.npz", allow_pickle=False) as archive:
        meta = json.loads(archive["metadata"].tobytes().decode("utf-8"))
    assert meta["training_elements"] == [1, 6, 7, 8] and meta["target"] == "u0_atom"


def test_model_files_without_target_unit_or_provenance_still_load(fitted_so3, tmp_path):
    model, mols, _ = fitted_so3
    with np.load(model.save(tmp_path / "new.npz"), allow_pickle=False) as archive:
        arrays = dict(archive)
    meta = json.loads(arrays["metadata"].tobytes().decode("utf-8"))
    for key in ("target", "unit", "training_elements", "provenance"):
        del meta[key]
    np.savez(tmp_path / "old.npz", **_with_metadata(arrays, json.dumps(meta).encode("utf-8")))
    loaded = SO3NTKRegressor.load(tmp_path / "old.npz")
    assert (loaded.target_, loaded.unit_, loaded.provenance_) == (None, None, {})
    assert np.array_equal(loaded.predict(mols[30:]), model.predict(mols[30:]))


def test_fit_kernels_on_the_same_kernel_is_fit(fitted_so3, train_kernel):
    """fit_kernels(Θ) is fit without computing Θ: identical means and calibrated standard
    deviations (to rounding)."""
    model, mols, y = fitted_so3
    refit = SO3NTKRegressor(**model.get_params()).fit_kernels(mols[:30], y[:30], train_kernel)
    mean, std = model.predict(mols[30:35], return_std=True)
    mean2, std2 = refit.predict(mols[30:35], return_std=True)
    np.testing.assert_allclose(mean2, mean, rtol=1e-12)
    np.testing.assert_allclose(std2, std, rtol=1e-9)
    with pytest.raises(InputError, match="rows"):
        SO3NTKRegressor(**model.get_params()).fit_kernels(mols[:30], y[:29], train_kernel)


def test_from_recipe_gives_the_recipe_back(fitted_so3):
    model = fitted_so3[0]
    rebuilt = SO3NTKRegressor.from_recipe(model.recipe(), residual=False, cv="gcv")
    assert rebuilt.recipe() == model.recipe()
    assert (rebuilt.residual, rebuilt.cv) == (False, "gcv")
    overlapping = dataclasses.replace(model.recipe(), features=dataclasses.replace(model.recipe().features, element_width=1.5))
    assert SO3NTKRegressor.from_recipe(overlapping).recipe() == overlapping


def test_a_text_file_is_not_an_archive_rather_than_pickled_data(tmp_path):
    """numpy advises allow_pickle for any file that is no archive; the message says what it is."""
    text = tmp_path / "ethanol.xyz"
    text.write_text("3\n\nO 0 0 0\nH 0 0 1\nH 0 1 0\n")
    with pytest.raises(ModelFileError, match="not a molntk model file \\(not a .npz archive\\)"):
        SO3NTKRegressor.load(text)
