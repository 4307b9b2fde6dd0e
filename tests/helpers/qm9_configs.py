"""Small qm9-property configurations shared by the pipeline, configuration and scale tests.

``TINY``: every model family at n_train 20 and 40 (the full pipeline in seconds).
``SMALL``: the SO(3) NTK and the power spectrum at n_train 10 and 24, in blocks of 6
molecules, no cache (runs that are compared number for number).

Both state the cheap feature maps, grid and λ floor they were written with (``FIXED``:
smearing 0.5 rad, 6 Gaussians to 5 Å, Gauss–Legendre grid of band limit 3, psd_rtol 1e-4,
σ_w = 1), so their numbers do not depend on the schema's defaults (the SO(3) estimator's).
"""

FIXED = (
    "features: {smearing_width: 0.5, radial: {kind: gaussian, n: 6, r_min: 0.5, r_cut: 5.0}}\n"
    "kernel: {grid_band_limit: 3, sampling: gauss-legendre, threads: 1}\n"
    "regression: {psd_rtol: 1.0e-4}\n"
)

TINY = """\
task: qm9-property
name: tiny
learning_curve: {n_train: [20, 40], n_test: 25, n_select: 20}
invariance: {n_molecules: 6, n_rotations: 2}
models:
  so3_ntk:
    candidates:
      - {layers: "lift:3 erf pool dense", sigma_w: 1.0, sigma_b: 0.1}
      - {layers: "lift:3 relu pool dense", sigma_w: 1.0, sigma_b: 0.1}
  augmented_mlp_ntk: {rotations: 2}
  power_spectrum: {zetas: [1, 2]}
  soap: {zetas: [2]}
  fchl19: {sigmas: [2.0]}
""" + FIXED


SMALL = (
    "task: qm9-property\nlearning_curve: {n_train: [10, 24], n_test: 8, n_select: 10}\n"
    "invariance: {n_molecules: 3, n_rotations: 2}\n" + FIXED +
    "models: {so3_ntk: {candidates: [{layers: 'lift:3 erf pool dense', sigma_w: 1.0, sigma_b: 0.1}]}, mlp_ntk: null,\n"
    "         augmented_mlp_ntk: null, coulomb_matrix: null, bag_of_bonds: null, power_spectrum: {zetas: [1, 2]}}\n"
    "compute: {block_molecules: 6}\ncache: false\n"
)

