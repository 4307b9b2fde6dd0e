"""Autograd helpers shared by the derivative computations."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def grads_or_zeros(output: Tensor, inputs: Sequence[Tensor], **kwargs) -> list[Tensor]:
    """``torch.autograd.grad(output, inputs, **kwargs)`` with zeros for the inputs ``output``
    does not depend on (also when it depends on none of them)."""
    if not output.requires_grad:
        return [torch.zeros_like(x) for x in inputs]
    grads = torch.autograd.grad(output, list(inputs), allow_unused=True, **kwargs)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, grads)]
