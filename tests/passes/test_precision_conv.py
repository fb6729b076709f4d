"""lower-conv-precision (cuvil/passes/precision.py): 2-D convolutions with constant weights become conv_bf16 (relu
folded in), grouped convolutions and narrow ones whose window does not unfold stay fp32; through `precision="bf16"`
only where the CPU has a bf16 dot product (CUVIL_DISABLE_CPU_FEATURES masks it: convolutions then stay fp32)."""
import numpy as np
import pytest

from cuvil.backends.cpu import kernels
from cuvil.compiler import compile_module
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType
from cuvil.passes import PassManager, Pipeline
from cuvil.passes.precision import LowerConvPrecision
from cuvil.quantize import lower_precision

from .helpers import body

RNG = np.random.default_rng(2)


def _net():
    """A 3-channel stem conv + relu, a 16-channel conv + bias + relu, a strided 1x1, and a grouped conv."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 3, 12, 12))], ["x"])
    rng = np.random.default_rng(3)  # the same weights every call

    def weight(o, c, k, name):
        return b.constant((rng.standard_normal((o, c, k, k)) * 0.2).astype(np.float32), name)
    h = b.relu(b.conv(b.args[0], weight(16, 3, 3, "w0"), pads=[1, 1, 1, 1]))
    h = b.relu(b.conv(h, weight(24, 16, 3, "w1"), b.constant(rng.standard_normal(24).astype(np.float32), "b1"),
                      pads=[1, 1, 1, 1]))
    h = b.conv(h, weight(32, 24, 1, "w2"), strides=[2, 2])
    b.ret(b.conv(h, weight(32, 16, 3, "w3"), pads=[1, 1, 1, 1], groups=2))
    return m


def _ops(m):
    return [op.name for op in m.main.walk() if op.name in ("conv", "conv_bf16", "relu")]


def test_convolutions_become_conv_bf16_with_their_relu():
    m = _net()
    PassManager(verify=True).run(Pipeline("test", [LowerConvPrecision()]), m)
    assert _ops(m) == ["conv_bf16", "conv_bf16", "conv_bf16", "conv"]  # the grouped conv stays fp32
    assert 'act = "relu"' in body(m) and "w1_bf16" in m.constants and "w1" not in m.constants


def test_a_narrow_conv_stays_fp32_unless_its_window_unfolds():
    """3 channels 3x3 (27 per output, the kernel unfolds the window) and 7x7 (147) become conv_bf16; a narrow 1x1
    (nothing to unfold) and 8 channels 7x7 (392, past UNFOLDED_WINDOW) stay fp32: the kernel pads channels to 32."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 3, 16, 16)), TensorType("f32", (1, 8, 16, 16))])
    outs = [b.conv(b.args[0], b.constant(np.ones((4, 3, k, k), np.float32), f"w{k}")) for k in (3, 7, 1)]
    b.ret(*outs, b.conv(b.args[1], b.constant(np.ones((4, 8, 7, 7), np.float32), "w8")))
    PassManager(verify=True).run(Pipeline("test", [LowerConvPrecision()]), m)
    assert _ops(m) == ["conv_bf16", "conv_bf16", "conv", "conv"]


def test_compiled_bf16_convolutions_match_the_interpreter_and_stay_near_fp32():
    x = RNG.standard_normal((1, 3, 12, 12)).astype(np.float32)
    fp32 = interpret(_net(), [x])[0]
    m = _net()
    PassManager(verify=True).run(Pipeline("test", [LowerConvPrecision()]), m)
    want = interpret(m, [x])[0]
    got = compile_module(m)(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert np.abs(want - fp32).max() <= 2e-2 * np.abs(fp32).max()  # bf16 rounding of weights and activations


@pytest.mark.skipif(kernels.lowp_path(1) == "generic", reason="this CPU has no bf16 dot product")
def test_bf16_precision_sends_convolutions_to_the_bf16_kernel():
    _, passes = lower_precision(_net(), "bf16")
    assert any(isinstance(p, LowerConvPrecision) for p in passes)


def test_without_a_bf16_dot_product_convolutions_stay_fp32(monkeypatch):
    lib = kernels.load(1)
    monkeypatch.setenv("CUVIL_DISABLE_CPU_FEATURES", "amx_bf16,avx512_bf16")
    lib.cuvil_lowp_set_path(-1)
    try:
        _, passes = lower_precision(_net(), "bf16")
    finally:
        monkeypatch.delenv("CUVIL_DISABLE_CPU_FEATURES")
        lib.cuvil_lowp_set_path(-1)
    assert not any(isinstance(p, LowerConvPrecision) for p in passes)
