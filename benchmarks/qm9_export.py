"""QM9's arrays for the energy runs, exported compactly, and ``full_qm9.py`` run from them (not a test).

For a machine without ``qm9pack`` (e.g. a GPU node that cannot install it, or that takes
at most some tens of MB with a job): ``export`` writes the five arrays a U0 run reads —
atomic numbers, positions, molecule offsets, QM9 indices and ``u0_atom`` — to a folder,
about 32 MB (the parsed cache with every target and SMILES is 92 MB):

- ``positions.xz``: the positions times 10¹⁰ as int64 (QM9's coordinates have at most ten
  decimals, so x = round(10¹⁰ x) / 10¹⁰ exactly in float64; checked when exporting), the
  eight byte planes one after another, LZMA-compressed;
- ``arrays.npz.xz``: the other four arrays, LZMA-compressed;
- ``sha256.json``: the SHA-256 of each array's bytes as loaded here.

``run`` reads them back, checks every array against its SHA-256 (an error names the array),
builds the :class:`~molntk.data.qm9.QM9` with the one target ``u0_atom`` and runs
``benchmarks/full_qm9.py`` with the arguments after ``--``, the pipeline reading QM9 from it
instead of from qm9pack (configs with ``data.source: qm9pack`` and targets ``[u0_atom]``):

    python benchmarks/qm9_export.py export .kit
    python benchmarks/qm9_export.py run .kit -- --config configs/qm9_u0_full_sum.yaml --json results.json
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import sys
from pathlib import Path

import numpy as np

from molntk.data.qm9 import QM9, load_qm9
from molntk.utils.files import atomic_write_bytes, atomic_write_json

TARGET = "u0_atom"
#: Decimals of QM9's coordinates (qm9pack's CSV text): positions are exact as integers × 10⁻¹⁰.
SCALE = 1e10


def digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def export(folder: Path) -> dict[str, str]:
    """Write the three files of the module docstring; returns the SHA-256 per array."""
    data = load_qm9()
    arrays = {"numbers": data.numbers.astype(np.int8), "offsets": data.offsets, "index": data.index,
              TARGET: np.ascontiguousarray(data.target(TARGET))}
    scaled = np.round(data.positions * SCALE).astype(np.int64)
    if not np.array_equal(scaled / SCALE, data.positions):
        raise ValueError(f"QM9 positions are not integers × {1 / SCALE:g}: the export would change them")
    folder.mkdir(parents=True, exist_ok=True)
    planes = scaled.view(np.uint8).reshape(-1, 8).T.copy()
    atomic_write_bytes(folder / "positions.xz", lzma.compress(planes.tobytes()))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic_write_bytes(folder / "arrays.npz.xz", lzma.compress(buffer.getvalue()))
    digests = {name: digest(array) for name, array in {**arrays, "positions": data.positions}.items()}
    atomic_write_json(folder / "sha256.json", digests)  # last: a folder without it is no export
    return digests


def load(folder: Path) -> QM9:
    """The exported molecules with ``u0_atom``, every array checked against its SHA-256."""
    expected = json.loads((folder / "sha256.json").read_text())
    with np.load(io.BytesIO(lzma.decompress((folder / "arrays.npz.xz").read_bytes()))) as npz:
        arrays = {name: npz[name] for name in npz.files}
    planes = np.frombuffer(lzma.decompress((folder / "positions.xz").read_bytes()), dtype=np.uint8).reshape(8, -1)
    arrays["positions"] = planes.T.copy().view(np.int64).reshape(-1, 3) / SCALE
    for name, array in arrays.items():
        if digest(array) != expected.get(name):
            raise ValueError(f"{folder}: array {name!r} does not match its SHA-256 in sha256.json")
    return QM9(numbers=arrays["numbers"], positions=arrays["positions"], offsets=arrays["offsets"],
               index=arrays["index"], smiles=np.full(arrays["index"].size, ""), targets=arrays[TARGET][:, None],
               target_names=(TARGET,), source="qm9pack")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("export", "run"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("full_qm9_args", nargs=argparse.REMAINDER, help="after --: the arguments of full_qm9.py")
    args = parser.parse_args()
    if args.action == "export":
        export(args.folder)
        sizes = {path.name: path.stat().st_size / 1e6 for path in sorted(args.folder.iterdir())}
        print(f"wrote {args.folder}: " + ", ".join(f"{name} {mb:.1f} MB" for name, mb in sizes.items()))
        return
    data = load(args.folder)
    print(f"QM9 from {args.folder}: {len(data):,} molecules, every array equal to its SHA-256", flush=True)
    import molntk.pipelines.qm9.sets as sets

    sets.load_qm9 = lambda cache_dir=None: data  # the pipeline's reader of data.source "qm9pack"
    sys.path.insert(0, str(Path(__file__).parent))
    import full_qm9

    full_qm9.main([a for a in args.full_qm9_args if a != "--"])


if __name__ == "__main__":
    main()
