"""Density-functional energies and forces of given geometries with PySCF (force-field labels).

MD frames are cheap to sample with GFN2-xTB (:mod:`molntk.data.md`) and expensive to run with
DFT; the usual compromise, and this module's job, is to label sampled geometries with DFT.
:class:`PySCFCalculator` is an ASE calculator for closed- or open-shell Kohn-Sham DFT (PyPI
package ``pyscf``, the optional extra ``molntk[dft]``): for a geometry r it solves the SCF
equations to ``conv_tol`` Hartree and returns

    E = E_KS(r) · Hartree                         (eV)
    F = −∇_r E_KS(r) · Hartree / Bohr             (eV/Å, PySCF's analytic nuclear gradient)

with ASE's CODATA constants. The gradient includes the response of the exchange-correlation
grid to the moving atoms (``grid_response``, on by default; PySCF leaves it out by default), so
that F is the derivative of E, as force fields trained on both assume, and the forces of a
free molecule sum to zero: without it they differ by up to 2.6e-3 eV/Å on an ethanol frame
(grid level 3, forces of about 1 eV/Å) at no measurable extra cost. The default level of theory, PBE/def2-SVP, is that of the rMD17
data set (Christensen and von Lilienfeld, Mach. Learn.: Sci. Technol. 1, 045018, 2020).
Each geometry starts from PySCF's own initial guess, so a frame's labels do not depend on the
frames labelled before it.

:func:`label_frames` labels a list of frames and keeps going past a frame whose SCF does not
converge (or whose electron count does not fit the spin): it returns the labelled frames and
the failed ones with the reason, for the caller to report. :func:`write_labels` writes them
as extended xyz (read back by :func:`~molntk.data.labelled.read_labelled` with
``forces=True``) with a JSON manifest, both atomically.

Units: positions Å, energies eV, forces eV/Å.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import ase
import numpy as np
from ase import units
from ase.calculators.calculator import Calculator, all_changes
from ase.calculators.singlepoint import SinglePointCalculator

from molntk.data.labelled import write_labelled_frames
from molntk.errors import InputError
from molntk.utils.files import atomic_write_json, sha256_file
from molntk.utils.versions import package_version

#: Functional and basis of the default labels: rMD17's level of theory.
DEFAULT_XC = "PBE"
DEFAULT_BASIS = "def2-SVP"


class SCFNotConverged(InputError):
    """The self-consistent field of a geometry did not converge (``source`` names the geometry)."""


@dataclass(frozen=True)
class DFTSettings:
    """Kohn-Sham DFT with functional ``xc`` in the Gaussian basis ``basis`` for a molecule of
    total ``charge`` and ``spin`` = N_alpha − N_beta (restricted for ``spin`` 0, else
    unrestricted); density fitting of the Coulomb term when ``density_fit`` (PySCF's default
    auxiliary basis); SCF to ``conv_tol`` Hartree in at most ``max_cycle`` iterations on the
    exchange-correlation grid of ``grid_level`` (PySCF's 0-9; 3 is its default); forces with
    the grid's response to the atoms when ``grid_response``."""

    xc: str = DEFAULT_XC
    basis: str = DEFAULT_BASIS
    charge: int = 0
    spin: int = 0
    density_fit: bool = True
    conv_tol: float = 1e-10
    max_cycle: int = 100
    grid_level: int = 3
    grid_response: bool = True

    def __post_init__(self) -> None:
        if self.spin < 0:
            raise InputError("DFT settings", f"spin (N_alpha - N_beta) must be >= 0, got {self.spin}")
        if not self.conv_tol > 0:
            raise InputError("DFT settings", f"conv_tol must be positive, got {self.conv_tol}")
        if self.max_cycle < 1:
            raise InputError("DFT settings", f"max_cycle must be at least 1, got {self.max_cycle}")
        if not 0 <= self.grid_level <= 9:
            raise InputError("DFT settings", f"grid_level must be 0-9 (PySCF's grid levels), got {self.grid_level}")

    @property
    def method(self) -> str:
        """The level of theory as chemists write it, e.g. ``PBE/def2-SVP``."""
        return f"{self.xc}/{self.basis}"


def _geometry_name(atoms: ase.Atoms) -> str:
    """The geometry's ``id`` (as frames carry it), else its formula: the name errors give."""
    return str(atoms.info.get("id", atoms.get_chemical_formula()))


def _pyscf_modules() -> tuple[Any, Any]:
    try:
        from pyscf import dft, gto
    except ImportError:
        raise ImportError('DFT labels need PySCF: pip install "molntk[dft]" (or: pip install pyscf)') from None
    return gto, dft


class PySCFCalculator(Calculator):
    """ASE calculator of Kohn-Sham DFT energies (eV) and forces (eV/Å) by PySCF (module docstring).

    ``settings`` give the level of theory; other keyword arguments go to ASE's ``Calculator``.
    An unknown functional is refused here; a geometry's errors name it by its ``id`` in
    ``atoms.info`` (else its formula): :class:`SCFNotConverged` when its SCF does not converge,
    :class:`~molntk.errors.InputError` when its electron count does not fit ``spin``."""

    implemented_properties = ["energy", "forces"]

    def __init__(self, settings: DFTSettings = DFTSettings(), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self._gto, self._dft = _pyscf_modules()
        try:
            self._dft.libxc.parse_xc(settings.xc)
        except KeyError:
            raise InputError("DFT settings", f"xc {settings.xc!r} is not a functional PySCF (libxc) knows") from None

    def check_basis(self, symbols: Iterable[str]) -> None:
        """Raise :class:`~molntk.errors.InputError` naming the settings unless the basis has
        functions for every element of ``symbols`` (checked before any SCF is run)."""
        from pyscf.lib.exceptions import BasisNotFoundError

        for symbol in sorted(set(symbols)):
            try:
                with warnings.catch_warnings():  # PySCF's hint to install basis-set-exchange
                    warnings.simplefilter("ignore", UserWarning)
                    self._gto.basis.load(self.settings.basis, symbol)
            except BasisNotFoundError:
                raise InputError("DFT settings", f"basis {self.settings.basis!r} has no functions for "
                                                 f"{symbol} (or is not a basis PySCF knows)") from None

    def _mole(self, atoms: ase.Atoms) -> Any:
        name = _geometry_name(atoms)
        n_electrons = int(atoms.numbers.sum()) - self.settings.charge
        if n_electrons <= 0 or (n_electrons - self.settings.spin) % 2:
            raise InputError(name, f"{n_electrons} electrons (charge {self.settings.charge}) cannot have "
                                   f"spin N_alpha - N_beta = {self.settings.spin}")
        return self._gto.M(atom=list(zip(atoms.get_chemical_symbols(), atoms.positions.tolist())),
                           basis=self.settings.basis, unit="Angstrom", charge=self.settings.charge,
                           spin=self.settings.spin, verbose=0)

    def calculate(self, atoms: ase.Atoms | None = None, properties: Sequence[str] = ("energy",),
                  system_changes: Sequence[str] = all_changes) -> None:
        super().calculate(atoms, properties, system_changes)
        settings = self.settings
        mole = self._mole(self.atoms)
        scf = self._dft.RKS(mole) if settings.spin == 0 else self._dft.UKS(mole)
        if settings.density_fit:
            scf = scf.density_fit()
        scf.xc, scf.conv_tol, scf.max_cycle = settings.xc, settings.conv_tol, settings.max_cycle
        scf.grids.level = settings.grid_level
        energy = scf.kernel()
        if not scf.converged:
            raise SCFNotConverged(_geometry_name(self.atoms), f"{settings.method} SCF did not converge to "
                                                              f"{settings.conv_tol:g} Hartree in {settings.max_cycle} iterations")
        gradients = scf.nuc_grad_method()
        gradients.grid_response = settings.grid_response
        gradient = np.asarray(gradients.kernel())  # Hartree/Bohr, shape (n, 3)
        self.results = {"energy": float(energy) * units.Hartree, "forces": -gradient * (units.Hartree / units.Bohr)}


@dataclass
class LabelledFrames:
    """Frames with DFT energies and forces (``frames``), the ids of the frames that could not
    be labelled with the reason (``failed``), both in input order, the wall seconds of the batch
    and the CPU seconds of its SCFs and gradients summed over frames (``timings``: ``wall_s``,
    ``cpu_s``) and the number of worker processes that labelled them (``workers``)."""

    frames: list[ase.Atoms]
    failed: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    workers: int = 1


#: One frame's outcome: its id, the labelled copy (None when it failed), the reason it failed
#: (None when labelled) and the CPU seconds its SCF and gradient took.
FrameOutcome = tuple[str, ase.Atoms | None, str | None, float]


def _label_frame(calculator: PySCFCalculator, atoms: ase.Atoms, index: int) -> FrameOutcome:
    """A copy of ``atoms`` (positions, numbers, ``id``) with the calculator's energy and forces."""
    frame_id = str(atoms.info.get("id", f"frame {index}"))
    frame = ase.Atoms(numbers=atoms.numbers, positions=atoms.positions, info={"id": frame_id})
    frame.calc = calculator
    cpu = time.process_time()
    try:
        energy, forces = frame.get_potential_energy(), frame.get_forces()
    except InputError as error:
        return frame_id, None, error.problem, time.process_time() - cpu
    frame.calc = SinglePointCalculator(frame, energy=energy, forces=forces)
    return frame_id, frame, None, time.process_time() - cpu


@functools.lru_cache(maxsize=1)
def _worker_calculator(settings: DFTSettings) -> PySCFCalculator:
    """The calculator of a worker process, made once per process; PySCF runs on one thread there,
    so that the workers share the cores instead of oversubscribing them."""
    from pyscf import lib

    lib.num_threads(1)
    return PySCFCalculator(settings)


def _label_frame_in_worker(settings: DFTSettings, atoms: ase.Atoms, index: int) -> FrameOutcome:
    """:func:`_label_frame` in a worker process (a module-level function: spawned workers import it)."""
    return _label_frame(_worker_calculator(settings), atoms, index)


def _outcomes(frames: Sequence[ase.Atoms], calculator: PySCFCalculator, workers: int,
              progress: Callable[[int, int], None] | None) -> Iterator[FrameOutcome]:
    """Each frame's outcome in input order, by ``calculator`` here (``workers`` 1) or by workers'
    own calculators of its settings; ``progress(done, total)`` after each frame finishes."""
    total = len(frames)
    if workers == 1:
        for index, atoms in enumerate(frames):
            yield _label_frame(calculator, atoms, index)
            if progress is not None:
                progress(index + 1, total)
        return
    # Spawned, not forked: a fork would copy the parent's OpenMP and torch thread state.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_label_frame_in_worker, calculator.settings, atoms, index)
                   for index, atoms in enumerate(frames)]
        try:
            for done, _ in enumerate(as_completed(futures), start=1):
                if progress is not None:
                    progress(done, total)
            outcomes = [future.result() for future in futures]
        except BrokenProcessPool as error:
            raise RuntimeError("a DFT worker process ended abruptly: it was killed (out of memory?), or the script "
                               "that asked for workers does not call label_frames under "
                               "`if __name__ == \"__main__\":`") from error
    yield from outcomes


def label_frames(frames: Sequence[ase.Atoms], settings: DFTSettings = DFTSettings(), *, workers: int = 1,
                 progress: Callable[[int, int], None] | None = None) -> LabelledFrames:
    """Copies of ``frames`` (positions, numbers and the ``id`` in ``info``) holding the DFT energy
    (eV) and forces (eV/Å) of ``settings``; a frame whose SCF fails is left out and named in
    ``failed`` (the others go on). Settings that cannot work for any frame (an unknown
    functional, a basis without an element of the frames) raise before the first SCF.

    ``workers`` > 1 labels the frames in that many processes, one PySCF thread each (frames are
    independent: each SCF starts from PySCF's own guess, so the labels do not depend on which
    process computed them); with 1, the frames are labelled here on PySCF's threads
    (``OMP_NUM_THREADS``). The workers are spawned, so a script that asks for them must call
    this under ``if __name__ == "__main__":`` (Python's rule for spawned processes; without
    it the pool breaks). ``progress(done, total)`` is called after each frame."""
    if workers < 1:
        raise InputError("workers", f"must be at least 1, got {workers}")
    calculator = PySCFCalculator(settings)
    calculator.check_basis(symbol for atoms in frames for symbol in atoms.get_chemical_symbols())
    result = LabelledFrames([], workers=workers)
    wall, cpu = time.perf_counter(), 0.0
    for frame_id, frame, problem, seconds in _outcomes(frames, calculator, workers, progress):
        cpu += seconds
        if frame is None:
            result.failed[frame_id] = str(problem)
        else:
            result.frames.append(frame)
    result.timings = {"wall_s": time.perf_counter() - wall, "cpu_s": cpu}
    return result


def write_labels(labelled: LabelledFrames, settings: DFTSettings, folder: str | os.PathLike[str], name: str,
                 source: str | os.PathLike[str], frames: str = ":") -> Path:
    """Write ``<folder>/<name>.extxyz`` (the labelled frames) and ``<folder>/<name>.json`` (level
    of theory, settings, PySCF and ASE versions, the source file with its SHA-256 and the
    ``frames`` of it that were labelled (a Python slice, ``":"`` all), the failed frames,
    timings and worker processes), each atomically; returns the extxyz path."""
    folder = Path(folder)
    path = folder / f"{name}.extxyz"
    write_labelled_frames(path, labelled.frames)
    manifest: dict[str, Any] = {
        "name": name,
        "file": path.name,
        "method": settings.method,
        "settings": asdict(settings),
        "code": {"pyscf": package_version("pyscf"), "ase": package_version("ase")},
        "units": {"positions": "Å", "energy": "eV", "forces": "eV/Å"},
        "source": {"file": Path(source).name, "sha256": sha256_file(source), "frames": frames},
        "n_frames": len(labelled.frames),
        "failed": labelled.failed,
        "timings_s": {key: round(value, 2) for key, value in labelled.timings.items()},
        "workers": labelled.workers,
    }
    atomic_write_json(folder / f"{name}.json", manifest)
    return path
