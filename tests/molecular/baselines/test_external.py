"""Kernels from optional packages (molntk.molecular.baselines.external): a clear error when the
package is missing, FCHL19 = qmllib's local kernel, DScribe SOAP invariant and normalised."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from molntk.molecular import descriptors
from molntk.molecular.baselines import DScribeSOAPKernel, FCHL19Kernel
from tests.helpers.baselines import random_rotation, rotated


@pytest.mark.parametrize(("make", "module"), [(DScribeSOAPKernel, "dscribe"), (lambda: FCHL19Kernel(2.0), "qmllib")])
def test_missing_optional_packages_raise_a_clear_error(monkeypatch, molecules, make, module):
    for name in [n for n in sys.modules if n == module or n.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(ImportError, match=r"molntk\[baselines\]"):
        make()(molecules[:2])


@pytest.mark.parametrize("chunk", [2048, 3])  # descriptors of 3 molecules per call: several chunks
def test_fchl19_kernel_matches_qmllib_local_kernel(molecules, monkeypatch, chunk):
    pytest.importorskip("qmllib")
    monkeypatch.setattr(descriptors, "DESCRIBE_CHUNK", chunk)
    from qmllib.kernels import get_local_kernel, get_local_symmetric_kernel
    from qmllib.representations import generate_fchl19

    kern = FCHL19Kernel(sigma=2.5, block_size=7)
    reps = np.array([generate_fchl19(m.numbers, m.positions, elements=[1, 6, 7, 8, 9], pad=29) for m in molecules])
    charges = [m.numbers for m in molecules]
    assert np.allclose(kern(molecules).kernel.numpy(), get_local_symmetric_kernel(reps, charges, 2.5), rtol=1e-12)
    cross = get_local_kernel(reps[:4], reps[4:], charges[:4], charges[4:], 2.5)  # qmllib returns (N2, N1)
    assert np.allclose(kern(molecules[:4], molecules[4:]).kernel.numpy(), cross.T, rtol=1e-12)


def test_dscribe_soap_kernel_is_invariant_and_normalised(molecules):
    pytest.importorskip("dscribe")
    kern = DScribeSOAPKernel(r_cut=4.0, n_max=3, l_max=3)
    base = kern(molecules).kernel
    moved = [rotated(m, random_rotation(5), np.ones(3), np.random.default_rng(2).permutation(m.n_atoms)) for m in molecules]
    assert torch.allclose(kern(moved).kernel, base, rtol=1e-10, atol=1e-10)
    counts = torch.tensor([sum(int((m.numbers == z).sum()) ** 2 for z in (1, 6, 7, 8)) for m in molecules], dtype=torch.float64)
    assert torch.all(torch.diagonal(base) <= counts + 1e-12)  # Σ_Z n_Z² pairs, each ≤ 1


def test_soap_descriptors_in_chunks_are_dscribes_per_molecule_vectors_normalised(molecules, monkeypatch):
    """Computed 3 molecules per call into one array (the memory of the descriptors once), the
    rows are DScribe's SOAP vectors of each molecule on its own, scaled to unit length."""
    pytest.importorskip("dscribe")
    from ase import Atoms
    from dscribe.descriptors import SOAP

    monkeypatch.setattr(descriptors, "DESCRIBE_CHUNK", 3)
    kern = DScribeSOAPKernel(r_cut=4.0, n_max=3, l_max=3)
    soap = SOAP(species=list(kern.elements), r_cut=4.0, n_max=3, l_max=3, sigma=kern.sigma, periodic=False)
    expected = np.concatenate([soap.create(Atoms(numbers=m.numbers, positions=m.positions)) for m in molecules])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    got = kern.atom_descriptors(molecules)
    assert len(molecules) > 3 and got.values.shape == expected.shape
    np.testing.assert_allclose(got.values.numpy(), expected, rtol=0, atol=1e-14)
    assert got.molecule_index.tolist() == [i for i, m in enumerate(molecules) for _ in range(m.n_atoms)]
