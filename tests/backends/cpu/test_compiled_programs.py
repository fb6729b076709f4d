"""Whole programs on the CPU backend: control flow, dynamic sizes, outputs, the cache, generated C."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cuvil
from cuvil.compiler import compile_module
from cuvil.errors import ShapeError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Location, Module, TensorType, sym
from tests.ir.programs import control_flow_program

from .test_ops_compiled import assert_matches


def test_control_flow_program_matches_interpreter_at_several_sizes():
    m = control_flow_program()
    exe = compile_module(m)
    for n in (1, 5, 33):
        x = np.linspace(-1, 1, n * 4, dtype=np.float32).reshape(n, 4)
        assert_matches(exe(x), interpret(m, [x]))


def _dynamic_inference():
    """The seed's `relu(x) if x.mean() > threshold else sigmoid(x)`, built by hand."""
    m = Module()
    n, k = sym("n"), sym("k")
    b = Builder.new_function(m, "main", [TensorType("f32", (n, k))], ["x"])
    x = b.args[0]
    mean = b.reduce_mean(x, axes=(0, 1), keepdims=False)
    pred = b.gt(mean, b.full(0.5, ()), loc=Location("seed.py", 3))
    (y,) = b.cond(pred, lambda t: t.relu(x), lambda e: e.sigmoid(x))
    b.ret(y)
    return m


@pytest.mark.parametrize("shift", [0.0, 1.0])
def test_data_dependent_branch_both_ways(shift):
    m = _dynamic_inference()
    exe = compile_module(m)
    x = np.random.default_rng(1).random((64, 33), np.float32) - 0.5 + shift
    assert_matches(exe(x), interpret(m, [x]))


def test_data_dependent_while_loop():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"),))], ["x"])
    x = b.args[0]
    limit = b.full(100.0, ())
    (out,) = b.while_loop([x], lambda c, v: c.lt(c.reduce_sum(v, keepdims=False), limit),
                          lambda c, v: c.mul(v, c.broadcast_to(c.full(2.0, ()), shape=v.type.shape)))
    b.ret(out)
    exe = compile_module(m)
    for x in (np.ones(3, np.float32), np.full(7, 50, np.float32)):
        assert_matches(exe(x), interpret(m, [x]))


def test_loop_carried_swap():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (4,)), TensorType("f32", (4,))], ["a", "b"])
    i0 = b.full(0, (), "i64")
    _, p, q = b.while_loop([i0, *b.args], lambda c, i, u, v: c.lt(i, c.full(3, (), "i64")),
                           lambda c, i, u, v: (c.add(i, c.full(1, (), "i64")), v, u))
    b.ret(p, q)
    a, bb = np.arange(4, dtype=np.float32), -np.arange(4, dtype=np.float32)
    assert_matches(compile_module(m)(a, bb), [bb, a])


def test_one_compilation_serves_every_size_and_checks_relations():
    m = Module()
    n, k = sym("n"), sym("k")
    b = Builder.new_function(m, "main", [TensorType("f32", (n, 4)), TensorType("f32", (k, 4))], ["x", "y"])
    b.ret(b.tanh(b.add(*b.args)))
    exe = compile_module(m)
    for rows in (1, 2, 100, 1000):
        x = np.random.default_rng(rows).random((rows, 4), np.float32)
        assert_matches(exe(x, x), interpret(m, [x, x]))
    with pytest.raises(ShapeError, match="needs k == n"):
        exe(np.zeros((2, 4), np.float32), np.zeros((3, 4), np.float32))
    with pytest.raises(ShapeError, match="shape f32\\[n,4\\]"):
        exe(np.zeros((2, 5), np.float32), np.zeros((2, 5), np.float32))


