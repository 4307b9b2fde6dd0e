"""Write the labelled example data set ``qm9_subset.extxyz`` and ``qm9_subset.csv`` (README.md here).

300 QM9 molecules drawn at random (numpy seed 2026) from the offline copy of the ``qm9pack``
package, with their DFT geometries and three properties converted from molntk's QM9 units:
U0 (internal energy at 0 K, total, eV), the HOMO-LUMO gap (eV) and the dipole moment mu
(Debye); a ``split`` key (``train`` for 240, ``test`` for 60, numpy seed 2027) gives a fixed
split. Run from the repository root (rewrites both files)::

    python data/examples/make_qm9_subset.py
"""

from __future__ import annotations

from pathlib import Path

import ase.io
import numpy as np
import pandas as pd

from molntk.data.qm9 import load_qm9
from molntk.utils.files import atomic_write_text

HERE = Path(__file__).resolve().parent
N_MOLECULES = 300
N_TEST = 60


def main() -> None:
    qm9 = load_qm9()
    rows = np.sort(np.random.default_rng(2026).choice(len(qm9), N_MOLECULES, replace=False))
    test = set(np.random.default_rng(2027).choice(N_MOLECULES, N_TEST, replace=False).tolist())
    u0 = qm9.target("u0")[rows] / 1000.0  # meV → eV
    gap = qm9.target("gap")[rows] / 1000.0  # meV → eV
    mu = qm9.target("mu")[rows]  # Debye
    frames, table = [], []
    for k, molecule in enumerate(qm9.molecules(rows.tolist())):
        split = "test" if k in test else "train"
        comment = (f"Properties=species:S:1:pos:R:3 id={molecule.id} smiles={molecule.smiles} "
                   f"U0={u0[k]:.6f} gap={gap[k]:.6f} mu={mu[k]:.4f} split={split}")
        atoms = [f"{s:<2} {x:11.6f} {y:11.6f} {z:11.6f}" for s, (x, y, z) in zip(molecule.symbols, molecule.positions)]
        frames.append("\n".join([str(molecule.n_atoms), comment, *atoms]))
        table.append({"id": molecule.id, "smiles": molecule.smiles, "U0": round(u0[k], 6), "gap": round(gap[k], 6),
                      "mu": round(mu[k], 4), "split": split})
    atomic_write_text(HERE / "qm9_subset.extxyz", "\n".join(frames) + "\n")
    atomic_write_text(HERE / "qm9_subset.csv", pd.DataFrame(table).to_csv(index=False))
    check = ase.io.read(HERE / "qm9_subset.extxyz", index=":", format="extxyz")  # ASE reads it back
    assert len(check) == N_MOLECULES and check[0].info["id"] == f"gdb_{qm9.index[rows[0]]}"


if __name__ == "__main__":
    main()
