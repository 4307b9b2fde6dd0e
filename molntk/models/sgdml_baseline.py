"""sGDML, the force-field baseline of the SO(3) NTK force fields (PyPI package ``sgdml``).

    from molntk.models.sgdml_baseline import SGDMLForceField
    model = SGDMLForceField().fit(frames, energies, forces)
    energies = model.predict(new_frames);  forces = model.predict_forces(new_frames)

sGDML (Chmiela et al., Nat. Commun. 9, 3887, 2018) is a Gaussian process on the forces of
one molecule: a Matérn-5/2 kernel of length scale σ on the descriptor of inverse pairwise
distances (1/‖r_i − r_j‖, i > j), differentiated twice (the force field is the gradient
of an energy GP, so it is conservative), symmetrised over the permutations of equivalent
atoms that the package finds in the training frames (``use_sym``); the energy is the
integral of the force field plus a constant fitted to the training energies
(``use_E``). λ is the package's default 1e-10 (noise-free data: the solve is regularised
only numerically).

σ is chosen from ``sigmas`` on held-out training frames: a seeded ``validation_fraction`` of
the training frames is held out, a model fitted on the rest for each σ, and the σ with the
lowest criterion mean(r_E²)/mean((E − Ē)²) + mean(r_F²)/mean(F²) (the normalised energy
and force errors: the criterion with which :class:`~molntk.models.force_field.SO3ForceFieldRegressor`
chooses its noise levels) is refitted on every training frame. ``sigma_at_grid_edge_`` says
whether the choice fell on an end of the grid (then widen it).

The package solves the (3nM)² force system of M training frames of n atoms by one Cholesky
factorisation (scipy); it runs on one BLAS thread, because the threaded factorisation of
scipy's OpenBLAS crashed the process (segmentation fault in the library) on the 27,000²
system of 1,000 ethanol frames on this project's 2-core machine; a known failure class of
threaded ``dpotrf`` on large matrices (OpenMathLib/OpenBLAS issues #352, #1413, #2821). Its
memory is two copies of that matrix: 11.7 GB at M = 1,000 ethanol frames. When that exceeds
the memory the package may plan for (``max_memory_gb``; default the whole machine's), it
takes its iterative solver instead: conjugate gradients preconditioned by a Nyström factor on
as many inducing frames as that memory allows (aspirin at M = 1,000 on a 24 GB machine with
``max_memory_gb=17``: 124 frames, 213 iterations, 18 min).

Every frame must be the same molecule with its atoms in the same order (an MD trajectory,
an MD17 file): sGDML compares frames atom by atom. Units are the caller's (positions Å;
energy and force units consistent, e.g. eV and eV/Å).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from threadpoolctl import threadpool_limits

from molntk.data.molecule import Molecule
from molntk.errors import InputError
from molntk.models.so3_ntk import as_molecules
from molntk.utils.checks import integer

#: σ grid of the validation search (sGDML's own command line offers 2 … 100 in steps of 10
#: by default; the lower end matters for small, stiff molecules).
SIGMAS: tuple[float, ...] = (2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 70.0, 100.0, 150.0)


@functools.cache
def _sgdml() -> tuple[Any, Any]:
    """The package's trainer (one instance: the package allows no second one alive) and its
    predictor class (InputError naming the extra when the package is missing)."""
    logger_class = logging.getLoggerClass()
    try:
        from sgdml.predict import GDMLPredict
        from sgdml.train import GDMLTrain
    except ImportError as exc:  # pragma: no cover - the dev install has it
        raise InputError("sgdml", 'the sGDML baseline needs the package sgdml: pip install "molntk[md]"') from exc
    finally:
        # importing sgdml makes its coloured stderr logger the class of every logger created
        # afterwards in the process; give the process its own class back
        logging.setLoggerClass(logger_class)
    logging.getLogger("sgdml").setLevel(logging.ERROR)  # its solver chatter (info, hints) off
    return GDMLTrain(max_processes=1, use_torch=False), GDMLPredict


def _frames(X: Any, numbers: np.ndarray | None = None, name: str = "X") -> tuple[np.ndarray, np.ndarray]:
    """Positions (M, n, 3) of frames of one molecule and its elements (atoms of every frame in
    the order of the first, or of ``numbers``)."""
    molecules: list[Molecule] = as_molecules(X, name)
    if not molecules:
        raise InputError(name, "no molecules")
    reference = molecules[0].numbers if numbers is None else numbers
    for i, m in enumerate(molecules):
        if m.numbers.shape != reference.shape or not np.array_equal(m.numbers, reference):
            raise InputError(f"{name}[{i}]", "sGDML needs frames of one molecule with its atoms in one order: "
                             f"elements {m.numbers.tolist()} differ from {reference.tolist()}")
    return np.stack([m.positions for m in molecules]), reference.copy()


def _dataset(R: np.ndarray, E: np.ndarray, F: np.ndarray, numbers: np.ndarray) -> dict[str, Any]:
    """The package's in-memory data set (its keys and 0-d string arrays, as its .npz files hold)."""
    text = np.array
    return {"type": text("d"), "name": text("molntk"), "theory": text("unknown"), "md5": text(""),
            "r_unit": text("Ang"), "e_unit": text("unknown"), "R": R, "E": E, "F": F, "z": numbers}


