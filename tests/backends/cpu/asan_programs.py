"""Programs compiled and run under AddressSanitizer by test_asan.py (in a subprocess with libasan preloaded).

Each is run at several sizes, including 0 and 1 where the signature allows, and with out-of-range gather
indices, which the generated code must report (IndexRangeError, on the C call path and on the ctypes one) without
reading out of bounds, in its vectorised kernel and in the in-order copy that finds the first bad index. A program
with data-dependent sizes runs with none, some and all elements selected (its outputs are allocated at their bound).
"""
import sys

import numpy as np

from cuvil.compiler import compile_module
from cuvil.errors import IndexRangeError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from tests.backends.cpu.test_dynamic_sizes import selected_rows
from tests.ops import cases_dynamic
from tests.ops.test_registry_sweep import build_case
from tests.ir.programs import control_flow_program


def movement_program() -> Module:
    m = Module()
    n = sym("n")
    b = Builder.new_function(m, "main", [TensorType("f32", (n, 6)), TensorType("i64", (n,))], ["x", "idx"])
    x, idx = b.args
    g = b.gather(x, idx, axis=0)
    p = b.pad(g, pads=(0, 1, 0, 2), mode="reflect")
    c = b.concat(p, b.exp(p), axis=1)
    s = b.slice(c, starts=(1,), ends=(1000,), axes=(1,), steps=(2,))
    t = b.transpose(s, perm=(1, 0))
    b.ret(b.softmax(b.reshape(t, shape=(-1,)), axis=0), b.reduce_max(t, axes=(1,), keepdims=False))
    return m


def mlp_program() -> Module:
    rng = np.random.default_rng(0)
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"), 33))], ["x"])
    h = b.args[0]
    for i in range(2):
        w = b.constant(rng.standard_normal((h.type.shape[1], 17)).astype(np.float32), f"w{i}")
        bias = b.constant(rng.standard_normal(17).astype(np.float32), f"b{i}")
        y = b.matmul(h, w)
        h = b.gelu(b.add(y, b.broadcast_to(bias, shape=y.type.shape)))
    h = b.layer_norm(h, b.constant(np.ones(17, np.float32), "g"), axis=1)
    head = b.transpose(b.constant(rng.standard_normal((5, 17)).astype(np.float32), "head"), perm=(1, 0))
    y = b.matmul(h, head)  # a narrow head stored transposed, as a Linear's: the dot-product path
    b.ret(b.relu(b.add(y, b.broadcast_to(b.constant(np.ones(5, np.float32), "hb"), shape=y.type.shape))))
    return m


def check(m: Module, inputs) -> None:
    exe = compile_module(m)
    for got, want in zip(exe(*inputs), interpret(m, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def expect_index_error(exe, *inputs) -> None:
    try:
        exe(*inputs)
    except IndexRangeError:
        return
    raise AssertionError("an index out of range did not raise IndexRangeError")


def main() -> int:
    rng = np.random.default_rng(0)
    for n in (1, 3, 40):
        check(control_flow_program(), [rng.standard_normal((n, 4)).astype(np.float32)])
        check(mlp_program(), [rng.standard_normal((n, 33)).astype(np.float32)])
    mp = movement_program()
    exe = compile_module(mp)
    for n in (1, 5):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        idx = rng.integers(-n, n, n)
        for got, want in zip(exe(x, idx), interpret(mp, [x, idx])):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        for bad in (np.full(n, 10 ** 9, np.int64), np.full(n, -10 ** 9, np.int64), np.arange(n) - 2 * n):
            expect_index_error(exe, x, bad)
            expect_index_error(exe, x, bad.astype(np.int32))  # converted: the ctypes path
    sel = selected_rows()  # data-dependent sizes: buffers at the bound, nothing written past it when all are selected
    exe = compile_module(sel)
    for x in (np.zeros((0, 3)), np.ones((1, 3)), np.ones((40, 3)), -np.ones((3, 3)), rng.standard_normal((40, 3))):
        x = x.astype(np.float32)
        for got, want in zip(exe(x), interpret(sel, [x])):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    for case in cases_dynamic.CASES:  # nonzero, unique, non_max_suppression: all, some and none selected
        check(build_case(case), case.inputs)
    print("asan programs ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