def test_index_modulo_a_symbolic_product():
    """Bloom's alibi: [b, 4, s] read as [4*b, 1, s] in a [b, 4, s, s] kernel indexes `% (4*s_b)`, not `% 4*s_b`."""
    m = Module()
    b, s = sym("b"), sym("s")
    fb = Builder.new_function(m, "main", [TensorType("f32", (b, 4, s)), TensorType("f32", (4 * b, s, s))], ["a", "x"])
    a, x = fb.args
    rows = fb.broadcast_to(fb.reshape(a, shape=(4 * b, 1, s)), shape=(4 * b, s, s))
    fb.ret(fb.reshape(fb.add(rows, x), shape=(b, 4, s, s)))
    exe = compile_module(m)
    rng = np.random.default_rng(0)
    for n, t in ((2, 5), (3, 2)):
        inputs = [rng.random((n, 4, t), np.float32), rng.random((4 * n, t, t), np.float32)]
        assert_matches(exe(*inputs), interpret(m, inputs))


def test_inputs_are_converted_as_a_user_expects():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (3, 4))], ["x"])
    b.ret(b.exp(b.args[0]))
    exe = compile_module(m)
    base = np.random.default_rng(0).random((4, 3))
    strided = base.astype(np.float32).T  # not C-contiguous
    assert_matches(exe(strided), [np.exp(strided)])
    assert_matches(exe(base.T), [np.exp(base.T).astype(np.float32)])  # float64 input cast to f32
    with pytest.raises(ShapeError, match="element type f32"):
        exe(np.zeros((3, 4), np.complex64))


def test_outputs_may_be_inputs_constants_or_repeated():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2,))], ["x"])
    x = b.args[0]
    w = b.constant(np.array([5, 6], np.float32), "w")
    y = b.exp(x)
    b.ret(x, w, y, y, b.reshape(y, shape=(2, 1)))
    x_in = np.array([0.0, 1.0], np.float32)
    got = compile_module(m)(x_in)
    want = interpret(m, [x_in])
    assert_matches(got, want)
    assert got[0] is not x_in and got[2] is not got[3]


def test_generated_c_names_kernels_and_source_lines():
    m = _dynamic_inference()
    exe = compile_module(m)
    source = exe._run.program.source
    assert "static void k0_reduce_sum" in source or "static void k0_" in source
    assert "at seed.py:3" in source
    assert "int cuvil_main(void *const *args" in source


def test_second_process_hits_the_cache(tmp_path):
    code = textwrap.dedent("""
        import os, sys, logging, numpy as np
        os.environ["CUVIL_OPT_LEVEL"] = "1"
        sys.path.insert(0, {root!r})
        logging.basicConfig(level=logging.INFO)
        from tests.backends.cpu.test_compiled_programs import _dynamic_inference
        from cuvil.compiler import compile_module
        exe = compile_module(_dynamic_inference())
        print(float(exe(np.ones((2, 2), np.float32))[0].sum()))
    """).format(root=str(__import__("pathlib").Path(__file__).parents[3]))
    env = {**__import__("os").environ, "CUVIL_CACHE_DIR": str(tmp_path)}
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert "compiled obj-entry" in first.stderr and "compiled obj-entry" not in second.stderr
    assert first.stdout == second.stdout == "4.0\n"


def test_inspect_shows_fused_ir():
    exe = compile_module(_dynamic_inference())
    assert "= fused" in cuvil.inspect_ir(exe)


@pytest.mark.parametrize("batch", [1, 3, 64])
def test_mlp_with_packed_weights_and_gemm_epilogues(batch):
    """Constants before and after each weight, bias + relu/gelu/no activation epilogues, a 3-d input."""
    rng = np.random.default_rng(0)
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, batch, 48))], ["x"])
    h = b.args[0]
    for i, act in enumerate(["relu", "gelu", None]):
        scale = b.constant(np.full((1,), 0.5, np.float32), f"s{i}")
        w = b.constant((rng.standard_normal((48, 48)) / 7).astype(np.float32), f"w{i}")
        bias = b.constant(rng.standard_normal(48).astype(np.float32), f"b{i}")
        y = b.add(b.matmul(h, w), b.broadcast_to(bias, shape=(2, batch, 48)))
        y = b.emit(act, y) if act else y
        h = b.mul(y, b.broadcast_to(scale, shape=(2, batch, 48)))
    b.ret(h)
    exe = compile_module(m)
    assert "library" in cuvil.inspect_ir(exe) and "cuvil_sgemm_packed" in exe._run.program.source
    x = rng.standard_normal((2, batch, 48)).astype(np.float32)
    assert_matches(exe(x), interpret(m, [x]))


