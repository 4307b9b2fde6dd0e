"""Staged result sets, atomic writes' permission bits and the writability check of output
folders (molntk/utils/files.py)."""

from __future__ import annotations

import os
import stat

import pytest

from molntk.utils.files import atomic_write_text, folder_write_problem, staged_folder


def _partials(folder):
    return [p.name for p in folder.parent.iterdir() if ".partial-" in p.name]


def test_a_staged_set_replaces_files_and_whole_subfolders_and_leaves_the_rest(tmp_path):
    target = tmp_path / "results"
    (target / "models").mkdir(parents=True)
    (target / "models" / "old_target.npz").write_text("old model")
    (target / "report.json").write_text("old report")
    (target / "kernel_cache").mkdir()
    (target / "kernel_cache" / "block").write_text("cached")
    with staged_folder(target) as stage:
        assert stage.parent == target.parent and stage.name.startswith(".results.partial-")
        (stage / "models").mkdir()
        (stage / "models" / "u0.npz").write_text("new model")
        (stage / "report.json").write_text("new report")
        assert (target / "report.json").read_text() == "old report"  # nothing moves before the end
    assert (target / "report.json").read_text() == "new report"
    assert [p.name for p in (target / "models").iterdir()] == ["u0.npz"]  # the set's models, not a mix
    assert (target / "kernel_cache" / "block").read_text() == "cached"
    assert _partials(target) == []


def test_a_failed_set_moves_nothing_and_removes_its_staging_folder(tmp_path):
    target = tmp_path / "results"
    target.mkdir()
    (target / "report.json").write_text("old report")
    with pytest.raises(OSError, match="No space"):
        with staged_folder(target) as stage:
            (stage / "report.json").write_text("new report")
            raise OSError(28, "No space left on device")
    assert [p.name for p in target.iterdir()] == ["report.json"]
    assert (target / "report.json").read_text() == "old report"
    assert _partials(target) == []


def test_folder_write_problem_names_what_is_in_the_way(tmp_path):
    assert folder_write_problem(tmp_path / "new" / "deeper") is None
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert folder_write_problem(blocker) == "exists and is not a folder"
    assert folder_write_problem(blocker / "sub") == f"{blocker} is not a folder"


def test_atomic_writes_give_new_files_the_umask_mode_and_keep_an_existing_files_mode(tmp_path):
    """A new file gets 0o666 less the umask, as open() would (not mkstemp's 0o600); a
    replaced file keeps its own permission bits."""
    old = os.umask(0o022)
    try:
        new = tmp_path / "new.txt"
        atomic_write_text(new, "a")
        assert stat.S_IMODE(new.stat().st_mode) == 0o644
        kept = tmp_path / "kept.txt"
        kept.write_text("old")
        kept.chmod(0o640)
        atomic_write_text(kept, "new")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640
        assert kept.read_text() == "new"
    finally:
        os.umask(old)
