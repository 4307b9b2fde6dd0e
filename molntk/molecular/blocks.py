"""A molecular kernel on a molecule set as a block kernel of :mod:`molntk.scale`.

:class:`BlockKernelOf` describes every molecule once (``kernel.describe``: neighbour
lists, feature maps, descriptors), and a block K[rows, cols] is the kernel call on the
descriptor subsets of its molecules (``select``), so per-molecule work is done once, not
once per block; what is per pair of atoms or molecules stays in the kernel. What a kernel
makes of a subset before comparing it (``prepare``: a power spectrum's spectra) is kept
for the blocks that share the subset (a row block's every block).

Cache key: SHA-256 of the kernel's ``settings()`` (everything that defines its values
except the device), the matrices kept and the features' dtype; item keys: each molecule's
content digest (for an inducing set, each inducing atom's molecule and atom index first,
:meth:`~molntk.molecular.sets.InducingSet.item_keys`). Every kernel here describes a
molecule by itself alone (feature maps, descriptors), so a block's values depend on those
and on nothing else of the set: the cache (:mod:`molntk.scale.cache`) finds a block of the
same molecules in any run of the same kernel, at any position, e.g. the first rows of a
learning curve extended to more molecules. The device is not part of the key: a block
computed on a GPU is reused on the CPU (equal to rounding).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import torch

from molntk.data.molecule import Molecule
from molntk.molecular.protocol import MolecularKernel
from molntk.molecular.sets import InducingSet, MoleculeSet, as_molecule_set

#: Prepared descriptor sets a block kernel keeps: a row block's and the last column block's.
PREPARED_KEPT = 2


class BlockKernelOf:
    """The block kernel of ``kernel`` over ``molecules`` (a list or a set): blocks are
    ``{name: K_name[rows, cols]}`` for the names in ``outputs`` (default: all of
    ``kernel.outputs``), float64 numpy."""

    def __init__(
        self,
        kernel: MolecularKernel,
        molecules: MoleculeSet | InducingSet | Sequence[Molecule],
        *,
        outputs: Sequence[str] | None = None,
    ) -> None:
        group = as_molecule_set(molecules)
        if not len(group):
            raise ValueError("BlockKernelOf needs at least one molecule")
        self.outputs = tuple(kernel.outputs if outputs is None else outputs)
        unknown = sorted(set(self.outputs) - set(kernel.outputs))
        if unknown:
            raise ValueError(f"{type(kernel).__name__} has no matrices {unknown}; it gives {kernel.outputs}")
        self.kernel = kernel
        self.descriptors = kernel.describe(molecules)
        self._prepared: OrderedDict[bytes, object] = OrderedDict()
        self.n_molecules = len(group)
        material = {"kernel": kernel.settings(), "outputs": self.outputs, "dtype": str(group.dtype)}
        self._key = hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()
        self._item_keys = group.item_keys()

    def cache_key(self) -> str:
        """Content hash of the kernel's settings, the matrices kept and the features' dtype."""
        return self._key

    def item_keys(self) -> np.ndarray:
        """(n_molecules, 32) uint8: the content digest of each molecule (or inducing atom)."""
        return self._item_keys

    def compute_block(self, rows: np.ndarray, cols: np.ndarray | None) -> dict[str, np.ndarray]:
        """K[rows, cols] of every kept matrix; ``cols=None``: the symmetric call on rows."""
        a = self.prepared(rows)
        with torch.no_grad():
            result = self.kernel(a) if cols is None else self.kernel(a, self.prepared(cols))
        return {name: result[name].detach().to(device="cpu", dtype=torch.float64).numpy() for name in self.outputs}

    def prepared(self, indices: np.ndarray) -> object:
        """The descriptors of molecules ``indices`` as the kernel prepares them (``prepare``),
        the last :data:`PREPARED_KEPT` kept: blocks come row by row, so a row block's
        descriptors serve every block of its row, not only the first."""
        key = np.asarray(indices).tobytes()
        if key in self._prepared:
            self._prepared.move_to_end(key)
        else:
            self._prepared[key] = self.kernel.prepare(self.descriptors.select(indices))
            while len(self._prepared) > PREPARED_KEPT:
                self._prepared.popitem(last=False)
        return self._prepared[key]

    def __getstate__(self) -> dict:
        """Pickled (to a Dask worker) without the prepared descriptors it keeps."""
        return {**self.__dict__, "_prepared": OrderedDict()}

    def on(self, device: str) -> BlockKernelOf:
        """A copy computing on ``device`` (kernel and descriptors moved); the cache key is unchanged."""
        moved = copy.copy(self)
        moved.kernel = self.kernel.on(device)
        moved.descriptors = self.descriptors.to(device)
        moved._prepared = OrderedDict()
        return moved