class SGDMLForceField(RegressorMixin, BaseEstimator):
    """sGDML through the ``sgdml`` package (module docstring): ``sigmas`` (the length-scale
    grid, or one value), ``use_sym`` (permutational symmetries), ``validation_fraction`` and
    ``seed`` (the held-out frames of the σ search), ``max_memory_gb`` (the memory in GB the
    package plans its solver for, None: the whole machine's; module docstring).

    Fitted attributes: ``sigma_``, ``sigma_at_grid_edge_``, ``search_`` (σ → validation
    criterion), ``perms_`` (the atom permutations the model is symmetrised over, found once
    in every training frame), ``model_`` (the package's model dict), ``numbers_`` (the
    molecule's elements).
    """

    def __init__(self, sigmas: Sequence[float] = SIGMAS, use_sym: bool = True, validation_fraction: float = 0.2,
                 seed: int = 0, max_memory_gb: int | None = None) -> None:
        self.sigmas = sigmas
        self.use_sym = use_sym
        self.validation_fraction = validation_fraction
        self.seed = seed
        self.max_memory_gb = max_memory_gb

    def _task(self, R: np.ndarray, E: np.ndarray, F: np.ndarray, sigma: float, perms: np.ndarray | None) -> dict[str, Any]:
        """The package's training recipe on every frame given (a data set of exactly n_train
        frames is taken whole, in order); its validation subset, unused by training, is the
        first frame as a set of its own. ``perms``: the symmetries (None: searched here)."""
        first = _dataset(R[:1], E[:1], F[:1], self.numbers_)
        return _sgdml()[0].create_task(
            _dataset(R, E, F, self.numbers_), len(E), first, 1, sig=float(sigma), lam=1e-10, perms=perms,
            use_sym=self.use_sym, use_E=True, use_E_cstr=False)

    def _train(self, R: np.ndarray, E: np.ndarray, F: np.ndarray, sigma: float) -> dict[str, Any]:
        """A model on these frames with the symmetries of the whole training set (``perms_``),
        its Cholesky factorisation on one BLAS thread (module docstring), planned for
        ``max_memory_gb`` (the one trainer's memory limit, set for this call and restored)."""
        trainer = _sgdml()[0]
        machine = trainer._max_memory  # the package's limit: the machine's memory in GB, set at its creation
        if self.max_memory_gb is not None:
            trainer._max_memory = min(int(self.max_memory_gb), machine)
        try:
            with threadpool_limits(limits=1, user_api="blas"):
                return trainer.train(self._task(R, E, F, sigma, self.perms_))
        finally:
            trainer._max_memory = machine

    @staticmethod
    def _predict(model: dict[str, Any], R: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        _, predictor_class = _sgdml()
        energies, forces = predictor_class(model, max_processes=1, use_torch=False).predict(R.reshape(len(R), -1))
        return np.asarray(energies, dtype=np.float64), np.asarray(forces, dtype=np.float64).reshape(R.shape)

    def fit(self, X: Any, energies: Any, forces: Sequence[Any]) -> SGDMLForceField:
        """Fit on frames X of one molecule, their energies (M,) and forces (M × (n, 3))."""
        sigmas = [float(s) for s in np.atleast_1d(np.asarray(self.sigmas, dtype=np.float64))]
        if not sigmas or min(sigmas) <= 0:
            raise InputError("sigmas", f"must be positive length scales, got {self.sigmas!r}")
        if not 0 < self.validation_fraction < 1:
            raise InputError("validation_fraction", f"must lie strictly between 0 and 1, got {self.validation_fraction!r}")
        if self.max_memory_gb is not None:
            integer(self.max_memory_gb, "max_memory_gb", minimum=1)
        R, self.numbers_ = _frames(X)
        E = np.asarray(energies, dtype=np.float64)
        F = np.asarray(forces, dtype=np.float64)
        if E.shape != (len(R),) or not np.all(np.isfinite(E)):
            raise InputError("energies", f"must be {len(R)} finite numbers, one per frame, got shape {E.shape}")
        if F.shape != R.shape or not np.all(np.isfinite(F)):
            raise InputError("forces", f"must be finite, of shape {R.shape} (frames, atoms, 3), got {F.shape}")
        self.perms_ = self._task(R, E, F, 1.0, None)["perms"]  # searched once, on every training frame
        self.search_ = {}
        if len(sigmas) > 1:
            n_val = int(round(self.validation_fraction * len(R)))
            if n_val < 1 or n_val >= len(R):
                raise InputError("X", f"{len(R)} frames are too few to hold out {self.validation_fraction:.0%} for the σ search")
            order = np.random.default_rng(self.seed).permutation(len(R))
            val, fit = order[:n_val], order[n_val:]
            norm_e = max(float(np.mean((E[val] - E[fit].mean()) ** 2)), 1e-300)
            norm_f = max(float(np.mean(F[val] ** 2)), 1e-300)
            for sigma in sigmas:
                e, f = self._predict(self._train(R[fit], E[fit], F[fit], sigma), R[val])
                self.search_[sigma] = float(np.mean((e - E[val]) ** 2) / norm_e + np.mean((f - F[val]) ** 2) / norm_f)
            self.sigma_ = min(self.search_, key=self.search_.get)
            self.sigma_at_grid_edge_ = self.sigma_ in (min(sigmas), max(sigmas))
        else:
            self.sigma_, self.sigma_at_grid_edge_ = sigmas[0], None
        self.model_ = self._train(R, E, F, self.sigma_)
        self.n_features_in_ = 1
        return self

    def _query(self, X: Any, caller: str) -> np.ndarray:
        if not hasattr(self, "model_"):
            raise InputError("SGDMLForceField", f"{caller} called before fit")
        return _frames(X, self.numbers_)[0]

    def predict(self, X: Any) -> np.ndarray:
        """Energies (M,) of frames X of the training molecule."""
        positions = self._query(X, "predict")
        return self._predict(self.model_, positions)[0]

    def predict_forces(self, X: Any, return_energy: bool = False) -> list[np.ndarray] | tuple[np.ndarray, list[np.ndarray]]:
        """Forces, a list of (n, 3) arrays; with ``return_energy`` also the energies (M,)."""
        positions = self._query(X, "predict_forces")
        energies, forces = self._predict(self.model_, positions)
        return (energies, list(forces)) if return_energy else list(forces)
