"""Generate GFN2-xTB molecular-dynamics trajectories with energies and forces (README.md here).

For each molecule (default: ethanol, malonaldehyde, aspirin) the SMILES is embedded by RDKit,
relaxed with GFN2-xTB (tblite), and run by Langevin MD (ASE) at 500 K with 0.5 fs steps:
2,000 equilibration steps, then 2,000 frames one every 20 steps (10 fs), written as
``<out>/<name>.extxyz`` (energy eV, forces eV/Å) with a manifest ``<out>/<name>.json``
(settings, seed, timings). ``--out`` defaults to the molntk cache (``$MOLNTK_CACHE_DIR/md``
or the user cache). Needs ``pip install "molntk[md]"``. Run from the repository root::

    OMP_NUM_THREADS=1 python data/md/make_md_trajectories.py
    # the committed sample (100 ethanol frames):
    OMP_NUM_THREADS=1 python data/md/make_md_trajectories.py --molecules ethanol --frames 100 \
        --out data/md --name-suffix _sample
"""

from __future__ import annotations

import argparse
import time

from molntk.data.md import MD_MOLECULES, MDSettings, md_cache_dir, md_trajectory, write_trajectory


def _report(name: str, done: int, total: int, started: float) -> None:
    """A progress line at every tenth of the frames."""
    if done % max(total // 10, 1) == 0:
        print(f"{name}: {done}/{total} frames, {time.perf_counter() - started:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> None:
    defaults = MDSettings()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", nargs="+", choices=sorted(MD_MOLECULES), default=list(MD_MOLECULES))
    parser.add_argument("--frames", type=int, default=defaults.n_frames, help="frames kept per molecule")
    parser.add_argument("--stride", type=int, default=defaults.stride, help="MD steps between kept frames")
    parser.add_argument("--equilibration", type=int, default=defaults.n_equilibration, help="MD steps discarded")
    parser.add_argument("--temperature", type=float, default=defaults.temperature, help="K")
    parser.add_argument("--timestep", type=float, default=defaults.timestep, help="fs")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--out", default=None, help="output folder (default: the molntk cache's md/ folder)")
    parser.add_argument("--name-suffix", default="", help="appended to each molecule's file name")
    args = parser.parse_args(argv)
    settings = MDSettings(temperature=args.temperature, timestep=args.timestep, n_equilibration=args.equilibration,
                          n_frames=args.frames, stride=args.stride, seed=args.seed)
    out = args.out if args.out is not None else md_cache_dir()
    for name in args.molecules:
        started = time.perf_counter()
        trajectory = md_trajectory(f"{name}{args.name_suffix}", MD_MOLECULES[name], settings,
                                   progress=lambda done, total, name=name: _report(name, done, total, started))
        path = write_trajectory(trajectory, out)
        timings = ", ".join(f"{key} {value:.1f}" for key, value in trajectory.timings.items())
        print(f"{name}: {len(trajectory.frames)} frames in {time.perf_counter() - started:.1f} s ({timings}) -> {path}", flush=True)


if __name__ == "__main__":
    main()
