"""Loop kernels over chains of reshapes, transposes and broadcasts: the loop nest is split at every axis boundary
the chain reaches, so no index is divided and the innermost loop runs along the data; chains whose boundaries
cross (a reshape that regroups axes) keep the plain nest. Either way the result matches the interpreter. A reduction
behind such a chain (a global pool after a blocked convolution) has its source split the same way."""
import re

import numpy as np
import pytest

import cuvil
from cuvil.backends.cpu import codegen
from cuvil.backends.cpu.loops import DomainRefiner
from cuvil.ir import Builder, Module, TensorType


def _chain(in_shape, steps) -> Module:
    """x -> each step ("reshape", shape) / ("transpose", perm) / ("broadcast", shape) -> x * 2 + 1."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", in_shape)], ["x"])
    h = b.args[0]
    for kind, arg in steps:
        if kind == "reshape":
            h = b.reshape(h, shape=arg)
        elif kind == "transpose":
            h = b.transpose(h, perm=arg)
        else:
            h = b.broadcast_to(h, shape=arg)
    two = b.broadcast_to(b.full(2.0, ()), shape=h.type.shape)
    b.ret(b.add(b.mul(h, two), two))
    return m


def _kernel_bodies(module: Module) -> str:
    source = codegen.generate(cuvil.compile_module(module).module).source
    bodies = "\n".join(re.findall(r"static (?:void|int) k\d+_\w+\(.*?\n}\n", source, re.S))
    # the pool's chunk of a threaded nest finds its first row once (`lo_ / n`), not per element
    return "\n".join(line for line in bodies.splitlines() if "lo_ /" not in line)


HEADS_MERGE = ((1, 12, 16, 64), [("transpose", (0, 2, 1, 3)), ("reshape", (1, 16, 768))])
HEADS_SPLIT = ((16, 768), [("reshape", (1, 16, 12, 64)), ("transpose", (0, 2, 3, 1))])
CASES = {
    "heads-merge": HEADS_MERGE,
    "heads-split-key-transposed": HEADS_SPLIT,
    "nchwc-to-nchw": ((1, 4, 5, 7, 16), [("transpose", (0, 1, 4, 2, 3)), ("reshape", (1, 64, 5, 7))]),
    "nchw-to-nchwc": ((1, 64, 5, 7), [("reshape", (1, 4, 16, 5, 7)), ("transpose", (0, 1, 3, 4, 2))]),
    "reshape-transpose-reshape": ((6, 20), [("reshape", (6, 4, 5)), ("transpose", (2, 1, 0)), ("reshape", (10, 12))]),
    "broadcast-then-split": ((1, 24), [("broadcast", (3, 24)), ("reshape", (3, 2, 12)), ("transpose", (1, 2, 0))]),
    "crossing-boundaries": ((4, 6), [("transpose", (1, 0)), ("reshape", (4, 6))]),
    "size-one-axes": ((1, 8, 1, 6), [("reshape", (2, 4, 6)), ("transpose", (2, 0, 1)), ("reshape", (6, 1, 8))]),
}


@pytest.mark.parametrize("in_shape, steps", CASES.values(), ids=CASES.keys())
def test_chain_matches_interpreter(in_shape, steps):
    x = np.random.default_rng(0).standard_normal(in_shape).astype(np.float32)
    want = cuvil.interpret(_chain(in_shape, steps), [x])[0]
    np.testing.assert_array_equal(cuvil.compile_module(_chain(in_shape, steps))(x)[0], want)


@pytest.mark.parametrize("case", [HEADS_MERGE, HEADS_SPLIT], ids=["merge", "split"])
def test_attention_head_moves_divide_no_index(case):
    body = _kernel_bodies(_chain(*case))
    assert "/" not in body and "%" not in body, body
    assert "i2 < 64; i2++" in body or "i2 < 16; i2++" in body  # the innermost loop is a head's row or a column


def test_crossing_boundaries_keep_the_plain_nest():
    body = _kernel_bodies(_chain(*CASES["crossing-boundaries"]))
    assert "%" in body


def test_refiner_splits_the_output_at_the_boundaries_behind_it():
    module = _chain(*HEADS_MERGE)
    fused = next(op for op in cuvil.compile_module(module).module.main.body.ops if op.name == "fused")
    region = fused.regions[0]
    refiner = DomainRefiner(list(region.terminator.operands), {id(a): i for i, a in enumerate(region.args)})
    assert refiner.factor_sizes() == [16, 12, 64]


def _reduce_after_unblock(op: str, axes, keepdims: bool) -> Module:
    """NCHWc [1, 3, 5, 7, 16] -> NCHW [1, 48, 5, 7] -> clip -> reduce `op` over `axes` -> / 4."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 3, 5, 7, 16))], ["x"])
    h = b.reshape(b.transpose(b.args[0], perm=(0, 1, 4, 2, 3)), shape=(1, 48, 5, 7))
    h = b.min(h, b.broadcast_to(b.full(1.5, ()), shape=h.type.shape))
    r = getattr(b, op)(h, axes=axes, keepdims=keepdims)
    b.ret(b.div(r, b.broadcast_to(b.full(4.0, ()), shape=r.type.shape)))
    return m


