"""The qm9-property configuration: each problem named with its key, cross-field checks."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from molntk.cli.main import app
from molntk.config import ConfigValidationError
from molntk.pipelines.tasks import TASKS
from tests.helpers.qm9_configs import SMALL


def test_config_problems_name_their_keys(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "task: qm9-property\ntargets: [u0_atm]\nlearning_curve: {n_train: [10, 20], n_select: 30}\n"
        "models: {so3_ntk: {candidates: [{layers: 'lift:3 tanh pool dense'}]}}\n"
    )
    with pytest.raises(ConfigValidationError) as info:
        TASKS.load(str(path), ())
    text = str(info.value)
    assert "targets: unknown QM9 target 'u0_atm'" in text and "u0_atom" in text
    assert "learning_curve.n_select: 30 exceeds the largest n_train 20" in text
    assert "unknown layer 'tanh'" in text


def test_eigh_max_applies_to_the_exact_sizes_only(tmp_path):
    """λ comes from an eigendecomposition at the smallest exact size; with every size above
    ``sparse.exact_up_to`` no exact model runs and eigh_max does not limit the sizes."""
    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    sparse = ["sparse.models=[so3_ntk]", "sparse.environments=20"]
    with pytest.raises(ConfigValidationError, match="below the smallest n_train 10"):
        TASKS.load(str(config), ["regression.eigh_max=5", *sparse, "sparse.exact_up_to=10"])
    assert TASKS.load(str(config), ["regression.eigh_max=5", *sparse, "sparse.exact_up_to=5"]).regression.eigh_max == 5


def test_sparse_descriptor_baselines_need_their_models_section(tmp_path):
    """``sparse.models`` may list soap and fchl19, which are off unless ``models`` gives them."""
    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    with pytest.raises(ConfigValidationError, match=r"sparse.models: lists 'fchl19', but models.fchl19 is null"):
        TASKS.load(str(config), ["sparse.models=[fchl19]"])
    with pytest.raises(ConfigValidationError, match="sparse.models"):
        TASKS.load(str(config), ["sparse.models=[coulomb_matrix]"])  # a global descriptor: no atoms to induce on
    loaded = TASKS.load(str(config), ["sparse.models=[fchl19, soap]", "models.fchl19={sigmas: [2.0]}", "models.soap={zetas: [2]}"])
    assert loaded.sparse.models == ["fchl19", "soap"]


def test_compute_section_is_validated(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    with pytest.raises(ConfigValidationError, match="exactly one of 'workers'"):
        TASKS.load(str(config), ["compute.executor=dask"])
    with pytest.raises(ConfigValidationError, match="only used with executor 'dask'"):
        TASKS.load(str(config), ["compute.workers=2"])
    with pytest.raises(ConfigValidationError, match="below the smallest n_train 10"):
        TASKS.load(str(config), ["regression.eigh_max=5"])
    assert TASKS.load(str(config), ["compute.executor=dask", "compute.scheduler=tcp://127.0.0.1:8786"]).compute.scheduler


@pytest.mark.usefixtures("molntk_cache_dir")
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("learning_curve.n_test=20000", "learning_curve.n_test: 20,000 exceeds the 10,831 molecules of the test split"),
        ("learning_curve.n_train=[10, 200000]", "learning_curve.n_train: 200,000 exceeds the 110,000 molecules of the training split"),
    ],
)
def test_sizes_beyond_the_split_are_refused_with_their_key(tmp_path, override, message):
    """``molntk run`` with more test (training) molecules than the standard split holds: exit 2
    and one line naming the key, before any kernel is computed (nothing is cut silently)."""
    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    result = CliRunner().invoke(app, ["run", str(config), "--set", override, "--set", f"output={tmp_path / 'out'}"])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "out" / "report.json").exists()


def test_an_so3_candidate_may_bring_its_own_radial_basis(tmp_path):
    """A candidate's ``radial`` replaces the feature maps' radial basis in its recipe (and only
    in its own); an impossible basis is an error naming the candidate's ``radial`` key."""
    from molntk.features.radial import GaussianBasis
    from molntk.pipelines.qm9.candidates import so3_recipe

    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    growth = "{kind: gaussian, n: 5, r_min: 0.7, r_cut: 3.0, width_growth: 1.5}"
    loaded = TASKS.load(str(config), [
        "models.so3_ntk={candidates: [{layers: 'lift:2 erf pool dense'}, "
        f"{{layers: 'lift:2 erf pool dense', radial: {growth}}}]}}"
    ])
    plain, own = (so3_recipe(loaded, c, "sum") for c in loaded.models.so3_ntk.candidates)
    assert plain.features.radial == loaded.features.feature_config().radial
    assert own.features.radial == GaussianBasis(n=5, r_min=0.7, r_cut=3.0, width_growth=1.5)
    assert own.features.smearing_width == plain.features.smearing_width
    with pytest.raises(ConfigValidationError, match=r"models\.so3_ntk\.candidates\[0\]\.radial: .*width or width_growth"):
        TASKS.load(str(config), [
            "models.so3_ntk={candidates: [{layers: 'lift:2 erf pool dense', "
            "radial: {kind: gaussian, width: 0.3, width_growth: 1.5}}]}"
        ])


