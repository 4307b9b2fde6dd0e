"""torch-geometric adapter: ``Data`` objects ↔ :class:`Molecule`, and PyG's QM9.

A PyG molecule is a ``Data`` with ``z`` (atomic numbers, long, shape (n,)) and ``pos``
(Å, shape (n, 3)); ``name`` (or else ``idx``) and ``smiles`` are optional. PyG models
usually run in float32, so :func:`molecule_to_pyg` writes ``pos`` as float32 unless
asked for float64: float32 keeps about 7 significant digits (≈ 1e-7 Å for QM9-sized
coordinates), so only a float64 round trip gives back the exact :class:`Molecule`.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch_geometric.data import Data

from molntk.data.molecule import Molecule
from molntk.data.qm9 import QM9, QM9_TARGETS
from molntk.errors import InputError

#: Names of PyG ``QM9.y`` columns 0-15 (16-18 are the rotational constants A, B, C).
PYG_QM9_COLUMNS: tuple[str, ...] = (
    "mu", "alpha", "homo", "lumo", "gap", "r2", "zpve",
    "u0", "u", "h", "g", "cv", "u0_atom", "u_atom", "h_atom", "g_atom",
)  # fmt: skip
#: Factor from PyG's unit (eV for energies) to the unit of :data:`QM9_TARGETS` (meV).
_PYG_TO_MOLNTK = np.array([1000.0 if QM9_TARGETS[name].unit == "meV" else 1.0 for name in PYG_QM9_COLUMNS])


def _field(data: Data, key: str) -> object | None:
    return data[key] if key in data else None


def _single(value: object, key: str, source: str) -> str:
    """A ``name``/``idx``/``smiles`` field as a string (a one-element tensor or list counts as its element)."""
    if isinstance(value, torch.Tensor):
        value = value.tolist() if value.numel() != 1 else value.item()
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise InputError(source, f"'{key}' must hold one value, got {len(value)} (a batch of graphs?)")
        value = value[0]
    return str(value)


def molecule_from_pyg(data: Data, source: str = "pyg") -> Molecule:
    """:class:`Molecule` from a single-graph PyG ``Data`` (``z``, ``pos``; optional ``name``/``idx``, ``smiles``).

    Positions are converted to float64 (exact for float32 input). The id is ``name``
    when present, else ``str(idx)``, else None.
    """
    for key, meaning in (("z", "atomic numbers"), ("pos", "positions in Å")):
        if _field(data, key) is None:
            raise InputError(source, f"PyG Data has no '{key}' field ({meaning})")
    numbers = torch.as_tensor(data.z).detach().cpu().numpy()
    positions = torch.as_tensor(data.pos).detach().cpu().to(torch.float64).numpy()
    id_key = next((key for key in ("name", "idx") if _field(data, key) is not None), None)
    smiles = _field(data, "smiles")
    return Molecule(
        numbers,
        positions,
        id=None if id_key is None else _single(data[id_key], id_key, source),
        smiles=None if smiles is None else _single(smiles, "smiles", source),
        source=source,
    )


def molecule_to_pyg(mol: Molecule, *, dtype: torch.dtype = torch.float32) -> Data:
    """PyG ``Data`` with ``z`` (long), ``pos`` (``dtype``, float32 by default), and ``name``/``smiles`` when set."""
    if not dtype.is_floating_point:
        raise InputError("dtype", f"positions need a floating-point dtype, got {dtype}")
    fields: dict[str, object] = {
        "z": torch.tensor(mol.numbers, dtype=torch.long),
        "pos": torch.tensor(mol.positions, dtype=dtype),
    }
    if mol.id is not None:
        fields["name"] = mol.id
    if mol.smiles is not None:
        fields["smiles"] = mol.smiles
    return Data(**fields)


def load_pyg_qm9(root: str | os.PathLike[str]) -> QM9:
    """QM9 through ``torch_geometric.datasets.QM9(root)`` (downloads into ``root`` if absent).

    Returns a :class:`QM9` like :func:`molntk.data.qm9.load_qm9`: atoms, positions and
    PyG's SMILES per molecule, and the 16 targets of :data:`PYG_QM9_COLUMNS` converted
    from PyG's units (eV) to molntk's (meV). PyG stores ``pos`` and ``y`` as float32
    (≈ 0.1 meV on total energies), and its raw ``gdb9.sdf`` has 4-decimal coordinates.
    PyG's atomization energies come from the MoleculeNet CSV (kcal/mol, own atom
    references), not from :data:`molntk.data.qm9.ATOM_REFERENCE_HARTREE`. The QM9 index
    is PyG's ``idx`` + 1 (``idx`` counts the records of ``gdb9.sdf``, molecules 1..133,885).
    """
    from torch_geometric.datasets import QM9 as PygQM9

    dataset = PygQM9(str(root))
    numbers, positions, index, smiles, targets = [], [], [], [], []
    for data in dataset:
        numbers.append(data.z.numpy())
        positions.append(data.pos.to(torch.float64).numpy())
        index.append(int(data.idx) + 1)
        smiles.append(str(data.smiles))
        targets.append(data.y.to(torch.float64).numpy().reshape(-1)[: len(PYG_QM9_COLUMNS)])
    return QM9(
        numbers=np.concatenate(numbers),
        positions=np.concatenate(positions),
        offsets=np.concatenate([[0], np.cumsum([len(z) for z in numbers])]),
        index=np.array(index),
        smiles=np.array(smiles, dtype=str),
        targets=np.stack(targets) * _PYG_TO_MOLNTK,
        target_names=PYG_QM9_COLUMNS,
        source=f"pyg-qm9 ({root})",
    )