REDUCTIONS = [("reduce_sum", (2, 3), False), ("reduce_max", (2, 3), True), ("reduce_sum", (1,), True),
              ("reduce_min", (1, 2), False), ("reduce_sum", (0, 1, 2, 3), False)]


@pytest.mark.parametrize("op, axes, keepdims", REDUCTIONS, ids=[f"{o}-{a}-{k}" for o, a, k in REDUCTIONS])
def test_reduction_behind_a_layout_change_divides_no_index(op, axes, keepdims):
    x = np.random.default_rng(1).standard_normal((1, 3, 5, 7, 16)).astype(np.float32)
    want = cuvil.interpret(_reduce_after_unblock(op, axes, keepdims), [x])[0]
    np.testing.assert_allclose(cuvil.compile_module(_reduce_after_unblock(op, axes, keepdims))(x)[0], want,
                               rtol=1e-5, atol=1e-5)
    body = _kernel_bodies(_reduce_after_unblock(op, axes, keepdims))
    assert "/ (" not in body and "%" not in body, body


def _full_reduction(op: str, shape, dtype: str = "f32") -> Module:
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(dtype, shape)], ["x"])
    b.ret(getattr(b, op)(b.args[0], axes=tuple(range(len(shape)))))
    return m


LANES = [("reduce_sum", (512, 1024), "f32"), ("reduce_max", (1, 3, 256), "f32"), ("reduce_min", (1, 1024), "f32"),
         ("reduce_sum", (2, 1, 320), "i64"), ("reduce_prod", (4, 256), "f64")]


@pytest.mark.parametrize("op, shape, dtype", LANES, ids=[f"{o}-{s}-{d}" for o, s, d in LANES])
def test_full_reduction_runs_in_lanes(op, shape, dtype):
    rng = np.random.default_rng(2)
    x = rng.integers(-50, 50, shape) if dtype == "i64" else rng.uniform(0.99, 1.01, shape)
    x = x.astype({"f32": np.float32, "f64": np.float64, "i64": np.int64}[dtype])
    want = cuvil.interpret(_full_reduction(op, shape, dtype), [x])[0]
    np.testing.assert_allclose(cuvil.compile_module(_full_reduction(op, shape, dtype))(x)[0], want, rtol=1e-5)
    assert "part[j + 32]" in _kernel_bodies(_full_reduction(op, shape, dtype))


NAN_CASES = [((16, 256), (0, 1)), ((512, 256), (0, 1)), ((300, 300), (0, 1)), ((1000,), (0,)), ((8, 300), (1,)),
             ((300, 8), (0,)), ((64, 1024), (1,))]


@pytest.mark.parametrize("shape, axes", NAN_CASES, ids=[f"{s}-{a}" for s, a in NAN_CASES])
@pytest.mark.parametrize("op", ["reduce_max", "reduce_min"])
def test_max_and_min_keep_a_nan(op, shape, axes):
    """In lanes, in order, threaded or not: OpenMP's own max/min combination would drop the NaN."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", shape)], ["x"])
    b.ret(getattr(b, op)(b.args[0], axes=axes))
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[x.size * 3 // 4 + 5] = np.nan  # in the last thread's share
    got = cuvil.compile_module(m)(x)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(cuvil.interpret(m, [x])[0]))


@pytest.mark.parametrize("op", ["reduce_max", "reduce_min"])
@pytest.mark.parametrize("shape", [(1, 4096), (3, 1024)])
def test_long_rows_of_max_and_min_reduce_in_lanes(op, shape):
    """A long row kept beside other rows (ONNX's ReduceMax over [1, n]) runs in REDUCE_LANES partial results, not one
    accumulator that waits on the compare's latency; exact against the interpreter."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", shape)], ["x"])
    b.ret(getattr(b, op)(b.args[0], axes=(1,), keepdims=True))
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(cuvil.compile_module(m)(x)[0], cuvil.interpret(m, [x])[0])
    assert "part[j + 32]" in _kernel_bodies(m)
