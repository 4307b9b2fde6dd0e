"""SO(3) group-convolutional networks: kernel rules (exact and fast modes) and finite twins."""

from molntk.kernels.so3.context import Discretisation
from molntk.kernels.so3.conv import GroupConv
from molntk.kernels.so3.dense import Dense
from molntk.kernels.so3.grids import SO3Grid
from molntk.kernels.so3.lift import Lift
from molntk.kernels.so3.network import SO3Network, serial
from molntk.kernels.so3.nonlinearity import Nonlinearity
from molntk.kernels.so3.pool import Pool

__all__ = ["Discretisation", "GroupConv", "Dense", "SO3Grid", "Lift", "SO3Network", "serial", "Nonlinearity", "Pool"]
