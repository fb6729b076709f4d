"""Smoke test of bench/wasm_peak.py: the peak loop builds and runs natively and as both wasm32 levels in Node.js."""
import importlib.util
import os
import shutil

import pytest

from bench import wasm_peak


def test_the_peaks_are_measured_for_each_level():
    if importlib.util.find_spec("ziglang") is None or shutil.which("node") is None:
        if os.environ.get("CI") == "true":  # .ci/run installs both
            pytest.fail("the ziglang package or Node.js is missing")
        pytest.skip("needs the ziglang package and Node.js")
    peaks = wasm_peak.measure(seconds=0.002, rounds=1)
    assert [name.split(" (")[0] for name in peaks] == ["native", "wasm SIMD128", "wasm relaxed-SIMD"]
    assert all(g > 0 for g in peaks.values()), peaks
    assert [name.split("(")[1] for name in peaks][1:] == ["4 lanes)", "4 lanes)"]


def test_the_read_bandwidth_is_measured_for_each_level():
    if importlib.util.find_spec("ziglang") is None or shutil.which("node") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the ziglang package or Node.js is missing")
        pytest.skip("needs the ziglang package and Node.js")
    rates = wasm_peak.measure_stream(seconds=0.002, rounds=1, stream_mb=0.25)
    assert [name.split(" (")[0] for name in rates] == ["native", "wasm SIMD128", "wasm relaxed-SIMD"]
    assert all(g > 0 for g in rates.values()), rates
