"""Code generation emits a loop kernel once however often the same computation repeats (a transformer's layers),
and never lets the C compiler inline kernels into the entry point."""
import numpy as np

import cuvil
from cuvil.backends.cpu import codegen
from cuvil.ir import Builder, Module, TensorType


def _repeated_layers(n: int) -> Module:
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (8, 8))], ["x"])
    h = b.args[0]
    for _ in range(n):
        h = b.matmul(b.exp(h), b.args[0])  # the matmul ends each fused group: one exp kernel per layer
    b.ret(h)
    return m


def test_identical_kernels_are_emitted_once_and_called_per_layer():
    exe = cuvil.compile_module(_repeated_layers(3))
    source = codegen.generate(exe.module).source
    assert source.count("static void k0_exp(") == 1 and source.count("k0_exp(") == 4  # one definition, 3 calls
    assert "k1_exp" not in source and "__attribute__((noinline)) static void k0_exp" in source
    x = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32) * 0.1
    want = cuvil.interpret(_repeated_layers(3), [x])[0]
    np.testing.assert_allclose(exe(x)[0], want, rtol=1e-4, atol=1e-5)
