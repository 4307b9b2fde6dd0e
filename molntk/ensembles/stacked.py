"""E finite networks of one architecture evaluated as one batched program (torch.func).

The members' parameters are stacked along a leading axis of size E
(:func:`torch.func.stack_module_state`) and one forward pass maps inputs (N, ...) to outputs
(E, N, ...) by ``vmap`` over :func:`torch.func.functional_call`: one batched GEMM per layer
instead of E small ones, on CPU or CUDA alike. Members stay independent: the gradient of a
sum of per-member losses with respect to the stacked parameters is each member's own
gradient in its slice. :func:`group_means` averages their outputs over disjoint groups
(sub-ensembles of a smaller size).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap


class StackedEnsemble:
    """Members ``make(seed)`` for every seed in ``seeds``, with stacked parameters.

    ``make(seed)`` must build one member with parameters drawn from ``seed`` (e.g.
    ``lambda s: net.finite(shape, width, seed=s)``, the finite twins of
    :mod:`molntk.kernels.cn`); ``seeds`` are recorded in :attr:`seeds`. The stacked
    parameters live on ``device`` in ``dtype``.
    """

    def __init__(
        self,
        make: Callable[[int], nn.Module],
        seeds: Sequence[int],
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        if not seeds:
            raise ValueError("an ensemble needs at least one member (seed)")
        members = [make(int(seed)).to(dtype=dtype, device=device) for seed in seeds]
        self.seeds = tuple(int(seed) for seed in seeds)
        params, buffers = stack_module_state(members)
        self.params: dict[str, Tensor] = {name: p.detach().requires_grad_(True) for name, p in params.items()}
        self.buffers: dict[str, Tensor] = buffers
        self._base = copy.deepcopy(members[0]).to("meta")  # the architecture, without storage

    def _member(self, params: dict[str, Tensor], buffers: dict[str, Tensor], x: Tensor) -> Tensor:
        return functional_call(self._base, (params, buffers), (x,))

    def __call__(self, x: Tensor) -> Tensor:
        """Outputs of every member, (E, N, ...) for inputs (N, ...)."""
        return vmap(self._member, in_dims=(0, 0, None))(self.params, self.buffers, x)


def group_means(outputs: Tensor, size: int) -> Tensor:
    """Means of ⌊E / size⌋ disjoint groups of ``size`` consecutive members, the outputs of
    sub-ensembles of that size: (E, ...) → (E // size, ...)."""
    groups = outputs.shape[0] // size
    return outputs[: groups * size].unflatten(0, (groups, size)).mean(1)
