"""NTK / NNGP kernels: dual activations, SO(3) group-convolution kernels, baselines."""
