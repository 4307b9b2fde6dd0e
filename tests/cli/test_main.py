"""The ``molntk`` command line: help, version, info, data, config and run, with their exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

import molntk
from molntk.cli import app
from molntk.cli.show import SHOW
from molntk.data.qm9 import QM9
from molntk.errors import CacheError
from molntk.pipelines.tasks import TASKS

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "qm9_summary.yaml")
TARGET_STATS = {"unit", "count", "mean", "std", "min", "max"}

METHANE_XYZ = """\
5
methane
C 0.0 0.0 0.0
H 0.629 0.629 0.629
H -0.629 -0.629 0.629
H -0.629 0.629 -0.629
H 0.629 -0.629 -0.629
"""
WATER_XYZ = "3\nwater\nO 0 0 0\nH 0.96 0 0\nH -0.24 0.93 0\n"
BAD_ELEMENT_XYZ = "2\nbad\nC 0 0 0\nXx 1.2 0 0\n"
SMILES_FILE = "CCO ethanol\nC1CC broken-ring\n"


def invoke(*args: str) -> Result:
    """Run ``molntk ARGS`` in-process; stdout and stderr are kept apart."""
    return CliRunner().invoke(app, list(args))


def error_lines(result: Result) -> list[str]:
    """The stderr lines of a failed run, each checked to be an ``error:`` line (no traceback)."""
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), result.stderr
    assert "Traceback" not in result.output
    return [line.removeprefix("error: ") for line in lines]


# ----------------------------------------------------------------------------- help, version, info


def test_help_lists_the_commands() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("info", "data", "config", "run", "fit", "predict"):
        assert command in result.stdout


def test_help_states_the_exit_codes() -> None:
    text = " ".join(invoke("--help").stdout.split())
    assert "Exit status: 0 all good; 1 some inputs failed" in text
    assert "2 usage, configuration, output-folder or model-file errors" in text


@pytest.mark.parametrize("group", ["data", "config"])
def test_group_help(group: str) -> None:
    result = invoke(group, "--help")
    assert result.exit_code == 0
    assert "Usage" in result.stdout


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"molntk {molntk.__version__}"


def test_info_json_parses() -> None:
    result = invoke("info", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["versions"]["molntk"] == molntk.__version__
    assert set(report["versions"]) == {"molntk", "python", "torch", "triton", "e3nn", "torch-geometric", "rdkit", "numpy"}
    torch = report["torch"]
    assert isinstance(torch["cuda_available"], bool)
    assert isinstance(torch["cuda_devices"], list)
    assert torch["num_threads"] >= 1
    assert report["cache"]["dir"] == os.environ["MOLNTK_CACHE_DIR"]


def test_info_table() -> None:
    result = invoke("info")
    assert result.exit_code == 0, result.output
    assert "torch threads" in result.stdout
    assert os.environ["MOLNTK_CACHE_DIR"] in result.stdout


# ----------------------------------------------------------------------------- data read


@pytest.fixture
def molecule_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Good and bad molecule files written for the test, by role; relative to the working directory."""
    monkeypatch.chdir(tmp_path)
    files = {
        "methane": ("methane.xyz", METHANE_XYZ),
        "water": ("water.xyz", WATER_XYZ),
        "bad_element": ("bad.xyz", BAD_ELEMENT_XYZ),
        "smiles": ("mols.smi", SMILES_FILE),
    }
    for name, text in files.values():
        Path(name).write_text(text, encoding="utf-8")
    return {role: name for role, (name, _) in files.items()} | {"missing": "missing.sdf"}


def test_read_mixed_good_and_bad(molecule_files: dict[str, str]) -> None:
    f = molecule_files
    result = invoke(
        "data", "read", f["methane"], f["bad_element"], f["smiles"], f["missing"], "--smiles", "C(", "--smiles", "CC"
    )
    assert result.exit_code == 1, result.output
    out = result.stdout
    for good in ("methane", "CH4", "ethanol", "C2H6O", "C2H6"):
        assert good in out
    assert f"{f['bad_element']}:4" in out and "unknown element symbol 'Xx'" in out
    assert f"{f['smiles']}:2" in out and "C1CC" in out
    assert f["missing"] in out and "file not found" in out
    assert "cannot parse SMILES" in out
    assert "3 molecule(s) read, 4 failed" in out


