"""QM9 from qm9pack: completeness, agreement with the CSV files, units, the cache."""

from __future__ import annotations

import ast
import csv
import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import molntk.data.qm9 as qm9_module
from molntk.data.molecule import element_number
from molntk.data.qm9 import (
    HARTREE_TO_MEV,
    QM9,
    QM9_STANDARD_TARGETS,
    QM9_TARGETS,
    load_qm9,
    parse_qm9pack,
    qm9_cache_dir,
    qm9_summary,
    qm9pack_data_dir,
)
from molntk.errors import InputError

N_QM9 = 130_831
PART_FILES = ("qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv")


def _csv_rows(name: str, n: int) -> list[dict[str, str]]:
    """The first ``n`` data rows of a qm9pack CSV file."""
    with open(qm9pack_data_dir() / name, newline="") as fh:
        reader = csv.DictReader(fh)
        return [next(reader) for _ in range(n)]


def _last_csv_row(name: str) -> dict[str, str]:
    path = qm9pack_data_dir() / name
    with open(path, "rb") as fh:
        header = fh.readline().decode()
        fh.seek(-20_000, 2)
        last = fh.read().decode().strip().split("\n")[-1]
    return next(csv.DictReader([header, last]))


def _assert_matches_row(data: QM9, row: dict[str, str]) -> None:
    """Atoms, positions and the 12 standard targets of ``row`` equal the loaded molecule's."""
    (i,) = data.positions_of([int(row["Index"])])
    mol = data.molecule(int(i))
    assert mol.id == f"gdb_{row['Index']}" and mol.smiles == row["SMILES"]
    np.testing.assert_array_equal(mol.numbers, [element_number(s) for s in ast.literal_eval(row["Elements"])])
    np.testing.assert_array_equal(mol.positions, np.array(ast.literal_eval(row["XYZ_Ang"]), dtype=float))
    for name in QM9_STANDARD_TARGETS:
        target = QM9_TARGETS[name]
        assert data.target(name)[i] == pytest.approx(target.scale * float(row[target.column]), rel=1e-14)


def test_all_molecules_are_loaded(qm9: QM9) -> None:
    assert len(qm9) == N_QM9
    assert qm9.index[0] == 1 and qm9.index[-1] == 133_885 and np.all(np.diff(qm9.index) > 0)
    assert qm9.numbers.size == qm9.offsets[-1] == qm9.n_atoms.sum()
    assert set(np.unique(qm9.numbers).tolist()) == {1, 6, 7, 8, 9}
    assert qm9.targets.shape == (N_QM9, len(QM9_TARGETS)) and np.isfinite(qm9.targets).all()


def test_methane_and_ammonia_match_the_csv(qm9: QM9) -> None:
    methane, ammonia = _csv_rows("qm9_part1.csv", 2)
    _assert_matches_row(qm9, methane)
    _assert_matches_row(qm9, ammonia)
    assert qm9.molecule(0).formula == "CH4" and qm9.molecule(1).formula == "H3N"


@pytest.mark.parametrize("name", PART_FILES)
def test_every_part_file_stays_aligned(qm9: QM9, name: str) -> None:
    _assert_matches_row(qm9, _csv_rows(name, 1)[0])
    _assert_matches_row(qm9, _last_csv_row(name))


def test_methane_atomization_energy(qm9: QM9) -> None:
    (i,) = qm9.positions_of([1])
    expected = (-40.47893 - (-37.846772 - 4 * 0.500273)) * HARTREE_TO_MEV
    assert qm9.target("u0_atom")[i] == pytest.approx(expected, rel=1e-12)
    assert abs(qm9.target("u0_atom")[i] - (-17_172)) < 1.0
    u0 = qm9.target("u0")[i]
    assert u0 == pytest.approx(-40.47893 * HARTREE_TO_MEV, rel=1e-14)
    # The same atom references are subtracted from U0, U, H and G.
    for total, atom in (("u", "u_atom"), ("h", "h_atom"), ("g", "g_atom")):
        assert qm9.target(total)[i] - qm9.target(atom)[i] == pytest.approx(u0 - qm9.target("u0_atom")[i], rel=1e-12)


