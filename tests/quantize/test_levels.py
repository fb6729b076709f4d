"""The 16-bit-weight GEMM built for each x86-64 level of one `.cuv` (AVX-512, AVX2, SSE vector widths) gives the
host build's results at batch 1, where gemm_lowp.c widens the weights in registers of the level's width. (int8 and
int4 choose their paths by CPUID at run time on every level; tests/quantize/test_int8_kernels.py forces each.)"""
from __future__ import annotations

import numpy as np
import pytest

import cuvil
from cuvil.runtime import host
from tests.backends.cpu.test_targets import MASKS, best_level, on_x86

RNG = np.random.default_rng(5)
W1 = RNG.standard_normal((64, 96)).astype(np.float32) / 8
W2 = RNG.standard_normal((96, 40)).astype(np.float32) / 8
X = RNG.standard_normal((1, 64)).astype(np.float32)


def mlp(x):
    return np.maximum(x @ W1, 0) @ W2


@pytest.fixture(scope="module", params=["bf16", "fp16"])
def exported(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("levels") / f"{request.param}.cuv"
    jitted = cuvil.jit(mlp, precision=request.param)
    cuvil.export(jitted, path, target="x86_64", example_inputs=(X,))
    return path, np.asarray(jitted(X))


@on_x86
@pytest.mark.parametrize("masked", MASKS)
def test_each_level_gives_the_host_result(exported, masked, monkeypatch):
    best_level(masked)  # skips where the CPU has no level once `masked` is off
    monkeypatch.setenv(host.MASK_VARIABLE, masked)
    path, want = exported
    np.testing.assert_allclose(np.asarray(cuvil.load(path)(X)), want, rtol=1e-4, atol=1e-5)
