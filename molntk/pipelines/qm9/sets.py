"""The molecules and targets of a ``qm9-property`` run (step 1 of :mod:`molntk.pipelines.qm9`).

QM9: standard split (``data.seed``). A file (``data.source: file``): the labelled
molecules :func:`~molntk.data.labelled.read_labelled` reads (items it cannot read are
reported, not used), split at random (scikit-learn's ``train_test_split``, ``seed``,
``test_fraction``) or as the file's split key says. The training sizes are nested prefixes
of the training split (:func:`~molntk.data.splits.nested_subsets`); the test set is the
first ``n_test`` molecules of the test split; the invariance set is the first
``n_molecules`` of the test set, each under ``n_rotations`` Haar-random rotations R
(positions x ↦ R x). The element set of the models (:class:`Composition`) is QM9's, or
the elements present in the file's molecules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.spatial.transform import Rotation
from sklearn.model_selection import train_test_split

from molntk.config import ConfigProblem, ConfigValidationError
from molntk.data.labelled import LabelledData, read_labelled
from molntk.data.molecule import Molecule
from molntk.data.qm9 import QM9, QM9_ELEMENTS, QM9_MAX_ATOMS, QM9_TARGETS, load_qm9
from molntk.data.splits import nested_subsets, standard_split
from molntk.molecular import MoleculeSet
from molntk.molecular.baselines import QM9_MAX_COUNTS
from molntk.pipelines.qm9.config import FileDataConfig, GivenSplitConfig, QM9DataConfig, QM9PropertyConfig


def rotated_copies(molecules: Sequence[Molecule], n_rotations: int, seed: int) -> list[Molecule]:
    """Each molecule under ``n_rotations`` Haar-random rotations (scipy), molecule-major order."""
    matrices = Rotation.random(len(molecules) * n_rotations, random_state=seed).as_matrix()
    out = []
    for i, molecule in enumerate(molecules):
        for r in range(n_rotations):
            rot = matrices[i * n_rotations + r]
            out.append(Molecule(molecule.numbers, molecule.positions @ rot.T, id=f"{molecule.id}@rot{r}"))
    return out


@dataclass(frozen=True)
class Composition:
    """What the models must accommodate: the elements (feature-map channels, dressed-atom
    columns, bags), the largest count of each element in one molecule (Bag of Bonds) and
    the largest molecule (Coulomb matrix). The defaults are QM9's."""

    elements: tuple[int, ...] = QM9_ELEMENTS
    max_counts: Mapping[int, int] = field(default_factory=lambda: QM9_MAX_COUNTS)
    max_atoms: int = QM9_MAX_ATOMS

    @classmethod
    def of(cls, molecules: Sequence[Molecule]) -> Composition:
        """The composition of a data set's molecules."""
        counts: dict[int, int] = {}
        for molecule in molecules:
            elements, n = np.unique(molecule.numbers, return_counts=True)
            for z, k in zip(elements.tolist(), n.tolist()):
                counts[z] = max(counts.get(z, 0), k)
        return cls(tuple(sorted(counts)), counts, max(m.n_atoms for m in molecules))


@dataclass
class QM9Sets:
    """Molecules and target values of one run. ``molecules`` holds the largest training set
    (its first n are the training set of size n), then the test set, then the rotated
    copies of the invariance set: one group, so each model describes every molecule once.
    ``inducing_pool``: the first ``sparse.pool`` training molecules when that pool reaches
    beyond the largest training set (the sparse models' inducing atoms come from it, so a
    curve can be run now on the inducing set of the longer curve it will be extended to);
    None when the pool lies within ``molecules``."""

    sizes: list[int]
    molecules: MoleculeSet
    n_test: int
    n_rotated: int
    n_rotations: int
    train_targets: dict[str, np.ndarray]
    test_targets: dict[str, np.ndarray]
    units: dict[str, str]
    composition: Composition = field(default_factory=Composition)
    read_failures: list[str] = field(default_factory=list)
    inducing_pool: MoleculeSet | None = None

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


def check_sizes(n_train: list[int], n_test: int | None, train_size: int, test_size: int, source: str,
                split_key: str = "data.split.n_train", pool: int | None = None) -> None:
    """ConfigValidationError naming ``learning_curve.n_train`` / ``sparse.pool`` /
    ``learning_curve.n_test`` when they ask for more molecules than the split's training /
    test part holds (nothing is cut silently); ``split_key`` names the key that sets the
    training split's size."""
    problems = []
    for key, n in (("learning_curve.n_train", max(n_train)), ("sparse.pool", pool)):
        if n is not None and n > train_size:
            problems.append(ConfigProblem(source, key, f"{n:,} exceeds the {train_size:,} molecules of the training split ({split_key})"))
    if n_test is not None and n_test > test_size:
        problems.append(ConfigProblem(source, "learning_curve.n_test",
                                      f"{n_test:,} exceeds the {test_size:,} molecules of the test split (null: all of them)"))
    if problems:
        raise ConfigValidationError(problems)