def test_target_names_and_units() -> None:
    units = {name: target.unit for name, target in QM9_TARGETS.items()}
    assert units == {
        "mu": "D", "alpha": "a0^3", "homo": "meV", "lumo": "meV", "gap": "meV", "r2": "a0^2",
        "zpve": "meV", "u0": "meV", "u": "meV", "h": "meV", "g": "meV", "cv": "cal/(mol K)",
        "u0_atom": "meV", "u_atom": "meV", "h_atom": "meV", "g_atom": "meV",
    }  # fmt: skip
    assert QM9_STANDARD_TARGETS == tuple(QM9_TARGETS)[:12]
    assert HARTREE_TO_MEV == 27211.386245988


def test_unknown_target_is_named(qm9: QM9) -> None:
    with pytest.raises(InputError, match="'U0'"):
        qm9.target("U0")


def test_subset_and_molecules(qm9: QM9) -> None:
    picks = [5, 0, 130_830, 5]
    sub = qm9.subset(picks)
    assert len(sub) == 4
    assert sub.molecules() == qm9.molecules(picks)
    np.testing.assert_array_equal(sub.targets, qm9.targets[picks])
    np.testing.assert_array_equal(sub.index, qm9.index[picks])
    assert len(qm9.subset([])) == 0
    assert qm9.molecule(-1) == qm9.molecule(N_QM9 - 1)


def test_bad_positions_are_rejected(qm9: QM9) -> None:
    with pytest.raises(IndexError, match="130831"):
        qm9.molecule(N_QM9)
    with pytest.raises(InputError, match="-1"):
        qm9.subset([0, -1])
    with pytest.raises(InputError, match="999999"):
        qm9.positions_of([1, 999_999])


def test_arrays_are_read_only(qm9: QM9) -> None:
    with pytest.raises(ValueError):
        qm9.positions[0, 0] = 1.0
    with pytest.raises(ValueError):
        qm9.target("mu")[0] = 1.0


def test_summary_is_json_serialisable(qm9: QM9) -> None:
    summary = json.loads(json.dumps(qm9_summary(qm9)))
    assert summary["n_molecules"] == N_QM9
    assert summary["split"] == {"seed": 0, "train": 110_000, "valid": 10_000, "test": 10_831}
    u0_atom = summary["targets"]["u0_atom"]
    assert u0_atom["unit"] == "meV" and u0_atom["count"] == N_QM9
    assert u0_atom["min"] < u0_atom["mean"] < u0_atom["max"] < 0
    assert qm9_summary(qm9.subset(range(10)))["split"] is None


def test_cache_lives_in_the_configured_directory(qm9: QM9, molntk_cache_dir: Path) -> None:
    directory = qm9_cache_dir()
    assert directory == molntk_cache_dir / "qm9"
    manifest = json.loads((directory / "qm9.json").read_text())
    assert manifest["n_molecules"] == N_QM9 and manifest["format"] == qm9_module.CACHE_FORMAT


# ----------------------------------------------------------------------------- damage


def _damage(cache: Path, kind: str) -> None:
    data, manifest = cache / "qm9.npz", cache / "qm9.json"
    if kind == "truncated":
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    elif kind == "flipped_byte":
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 3] ^= 0xFF
        data.write_bytes(bytes(raw))
    elif kind == "missing_manifest":
        manifest.unlink()
    else:
        fields = json.loads(manifest.read_text())
        if kind == "old_format":
            fields["format"] = 0
        elif kind == "other_sources":
            fields["sources"]["qm9_part2.csv"] += 1
        elif kind == "wrong_checksum":
            fields["sha256"] = "0" * 64
        manifest.write_text(json.dumps(fields))


@pytest.fixture
def small_cache(qm9: QM9, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[Path]]:
    """A valid cache of 50 molecules in ``tmp_path``, built by a stand-in CSV parser.

    Returns the cache_dir to pass and the list of parser calls made after the build.
    """
    calls: list[Path] = []

    def parse(data_dir: Path) -> QM9:
        calls.append(data_dir)
        return qm9.subset(range(50))

    monkeypatch.setattr(qm9_module, "parse_qm9pack", parse)
    load_qm9(tmp_path)
    calls.clear()
    return tmp_path, calls


