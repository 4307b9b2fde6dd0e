"""YAML configuration files: reading, ``--set`` overrides, validation, clear messages, tasks.

A configuration file is a YAML mapping whose ``task`` key names the job; a
:class:`TaskRegistry` maps each name to a :class:`Task`: the pydantic schema that
validates the file and the ``run`` function that performs the job (the registry of
``molntk run`` is :data:`molntk.pipelines.tasks.TASKS`)::

    task: qm9-summary
    data:
      source: qm9pack
      seed: 0
      split: {n_train: 110000, n_valid: 10000}

Every schema forbids unknown keys and states its constraints, and every problem found
becomes one line ``<where>: <dotted.key>: <what is wrong>``; all problems of a file and
its overrides are reported together in one :class:`ConfigValidationError`::

    configs/x.yaml: data.seed: expected an integer, got 'abc'
    configs/x.yaml: data.split.n_trian: unknown key 'n_trian' (did you mean 'n_train'?)
    --set data.split.n_valid=-5: data.split.n_valid: must be > 0, got -5

Adding a task: write a :class:`TaskConfig` subclass with a ``task: Literal["<name>"]``
field and its sections next to its pipeline, a ``run(config, source, progress=None)``
returning the result as JSON-serialisable data, and list ``Task(schema, run)`` in
:data:`molntk.pipelines.tasks.TASKS`; ``molntk run`` prints the result with the task's
show function in :mod:`molntk.cli.show`.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from molntk.errors import ConfigError

# ---------------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------------

#: A count of molecules: a strict integer > 0 (``1.0``, ``"5"`` and ``true`` are rejected).
Count = Annotated[int, Field(strict=True, gt=0)]
#: A file system path; a leading ``~`` is expanded, relative paths stay relative to the working directory.
UserPath = Annotated[Path, AfterValidator(Path.expanduser)]
#: A random seed: a strict integer in ``[0, 2**32)`` (valid for every RNG molntk uses).
Seed = Annotated[int, Field(strict=True, ge=0, le=2**32 - 1)]


def _no_path_separator(name: str) -> str:
    """Reject a name that would make a report path leave its directory."""
    if "/" in name or "\\" in name:
        raise ValueError("must not contain '/' or '\\' (it names report files)")
    return name


#: A run name: non-empty, no path separators (it names report files).
Name = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_path_separator)]

#: A positive float (scales, widths).
Positive = Annotated[float, Field(gt=0)]
#: A non-negative float.
NonNegative = Annotated[float, Field(ge=0)]


class Section(BaseModel):
    """Base of every configuration model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldError(ValueError):
    """Raised by a cross-field validator to blame one key of its section."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def check_increasing(values: list[int], key: str) -> None:
    """FieldError blaming ``key`` unless ``values`` is strictly increasing."""
    if any(a >= b for a, b in zip(values, values[1:])):
        raise FieldError(key, f"must be strictly increasing, got {values}")


class TaskConfig(Section):
    """Keys shared by every task. Subclasses narrow ``task`` to ``Literal[...]`` and add their sections."""

    name: Name
    task: str

    def to_dict(self) -> dict[str, Any]:
        """The resolved configuration as plain JSON/YAML values (paths become strings)."""
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        """The resolved configuration as a YAML document, keys in schema order."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)


