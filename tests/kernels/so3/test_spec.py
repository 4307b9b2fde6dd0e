"""Architecture strings of SO(3) networks (molntk.kernels.so3.spec): parsing, round trip, errors."""

from __future__ import annotations

import pytest

from molntk.kernels.so3.spec import describe_architecture, parse_architecture


def test_architecture_strings_round_trip():
    spec = "lift:4 relu conv:3 erf dense relu pool dense"
    net = parse_architecture(spec, sigma_w=1.3, sigma_b=0.2)
    assert describe_architecture(net) == spec
    assert net.layers[0].band_limit == 4 and net.layers[0].sigma_w == 1.3 and net.layers[2].sigma_b == 0.2
    assert describe_architecture(parse_architecture("lift:2 -> relu -> pool -> dense")) == "lift:2 relu pool dense"
    normed = "lift:3 layernorm erf pool dense layernorm quadratic dense"
    assert describe_architecture(parse_architecture(normed)) == normed


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [("lift:3 tanh pool dense", "unknown layer 'tanh'"), ("relu pool dense", "starts with Lift"), ("", "empty"),
     ("lift:3 erf pool quadratic dense", "weight layer")],
)
def test_bad_architecture_names_the_problem(spec, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_architecture(spec)