@pytest.mark.parametrize("op, attrs, n_params", [("softmax", {"axis": -1}, 0), ("log_softmax", {"axis": 2}, 0),
                                                 ("layer_norm", {"axis": 1}, 2), ("layer_norm", {"axis": 2}, 1)])
def test_row_kernels(op, attrs, n_params):
    """f32 softmax/log_softmax/layer_norm over trailing axes use row kernels, with symbolic rows."""
    rng = np.random.default_rng(0)
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"), 6, 40))], ["x"])
    x = b.args[0]
    trailing = x.type.shape[attrs["axis"]:] if op == "layer_norm" else ()
    params = [b.constant(rng.standard_normal(trailing).astype(np.float32), f"p{i}") for i in range(n_params)]
    b.ret(b.emit(op, x, *params, **attrs))
    exe = compile_module(m)
    assert f"{op}_f32(" in exe._run.program.source
    for rows in (1, 9):
        x_in = (rng.standard_normal((rows, 6, 40)) * 5).astype(np.float32)
        assert_matches(exe(x_in), interpret(m, [x_in]))


def test_fusion_can_be_turned_off():
    m = _dynamic_inference()
    fused = cuvil.inspect_ir(compile_module(m))
    unfused = cuvil.inspect_ir(compile_module(m, enable_fusion=False))
    assert unfused.count("= fused") > fused.count("= fused")


def test_integer_and_bool_reductions():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("u8", (3, 5)), TensorType("i8", (3, 5))], ["x", "y"])
    x, y = b.args
    b.ret(b.reduce_max(x, axes=(1,)), b.reduce_min(x, axes=(0,)), b.reduce_max(y, axes=(1,)),
          b.reduce_min(y, axes=(1,)), b.reduce_sum(y, axes=(0,)))
    rng = np.random.default_rng(0)
    inputs = [rng.integers(0, 255, (3, 5)).astype(np.uint8), rng.integers(-128, 127, (3, 5)).astype(np.int8)]
    assert_matches(compile_module(m)(*inputs), interpret(m, inputs))


def test_float_max_min_reductions_propagate_nan():
    """A NaN anywhere in a row makes its max/min NaN (NumPy, torch, the reference), also through the
    vectorised and the threaded full reductions, whose OpenMP max/min would drop it."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (3, 40)), TensorType("f64", (5,))], ["x", "y"])
    x, y = b.args
    b.ret(b.reduce_max(x, axes=(1,)), b.reduce_min(x, axes=(0,)), b.reduce_max(x, axes=(0, 1)),
          b.reduce_min(y, axes=(0,)))
    x = np.random.default_rng(0).standard_normal((3, 40)).astype(np.float32)
    x[0, 1], x[1, 37] = np.nan, np.nan
    y = np.array([1.0, np.nan, 3.0, -1.0, 0.0])
    got = compile_module(m)(x, y)
    assert np.isnan(got[0][:2]).all() and not np.isnan(got[0][2]) and np.isnan(got[2]) and np.isnan(got[3])
    assert_matches(got, interpret(m, [x, y]))


@pytest.mark.parametrize("narrow", ["f16", "bf16"])
def test_a_cast_to_a_narrow_float_rounds_inside_a_fused_loop(narrow):
    """f16 and bf16 compute in float; a cast to them rounds (and overflows to inf) where it stands, also when
    a cast back to f32 follows in the same kernel."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (6,))], ["x"])
    y = b.cast(b.cast(b.args[0], dtype=narrow), dtype="f32")
    b.ret(b.add(y, y))
    x = np.array([-2.7, 300.7, -1e10, 1.00390625, 3.14159, np.nan], np.float32)
    got = compile_module(m)(x)
    np.testing.assert_array_equal(got[0], interpret(m, [x])[0])