# ---------------------------------------------------------------------------------------
# Problems and their messages
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a configuration: where (file or override), which key, what."""

    source: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.key}: {self.message}" if self.key else f"{self.source}: {self.message}"


class ConfigValidationError(ConfigError):
    """A configuration has one or more problems; ``str()`` gives one line per problem."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def _show(value: Any) -> str:
    """A value as the user wrote it: strings quoted, the rest in YAML/JSON spelling."""
    if isinstance(value, str):
        return repr(value)
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _closest(word: Any, choices: Sequence[str]) -> str | None:
    """The choice closest to ``word`` (difflib), if any is close enough."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(word: Any, choices: Sequence[str], noun: str) -> str:
    """`` (did you mean 'x'?)`` for a close match, else `` (<noun>: a, b, c)``."""
    close = _closest(word, choices)
    if close is not None:
        return f" (did you mean {close!r}?)"
    return f" ({noun}: {', '.join(choices)})" if choices else ""


def _dotted(loc: Sequence[str | int]) -> str:
    """``('data', 'split', 'n_train')`` → ``data.split.n_train``; list indices as ``[i]``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Every model class inside an annotation (``SplitConfig``, ``SplitConfig | None``, a union of sections)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The (first) model class inside an annotation (``SplitConfig``, ``SplitConfig | None``)."""
    models = _models_in(annotation)
    return models[0] if models else None


def _tags(field: FieldInfo) -> dict[str, type[BaseModel]]:
    """Tag → section of a discriminated union of sections (``Field(discriminator="kind")``);
    empty for any other field."""
    key = field.discriminator
    if not isinstance(key, str):
        return {}
    return {str(value): model for model in _models_in(field.annotation)
            for value in get_args(model.model_fields[key].annotation)}


def _walk(root: type[BaseModel], loc: Sequence[str | int]) -> tuple[type[BaseModel] | None, tuple[str | int, ...]]:
    """The model class that validates the section at ``loc`` (``()`` is ``root``; None if
    none does), and ``loc`` without the tags pydantic puts after a discriminated union's
    key (``data.file.path`` is the user's ``data.path``)."""
    model: type[BaseModel] | None = root
    shown: list[str | int] = []
    i = 0
    while i < len(loc):
        part = loc[i]
        shown.append(part)
        i += 1
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            model = None
            continue
        field = model.model_fields[part]
        tags = _tags(field)
        if i < len(loc) and isinstance(loc[i], str) and loc[i] in tags:
            model = tags[str(loc[i])]
            i += 1
        else:
            model = _model_in(field.annotation)
    return model, tuple(shown)


def _model_at(root: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The model class that validates the section at ``loc`` (``()`` is ``root``)."""
    return _walk(root, loc)[0]


def _literal_values(root: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The allowed values of a ``Literal`` field at ``loc``, as strings."""
    parent = _model_at(root, loc[:-1])
    field = parent.model_fields.get(str(loc[-1])) if parent is not None and loc else None
    if field is None:
        return []
    annotation = field.annotation
    literal = (
        annotation
        if get_origin(annotation) is Literal
        else next((a for a in get_args(annotation) if get_origin(a) is Literal), None)
    )
    return [str(v) for v in get_args(literal)] if literal is not None else []


#: Pydantic error type → what was expected (the message adds ``, got <input>``).
_EXPECTED = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "path_type": "expected a path (a string)",
    "list_type": "expected a list",
    "dict_type": "expected a section (a mapping of keys)",
    "model_type": "expected a section (a mapping of keys)",
    "model_attributes_type": "expected a section (a mapping of keys)",
}

#: Pydantic constraint error type → the constraint, formatted with the error's ``ctx``.
_CONSTRAINTS = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "string_too_short": "must have at least {min_length} character(s)",
    "string_too_long": "must have at most {max_length} characters",
    "too_short": "must have at least {min_length} item(s)",
    "too_long": "must have at most {max_length} items",
}