def file_split(data: FileDataConfig, labelled: LabelledData, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Training and test rows of a labelled file: the file's split key (file order), or a
    random split (``train_test_split``: both parts shuffled by ``seed``)."""
    n = len(labelled.molecules)
    if isinstance(data.split, GivenSplitConfig):
        split = np.asarray(labelled.split)
        train, test = np.flatnonzero(split == "train"), np.flatnonzero(split == "test")
    else:
        try:
            train, test = train_test_split(np.arange(n), test_size=data.split.test_fraction, random_state=data.split.seed)
        except ValueError as err:
            raise ConfigValidationError([ConfigProblem(source, "data.split.test_fraction", f"{err}")]) from None
    for name, rows in (("training", train), ("test", test)):
        if rows.size == 0:
            problem = f"leaves no {name} molecules among the {n} read from {data.path}"
            raise ConfigValidationError([ConfigProblem(source, "data.split", problem)])
    return train, test


def _qm9_part(config: QM9PropertyConfig, source: str, pool: int | None) -> tuple[QM9, np.ndarray, np.ndarray]:
    """QM9 and its standard split's training and test rows, sizes (and the inducing ``pool``) checked."""
    data = config.data
    qm9 = load_qm9_data(data, source)
    split = standard_split(len(qm9), data.seed, data.split.n_train, data.split.n_valid)
    check_sizes(config.learning_curve.n_train, config.learning_curve.n_test, split.train.size, split.test.size, source,
                pool=pool)
    return qm9, split.train, split.test


def load_sets(config: QM9PropertyConfig, source: str, dtype: torch.dtype, device: str) -> QM9Sets:
    """Molecules and targets of a run (module docstring)."""
    curve, data = config.learning_curve, config.data
    pool = None if config.sparse is None else config.sparse.pool
    if isinstance(data, FileDataConfig):
        split_key = data.split.key if isinstance(data.split, GivenSplitConfig) else None
        labelled = read_labelled(data.path, config.targets, smiles_column=data.smiles_column,
                                 structure_column=data.structure_column, id_column=data.id_column,
                                 split_key=split_key, add_hs=data.add_hs)
        train_rows, test_rows = file_split(data, labelled, source)
        check_sizes(curve.n_train, curve.n_test, train_rows.size, test_rows.size, source, "data.split", pool)
        molecules, values = labelled.molecules, labelled.targets
        units = {t: data.targets[t] for t in config.targets}
        composition, failures = Composition.of(molecules), [f.message for f in labelled.failures]
    else:
        qm9, train_rows, test_rows = _qm9_part(config, source, pool)
        molecules, values = qm9, {t: np.asarray(qm9.target(t)) for t in config.targets}
        units = {t: QM9_TARGETS[t].unit for t in config.targets}
        composition, failures = Composition(), []
    sizes = sorted(nested_subsets(train_rows, curve.n_train))
    train_idx = train_rows[: sizes[-1]]
    test_idx = test_rows if curve.n_test is None else test_rows[: curve.n_test]
    train, test = (_pick(molecules, rows) for rows in (train_idx, test_idx))
    inv = config.invariance
    rotated = rotated_copies(test[: inv.n_molecules], inv.n_rotations, inv.seed)
    return QM9Sets(
        sizes=sizes,
        molecules=MoleculeSet([*train, *test, *rotated], dtype, device),
        n_test=len(test),
        n_rotated=len(rotated),
        n_rotations=inv.n_rotations,
        train_targets={t: values[t][train_idx] for t in config.targets},
        test_targets={t: values[t][test_idx] for t in config.targets},
        units=units,
        composition=composition,
        read_failures=failures,
        inducing_pool=MoleculeSet(_pick(molecules, train_rows[:pool]), dtype, device) if pool and pool > sizes[-1] else None,
    )


def _pick(molecules: QM9 | Sequence[Molecule], rows: np.ndarray) -> list[Molecule]:
    """The molecules at ``rows`` of QM9 or of a list."""
    if isinstance(molecules, QM9):
        return molecules.molecules(rows.tolist())
    return [molecules[i] for i in rows.tolist()]
