"""The int8 and int4 kernels on every code path this CPU has (AMX, VNNI, AVX-512BW, AVX2, C), each forced in turn,
against the ops' NumPy references (cuvil/ops/quantized.py), and compiled modules against the interpreter."""
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cuvil.backends.cpu import kernels_int8 as k8
from cuvil.compiler import compile_module
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType
from cuvil.ir.dtypes import DType
from cuvil.ops import get_op
from cuvil.ops.quantized import pack_int4

ROOT = Path(__file__).resolve().parents[2]
PATHS = [p for p in (4, 3, 2, 1, 0) if p <= k8.best_isa(1)]
RNG = np.random.default_rng(0)


def _weights(n, k):
    return RNG.integers(-127, 128, (n, k)).astype(np.int8), (RNG.random(n) * 0.01).astype(np.float32)


@pytest.mark.skipif(k8.best_isa(1) < 4, reason="this CPU has no AMX-INT8")
def test_disabled_cpu_features_leave_out_amx_int8():
    """CUVIL_DISABLE_CPU_FEATURES=amx_int8 chooses VNNI (read once per process, so in a fresh one)."""
    env = {**os.environ, "CUVIL_DISABLE_CPU_FEATURES": "avx512_bf16, amx_int8", "PYTHONPATH": str(ROOT)}
    code = "from cuvil.backends.cpu import kernels_int8 as k; print(k.best_isa(1))"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.stdout.strip() == "3", out.stderr[-2000:]


def test_the_cap_selects_each_path():
    for cap in PATHS:
        with k8.isa(cap, 1) as got:
            assert got == cap
    assert k8.best_isa(1) == max(PATHS)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("m,k,n", [(1, 7, 5), (2, 37, 40), (3, 9, 20), (4, 64, 17), (13, 37, 50), (33, 260, 70),
                                   (16, 64, 32), (47, 129, 16), (64, 300, 48)])
@pytest.mark.parametrize("attrs", [dict(x_scale=0.05, x_zero=128, act="relu"), dict(act="gelu_tanh"),
                                   dict(x_scale=0.03, x_zero=100, out_scale=0.1, out_zero=7)],
                         ids=["static-relu", "dynamic-gelu", "requantized"])
def test_qlinear_matches_the_reference(path, m, k, n, attrs):
    x = RNG.standard_normal((m, k)).astype(np.float32)
    w, ws = _weights(n, k)
    bias = RNG.standard_normal(n).astype(np.float32)
    full = {"x_scale": 0.0, "x_zero": 0, "act": "none", "out_scale": 0.0, "out_zero": 0, **attrs}
    want = get_op("qlinear_i8").reference([x, w, ws, bias], full)
    with k8.isa(path, 1):
        got = k8.qlinear(x, w, ws, bias, opt_level=1, **attrs)
    if got.dtype == np.uint8:
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1  # a rounding tie may fall either way
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", PATHS)
def test_qlinear_takes_uint8_input(path):
    x = RNG.integers(0, 256, (9, 40)).astype(np.uint8)
    w, ws = _weights(17, 40)
    want = get_op("qlinear_i8").reference([x, w, ws], {"x_scale": 0.02, "x_zero": 3, "act": "none",
                                                        "out_scale": 0.0, "out_zero": 0})
    with k8.isa(path, 1):
        np.testing.assert_array_equal(k8.qlinear(x, w, ws, x_scale=0.02, x_zero=3, opt_level=1), want)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("geom", [((2, 3, 9, 7), 5, 3, (2, 1), (1, 0, 1, 2), (1, 2)),
                                  ((1, 16, 8, 8), 40, 1, (1, 1), (0, 0, 0, 0), (1, 1))])