def test_an_so3_candidate_may_bring_its_own_quadrature_grid(tmp_path):
    """A candidate's ``grid_band_limit`` replaces the kernel section's grid in its recipe, its
    kernel and its label (and only in its own); the other candidate keeps the section's; an
    out-of-range grid is an error naming the candidate's key."""
    from molntk.pipelines.qm9.candidates import so3_candidates, so3_recipe

    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    loaded = TASKS.load(str(config), [
        "kernel.grid_band_limit=4",
        "models.so3_ntk={candidates: [{layers: 'lift:2 erf pool dense'}, "
        "{layers: 'lift:2 erf pool dense', grid_band_limit: 6}]}",
    ])
    plain, own = (so3_recipe(loaded, c, "sum") for c in loaded.models.so3_ntk.candidates)
    assert (plain.grid_band_limit, own.grid_band_limit) == (4, 6)
    assert plain.features == own.features
    candidates = so3_candidates(loaded, "sum")
    assert [c.kernel.ctx.grid.band_limit for c in candidates] == [4, 6]
    assert "grid" not in candidates[0].label and candidates[1].label.endswith(", grid band limit 6")
    with pytest.raises(ConfigValidationError, match=r"models\.so3_ntk\.candidates\[0\]\.grid_band_limit"):
        TASKS.load(str(config), ["models.so3_ntk={candidates: [{layers: 'lift:2 erf pool dense', grid_band_limit: 0}]}"])


def test_an_so3_candidate_may_overlap_neighbour_elements(tmp_path):
    """A candidate's ``element_width`` replaces the feature maps' in its recipe, its kernel's
    cache key and its label (and only in its own); a width ≤ 0 is an error naming its key."""
    from molntk.pipelines.qm9.candidates import so3_candidates, so3_recipe

    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    loaded = TASKS.load(str(config), [
        "models.so3_ntk={candidates: [{layers: 'lift:2 erf pool dense'}, "
        "{layers: 'lift:2 erf pool dense', element_width: 1.5}]}",
    ])
    plain, own = (so3_recipe(loaded, c, "sum") for c in loaded.models.so3_ntk.candidates)
    assert (plain.features.element_width, own.features.element_width) == (None, 1.5)
    candidates = so3_candidates(loaded, "sum")
    assert candidates[0].kernel.settings() != candidates[1].kernel.settings()
    assert "element" not in candidates[0].label and candidates[1].label.endswith(", element width 1.5")
    with pytest.raises(ConfigValidationError, match=r"models\.so3_ntk\.candidates\[0\]\.element_width"):
        TASKS.load(str(config), ["models.so3_ntk={candidates: [{layers: 'lift:2 erf pool dense', element_width: 0}]}"])
    with pytest.raises(ConfigValidationError, match=r"features\.element_width"):
        TASKS.load(str(config), ["features.element_width=-1"])


