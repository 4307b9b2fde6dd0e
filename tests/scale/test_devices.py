"""``molntk.scale.devices.map_over_threads``: per-item work side by side on the CPU's threads."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from molntk.scale.devices import map_over_threads, torch_threads


def test_items_run_on_python_threads_with_one_torch_thread_each_in_order():
    """With two torch threads: results in the items' order, computed on two Python threads
    (each item sleeps, so both workers take some), torch on one thread inside them, two after."""
    seen = []

    def square(x: int) -> int:
        time.sleep(0.02)
        seen.append((threading.get_ident(), torch.get_num_threads()))
        return x * x

    with torch_threads(2):
        assert map_over_threads(square, range(8), "cpu") == [x * x for x in range(8)]
        assert torch.get_num_threads() == 2
    assert len({ident for ident, _ in seen}) == 2 and threading.get_ident() not in {ident for ident, _ in seen}
    assert {threads for _, threads in seen} == {1}


def test_an_error_of_an_item_is_raised_and_the_threads_restored():
    def fail_on_three(x: int) -> int:
        if x == 3:
            raise ValueError("item 3")
        return x

    with torch_threads(2):
        with pytest.raises(ValueError, match="item 3"):
            map_over_threads(fail_on_three, range(6), "cpu")
        assert torch.get_num_threads() == 2


@pytest.mark.parametrize("device, threads", [("cuda", 2), ("cpu", 1)])
def test_another_device_or_one_thread_runs_in_order_in_this_thread(device, threads):
    """A CUDA device (its kernels are queued by one thread; none is needed to construct the
    name) or one torch thread: every item in the calling thread, in order."""
    calls = []
    with torch_threads(2 if device == "cuda" else threads):
        out = map_over_threads(lambda x: calls.append((x, threading.get_ident())) or -x, range(4), device)
    assert out == [0, -1, -2, -3] and calls == [(x, threading.get_ident()) for x in range(4)]