def test_a_reduction_followed_by_a_real_transpose_compiles():
    """The reduction's value exists only at the output index being stored: a transpose that moves a size above 1
    after it (even one that only moves a keepdims axis) starts a kernel of its own."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 3, 4))], ["x"])
    x = b.args[0]
    moved = b.transpose(b.reduce_mean(x, axes=(2,), keepdims=True), perm=(1, 0, 2))
    b.ret(moved, b.relu(b.transpose(b.reduce_max(x, axes=(2,), keepdims=True), perm=(0, 2, 1))))
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    assert_matches(compile_module(m)(x), interpret(m, [x]))


def test_symbolic_products_stay_one_operand_in_index_arithmetic():
    """Reading a concat of size 2*a through a reshape takes `i % (2*s_a)`; `i % 2*s_a` is `(i % 2) * s_a`."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (sym("a"), sym("b"), 6))], ["y"])
    y = b.args[0]
    b.ret(b.reshape(b.concat(y, b.mul(y, y), axis=0), shape=[-1, 6]))
    exe = compile_module(m)
    for shape in ((2, 3, 6), (3, 2, 6)):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        assert_matches(exe(x), interpret(m, [x]))


@pytest.mark.parametrize("dtype", ["i32", "i64", "i8"])
def test_integer_division_by_zero_and_of_the_minimum_by_minus_one_does_not_trap(dtype):
    """x86's idiv traps (SIGFPE) on MIN / -1 as on / 0: both give what the reference gives instead."""
    low = np.iinfo(np.dtype(dtype.replace("i", "int"))).min
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(dtype, (6,)), TensorType(dtype, (6,))], ["x", "y"])
    x, y = b.args
    b.ret(b.div(x, y), b.floordiv(x, y), b.mod(x, y), b.mod(x, y, fmod=True))
    arrays = [np.array([7, -7, low, low, 5, -5]), np.array([0, -1, -1, 0, 2, -1])]
    inputs = [a.astype(np.dtype(dtype.replace("i", "int"))) for a in arrays]
    assert_matches(compile_module(m)(*inputs), interpret(m, inputs))


def test_reduction_with_a_reshaping_epilogue():
    """Global average pooling then flatten: the reduction's result is read through a reshape."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 8, 3, 3))], ["x"])
    pooled = b.reduce_mean(b.args[0], axes=(2, 3), keepdims=True)
    b.ret(b.relu(b.reshape(pooled, shape=(2, 8))))
    x = np.random.default_rng(0).standard_normal((2, 8, 3, 3)).astype(np.float32)
    assert_matches(compile_module(m)(x), interpret(m, [x]))


@pytest.mark.parametrize("epilogue", ["gather", "transpose", "flip"])
def test_reduction_result_read_elsewhere_is_a_kernel_of_its_own(epilogue):
    """FocalNet's pooler exported to ONNX gathers the pooled means at constant positions: a gather, transpose or
    flip of a reduction's result reads it at other positions than the reduction computes, so it is not fused."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 3, 4)), TensorType("i64", (6,))], ["x", "i"])
    x, i = b.args
    total = b.reduce_sum(x, axes=(2,), keepdims=False)
    if epilogue == "gather":
        y = b.gather(b.reshape(total, shape=(6,)), i, axis=0)
    elif epilogue == "transpose":
        y = b.exp(b.transpose(total, perm=[1, 0]))
    else:
        y = b.slice(total, starts=[-1], ends=[-100], axes=[1], steps=[-1])
    b.ret(y)
    inputs = [np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32), np.array([5, 0, 3, 3, 1, 2])]
    assert_matches(compile_module(m)(*inputs), interpret(m, inputs))