def test_soap_candidates_span_cutoff_width_and_zeta_and_an_edge_on_any_axis_is_reported(tmp_path):
    """SOAP's candidates are r_cuts × sigmas × zetas; the chosen one is at the grid's edge when
    it takes the smallest or largest value of any axis that has two or more values."""
    from molntk.pipelines.qm9.candidates import Candidate
    from molntk.pipelines.qm9.exact import at_grid_edge

    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    soap = TASKS.load(str(config), ["models.soap={r_cuts: [3.0, 4.0, 5.0], sigmas: [0.3], zetas: [1, 2, 3]}"]).models.soap
    grid = [(r, w, z) for r in soap.r_cuts for w in soap.sigmas for z in soap.zetas]
    candidates = [Candidate(str(point), {}, None, grid_value=point) for point in grid]
    assert at_grid_edge(candidates, grid.index((4.0, 0.3, 2))) is False  # inside on both varied axes; σ has one value
    assert at_grid_edge(candidates, grid.index((4.0, 0.3, 3))) is True  # ζ at its largest
    assert at_grid_edge(candidates, grid.index((3.0, 0.3, 2))) is True  # r_cut at its smallest
    one_point = [Candidate("x", {}, None, grid_value=(5.0, 0.5, 2))]
    assert at_grid_edge(one_point, 0) is None and at_grid_edge([Candidate("y", {}, None)], 0) is None
    with pytest.raises(ConfigValidationError, match="r_cut"):
        TASKS.load(str(config), ["models.soap={r_cut: 5.0}"])  # the grid's key is r_cuts


def test_power_spectrum_chooses_among_radial_bases_as_the_so3_candidates_do(tmp_path):
    """``models.power_spectrum.radials``: each radial basis (null: the features section's) × each ζ;
    a basis that does not parse is named by its position."""
    from molntk.pipelines.qm9.candidates import build_candidates

    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    growth = "{kind: gaussian, n: 6, r_min: 0.7, r_cut: 3.0, width_growth: 1.5}"
    loaded = TASKS.load(str(config), [f"models.power_spectrum={{zetas: [1, 2], radials: [null, {growth}]}}"])
    candidates = build_candidates(loaded, "sum", [])["power-spectrum"]
    assert [c.params["zeta"] for c in candidates] == [1, 2, 1, 2]
    features = loaded.features.feature_config(None)
    assert candidates[0].kernel.features == features and "radial" not in candidates[0].label
    assert candidates[2].kernel.features.radial != features.radial and candidates[2].kernel.features.radial.n == 6
    assert "width_growth=1.5" in candidates[2].label
    with pytest.raises(ConfigValidationError, match=r"radials\[1\]"):
        TASKS.load(str(config), ["models.power_spectrum={radials: [null, {kind: gaussian, n: 0}]}"])


def test_power_spectrum_chooses_the_overlap_of_neighbour_elements_as_the_so3_candidates_do(tmp_path):
    """``models.power_spectrum.element_widths``: each width (null: elements apart) × each ζ on the
    maps of each radial basis; without the list the features section's width, and the candidates'
    parameters keep their earlier keys; a width that is not positive is named."""
    from molntk.pipelines.qm9.candidates import build_candidates

    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    loaded = TASKS.load(str(config), ["features.element_width=1.5",
                                      "models.power_spectrum={zetas: [1, 2], element_widths: [null, 2.18]}"])
    candidates = build_candidates(loaded, "sum", [])["power-spectrum"]
    assert [(c.params["zeta"], c.params["element_width"]) for c in candidates] == [(1, None), (2, None), (1, 2.18), (2, 2.18)]
    assert candidates[0].kernel.features.element_mixing() is None and "elements apart" in candidates[0].label
    assert candidates[2].kernel.features.element_width == 2.18 and "element width 2.18" in candidates[2].label
    assert candidates[2].kernel.features.radial == loaded.features.feature_config(None).radial
    default = build_candidates(TASKS.load(str(config), ["features.element_width=1.5"]), "sum", [])["power-spectrum"]
    assert all(c.kernel.features.element_width == 1.5 and set(c.params) == {"zeta", "radial"} for c in default)
    with pytest.raises(ConfigValidationError, match=r"element_widths"):
        TASKS.load(str(config), ["models.power_spectrum={element_widths: [0.0]}"])