def test_read_json_is_well_formed(molecule_files: dict[str, str]) -> None:
    f = molecule_files
    result = invoke("data", "read", f["methane"], f["bad_element"], f["smiles"], "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert [(m["id"], m["formula"], m["n_atoms"]) for m in report["molecules"]] == [
        ("methane", "CH4", 5),
        ("ethanol", "C2H6O", 9),
    ]
    assert all(m["source"] for m in report["molecules"])
    assert [(x["source"], x["line"]) for x in report["failures"]] == [(f["bad_element"], 4), (f["smiles"], 2)]
    assert all(x["problem"] and x["message"] for x in report["failures"])


def test_read_smiles_option_takes_several_values(molecule_files: dict[str, str]) -> None:
    """``--smiles A B`` reads both SMILES (B is no file); paths beside them stay paths."""
    f = molecule_files
    result = invoke("data", "read", "--smiles", "CCO", "CC", f["methane"], f["missing"], "--json")
    assert result.exit_code == 1, result.output  # missing.sdf
    report = json.loads(result.stdout)
    assert sorted(m["formula"] for m in report["molecules"]) == ["C2H6", "C2H6O", "CH4"]
    assert [(x["source"], x["problem"]) for x in report["failures"]] == [(f["missing"], "file not found")]


def test_read_molecules_with_carbon_and_no_hydrogen() -> None:
    """Cyanogen, CF4 and CO2 (41 QM9 molecules have C and no H) are read and named by their Hill formulas."""
    result = invoke("data", "read", "--smiles", "N#CC#N", "--smiles", "FC(F)(F)F", "--smiles", "O=C=O", "--json")
    assert result.exit_code == 0, result.output
    assert [m["formula"] for m in json.loads(result.stdout)["molecules"]] == ["C2N2", "CF4", "CO2"]


