"""Every code block of README.md and docs/*.md runs as shown (the examples stay true).

Each fenced block is one test, with the id ``FILE:LINE-LANG`` (the line of its opening
fence), so a failure names the block. The rules:

- **Scenarios.** The blocks of one section (a ``## `` heading and everything up to the
  next one) form one scenario: they run in order, in one Python namespace and one
  temporary working directory. A block's test first runs the earlier blocks of its section
  when this process has not run them yet (so the tests also pass alone or spread over
  xdist workers), and an earlier block's failure is reported as such. The working
  directory holds links to the repository's ``data/`` and ``configs/``, so paths are
  written as from the repository root while everything a block writes (results, model
  files, caches) stays in the temporary directory. ``$MOLNTK_CACHE_DIR`` is the test
  session's (tests/conftest.py).
- **``python`` blocks** are executed with :func:`exec` in the section's namespace.
- **``bash`` / ``sh`` / ``shell`` / ``console`` blocks** are read line by line, with
  ``$ `` prompts stripped, lines ending in ``\\`` joined with the next, trailing
  ``# comments`` dropped and words with ``*`` expanded as file patterns. A command line
  ``molntk ARGS`` (or ``python -m molntk ARGS``) runs in-process through typer's
  :class:`~typer.testing.CliRunner` on :data:`molntk.cli.app` and must exit with code 0;
  ``echo $?`` followed by a number instead asserts that the previous command exited with
  that code. In ``console`` blocks, the lines after a ``$`` command are its expected output:
  each (apart from ``...``) must appear in what the command printed, compared with table
  borders removed and whitespace collapsed. Setup-only lines, those starting with
  ``make``, ``pip install``, ``git clone``, ``cd`` or ``source``, are skipped: they install
  or run the whole project, which the rest of the test suite covers. Any other command
  fails the test, so that a block cannot show a command that is never checked.
- **``yaml`` blocks** must parse (``yaml.safe_load``). Blocks marked ``text``, or without a
  language (mathematics, sample output), are not executed and not collected.

The README's examples therefore use small sizes (a few dozen molecules, coarse grids); the
whole file runs in well under a minute on two cores.
"""

from __future__ import annotations

import glob
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from molntk.cli import app

ROOT = Path(__file__).resolve().parents[1]
SHELL = ("bash", "sh", "shell", "console")
SETUP = ("make", "pip install", "git clone", "cd", "source")
LINKED = ("data", "configs")
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")


@dataclass(frozen=True)
class Block:
    file: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    lang: str
    section: str
    index: int  # position within its section
    text: str

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}-{self.lang}"


def blocks_of(path: Path) -> list[Block]:
    """The executed blocks (python, shell, yaml) of a Markdown file, in order."""
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    section, counts, i = "", {}, 0
    while i < len(lines):
        line = lines[i]
        match = FENCE.match(line)
        if line.startswith("## "):
            section = line[3:].strip()
        if not match:
            i += 1
            continue
        fence, lang, start = match.group(1), match.group(2).lower(), i
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        if lang in ("python", "py", "yaml", "yml") or lang in SHELL:
            index = counts.get(section, 0)
            counts[section] = index + 1
            rel = str(path.relative_to(ROOT))
            out.append(Block(rel, start + 1, lang, section, index, "\n".join(body) + "\n"))
    return out


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


BLOCKS = [block for path in documents() if path.exists() for block in blocks_of(path)]


# --------------------------------------------------------------------------- running blocks


def _normalise(text: str) -> str:
    """Table borders removed and whitespace collapsed (rich tables vs plain sample lines)."""
    return " ".join(re.sub(r"[│┃┏┓┗┛┡┩└┘┌┐├┤┬┴┼╇╈═━─╭╮╰╯|]", " ", text).split())


