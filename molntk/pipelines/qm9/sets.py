"""The molecules and targets of a ``qm9-property`` run (step 1 of :mod:`molntk.pipelines.qm9`).

Standard split (``data.seed``); the training sizes are nested prefixes of the training
split (:func:`~molntk.data.splits.nested_subsets`); the test set is the first ``n_test``
molecules of the test split; the invariance set is the first ``n_molecules`` of the test
set, each under ``n_rotations`` Haar-random rotations R (positions x ↦ R x).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.spatial.transform import Rotation

from molntk.config import ConfigProblem, ConfigValidationError
from molntk.data.molecule import Molecule
from molntk.data.qm9 import QM9, QM9_TARGETS, load_qm9
from molntk.data.splits import nested_subsets, standard_split
from molntk.molecular import MoleculeSet
from molntk.pipelines.qm9.config import QM9DataConfig, QM9PropertyConfig


def rotated_copies(molecules: Sequence[Molecule], n_rotations: int, seed: int) -> list[Molecule]:
    """Each molecule under ``n_rotations`` Haar-random rotations (scipy), molecule-major order."""
    matrices = Rotation.random(len(molecules) * n_rotations, random_state=seed).as_matrix()
    out = []
    for i, molecule in enumerate(molecules):
        for r in range(n_rotations):
            rot = matrices[i * n_rotations + r]
            out.append(Molecule(molecule.numbers, molecule.positions @ rot.T, id=f"{molecule.id}@rot{r}"))
    return out


@dataclass
class QM9Sets:
    """Molecules and target values of one run. ``molecules`` holds the largest training set
    (its first n are the training set of size n), then the test set, then the rotated
    copies of the invariance set: one group, so each model describes every molecule once."""

    sizes: list[int]
    molecules: MoleculeSet
    n_test: int
    n_rotated: int
    n_rotations: int
    train_targets: dict[str, np.ndarray]
    test_targets: dict[str, np.ndarray]
    units: dict[str, str]

    @property
    def n_train(self) -> int:
        return self.sizes[-1]

    @property
    def train_molecules(self) -> list[Molecule]:
        return self.molecules.molecules[: self.n_train]

    @property
    def test_molecules(self) -> list[Molecule]:
        return self.molecules.molecules[self.n_train : self.n_train + self.n_test]

    @property
    def rotated_molecules(self) -> list[Molecule]:
        return self.molecules.molecules[self.n_train + self.n_test :]


def load_qm9_data(data: QM9DataConfig, source: str) -> QM9:
    """The QM9 molecules a ``data`` section asks for, with its split checked against their number.

    ``source`` names the configuration in the error raised when
    ``n_train + n_valid`` leaves no test molecules.
    """
    if data.source == "torch-geometric":
        from molntk.data.pyg import load_pyg_qm9  # torch_geometric: only for this source

        molecules = load_pyg_qm9(data.root)
    else:
        molecules = load_qm9(data.cache_dir)
    n_train, n_valid = data.split.n_train, data.split.n_valid
    if n_train + n_valid >= len(molecules):
        problem = (
            f"n_train + n_valid = {n_train:,} + {n_valid:,} = {n_train + n_valid:,} leaves no test molecules: "
            f"QM9 from {data.source} has {len(molecules):,}"
        )
        raise ConfigValidationError([ConfigProblem(source, "data.split", problem)])
    return molecules


def check_sizes(n_train: list[int], n_test: int | None, train_size: int, test_size: int, source: str) -> None:
    """ConfigValidationError naming ``learning_curve.n_train`` / ``learning_curve.n_test``
    when they ask for more molecules than the split's training / test part holds (nothing
    is cut silently)."""
    problems = []
    if max(n_train) > train_size:
        problems.append(ConfigProblem(source, "learning_curve.n_train",
                                      f"{max(n_train):,} exceeds the {train_size:,} molecules of the training split (data.split.n_train)"))
    if n_test is not None and n_test > test_size:
        problems.append(ConfigProblem(source, "learning_curve.n_test",
                                      f"{n_test:,} exceeds the {test_size:,} molecules of the test split (null: all of them)"))
    if problems:
        raise ConfigValidationError(problems)


def load_sets(config: QM9PropertyConfig, source: str, dtype: torch.dtype, device: str) -> QM9Sets:
    """Molecules and targets of a run (module docstring)."""
    data = config.data
    qm9 = load_qm9_data(data, source)
    split = standard_split(len(qm9), data.seed, data.split.n_train, data.split.n_valid)
    curve = config.learning_curve
    check_sizes(curve.n_train, curve.n_test, split.train.size, split.test.size, source)
    sizes = sorted(nested_subsets(split.train, curve.n_train))
    train_idx = split.train[: sizes[-1]]
    test_idx = split.test if curve.n_test is None else split.test[: curve.n_test]
    train = qm9.molecules(train_idx.tolist())
    test = qm9.molecules(test_idx.tolist())
    inv = config.invariance
    rotated = rotated_copies(test[: inv.n_molecules], inv.n_rotations, inv.seed)
    return QM9Sets(
        sizes=sizes,
        molecules=MoleculeSet([*train, *test, *rotated], dtype, device),
        n_test=len(test),
        n_rotated=len(rotated),
        n_rotations=inv.n_rotations,
        train_targets={t: np.asarray(qm9.target(t))[train_idx] for t in config.targets},
        test_targets={t: np.asarray(qm9.target(t))[test_idx] for t in config.targets},
        units={t: QM9_TARGETS[t].unit for t in config.targets},
    )