def test_read_all_good_exits_0(molecule_files: dict[str, str]) -> None:
    result = invoke("data", "read", molecule_files["methane"], molecule_files["water"], "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["n_molecules"] == 2 and report["failures"] == []


def test_read_element_set(molecule_files: dict[str, str]) -> None:
    result = invoke("data", "read", molecule_files["methane"], molecule_files["water"], "--elements", "H,C", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert [m["id"] for m in report["molecules"]] == ["methane"]
    (failure,) = report["failures"]
    assert failure["source"].startswith(molecule_files["water"])
    assert "element(s) O outside" in failure["problem"]


@pytest.mark.parametrize("args", [[], ["x.xyz", "--elements", "H,Qq"], ["x.xyz", "--elements", ","]])
def test_read_usage_errors_exit_2(args: list[str]) -> None:
    assert invoke("data", "read", *args).exit_code == 2


# ----------------------------------------------------------------------------- data qm9


def check_summary(summary: dict, *, seed: int, train: int = 110_000, valid: int = 10_000) -> None:
    """The structure of a QM9 summary document and its sizes."""
    assert summary["n_molecules"] == 130_831
    assert summary["n_atoms"] > summary["n_molecules"]
    assert summary["split"] == {"seed": seed, "train": train, "valid": valid, "test": 130_831 - train - valid}
    targets = summary["targets"]
    assert {"mu", "alpha", "homo", "lumo", "gap", "u0", "u0_atom", "cv"} <= set(targets)
    for name, stats in targets.items():
        assert set(stats) == TARGET_STATS, name
        assert stats["count"] == 130_831, name
        assert stats["min"] <= stats["mean"] <= stats["max"], name
        assert stats["std"] >= 0, name
    assert targets["u0_atom"]["unit"] == "meV"


def test_qm9_summary_json(qm9: QM9) -> None:
    result = invoke("data", "qm9", "--summary", "--json", "--seed", "4")
    assert result.exit_code == 0, result.output
    check_summary(json.loads(result.stdout), seed=4)


def test_qm9_summary_table(qm9: QM9) -> None:
    result = invoke("data", "qm9", "--summary")
    assert result.exit_code == 0, result.output
    for text in ("130,831 molecules", "u0_atom", "meV", "train 110,000, valid 10,000, test 10,831"):
        assert text in result.stdout


def test_qm9_without_summary_prints_count_and_cache(qm9: QM9) -> None:
    result = invoke("data", "qm9", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["n_molecules"] == 130_831
    assert report["cache"].startswith(os.environ["MOLNTK_CACHE_DIR"])


def test_molntk_error_is_one_red_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise CacheError("QM9 cache lock held by another process")

    monkeypatch.setattr("molntk.cli.data.load_qm9", broken)
    result = invoke("data", "qm9", "--summary")
    assert result.exit_code == 1
    assert error_lines(result) == ["QM9 cache lock held by another process"]


# ----------------------------------------------------------------------------- config


def test_config_show_prints_resolved_yaml() -> None:
    result = invoke("config", "show", CONFIG, "--set", "data.seed=5", "--set", "data.split.n_train=1000")
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.stdout)
    assert shown["name"] == "qm9_summary" and shown["task"] == "qm9-summary"
    assert shown["data"]["seed"] == 5
    assert shown["data"]["split"] == {"n_train": 1000, "n_valid": 10000}


def test_config_validate_ok() -> None:
    result = invoke("config", "validate", CONFIG)
    assert result.exit_code == 0, result.output
    assert f"ok: {CONFIG}" in result.stdout


def test_config_error_lists_every_problem_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("task: qm9-summary\ndata:\n  seed: abc\n  split: {n_trian: 5}\n", encoding="utf-8")
    for command in ("show", "validate"):
        result = invoke("config", command, str(path), "--set", "data.split.n_valid=-5")
        assert result.exit_code == 2
        assert sorted(error_lines(result)) == sorted(
            [
                f"{path}: data.seed: expected an integer, got 'abc'",
                f"{path}: data.split.n_trian: unknown key 'n_trian' (did you mean 'n_train'?)",
                "--set data.split.n_valid=-5: data.split.n_valid: must be > 0, got -5",
            ]
        )


def test_config_validate_reports_every_file(tmp_path: Path) -> None:
    result = invoke("config", "validate", CONFIG, str(tmp_path / "missing.yaml"))
    assert result.exit_code == 2
    assert f"ok: {CONFIG}" in result.stdout
    assert error_lines(result) == [f"{tmp_path / 'missing.yaml'}: no such file"]


# ----------------------------------------------------------------------------- run


def test_every_task_has_a_show_function() -> None:
    assert set(SHOW) == set(TASKS)


def test_run_qm9_summary_json(qm9: QM9) -> None:
    result = invoke("run", CONFIG, "--json", "--set", "data.seed=2", "--set", "data.split.n_train=100000")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["config"]["task"] == "qm9-summary"
    assert report["config"]["data"]["seed"] == 2
    check_summary(report["result"], seed=2, train=100_000)


def test_run_qm9_summary_table(qm9: QM9) -> None:
    result = invoke("run", CONFIG)
    assert result.exit_code == 0, result.output
    assert "qm9_summary: QM9 (qm9pack)" in result.stdout


def test_run_split_too_large_for_the_data(qm9: QM9) -> None:
    result = invoke("run", CONFIG, "--set", "data.split.n_train=130000", "--set", "data.split.n_valid=831")
    assert result.exit_code == 2
    (line,) = error_lines(result)
    assert line.startswith(
        f"{CONFIG}: data.split: n_train + n_valid = 130,000 + 831 = 130,831 leaves no test molecules"
    )


def test_run_torch_geometric_source(qm9: QM9, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``source: torch-geometric`` reads PyG's QM9 in ``root`` (replaced here by 20 molecules)."""
    roots = []

    def fake_pyg_qm9(root: object) -> QM9:
        roots.append(root)
        return qm9.subset(range(20))

    monkeypatch.setattr("molntk.data.pyg.load_pyg_qm9", fake_pyg_qm9)
    overrides = ["data.source=torch-geometric", f"data.root={tmp_path}", "data.split={n_train: 12, n_valid: 3}"]
    result = invoke("run", CONFIG, "--json", *(arg for o in overrides for arg in ("--set", o)))
    assert result.exit_code == 0, result.output
    assert roots == [tmp_path]
    summary = json.loads(result.stdout)["result"]
    assert summary["n_molecules"] == 20
    assert summary["split"] == {"seed": 0, "train": 12, "valid": 3, "test": 5}


def test_run_unknown_task_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("task: fly-to-the-moon\n", encoding="utf-8")
    result = invoke("run", str(path))
    assert result.exit_code == 2
    (line,) = error_lines(result)
    assert line.startswith(f"{path}: task: unknown task 'fly-to-the-moon' (known tasks: ")
    assert "qm9-summary" in line


def test_run_missing_config() -> None:
    result = invoke("run", "no-such-config.yaml")
    assert result.exit_code == 2
    assert error_lines(result) == ["no-such-config.yaml: no such file"]


# ----------------------------------------------------------------------------- a real process


def test_subprocess_summary_json_is_the_only_stdout(qm9: QM9) -> None:
    """``python -m molntk data qm9 --summary --json``: stdout is exactly one JSON document."""
    done = subprocess.run(
        [sys.executable, "-m", "molntk", "data", "qm9", "--summary", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    check_summary(json.loads(done.stdout), seed=0)


def test_subprocess_config_error_exit_code(tmp_path: Path) -> None:
    """The installed script reports a config error as one ``error:`` line and exit status 2."""
    script = Path(sys.executable).with_name("molntk")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "molntk"]
    done = subprocess.run(
        [*command, "config", "validate", CONFIG, "--set", "data.seed=abc"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --set data.seed=abc: data.seed: expected an integer, got 'abc'"
    assert done.stdout == ""


def test_progress_lines_in_a_log_are_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    """Off a terminal a report is one line whatever its length (a log stays greppable; rich
    would wrap it at 80 columns), its text as given (no markup)."""
    from molntk.cli.progress import job_progress

    label = "so3-ntk-forces-frames-150-fps N=1000 kernel [r_cut 4 Å]"
    with job_progress() as progress:
        progress(label, 11, 63)
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{label}: 11/63 blocks, ") and len(line) > 80


def test_progress_lines_report_first_last_and_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain progress lines: the first block, then at most one per ``every`` seconds, and the
    last; the ETA is (total − done) / rate at the label's mean rate since its first report."""
    from molntk.cli import progress as progress_module
    from molntk.cli.progress import ProgressLines

    clock = iter([0.0, 0.0, 10.0, 20.0, 40.0])
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: next(clock))
    lines: list[str] = []
    report = ProgressLines(lines.append, every=30.0)
    report("k", 1, 5)  # t = 0: first line
    report("k", 2, 5)  # t = 10: within 30 s of the last line, skipped
    report("k", 3, 5)  # t = 20: skipped
    report("k", 5, 5)  # t = 40: done, always written
    assert lines == ["k: 1/5 blocks, 0 s (0 s into the job)", "k: 5/5 blocks, 40 s (40 s into the job)"]
    clock = iter([0.0, 0.0, 40.0])
    lines.clear()
    report = ProgressLines(lines.append, every=30.0)
    report("k", 1, 5)
    report("k", 3, 5)  # 2 blocks in 40 s: 2 left take 40 s
    assert lines[-1] == "k: 3/5 blocks, 40 s (40 s into the job), ETA 40 s"