def _problem_text(root: type[BaseModel], err: Mapping[str, Any]) -> tuple[tuple[str | int, ...], str]:
    """The key path and the message of one pydantic error."""
    kind, loc, ctx = err["type"], tuple(err["loc"]), err.get("ctx", {})
    got = _show(err.get("input"))
    if kind == "missing":
        return loc, "missing required key"
    if kind == "extra_forbidden":
        parent = _model_at(root, loc[:-1])
        keys = list(parent.model_fields) if parent is not None else []
        return loc, f"unknown key {str(loc[-1])!r}" + did_you_mean(loc[-1], keys, "known keys")
    if kind == "literal_error":
        values = _literal_values(root, loc)
        listed = ", ".join(repr(v) for v in values) or ctx.get("expected", "")
        close = _closest(err.get("input"), values)
        hint = f" (did you mean {close!r}?)" if close is not None else ""
        return loc, f"expected one of {listed}, got {got}{hint}"
    if kind in ("union_tag_invalid", "union_tag_not_found"):  # the key of a discriminated union
        key = str(ctx.get("discriminator", "")).strip("'")
        if kind == "union_tag_not_found":
            return (*loc, key), "missing required key"
        tags = [tag.strip().strip("'") for tag in str(ctx.get("expected_tags", "")).split(",")]
        close = _closest(ctx.get("tag"), tags)
        hint = f" (did you mean {close!r}?)" if close is not None else ""
        return (*loc, key), f"expected one of {ctx.get('expected_tags')}, got {_show(ctx.get('tag'))}{hint}"
    if kind == "invalid_key":  # the key itself ends ``loc``; an int key is no list index
        return (*loc[:-1], str(loc[-1])), f"expected a string key, got {got}"
    if kind in _EXPECTED:
        return loc, f"{_EXPECTED[kind]}, got {got}"
    if kind in _CONSTRAINTS:
        return loc, f"{_CONSTRAINTS[kind].format(**ctx)}, got {got}"
    if kind == "value_error" and isinstance(ctx.get("error"), FieldError):
        problem = ctx["error"]
        return (*loc, problem.key), str(problem)
    if kind == "value_error":
        return loc, str(ctx.get("error", err["msg"]))
    msg = str(err["msg"])
    return loc, f"{msg[:1].lower()}{msg[1:]}, got {got}"


# ---------------------------------------------------------------------------------------
# YAML
# ---------------------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML loader that rejects a key repeated in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader reports an unhashable key itself
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(source: str, exc: yaml.YAMLError) -> ConfigProblem:
    """One problem for a YAML syntax error, located as ``file:line:column``."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
    what = getattr(exc, "problem", None) or str(exc)
    return ConfigProblem(where, "", f"invalid YAML: {what}")


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The top-level mapping of a YAML file; :class:`ConfigValidationError` if unusable."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigValidationError([ConfigProblem(source, "", "no such file")]) from None
    except IsADirectoryError:
        raise ConfigValidationError([ConfigProblem(source, "", "is a directory, not a YAML file")]) from None
    except UnicodeDecodeError:
        raise ConfigValidationError([ConfigProblem(source, "", "is not a UTF-8 text file")]) from None
    except OSError as exc:
        raise ConfigValidationError([ConfigProblem(source, "", f"cannot be read ({exc.strerror})")]) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: safe
    except yaml.YAMLError as exc:
        raise ConfigValidationError([_yaml_problem(source, exc)]) from None
    if data is None:
        raise ConfigValidationError(
            [ConfigProblem(source, "", "the file is empty (expected a mapping with a 'task' key)")]
        )
    if not isinstance(data, dict):
        raise ConfigValidationError(
            [ConfigProblem(source, "", f"expected a mapping of keys at the top level, got {type(data).__name__}")]
        )
    return data


# ---------------------------------------------------------------------------------------
# Overrides
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Override:
    """One ``--set key.path=value``: the key path and the value parsed as YAML."""

    text: str
    path: tuple[str, ...]
    value: Any


def parse_override(text: str) -> Override:
    """Parse ``a.b.c=value`` (value as a YAML scalar or flow list/mapping)."""
    source = f"--set {text}"
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigValidationError([ConfigProblem(source, "", "expected KEY=VALUE, e.g. data.seed=1")])
    path = tuple(part.strip() for part in key.split("."))
    if not all(path):
        raise ConfigValidationError([ConfigProblem(source, key, "empty part in the key path")])
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        what = getattr(exc, "problem", None) or str(exc)
        raise ConfigValidationError([ConfigProblem(source, key, f"value is not valid YAML: {what}")]) from None
    return Override(text, path, value)


def _apply_override(data: dict[str, Any], override: Override) -> None:
    """Set ``override.value`` at ``override.path`` in ``data``, creating sections on the way."""
    node = data
    for depth, part in enumerate(override.path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            section = ".".join(override.path[: depth + 1])
            raise ConfigValidationError(
                [ConfigProblem(f"--set {override.text}", section, f"is {_show(child)}, not a section with keys")]
            )
        node = child
    node[override.path[-1]] = override.value


def _merge_overrides(
    data: Mapping[str, Any], overrides: Sequence[str]
) -> tuple[dict[str, Any], list[Override], list[ConfigProblem]]:
    """A copy of ``data`` with the well-formed overrides applied, those overrides, and the problems of the rest."""
    merged = copy.deepcopy(dict(data))
    parsed: list[Override] = []
    problems: list[ConfigProblem] = []
    for text in overrides:
        try:
            override = parse_override(text)
            _apply_override(merged, override)
        except ConfigValidationError as exc:
            problems.extend(exc.problems)
            continue
        parsed.append(override)
    return merged, parsed, problems


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of ``data`` with every ``key.path=value`` override applied in order.

    All malformed overrides are reported together in one :class:`ConfigValidationError`.
    """
    merged, _, problems = _merge_overrides(data, overrides)
    if problems:
        raise ConfigValidationError(problems)
    return merged