@pytest.mark.parametrize("static", [True, False])
def test_qconv_matches_the_reference(path, geom, static):
    shape, o, kh, strides, pads, dilations = geom
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.integers(-127, 128, (o, shape[1], kh, kh)).astype(np.int8)
    ws, bias = (RNG.random(o) * 0.01).astype(np.float32), RNG.standard_normal(o).astype(np.float32)
    attrs = dict(strides=strides, pads=pads, dilations=dilations, x_scale=0.05 if static else 0.0,
                 x_zero=128 if static else 0, act="relu", out_scale=0.0, out_zero=0)
    want = get_op("qconv_i8").reference([x, w, ws, bias], attrs)
    with k8.isa(path, 1):
        got = k8.qconv2d(x, w, ws, bias, opt_level=1, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("m,k,n,group,zeros", [(1, 64, 10, 32, 16), (2, 96, 7, 32, 16), (3, 256, 33, 64, 16),
                                               (4, 128, 13, 32, 16), (1, 64, 6, 64, 256), (9, 256, 70, 128, 16),
                                               (16, 96, 9, 32, 256), (17, 64, 200, 32, 256),
                                               (70, 256, 300, 128, 16)])
def test_int4_matches_the_reference(path, m, k, n, group, zeros):
    """Up to 16 rows, in runs of 4, the weights are looked up in per-group tables (AVX-512) or unpacked in the dot
    product; more rows dequantise blocks of 64 rows of W, each by one thread, for the fp32 GEMM against x^T (several
    blocks, a partial one, x^T wider than one panel). Columns past a multiple of 4, zero points above 15 included."""
    x = RNG.standard_normal((m, k)).astype(np.float32)
    q = pack_int4(RNG.integers(0, 16, (n, k)))
    scale = (RNG.random((n, k // group)) * 0.1).astype(np.float32)
    zero = RNG.integers(0, zeros, (n, k // group)).astype(np.uint8)
    bias = RNG.standard_normal(n).astype(np.float32)
    want = get_op("linear_i4").reference([x, q, scale, zero, bias], {"group": group, "act": "relu"})
    with k8.isa(path, 1):
        got = k8.gemm_int4(x, q, scale, zero, group, bias, act="relu", opt_level=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def _worker_chunks(lib) -> int:
    """Chunks of parallel loops that the pool's workers (not the caller) ran, since the process started."""
    counts = np.zeros(7, np.int64)
    lib.cuvil_pool_waits(counts.ctypes.data)
    return int(counts[2])


@pytest.mark.parametrize("threads", [2, 3, 9])
def test_int4_blocks_of_w_shared_by_threads(threads):
    """Past 16 rows each thread dequantises its own blocks of W into its own part of the scratch: 2, 3 and more
    threads than the 8 buffers or the 5 blocks give the reference's result, and the pool's workers take part."""
    from cuvil.backends.cpu import kernels
    m, k, n, group = 70, 256, 300, 32
    x = RNG.standard_normal((m, k)).astype(np.float32)
    q = pack_int4(RNG.integers(0, 16, (n, k)))
    scale = (RNG.random((n, k // group)) * 0.1).astype(np.float32)
    zero = RNG.integers(0, 16, (n, k // group)).astype(np.uint8)
    want = get_op("linear_i4").reference([x, q, scale, zero], {"group": group, "act": "none"})
    lib = kernels.load(1)
    lib.cuvil_set_num_threads(threads)
    try:
        before, calls, deadline = _worker_chunks(lib), 0, time.monotonic() + 20
        # a worker may be late for a call (the caller then runs every slice), on a loaded machine for many in a row
        while calls < 5 or _worker_chunks(lib) == before and time.monotonic() < deadline:
            np.testing.assert_allclose(k8.gemm_int4(x, q, scale, zero, group, opt_level=1), want, rtol=1e-5, atol=1e-4)
            calls += 1
        assert _worker_chunks(lib) > before, f"no worker took part in {calls} calls"
    finally:
        lib.cuvil_set_num_threads(kernels.default_num_threads())


def test_pack_int4_round_trips():
    from cuvil.ops.quantized import unpack_int4
    q = RNG.integers(0, 16, (3, 96))
    np.testing.assert_array_equal(unpack_int4(pack_int4(q), 96), q)


def test_compiled_quantized_ops_equal_the_interpreter():
    """A u8 tensor flowing from one qlinear_i8 (requantised epilogue) into the next, int4 and a strided conv."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, (3, 40)), TensorType(DType.f32, (2, 3, 9, 9))])
    x, img = b.args
    w1, s1 = _weights(24, 40)
    w2, s2 = _weights(16, 24)
    h = b.qlinear_i8(x, b.constant(w1, "w1"), b.constant(s1, "s1"), b.constant(np.ones(24, np.float32), "b1"),
                     act="relu", out_scale=0.02)
    y = b.qlinear_i8(h, b.constant(w2, "w2"), b.constant(s2, "s2"), x_scale=0.02)
    q4 = b.constant(pack_int4(RNG.integers(0, 16, (8, 64))), "q4")
    y4 = b.linear_i4(b.reshape(b.constant(RNG.standard_normal((2, 64)).astype(np.float32), "xi"), shape=(2, 64)),
                     q4, b.constant(np.full((8, 2), 0.1, np.float32), "s4"), b.constant(np.full((8, 2), 8, np.uint8),
                                                                                       "z4"), group=32)
    wc = RNG.integers(-127, 128, (5, 3, 3, 3)).astype(np.int8)
    yc = b.qconv_i8(img, b.constant(wc, "wc"), b.constant(np.full(5, 0.01, np.float32), "sc"), strides=[2, 2],
                    pads=[1, 1, 1, 1], x_scale=0.03, x_zero=128, act="relu")
    b.ret(y, y4, yc)
    inputs = [RNG.standard_normal((3, 40)).astype(np.float32), RNG.standard_normal((2, 3, 9, 9)).astype(np.float32)]
    for got, want in zip(compile_module(m)(*inputs), interpret(m, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_weight_computed_at_run_time_is_packed_per_call():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, (5, 40)), TensorType(DType.i8, (9, 40)),
                                         TensorType(DType.f32, (1, 3, 6, 6)), TensorType(DType.i8, (4, 3, 3, 3))])
    x, w, img, wc = b.args
    b.ret(b.qlinear_i8(x, w, b.constant(np.full(9, 0.01, np.float32), "s"), act="relu"),
          b.qconv_i8(img, wc, b.constant(np.full(4, 0.01, np.float32), "sc"), x_scale=0.05, x_zero=128))
    conv_w = RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    inputs = [RNG.standard_normal((5, 40)).astype(np.float32), _weights(9, 40)[0],
              RNG.standard_normal((1, 3, 6, 6)).astype(np.float32), conv_w]
    for got, want in zip(compile_module(m)(*inputs), interpret(m, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
