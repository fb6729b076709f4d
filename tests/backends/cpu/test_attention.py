"""The fused attention kernel (kernels/attention.c) against the interpreter: odd sizes, masks, the guard, K stored
transposed, symbolic sizes, and more rows than one block of scores holds."""
import numpy as np
import pytest

import cuvil
from cuvil.compiler import compile_module
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from tests.passes.test_attention import SCORES, SHAPE, _exported_attention, attention_inputs, attention_module

from .test_ops_compiled import assert_matches


def _scaled(b, s, scale, shape):
    return b.mul(s, b.broadcast_to(b.emit("full", value=scale, shape=(), dtype="f32"), shape=shape))


def attention(batch, rows, keys, d, dv, k_transposed: bool = False) -> Module:
    """softmax(Q K^T * 0.3) V, K [*batch, keys, d]; or, k_transposed, K^T [b, h, d, keys] made of K [b, keys, h, d]
    by a transpose that is not a swap of the last two axes (BERT's), so the kernel reads K^T as it is stored."""
    m = Module()
    kshape = (batch[0], keys, batch[1], d) if k_transposed else (*batch, keys, d)
    b = Builder.new_function(m, "main", [TensorType("f32", (*batch, rows, d)), TensorType("f32", kshape),
                                         TensorType("f32", (*batch, keys, dv))])
    q, k, v = b.args
    n = len(batch)
    kt = b.transpose(k, perm=(0, 2, 3, 1) if k_transposed else (*range(n), n + 1, n))
    s = _scaled(b, b.matmul(q, kt), 0.3, (*batch, rows, keys))
    b.ret(b.matmul(b.softmax(s, axis=n + 1), v))
    return m


def _inputs(m: Module, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(a.type.shape).astype(np.float32) for a in m.main.args]


def _fused_once(exe) -> None:
    ir = cuvil.inspect_ir(exe)
    assert ir.count('name = "attention"') == 1 and "softmax" in ir


@pytest.mark.parametrize("batch, rows, keys, d, dv", [((2, 3), 7, 13, 5, 9), ((1,), 1, 129, 64, 64),
                                                      ((3,), 197, 197, 64, 64), ((1,), 33, 1, 3, 17),
                                                      ((2,), 40, 2000, 16, 8), ((2, 3), 100, 700, 5, 9)])
def test_attention_matches_the_interpreter_at_odd_sizes(batch, rows, keys, d, dv):
    m = attention(batch, rows, keys, d, dv)
    inputs = _inputs(m)
    want = interpret(m, inputs)
    exe = compile_module(m)
    _fused_once(exe)
    assert_matches(exe(*inputs), want)


@pytest.mark.parametrize("rows, keys", [(9, 11), (100, 1500)])  # one block of rows an item; several (K^T packed)
def test_attention_reads_k_stored_transposed(rows, keys):
    m = attention((2, 3), rows, keys, 6, 5, k_transposed=True)
    inputs = _inputs(m, 1)
    exe = compile_module(m)
    _fused_once(exe)
    assert_matches(exe(*inputs), interpret(m, inputs))


@pytest.mark.parametrize("mask, guard", [("add", False), ("keep", True), ("keep", False), ("none", True)])
def test_attention_masks_and_the_guard_of_a_row_with_no_key_left(mask, guard):
    m = attention_module(mask, guard, keys=11, head=7)
    inputs = attention_inputs(mask, keys=11, head=7)
    want = interpret(m, inputs)[0]
    exe = compile_module(m)
    _fused_once(exe)
    got = exe(*inputs)
    got = got[0] if isinstance(got, (list, tuple)) else got
    if mask == "keep":  # row [1, 2, 3] has no key: NaN, as the softmax's reference, or 0 where guarded
        assert np.isnan(want[1, 2, 3]).all() != guard and np.isnan(got[1, 2, 3]).all() != guard
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_attention_with_symbolic_sequence_lengths():
    n, t = sym("n"), sym("t")
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, n, 8)), TensorType("f32", (2, t, 8)),
                                         TensorType("f32", (2, t, 8))])
    q, k, v = b.args
    s = _scaled(b, b.matmul(q, b.transpose(k, perm=(0, 2, 1))), 0.5, (2, n, t))
    b.ret(b.matmul(b.softmax(s, axis=2), v))
    exe = compile_module(m)
    _fused_once(exe)
    rng = np.random.default_rng(2)
    for rows, keys in ((1, 1), (5, 300), (70, 3)):
        inputs = [rng.standard_normal(s).astype(np.float32) for s in ((2, rows, 8), (2, keys, 8), (2, keys, 8))]
        assert_matches(exe(*inputs), interpret(m, inputs))


@pytest.mark.parametrize("row", [0, 5])
def test_attention_as_the_onnx_exporter_writes_it_with_its_isnan_guard(row):
    """A row of -inf scores and, row 5, a NaN score: the isnan guard makes both rows 0."""
    m = _exported_attention(scale_in_constant=True)
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in (SHAPE, SHAPE, SHAPE, SCORES)]
    inputs[3][1, 3, row, :] = -np.inf
    inputs[3][0, 2, row, 4] = np.nan if row else 0.0
    exe = compile_module(m)
    _fused_once(exe)
    got, want = exe(*inputs), interpret(m, inputs)
    assert_matches(got, want)
    assert not np.isnan(want[0]).any()


def test_vits_constant_all_true_mask_is_folded_away_before_the_kernel():
    """The ONNX exporter's ViT mask: where(bool[2,1,197,197] constant, 0, -FLT_MAX), broadcast over the heads and
    added to the scores. All true, so it adds 0: the kernel reads no mask (before, the 77,618-element constant was
    over the splat scan's limit, and [2,3,197,197] of zeros were written and read each layer)."""
    batch, n, d = (2, 3), 197, 8
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (*batch, n, d))] * 3)
    q, k, v = b.args
    keep = b.constant(np.ones((2, 1, n, n), bool), "expand_1")
    zero, lowest = (b.broadcast_to(b.constant(np.array(x, np.float32), name), shape=(2, 1, n, n))
                    for x, name in ((0.0, "zero"), (np.finfo(np.float32).min, "lowest")))
    mask = b.broadcast_to(b.where(keep, zero, lowest), shape=(*batch, n, n))
    s = b.add(_scaled(b, b.matmul(q, b.transpose(k, perm=(0, 1, 3, 2))), 0.3, (*batch, n, n)), mask)
    b.ret(b.matmul(b.softmax(s, axis=3), v))
    inputs = _inputs(m, 6)
    want = interpret(m, inputs)
    exe = compile_module(m)
    _fused_once(exe)
    (line,) = [x for x in cuvil.inspect_ir(exe).splitlines() if 'name = "attention"' in x]
    assert line.split("=", 1)[1].count("%") == 3  # Q, K and V: no mask
    assert_matches(exe(*inputs), want)
