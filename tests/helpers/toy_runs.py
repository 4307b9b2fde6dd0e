"""``molntk run`` on a small configuration written to a temporary folder, as the pipeline
tests do it: a whole run that must write its files, or a bad override that must give one
error line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from molntk.cli import app


def run_toy(tmp_path: Path, text: str, files: tuple[str, ...]) -> dict[str, Any]:
    """Run the configuration ``text`` with output ``tmp_path/out``; assert that it exits 0 and
    writes every one of ``files`` (non-empty); return its report.json."""
    config = tmp_path / "toy.yaml"
    config.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(config), "--set", f"output={out}", "--json"])
    assert result.exit_code == 0, result.output
    for name in files:
        assert (out / name).stat().st_size > 0, name
    return json.loads((out / "report.json").read_text())


def config_error(tmp_path: Path, text: str, override: str) -> str:
    """Run the configuration ``text`` with ``--set override``; assert that it exits 2 with
    one line of output, and return that line."""
    config = tmp_path / "toy.yaml"
    config.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(config), "--set", override])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]
