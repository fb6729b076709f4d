"""Smoke tests of the dispatch micro-benchmark and the seed examples' comparison."""
import pytest

pytest.importorskip("torch")

from bench import dispatch, seeds  # noqa: E402


def test_dispatch_times_every_layer():
    got = dispatch.measure(calls=20, rounds=1)
    assert {"cuvil.jit, NumPy in", "Executable", "ctypes path (no C extension)"} <= set(got)
    assert all(us > 0 for us in got.values())


def test_seed_examples_run_verbatim_and_match_their_originals():
    got = seeds.measure(rounds=1, calls=1)
    assert set(got) == {"dynamic_inference, relu branch", "dynamic_inference, sigmoid branch", "matmul_inference"}
    assert all(a > 0 and b > 0 for a, b in got.values())
