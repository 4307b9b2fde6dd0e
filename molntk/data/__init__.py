"""Molecules in: the :class:`Molecule` record, file/SMILES/ASE/PyG readers, QM9."""

from molntk.data.molecule import Molecule, element_number, element_symbol

__all__ = ["Molecule", "element_number", "element_symbol"]
