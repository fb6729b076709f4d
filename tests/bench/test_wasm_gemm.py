"""Smoke test of bench/wasm_gemm.py: the GEMM alone builds for both wasm32 levels with a block override, runs in
Node.js, and its products equal a float64 reference."""
import importlib.util
import os
import shutil

import pytest

from bench import wasm_gemm


def test_each_variant_runs_at_both_levels_and_is_right():
    if importlib.util.find_spec("ziglang") is None or shutil.which("node") is None:
        if os.environ.get("CI") == "true":  # .ci/run installs both
            pytest.fail("the ziglang package or Node.js is missing")
        pytest.skip("needs the ziglang package and Node.js")
    rows = wasm_gemm.measure(["", "CUVIL_MR=3,CUVIL_NV=3"], rounds=1, calls=1, shape=(75, 29, 300), warm_s=0.01)
    assert [(v, level) for v, level, _, _ in rows] == [("default", "wasm32"), ("default", "wasm32-relaxed"),
                                                      ("CUVIL_MR=3,CUVIL_NV=3", "wasm32"),
                                                      ("CUVIL_MR=3,CUVIL_NV=3", "wasm32-relaxed")]
    assert all(cpu > 0 for _, _, cpu, _ in rows), rows
    assert all(error < 1e-4 for _, _, _, error in rows), rows  # entries of about 300 products of |x| <= 0.5