def _blame(loc: Sequence[str | int], overrides: Sequence[Override], source: str) -> str:
    """The override that set the key at ``loc`` (longest matching prefix, last wins), else ``source``."""
    best, best_len = source, 0
    for override in overrides:
        n = len(override.path)
        if n >= best_len and tuple(loc[:n]) == override.path:
            best, best_len = f"--set {override.text}", n
    return best


# Tasks, validation and loading
# ---------------------------------------------------------------------------------------

#: ``run(config, source, progress=None)``: perform a task; ``source`` names the configuration
#: in error messages, ``progress`` is a :class:`molntk.scale.progress.Progress`; returns the
#: result as JSON-serialisable data.
RunTask = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class Task:
    """One job of ``molntk run``: the schema of its configuration and the function performing it.

    Its name is the ``task`` literal of the schema (``task: Literal["qm9-summary"]``).
    """

    schema: type[TaskConfig]
    run: RunTask

    @property
    def name(self) -> str:
        """The value of the ``task`` key that selects this task."""
        (name,) = get_args(self.schema.model_fields["task"].annotation)
        return str(name)


class TaskRegistry(Mapping[str, Task]):
    """Task name → :class:`Task`, in the order given; validates and loads configuration files."""

    def __init__(self, tasks: Iterable[Task]) -> None:
        self._tasks: dict[str, Task] = {}
        for task in tasks:
            if task.name in self._tasks:
                raise ValueError(f"task {task.name!r} is registered twice")
            self._tasks[task.name] = task

    def __getitem__(self, name: str) -> Task:
        return self._tasks[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    def schema(self, data: Mapping[str, Any], source: str = "config") -> type[TaskConfig]:
        """The schema for ``data['task']``; a :class:`ConfigValidationError` if missing or unknown."""
        known = list(self._tasks)
        task = data.get("task")
        if "task" not in data:
            problem = f"missing required key (known tasks: {', '.join(known)})"
        elif not isinstance(task, str):
            problem = f"expected a task name (one of {', '.join(known)}), got {_show(task)}"
        elif task not in self._tasks:
            problem = f"unknown task {task!r}" + did_you_mean(task, known, "known tasks")
        else:
            return self._tasks[task].schema
        raise ConfigValidationError([ConfigProblem(source, "task", problem)])

    def validate(
        self, data: Mapping[str, Any], *, source: str = "config", overrides: Sequence[Override] = ()
    ) -> TaskConfig:
        """Validate a configuration mapping against the schema of its task.

        Problems are attributed to the override that set the key, else to ``source``.
        """
        model = self.schema(data, _blame(("task",), overrides, source))
        try:
            return model.model_validate(dict(data))
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                loc, message = _problem_text(model, err)
                loc = _walk(model, loc)[1]
                problems.append(ConfigProblem(_blame(loc, overrides, source), _dotted(loc), message))
            raise ConfigValidationError(problems) from None

    def load(self, path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> TaskConfig:
        """Read, override and validate a configuration file; all problems are reported at once.

        ``name`` defaults to the file name without its extension
        (``configs/qm9_summary.yaml`` → ``qm9_summary``).
        """
        data, parsed, problems = _merge_overrides(read_yaml(path), overrides)
        data.setdefault("name", Path(path).stem)
        try:
            config = self.validate(data, source=str(path), overrides=parsed)
        except ConfigValidationError as exc:
            problems.extend(exc.problems)
        if problems:
            raise ConfigValidationError(problems)
        return config
