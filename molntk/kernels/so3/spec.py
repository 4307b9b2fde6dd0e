"""SO(3) network architectures written as short strings, for configuration files.

A specification is a sequence of layer tokens separated by spaces (or ``->``):

    "lift:4 relu conv:3 relu pool dense"

=================  =============================================================
``lift:L``         :class:`~molntk.kernels.so3.lift.Lift` with band limit L (first)
``conv:L``         :class:`~molntk.kernels.so3.conv.GroupConv` with band limit L
``dense``          :class:`~molntk.kernels.so3.dense.Dense` (pointwise before ``pool``)
``relu``, ``erf``,  :class:`~molntk.kernels.so3.nonlinearity.Nonlinearity`
``quadratic``, …
``layernorm``      :class:`~molntk.kernels.so3.layernorm.LayerNorm` (channels divided by their RMS)
``pool``           :class:`~molntk.kernels.so3.pool.Pool` (Haar mean over SO(3))
=================  =============================================================

Every weight layer (lift, conv, dense) gets the same ``sigma_w`` and ``sigma_b``;
the last layer must be ``dense`` (the scalar readout), as :class:`SO3Network` requires.
:func:`describe_architecture` writes the string of a network back.
"""

from __future__ import annotations

import re

from molntk.kernels.activations import ACTIVATIONS
from molntk.kernels.so3.conv import GroupConv
from molntk.kernels.so3.dense import Dense
from molntk.kernels.so3.layernorm import LayerNorm
from molntk.kernels.so3.lift import Lift
from molntk.kernels.so3.network import SO3Network, serial
from molntk.kernels.so3.nonlinearity import Nonlinearity
from molntk.kernels.so3.pool import Pool

_TOKEN = re.compile(r"^(lift|conv):(\d+)$")


def parse_architecture(spec: str, *, sigma_w: float = 1.0, sigma_b: float = 0.0) -> SO3Network:
    """The :class:`SO3Network` of ``spec`` (see the module docstring); ValueError naming the bad token."""
    tokens = [t for t in re.split(r"\s+|->|→", spec.strip().lower()) if t]
    if not tokens:
        raise ValueError("empty architecture: expected e.g. 'lift:4 relu conv:3 relu pool dense'")
    layers = []
    for token in tokens:
        match = _TOKEN.match(token)
        if match:
            kind, band_limit = match.group(1), int(match.group(2))
            if band_limit < 1:
                raise ValueError(f"architecture {spec!r}: {token!r} needs a band limit >= 1")
            layers.append((Lift if kind == "lift" else GroupConv)(band_limit, sigma_w, sigma_b))
        elif token == "dense":
            layers.append(Dense(sigma_w, sigma_b))
        elif token == "pool":
            layers.append(Pool())
        elif token == "layernorm":
            layers.append(LayerNorm())
        elif token in ACTIVATIONS:
            layers.append(Nonlinearity(token))
        else:
            known = ", ".join(["lift:L", "conv:L", "dense", "pool", "layernorm", *sorted(ACTIVATIONS)])
            raise ValueError(f"architecture {spec!r}: unknown layer {token!r} (known: {known})")
    try:
        return serial(*layers)
    except ValueError as err:
        raise ValueError(f"architecture {spec!r}: {err}") from None


def describe_architecture(network: SO3Network) -> str:
    """The specification string of ``network`` (layer tokens only; the scales are not written)."""
    words = []
    for layer in network.layers:
        if isinstance(layer, Lift):
            words.append(f"lift:{layer.band_limit}")
        elif isinstance(layer, GroupConv):
            words.append(f"conv:{layer.band_limit}")
        elif isinstance(layer, Dense):
            words.append("dense")
        elif isinstance(layer, Pool):
            words.append("pool")
        elif isinstance(layer, LayerNorm):
            words.append("layernorm")
        else:
            words.append(layer.name)
    return " ".join(words)