def test_valid_cache_is_used(small_cache: tuple[Path, list[Path]], recwarn: pytest.WarningsRecorder) -> None:
    cache_dir, calls = small_cache
    assert len(load_qm9(cache_dir)) == 50
    assert calls == [] and len(recwarn) == 0


@pytest.mark.parametrize(
    "kind", ["truncated", "flipped_byte", "missing_manifest", "old_format", "other_sources", "wrong_checksum"]
)
def test_damaged_cache_is_rebuilt(small_cache: tuple[Path, list[Path]], kind: str) -> None:
    cache_dir, calls = small_cache
    _damage(cache_dir / "qm9", kind)
    with pytest.warns(UserWarning, match="rebuilding"):
        assert len(load_qm9(cache_dir)) == 50
    assert len(calls) == 1
    assert len(load_qm9(cache_dir)) == 50  # the rewritten cache is valid again
    assert len(calls) == 1


def test_rebuild_flag_parses_again(small_cache: tuple[Path, list[Path]], caplog: pytest.LogCaptureFixture) -> None:
    cache_dir, calls = small_cache
    with caplog.at_level(logging.INFO, logger="molntk.data.qm9"):
        load_qm9(cache_dir, rebuild=True)
    assert len(calls) == 1 and "built QM9 cache" in caplog.text


#: A process that loads QM9 into the cache_dir argv[1] with a slow stand-in parser (a
#: one-molecule QM9 after 1 s), so that two such processes overlap in the build.
_SLOW_BUILD = """
import logging, sys, time
import numpy as np
import molntk.data.qm9 as q

def parse(data_dir):
    time.sleep(1.0)
    return q.QM9(numbers=[6, 1, 1, 1, 1], positions=np.arange(15.0).reshape(5, 3), offsets=[0, 5],
                 index=[1], smiles=["C"], targets=np.zeros((1, len(q.QM9_TARGETS))), target_names=tuple(q.QM9_TARGETS))

q.parse_qm9pack = parse
logging.basicConfig(level=logging.INFO, stream=sys.stdout)
print("n", len(q.load_qm9(sys.argv[1])))
"""


def test_concurrent_processes_build_once(tmp_path: Path) -> None:
    """Two processes starting on an empty cache: one builds, the other waits and reads."""
    procs = [
        subprocess.Popen([sys.executable, "-c", _SLOW_BUILD, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert all("n 1" in out for out in outputs), outputs
    assert sum(out.count("built QM9 cache") for out in outputs) == 1, outputs
    assert not any("rebuilding" in out for out in outputs), outputs


# ----------------------------------------------------------------------------- parsing errors


def _tiny_source(tmp_path: Path) -> Path:
    """A qm9pack-like data folder with the first two molecules of each part file."""
    for name in PART_FILES:
        with open(qm9pack_data_dir() / name) as fh:
            (tmp_path / name).write_text("".join(fh.readline() for _ in range(3)))
    return tmp_path


def test_parse_small_source(tmp_path: Path) -> None:
    data = parse_qm9pack(_tiny_source(tmp_path))
    assert len(data) == 6 and data.index[:2].tolist() == [1, 2]


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("[-0.0404260543,1.0241077531,0.0625637998],", "", r"qm9_part1.csv:3: molecule 2: coordinate count"),
        ("-0.0404260543", "x", r"qm9_part1.csv: unreadable XYZ_Ang"),
        ("['N','H','H','H']", "['N','H','H']", r"qm9_part1.csv:3: molecule 2: element count"),
        ("['N','H','H','H']", "['N','H','H','Xx']", r"qm9_part1.csv:3: molecule 2: unknown element symbol 'Xx'"),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path: Path, old: str, new: str, problem: str) -> None:
    source = _tiny_source(tmp_path)
    part = source / "qm9_part1.csv"
    lines = part.read_text().splitlines(keepends=True)
    assert old in lines[2]  # ammonia
    lines[2] = lines[2].replace(old, new, 1)
    part.write_text("".join(lines))
    with pytest.raises(InputError, match=problem):
        parse_qm9pack(source)


def test_missing_package_is_a_cache_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qm9_module, "find_spec", lambda name: None)
    with pytest.raises(qm9_module.CacheError, match="qm9pack"):
        load_qm9()