def test_gemm_reads_transposed_operands_through_strides():
    """x @ W.T with a constant W (a Linear layer) and q @ k^T (attention): no transpose kernel, no copy."""
    rng = np.random.default_rng(0)
    m = Module()
    n = sym("n")
    b = Builder.new_function(m, "main", [TensorType("f32", (2, n, 64)), TensorType("f32", (2, n, 64))], ["q", "k"])
    q, k = b.args
    w = b.constant(rng.standard_normal((96, 64)).astype(np.float32), "w")  # [out, in], as torch stores it
    y = b.matmul(q, b.transpose(w, perm=(1, 0)))
    scores = b.matmul(q, b.transpose(k, perm=(0, 2, 1)))
    b.ret(y, scores)
    exe = compile_module(m)
    ir = cuvil.inspect_ir(exe)
    assert "transpose" in ir and 'kind = "loop"' not in ir and len(exe._run._consts) == 2  # w and its packing
    for rows in (1, 7):
        qi, ki = (rng.standard_normal((2, rows, 64)).astype(np.float32) for _ in range(2))
        assert_matches(exe(qi, ki), interpret(m, [qi, ki]))


def test_gemm_inside_a_loop_with_a_weight_transposed_outside():
    """An RNN step: the transposed weight is made before the loop and read in its body."""
    rng = np.random.default_rng(0)
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 80))], ["h0"])
    w = b.transpose(b.constant(rng.standard_normal((80, 80)).astype(np.float32) / 9, "w"), perm=(1, 0))
    bias = b.constant(rng.standard_normal(80).astype(np.float32), "bias")
    i0 = b.full(0, (), "i64")
    _, h = b.while_loop([i0, b.args[0]], lambda c, i, h: c.lt(i, c.full(4, (), "i64")),
                        lambda c, i, h: (c.add(i, c.full(1, (), "i64")),
                                         c.tanh(c.add(c.matmul(h, w), c.broadcast_to(bias, shape=(2, 80))))))
    b.ret(h)
    x = rng.standard_normal((2, 80)).astype(np.float32)
    assert_matches(compile_module(m)(x), interpret(m, [x]))


@pytest.mark.parametrize("rows", [1, 3])
def test_a_single_row_reads_a_narrow_weight_in_place(rows):
    """x @ W + b with W 300 x 10: one row reads W where it lies (packing would pad it to a 64-column panel);
    more rows pack it once at load."""
    rng = np.random.default_rng(4)
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (rows, 300))], ["x"])
    w = b.constant(rng.standard_normal((300, 10)).astype(np.float32), "w")
    bias = b.constant(rng.standard_normal(10).astype(np.float32), "b")
    b.ret(b.add(b.matmul(b.args[0], w), b.broadcast_to(bias, shape=(rows, 10))))
    exe = compile_module(m)
    source = exe._run.program.source
    assert ("cuvil_sgemm_packed(" in source) == (rows > 1) and ("cuvil_sgemm(" in source) == (rows == 1)
    x = rng.standard_normal((rows, 300)).astype(np.float32)
    assert_matches(exe(x), interpret(m, [x]))


@pytest.mark.parametrize("rows", [1, 7, 70])
def test_a_gemm_viewed_with_a_unit_axis_runs_its_gelu_in_the_epilogue(rows):
    """GPT-2's MLP: x @ W + b viewed as [1, rows, N], then the tanh gelu; one GEMM, matching the interpreter."""
    rng = np.random.default_rng(rows)
    m = Module()
    n = sym("n")
    b = Builder.new_function(m, "main", [TensorType("f32", (n, 37))], ["x"])
    w, bias = b.constant(rng.standard_normal((37, 129)).astype(np.float32), "w"), \
        b.constant(rng.standard_normal(129).astype(np.float32), "b")
    y = b.add(b.matmul(b.args[0], w), b.broadcast_to(bias, shape=(n, 129)))
    b.ret(b.gelu(b.reshape(y, shape=(1, n, 129)), approximate="tanh"))
    want = interpret(m, [x := rng.standard_normal((rows, 37)).astype(np.float32)])[0]
    exe = compile_module(m)
    fused = [o for o in exe.module.main.walk() if o.name == "fused"]
    assert len(fused) == 1 and {"matmul", "gelu"} <= {o.name for o in fused[0].regions[0].ops}
    np.testing.assert_allclose(exe(x)[0], want, rtol=1e-4, atol=1e-4)
