"""Label MD frames with density-functional energies and forces (PySCF; README.md here).

Reads the frames of an extended xyz file (e.g. a GFN2-xTB trajectory of
``make_md_trajectories.py``), computes each frame's Kohn-Sham DFT energy and forces
(``molntk.data.dft``; default PBE/def2-SVP, the level of theory of rMD17) and writes
``<out>/<name>.extxyz`` with a manifest ``<out>/<name>.json`` (level of theory, versions, the
source file's SHA-256, frames that failed, timings). A frame whose SCF fails is reported and
left out; the others go on. Needs ``pip install "molntk[dft]"``. Run from the repository root::

    # the committed DFT sample: the 100 frames of the GFN2-xTB ethanol sample
    OMP_NUM_THREADS=1 python data/md/label_with_dft.py data/md/ethanol_sample.extxyz \
        --out data/md --name ethanol_sample_pbe

    # a cached trajectory's frames 1000-1999 in 8 processes (one PySCF thread each)
    python data/md/label_with_dft.py ~/.cache/molntk/md/ethanol.extxyz --frames 1000:2000 \
        --workers 8 --out labels --name ethanol_pbe_1000-1999
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import ase.io

from molntk.data.dft import DFTSettings, label_frames, write_labels
from molntk.data.readers import check_file
from molntk.errors import InputError


def frames_slice(text: str) -> str:
    """The ``--frames`` argument as the slice ASE reads: ``N`` (the first N frames) or
    ``START:STOP`` (Python's slice of frame indices; either end may be left out)."""
    if re.fullmatch(r"\d+", text) and int(text) > 0:
        return f":{text}"
    if re.fullmatch(r"\d*:\d*", text):
        return text
    raise argparse.ArgumentTypeError(f"expected N (the first N frames, N >= 1) or START:STOP, got {text!r}")


def main(argv: list[str] | None = None) -> int:
    defaults = DFTSettings()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="extended xyz file of the frames to label")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--name", required=True, help="output file name without suffix")
    parser.add_argument("--frames", type=frames_slice, default=":",
                        help="N: the first N frames; START:STOP: those frames (Python slice); default all")
    parser.add_argument("--workers", type=int, default=1,
                        help="label the frames in this many processes, one PySCF thread each (default 1: "
                             "one process on OMP_NUM_THREADS threads)")
    parser.add_argument("--xc", default=defaults.xc, help="exchange-correlation functional (libxc name)")
    parser.add_argument("--basis", default=defaults.basis, help="Gaussian basis set")
    parser.add_argument("--charge", type=int, default=defaults.charge)
    parser.add_argument("--spin", type=int, default=defaults.spin, help="N_alpha - N_beta")
    parser.add_argument("--conv-tol", type=float, default=defaults.conv_tol, help="SCF convergence, Hartree")
    parser.add_argument("--grid-level", type=int, default=defaults.grid_level, help="PySCF XC grid level 0-9")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    started = time.perf_counter()

    def report(done: int, total: int) -> None:
        if done % max(total // 10, 1) == 0:
            print(f"{args.name}: {done}/{total} frames, {time.perf_counter() - started:.0f} s", flush=True)

    try:
        settings = DFTSettings(xc=args.xc, basis=args.basis, charge=args.charge, spin=args.spin,
                               conv_tol=args.conv_tol, grid_level=args.grid_level)
        check_file(args.source)
        try:
            every = ase.io.read(args.source, index=":", format="extxyz")
        except ValueError as error:  # ASE's answer to a malformed file
            raise InputError(str(args.source), f"not an extended xyz file ({error})") from None
        frames = []
        for index in range(len(every))[slice(*(int(end) if end else None for end in args.frames.split(":")))]:
            every[index].info.setdefault("id", f"{args.source.name}#{index}")  # frames named by their place in the file
            frames.append(every[index])
        if not frames:
            raise InputError(str(args.source), f"no frames in {args.frames}")
        labelled = label_frames(frames, settings, workers=args.workers, progress=report)
    except InputError as error:  # settings that cannot work, a missing or malformed file: before any SCF
        print(f"error: {error}", file=sys.stderr)
        return 2
    path = write_labels(labelled, settings, args.out, args.name, args.source, frames=args.frames)
    for frame_id, reason in labelled.failed.items():
        print(f"failed: {frame_id}: {reason}", file=sys.stderr)
    timings = ", ".join(f"{key} {value:.1f}" for key, value in labelled.timings.items())
    print(f"{args.name}: {len(labelled.frames)} of {len(frames)} frames labelled with {settings.method} "
          f"({timings}) -> {path}", flush=True)
    return 1 if labelled.failed else 0


if __name__ == "__main__":
    sys.exit(main())