def _command(line: str) -> list[str] | None:
    """molntk arguments of a command line, None for a setup-only line; other commands fail."""
    if line.startswith(SETUP):
        return None
    words = [match for word in shlex.split(line) for match in (sorted(glob.glob(word)) if "*" in word else [word])]
    if words[:1] == ["molntk"]:
        return words[1:]
    if words[:3] == ["python", "-m", "molntk"]:
        return words[3:]
    raise AssertionError(f"a README command must be `molntk ...` or setup-only ({', '.join(SETUP)}): {line!r}")


def _strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a # outside quotes after whitespace)."""
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words = list(lexer)
    except ValueError:
        return line.strip()
    # re-quote the kept words so that shlex.split in _command gives them back unchanged
    return shlex.join(words)


def run_shell(block: Block) -> None:
    runner = CliRunner()
    console = block.lang == "console"
    last_code: int | None = None
    last_output = ""
    last_line = ""
    expected: list[str] = []
    pending_echo = False

    def check_expected() -> None:
        text = _normalise(last_output)
        for want in expected:
            if want and want != "...":
                assert _normalise(want) in text, f"{block.id}: expected output line {want!r} not in:\n{last_output}"
        expected.clear()

    for raw in block.text.replace("\\\n", " ").splitlines():
        if console and not raw.startswith("$ "):
            if pending_echo:
                assert raw.strip() == str(last_code), f"{block.id}: `{last_line}` exited with {last_code}, the block shows {raw.strip()}"
                pending_echo, last_code = False, 0
            else:
                expected.append(raw.strip())
            continue
        check_expected()
        line = raw[2:] if raw.startswith("$ ") else raw
        line = _strip_comment(line)
        if not line:
            continue
        if line == "echo '$?'" or line == "echo $?":
            pending_echo = True
            continue
        if last_code is not None and last_code != 0:
            raise AssertionError(f"{block.id}: `{last_line}` exited with {last_code} (show `echo $?` if expected):\n{last_output}")
        args = _command(line)
        if args is None:
            continue
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        last_code, last_output, last_line = result.exit_code, result.output, line
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"{block.id}: `{line}` raised\n{last_output}") from result.exception
    check_expected()
    if last_code not in (None, 0):
        raise AssertionError(f"{block.id}: `{last_line}` exited with {last_code} (show `echo $?` if expected):\n{last_output}")


def run_block(block: Block, namespace: dict) -> None:
    if block.lang in ("python", "py"):
        code = compile("\n" * block.line + block.text, block.file, "exec")
        exec(code, namespace)
    elif block.lang in SHELL:
        run_shell(block)
    else:
        yaml.safe_load(block.text)


@dataclass
class Scenario:
    """One section's namespace, working directory and the blocks run so far."""

    workdir: Path
    namespace: dict
    done: int = 0
    failed: str | None = None


_SCENARIOS: dict[tuple[str, str], Scenario] = {}


def _scenario(block: Block, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    key = (block.file, block.section)
    if key not in _SCENARIOS:
        workdir = tmp_path_factory.mktemp("readme")
        for name in LINKED:
            (workdir / name).symlink_to(ROOT / name, target_is_directory=True)
        _SCENARIOS[key] = Scenario(workdir, {"__name__": "__main__"})
    return _SCENARIOS[key]


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_code_block_runs(block: Block, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = _scenario(block, tmp_path_factory)
    section = [b for b in BLOCKS if (b.file, b.section) == (block.file, block.section)]
    monkeypatch.chdir(scenario.workdir)
    while scenario.done <= block.index:
        if scenario.failed is not None:
            pytest.fail(f"an earlier block of section {block.section!r} failed: {scenario.failed}")
        current = section[scenario.done]
        try:
            run_block(current, scenario.namespace)
        except BaseException:
            scenario.failed = current.id
            raise
        finally:
            scenario.done += 1


def test_blocks_are_collected() -> None:
    """The README has runnable Python and command-line blocks (a renamed fence would hide them)."""
    langs = {b.lang for b in BLOCKS if b.file == "README.md"}
    assert "python" in langs and langs & set(SHELL)
