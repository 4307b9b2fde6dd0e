"""YAML configuration files: loading, defaults, overrides, and one clear message per problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from molntk.config import ConfigValidationError, apply_overrides
from molntk.pipelines.qm9_summary import QM9SummaryConfig
from molntk.pipelines.tasks import TASKS
from molntk.errors import ConfigError, MolntkError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

VALID = """\
task: qm9-summary
data:
  source: qm9pack
  seed: 3
  split:
    n_train: 1000
    n_valid: 100
"""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a temporary directory, so that messages name files as ``x.yaml``."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(text: str, name: str = "x.yaml") -> str:
    """Write a config file in the working directory; return its relative name."""
    Path(name).write_text(text, encoding="utf-8")
    return name


def problems(path: str, overrides: list[str] | None = None) -> list[str]:
    """The message lines of the error that loading ``path`` raises."""
    with pytest.raises(ConfigValidationError) as info:
        TASKS.load(path, overrides or [])
    lines = str(info.value).splitlines()
    assert lines == [str(p) for p in info.value.problems]
    return lines


# ----------------------------------------------------------------------------- valid configs


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_are_valid(path: Path) -> None:
    config = TASKS.load(path)
    assert config.name == path.stem
    assert config.task in TASKS


def test_qm9_summary_config_defaults() -> None:
    config = TASKS.load(CONFIGS / "qm9_summary.yaml")
    assert isinstance(config, QM9SummaryConfig)
    assert config.to_dict() == {
        "name": "qm9_summary",
        "task": "qm9-summary",
        "data": {
            "source": "qm9pack",
            "root": None,
            "cache_dir": None,
            "seed": 0,
            "split": {"n_train": 110000, "n_valid": 10000},
        },
    }


def test_valid_config_loads(workdir: Path) -> None:
    config = TASKS.load(write(VALID))
    assert config.name == "x"
    assert config.data.seed == 3
    assert (config.data.split.n_train, config.data.split.n_valid) == (1000, 100)


def test_minimal_config_gets_defaults(workdir: Path) -> None:
    config = TASKS.load(write("task: qm9-summary\nname: my-run\n"))
    assert config.name == "my-run"
    assert config.data.source == "qm9pack"
    assert config.data.split.n_train == 110_000


def test_resolved_config_dumps_to_json_and_yaml_round_trip(workdir: Path) -> None:
    config = TASKS.load(write(VALID), ["data.source=torch-geometric", "data.root=~/pyg-qm9", "data.cache_dir=cache"])
    as_dict = config.to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict
    assert as_dict["data"]["root"] == str(Path("~/pyg-qm9").expanduser())
    assert as_dict["data"]["cache_dir"] == "cache"
    assert TASKS.validate(yaml.safe_load(config.to_yaml())) == config


def test_config_error_types() -> None:
    error = ConfigValidationError([])
    assert isinstance(error, ConfigError) and isinstance(error, MolntkError)


# ----------------------------------------------------------------------------- problems


def test_unknown_key_suggests_the_close_one(workdir: Path) -> None:
    path = write("task: qm9-summary\ndata:\n  split:\n    n_trian: 100\n")
    assert problems(path) == ["x.yaml: data.split.n_trian: unknown key 'n_trian' (did you mean 'n_train'?)"]


def test_unknown_key_without_close_match_lists_the_known_keys(workdir: Path) -> None:
    path = write("task: qm9-summary\nzzz: 1\n")
    assert problems(path) == ["x.yaml: zzz: unknown key 'zzz' (known keys: name, task, data)"]


def test_wrong_type(workdir: Path) -> None:
    path = write("task: qm9-summary\ndata:\n  seed: abc\n")
    assert problems(path) == ["x.yaml: data.seed: expected an integer, got 'abc'"]


@pytest.mark.parametrize("value, shown", [("1.5", "1.5"), ("true", "true"), ("'7'", "'7'"), ("[1, 2]", "[1, 2]")])
def test_integers_are_strict(workdir: Path, value: str, shown: str) -> None:
    path = write(f"task: qm9-summary\ndata:\n  seed: {value}\n")
    assert problems(path) == [f"x.yaml: data.seed: expected an integer, got {shown}"]


def test_impossible_value(workdir: Path) -> None:
    path = write("task: qm9-summary\ndata:\n  split:\n    n_valid: -5\n")
    assert problems(path) == ["x.yaml: data.split.n_valid: must be > 0, got -5"]


def test_negative_seed(workdir: Path) -> None:
    path = write("task: qm9-summary\ndata:\n  seed: -1\n")
    assert problems(path) == ["x.yaml: data.seed: must be >= 0, got -1"]


def test_unknown_source_suggests_the_close_one(workdir: Path) -> None:
    path = write("task: qm9-summary\ndata:\n  source: torch_geometric\n")
    assert problems(path) == [
        "x.yaml: data.source: expected one of 'qm9pack', 'torch-geometric', got 'torch_geometric' "
        "(did you mean 'torch-geometric'?)"
    ]


def test_root_only_with_torch_geometric(workdir: Path) -> None:
    assert problems(write("task: qm9-summary\ndata:\n  root: /data/qm9\n")) == [
        "x.yaml: data.root: only used with source 'torch-geometric', not 'qm9pack'"
    ]
    assert problems(write("task: qm9-summary\ndata:\n  source: torch-geometric\n")) == [
        "x.yaml: data.root: required with source 'torch-geometric' (the PyG QM9 dataset directory)"
    ]


def test_section_of_wrong_type(workdir: Path) -> None:
    path = write("task: qm9-summary\ndata: 5\n")
    assert problems(path) == ["x.yaml: data: expected a section (a mapping of keys), got 5"]


def test_name_must_not_be_a_path(workdir: Path) -> None:
    assert problems(write("task: qm9-summary\nname: a/b\n")) == [
        "x.yaml: name: must not contain '/' or '\\' (it names report files)"
    ]
    assert problems(write("task: qm9-summary\nname: ''\n")) == [
        "x.yaml: name: must have at least 1 character(s), got ''"
    ]


def test_several_problems_are_reported_at_once(workdir: Path) -> None:
    path = write("task: qm9-summary\ndata:\n  seed: abc\n  source: qm9\n  split:\n    n_trian: 100\n    n_valid: -5\n")
    assert sorted(problems(path)) == sorted(
        [
            "x.yaml: data.seed: expected an integer, got 'abc'",
            "x.yaml: data.source: expected one of 'qm9pack', 'torch-geometric', got 'qm9' (did you mean 'qm9pack'?)",
            "x.yaml: data.split.n_trian: unknown key 'n_trian' (did you mean 'n_train'?)",
            "x.yaml: data.split.n_valid: must be > 0, got -5",
        ]
    )


def test_bad_yaml_syntax_names_line_and_column(workdir: Path) -> None:
    path = write("task: qm9-summary\ndata:\n  seed: [1, 2\n")
    (line,) = problems(path)
    assert line.startswith("x.yaml:4:1: invalid YAML: ")


def test_duplicate_key(workdir: Path) -> None:
    path = write("task: qm9-summary\ndata:\n  seed: 1\n  seed: 2\n")
    assert problems(path) == ["x.yaml:4:3: invalid YAML: duplicate key 'seed'"]


def test_missing_file(workdir: Path) -> None:
    assert problems("missing.yaml") == ["missing.yaml: no such file"]


def test_empty_file_and_top_level_list(workdir: Path) -> None:
    assert problems(write("# nothing\n")) == ["x.yaml: the file is empty (expected a mapping with a 'task' key)"]
    assert problems(write("- task\n")) == ["x.yaml: expected a mapping of keys at the top level, got list"]


def test_missing_and_unknown_task(workdir: Path) -> None:
    known = ", ".join(TASKS)  # every registered task, in registration order
    assert problems(write("data: {}\n")) == [f"x.yaml: task: missing required key (known tasks: {known})"]
    assert problems(write("task: qm9-sumary\n")) == [
        "x.yaml: task: unknown task 'qm9-sumary' (did you mean 'qm9-summary'?)"
    ]
    assert problems(write("task: 3\n")) == [f"x.yaml: task: expected a task name (one of {known}), got 3"]


# ----------------------------------------------------------------------------- --set overrides


def test_nested_overrides(workdir: Path) -> None:
    config = TASKS.load(write(VALID), ["data.split.n_train=500", "data.seed=7", "name=run-7"])
    assert (config.data.split.n_train, config.data.split.n_valid) == (500, 100)
    assert config.data.seed == 7
    assert config.name == "run-7"


def test_override_creates_missing_sections(workdir: Path) -> None:
    config = TASKS.load(write("task: qm9-summary\n"), ["data.split.n_valid=42"])
    assert config.data.split.n_valid == 42


def test_override_values_are_yaml() -> None:
    merged = apply_overrides(
        {"data": {"seed": 1}},
        ["data.n_train=[100,200]", "data.flag=true", "data.text=abc", "data.none=", "data.map={a: 1}"],
    )
    assert merged == {
        "data": {"seed": 1, "n_train": [100, 200], "flag": True, "text": "abc", "none": None, "map": {"a": 1}}
    }


def test_override_does_not_change_its_input() -> None:
    original = {"data": {"seed": 1}}
    apply_overrides(original, ["data.seed=2"])
    assert original == {"data": {"seed": 1}}


def test_override_list_to_an_integer_key(workdir: Path) -> None:
    assert problems(write(VALID), ["data.split.n_train=[100,200]"]) == [
        "--set data.split.n_train=[100,200]: data.split.n_train: expected an integer, got [100, 200]"
    ]


def test_override_of_unknown_key(workdir: Path) -> None:
    assert problems(write(VALID), ["data.split.n_trian=5"]) == [
        "--set data.split.n_trian=5: data.split.n_trian: unknown key 'n_trian' (did you mean 'n_train'?)"
    ]


def test_override_with_bad_value(workdir: Path) -> None:
    assert problems(write(VALID), ["data.seed=abc"]) == [
        "--set data.seed=abc: data.seed: expected an integer, got 'abc'"
    ]


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.seed", "--set data.seed: expected KEY=VALUE, e.g. data.seed=1"),
        ("=3", "--set =3: expected KEY=VALUE, e.g. data.seed=1"),
        ("data..seed=3", "--set data..seed=3: data..seed: empty part in the key path"),
        ("data.seed.x=1", "--set data.seed.x=1: data.seed: is 3, not a section with keys"),
    ],
)
def test_malformed_override(workdir: Path, override: str, message: str) -> None:
    assert problems(write(VALID), [override]) == [message]


def test_override_with_invalid_yaml_value(workdir: Path) -> None:
    (line,) = problems(write(VALID), ["data.seed=[1"])
    assert line.startswith("--set data.seed=[1: data.seed: value is not valid YAML: ")


def test_override_and_file_problems_are_reported_together(workdir: Path) -> None:
    path = write("task: qm9-summary\ndata:\n  seed: abc\n")
    assert sorted(problems(path, ["oops", "data.split.n_valid=0"])) == sorted(
        [
            "--set oops: expected KEY=VALUE, e.g. data.seed=1",
            "x.yaml: data.seed: expected an integer, got 'abc'",
            "--set data.split.n_valid=0: data.split.n_valid: must be > 0, got 0",
        ]
    )


def test_override_can_fix_the_task(workdir: Path) -> None:
    config = TASKS.load(write("task: qm9-sumary\n"), ["task=qm9-summary"])
    assert config.task == "qm9-summary"


# ----------------------------------------------------------------------------- task registry


def test_task_names_come_from_the_schemas_and_are_unique() -> None:
    from molntk.config import Task, TaskRegistry

    assert list(TASKS) == [
        "qm9-summary",
        "image-classification",
        "qm9-property",
        "emergent-ising",
        "emergent-so3",
        "emergent-digits",
        "md-force-field",
    ]
    assert all(task.name == name for name, task in TASKS.items())
    summary = TASKS["qm9-summary"]
    assert summary.name == "qm9-summary" and summary.schema is QM9SummaryConfig
    with pytest.raises(ValueError, match="'qm9-summary' is registered twice"):
        TaskRegistry([summary, Task(QM9SummaryConfig, summary.run)])
