"""bench/wasm_profile.py: a V8 profile's self time summed by function, and a module exported with its names
(CUVIL_WASM_NAMES=1) profiled by name in Node.js."""
import importlib.util
import os
import shutil

import pytest

from bench import wasm_profile
from bench.workloads import Built


def test_self_time_goes_to_the_sampled_function_not_its_callers():
    profile = {"nodes": [{"id": 1, "callFrame": {"functionName": "", "url": ""}},
                         {"id": 2, "callFrame": {"functionName": "run", "url": "cuvil.js"}},
                         {"id": 3, "callFrame": {"functionName": "gemm_dispatch", "url": "wasm://"}}],
               "samples": [3, 3, 2, 3], "timeDeltas": [0, 1000, 2000, 500]}
    # a sample's time is the delta up to the next sample; the last sample has none
    assert wasm_profile.self_times(profile) == {"gemm_dispatch": 0.003, "run": 0.0005, "(anonymous)": 0.0}


def test_a_named_module_is_profiled_by_its_function_names(tmp_path, monkeypatch):
    if importlib.util.find_spec("ziglang") is None or shutil.which("node") is None:
        if os.environ.get("CI") == "true":  # .ci/run installs both
            pytest.fail("the ziglang package or Node.js is missing")
        pytest.skip("needs the ziglang package and Node.js")
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(67, 130), torch.nn.ReLU()).eval()
    monkeypatch.setitem(wasm_profile.WORKLOADS, "tiny", ("tiny", lambda: Built(net, (torch.randn(1, 67),))))
    cuv, x, shape = wasm_profile.export_named("tiny", tmp_path)
    calls, times = wasm_profile.profile_level(cuv, x, shape, "simd128", 0.3, tmp_path)
    assert calls > 0
    assert "cuvil_sgemm_packed" in times or "gemm_dispatch" in times, times.most_common(8)