def test_a_sum_of_so3_ntks_needs_two_valid_terms_a_weight_grid_and_a_size_to_choose_them_on(tmp_path):
    """Without an exact size the sum runs only as a sparse model, which must be listed in
    ``sparse.models`` and given one weight point (there is no exact kernel to choose on)."""
    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    term = "{layers: 'lift:3 erf pool dense'}"
    with pytest.raises(ConfigValidationError, match=r"models.so3_ntk_sum.terms: .*at least 2"):
        TASKS.load(str(config), [f"models.so3_ntk_sum={{terms: [{term}]}}"])
    with pytest.raises(ConfigValidationError, match=r"models.so3_ntk_sum.terms\[1\].layers: .*unknown layer 'tanh'"):
        TASKS.load(str(config), [f"models.so3_ntk_sum={{terms: [{term}, {{layers: 'lift:3 tanh pool dense'}}]}}"])
    with pytest.raises(ConfigValidationError, match=r"models.so3_ntk_sum.weights\[1\]"):
        TASKS.load(str(config), [f"models.so3_ntk_sum={{terms: [{term}, {term}], weights: [0, -1]}}"])
    no_exact = ["sparse.environments=20", "sparse.exact_up_to=5"]
    with pytest.raises(ConfigValidationError, match=r"models.so3_ntk_sum: has no exact training size \(sparse.exact_up_to 5 "
                                                    r"is below the smallest n_train 10\) and is not in sparse.models"):
        TASKS.load(str(config), [f"models.so3_ntk_sum={{terms: [{term}, {term}]}}", "sparse.models=[so3_ntk]", *no_exact])
    with pytest.raises(ConfigValidationError, match=r"models.so3_ntk_sum: has no exact training size to choose its weights on .*"
                                                    r"give its sparse model one point \(points: \[\[c_2, …\]\]\), not 7"):
        TASKS.load(str(config), [f"models.so3_ntk_sum={{terms: [{term}, {term}]}}", "sparse.models=[so3_ntk_sum]", *no_exact])
    one_point = TASKS.load(str(config), [f"models.so3_ntk_sum={{terms: [{term}, {term}], points: [[0.3]]}}",
                                         "sparse.models=[so3_ntk_sum]", *no_exact])
    assert one_point.models.so3_ntk_sum.n_points == 1
    with pytest.raises(ConfigValidationError, match=r"sparse.models: a sparse so3_ntk_sum needs kernel.pairing 'element' or 'shared'"):
        TASKS.load(str(config), [f"models.so3_ntk_sum={{terms: [{term}, {term}]}}", "sparse.models=[so3_ntk_sum]",
                                 "kernel.pairing=atom-index"])
    loaded = TASKS.load(str(config), [f"models.so3_ntk_sum={{terms: [{term}, {term}]}}"])
    assert loaded.models.so3_ntk_sum.weights == [0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0]
    assert loaded.models.so3_ntk_sum.searched == loaded.models.so3_ntk_sum.weights
    assert loaded.models.so3_ntk_sum.n_points == 7


def test_a_sum_of_three_so3_ntks_may_list_its_weight_points(tmp_path):
    """``points`` replaces the product grid: each point names c_2, c_3 of the networks after
    the first; a point of another length, a negative weight, or points beside an explicit
    grid are named."""
    config = tmp_path / "c.yaml"
    config.write_text(SMALL)
    terms = "terms: [{layers: 'lift:3 erf pool dense'}, {layers: 'lift:3 erf pool dense', sigma_w: 2.0}, {layers: 'lift:3 quadratic pool dense'}]"
    loaded = TASKS.load(str(config), [f"models.so3_ntk_sum={{{terms}, points: [[0, 1], [0.03, 30]]}}"])
    assert loaded.models.so3_ntk_sum.searched == [[0.0, 1.0], [0.03, 30.0]] and loaded.models.so3_ntk_sum.n_points == 2
    with pytest.raises(ConfigValidationError, match=r"models.so3_ntk_sum.points: each point gives the weights c_2, … of the 2 networks after the first, got \[0.03\]"):
        TASKS.load(str(config), [f"models.so3_ntk_sum={{{terms}, points: [[0, 1], [0.03]]}}"])
    with pytest.raises(ConfigValidationError, match=r"models.so3_ntk_sum.points\[0\]\[1\]: must be >= 0"):
        TASKS.load(str(config), [f"models.so3_ntk_sum={{{terms}, points: [[0, -1]]}}"])
    with pytest.raises(ConfigValidationError, match=r"models.so3_ntk_sum.points: give either weights \(a grid\) or points, not both"):
        TASKS.load(str(config), [f"models.so3_ntk_sum={{{terms}, weights: [0, 1], points: [[0, 1]]}}"])
