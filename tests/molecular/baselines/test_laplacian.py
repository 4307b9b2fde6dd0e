"""Laplacian kernel (molntk.molecular.baselines.laplacian) on Coulomb matrices and bags of
bonds: symmetric, PSD, the median width, brute-force values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from molntk.molecular.baselines import BagOfBonds, CoulombMatrix, LaplacianKernel, l1_distances


@pytest.mark.parametrize("descriptor", [CoulombMatrix(), BagOfBonds()], ids=["cm", "bob"])
def test_laplacian_kernels_are_symmetric_psd_with_median_width(qm9, descriptor):
    mols = qm9.molecules(range(0, 60))
    feats = descriptor(mols)
    kern = LaplacianKernel.with_median_width(descriptor, mols)
    d = l1_distances(feats)
    rows, cols = np.triu_indices(len(mols), 1)
    assert kern.sigma == pytest.approx(float(np.median(d.numpy()[rows, cols])), rel=1e-15)
    k = kern(kern.describe(mols)).kernel
    assert torch.equal(k, k.T) and torch.all(torch.diagonal(k) == 1)
    assert float(torch.linalg.eigvalsh(k).min()) > -1e-12
    brute = torch.exp(-(feats[:5, None, :] - feats[None, 5:9, :]).abs().sum(-1) / kern.sigma)
    assert torch.allclose(kern(mols[:5], mols[5:9]).kernel, brute, rtol=1e-13)
    assert kern.name == f"{descriptor.name}-laplacian"
