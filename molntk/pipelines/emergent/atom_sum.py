"""The finite twin of the shared per-atom MLP NTK on molecules: E(M) = Σ_{a∈M} N(env_a).

Molecules of different sizes are one tensor for :class:`~molntk.ensembles.StackedEnsemble`:
``padded_inputs`` writes molecule i's environments into the first n_atoms(i) of ``slots``
rows, each row the flattened feature map vec(f̂) ∈ R^{C·L²} and a last column 1 (atom) or
0 (padding). :class:`AtomSumMLP` applies one network N — :class:`~molntk.molecular.baselines.mlp.FiniteMLP`,
the finite network of :class:`~molntk.molecular.baselines.mlp.MLPNTK` — to every row and sums
the rows that are atoms, so its NTK tends as the width grows to the ``pairing="shared"``
molecular MLP NTK Θ(M, M') = Σ_{a∈M} Σ_{b∈M'} Θ_MLP(env_a, env_b).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from molntk.features.environments import EnvironmentBatch
from molntk.molecular.baselines.mlp import MLPArchitecture, MLPNTK


def padded_inputs(batch: EnvironmentBatch, slots: int) -> Tensor:
    """(n_molecules, slots, C·L² + 1): flattened feature maps and the atom mask (module doc)."""
    counts = torch.bincount(batch.molecule_index, minlength=batch.n_molecules)
    if batch.n_molecules and int(counts.max()) > slots:
        raise ValueError(f"a molecule has {int(counts.max())} atoms, more than the {slots} slots")
    out = batch.coeffs.new_zeros(batch.n_molecules, slots, batch.coeffs[0].numel() + 1)
    out[batch.molecule_index, batch.atom_index, :-1] = batch.coeffs.flatten(1)
    out[batch.molecule_index, batch.atom_index, -1] = 1.0
    return out


class AtomSumMLP(nn.Module):
    """Σ_a N(env_a) over the atoms of each padded molecule: (M, slots, C·L² + 1) → (M,), with
    N the finite per-atom MLP of width ``width`` (NTK parametrisation), parameters N(0, 1)
    drawn from ``seed``."""

    def __init__(
        self, architecture: MLPArchitecture, channels: int, coeffs: int, width: int, *, seed: int, dtype: torch.dtype
    ) -> None:
        super().__init__()
        self.channels, self.coeffs = channels, coeffs
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.atom = MLPNTK(architecture=architecture).finite(channels, coeffs, width, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        molecules, slots = x.shape[:2]
        energies = self.atom(x[..., :-1].reshape(molecules * slots, self.channels, self.coeffs)).view(molecules, slots)
        return (energies * x[..., -1]).sum(1)
