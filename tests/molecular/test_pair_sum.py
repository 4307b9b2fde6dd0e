"""Element-resolved pair sums (molntk.molecular.pair_sum) of the local baseline kernels against
brute-force sums over atom pairs; descriptors, environment batches and molecules as inputs."""

from __future__ import annotations

import pytest
import torch

from molntk.features.environments import environment_features
from molntk.molecular.baselines import MLPNTK, AugmentedMLPNTK, MLPArchitecture, PowerSpectrumKernel, RotationSet
from tests.helpers.baselines import CONFIG

#: Many small tensor ops: one torch thread is fastest (see conftest.one_thread).
pytestmark = pytest.mark.usefixtures("one_thread")


def _brute_force(kern, molecules_a, molecules_b, index: int) -> torch.Tensor:
    da, db = kern.describe(molecules_a), kern.describe(molecules_b)
    k = kern.env_kernel(kern.compared(da.values), kern.compared(db.values))[index]
    out = torch.zeros(len(molecules_a), len(molecules_b), dtype=torch.float64)
    for a in range(da.values.shape[0]):
        for b in range(db.values.shape[0]):
            if kern.pairing == "shared" or da.centre_numbers[a] == db.centre_numbers[b]:
                out[da.molecule_index[a], db.molecule_index[b]] += k[a, b]
    return out


@pytest.mark.parametrize("pairing", ["element", "shared"])
@pytest.mark.parametrize("block_size", [4, 1000])
@pytest.mark.parametrize(
    "make",
    [
        lambda p, b: MLPNTK(CONFIG, MLPArchitecture(2, "erf", 1.0, 0.1), pairing=p, block_size=b),
        lambda p, b: AugmentedMLPNTK(CONFIG, rotations=RotationSet.random(3), pairing=p, block_size=b),
        lambda p, b: PowerSpectrumKernel(CONFIG, zeta=3, pairing=p, block_size=b),
    ],
    ids=["mlp", "augmented", "power-spectrum"],
)
def test_pair_sums_equal_brute_force(molecules, make, pairing, block_size):
    kern = make(pairing, block_size)
    index = 1 if isinstance(kern, (MLPNTK, AugmentedMLPNTK)) else 0
    expected = _brute_force(kern, molecules, molecules, index)
    sym = kern(molecules)[kern.outputs[index]]
    cross = kern(molecules[:4], molecules[4:])[kern.outputs[index]]
    assert torch.allclose(sym, expected, rtol=1e-12, atol=1e-12)
    assert torch.allclose(cross, expected[:4, 4:], rtol=1e-12, atol=1e-12)


def test_features_once_and_environment_batches_are_accepted(molecules):
    """Precomputed descriptors, the SO(3) kernel's EnvironmentBatch and molecules agree; mean reduction."""
    kern = MLPNTK(CONFIG)
    feats = kern.describe(molecules)
    batch = environment_features(molecules, CONFIG)
    a = kern(molecules)
    assert torch.equal(kern(feats).ntk, a.ntk) and torch.equal(kern(batch).nngp, a.nngp)
    n = torch.tensor([m.n_atoms for m in molecules], dtype=torch.float64)
    mean = MLPNTK(CONFIG, reduce="mean")(feats).ntk
    assert torch.allclose(mean, a.ntk / n[:, None] / n[None, :], rtol=1e-14)
    ps = PowerSpectrumKernel(CONFIG)
    assert torch.equal(ps(ps.describe(molecules)).kernel, ps(batch).kernel)
    with pytest.raises(ValueError, match="pairing"):
        MLPNTK(CONFIG, pairing="atom-index")
