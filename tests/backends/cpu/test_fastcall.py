"""The C call path (fastcall.c): exact inputs take it, everything else falls back to ctypes' converting path with
the same results and errors; outputs are never handed out twice while held; ctypes alone works too."""
import ctypes
import functools
import logging
import threading

import numpy as np
import pytest

from cuvil.backends.cpu import fastcall, toolchain
from cuvil.compiler import compile_module
from cuvil.backends.cpu.executable import call_failure
from cuvil.errors import CuvilError, ShapeError
from cuvil.ir import Builder, Module, TensorType, sym

needs_extension = pytest.mark.skipif(fastcall.extension() is None, reason="no C call path on this machine")


def _add_one(shape=(4,)):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", shape)], ["x"])
    x = b.args[0]
    b.ret(b.add(x, b.full(1.0, shape)))
    return m


def _pair_sum():
    """x[n,4] + y[n,4], and the concatenation of x with itself, f32[2n,4]: a bound symbol, a checked one, an
    output size computed from it."""
    n = sym("n")
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (n, 4)), TensorType("f32", (n, 4))], ["x", "y"])
    x, y = b.args
    b.ret(b.add(x, y), b.concat(x, x, axis=0))
    return m


def _address(a):
    """The data pointer (not `a.ctypes.data`: that object is a reference cycle holding the array until GC)."""
    return a.__array_interface__["data"][0]


@pytest.fixture(scope="module")
def pair():
    return compile_module(_pair_sum())


@needs_extension
def test_exact_inputs_take_the_c_path_and_match_ctypes(pair):
    run = pair._run
    x, y = np.arange(12, dtype=np.float32).reshape(3, 4), np.ones((3, 4), np.float32)
    got = run.call_exact(x, y)
    want = run.call_ctypes([x, y])
    assert got is not None and len(got) == 2
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert got[1].shape == (6, 4)


@needs_extension
@pytest.mark.parametrize("case", ["dtype", "strides", "rank", "size", "relation", "list", "count"])
def test_the_c_path_declines_what_does_not_match_exactly(pair, case):
    x = np.ones((3, 4), np.float32)
    args = {"dtype": (x.astype(np.float64), x), "strides": (np.ones((3, 8), np.float32)[:, ::2], x),
            "rank": (x.reshape(12), x), "size": (np.ones((3, 5), np.float32), np.ones((3, 5), np.float32)),
            "relation": (x, np.ones((2, 4), np.float32)), "list": (x.tolist(), x), "count": (x,)}[case]
    assert pair._run.call_exact(*args) is None


def test_mismatches_are_converted_or_raise_on_the_python_path(pair, caplog):
    x = np.ones((3, 4), np.float32)
    with caplog.at_level(logging.DEBUG, logger="cuvil.backends.cpu"):
        out = pair(np.ones((3, 8), np.float32)[:, ::2], x.astype(np.float64))
    np.testing.assert_array_equal(out[0], np.full((3, 4), 2, np.float32))
    assert "non-contiguous" in caplog.text and "casting" in caplog.text
    with pytest.raises(ShapeError, match="n"):
        pair(x, np.ones((2, 4), np.float32))
    with pytest.raises(ShapeError, match="rank"):
        pair(x.reshape(12), x)


@needs_extension
def test_an_output_is_not_reused_while_anything_holds_it():
    exe = compile_module(_add_one())
    x = np.zeros(4, np.float32)
    first = exe(x)[0]
    view = exe(x)[0][1:]  # only a view survives: its base must not be written again
    again = exe(x + 5)[0]
    assert not np.shares_memory(first, again) and not np.shares_memory(view, again)
    np.testing.assert_array_equal(first, 1)
    np.testing.assert_array_equal(view, 1)
    address = _address(again)
    del again
    assert _address(exe(x)[0]) == address  # dropped: its buffer serves the next call


@needs_extension
def test_a_loop_that_keeps_the_last_result_cycles_through_two_buffers():
    exe = compile_module(_add_one())
    x = np.zeros(4, np.float32)
    y, seen = exe(x)[0], set()
    for k in range(6):
        y = exe(x + k)[0]  # the previous y is held while this call runs
        seen.add(_address(y))
        np.testing.assert_array_equal(y, k + 1)
    assert len(seen) == 2


@needs_extension
def test_concurrent_calls_each_get_scratch_and_outputs(pair):
    rng = np.random.default_rng(0)
    inputs = [rng.random((257, 4), np.float32) for _ in range(8)]
    errors = []

    def work(x):
        for _ in range(50):
            s, c = pair(x, x)
            if not (np.array_equal(s, 2 * x) and np.array_equal(c[257:], x)):
                errors.append("wrong result")

    threads = [threading.Thread(target=work, args=(x,)) for x in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_ctypes_alone_gives_the_same_results(monkeypatch):
    monkeypatch.setattr(fastcall, "extension", lambda: None)
    exe = compile_module(_pair_sum())
    assert exe._run.call_exact is None
    x = np.ones((2, 4), np.float32)
    s, c = exe(x, x)
    np.testing.assert_array_equal(s, 2 * x)
    assert c.shape == (4, 4)
    with pytest.raises(ShapeError):
        exe(x, np.ones((3, 4), np.float32))


def test_no_extension_without_python_headers(monkeypatch, tmp_path):
    monkeypatch.setattr(fastcall.sysconfig, "get_paths", lambda: {"include": str(tmp_path)})
    fastcall.extension.cache_clear()
    try:
        assert fastcall.extension() is None
    finally:
        fastcall.extension.cache_clear()


STUB = """#include <stdint.h>
int cuvil_main(void *const *args, void *const *outs, const int64_t *dims, uint8_t *arena, const void *const *consts)
{ return dims[0] == 9 ? 7 : 0; }
int64_t cuvil_arena_bytes(const int64_t *dims) { return dims[0]; }
const char *cuvil_last_error(void) { return "the stub fails at 9"; }
"""


@needs_extension
def test_sizes_evaluate_like_python_and_entry_failures_raise():
    n = sym("n")
    lib = toolchain.load_library(STUB, name="fastcall-stub", opt_level=1)
    outs = [TensorType("f32", ((n - 7) // 2, (n + 1) % 3, 2 * n))]
    keep = (ctypes.c_void_p * 1)()
    lib.cuvil_last_error.restype = ctypes.c_char_p
    failure = functools.partial(call_failure, lib.cuvil_last_error)
    call = fastcall.caller(lib, keep, [TensorType("f32", (n,))], outs, ["n"], [(0, 0)], [], failure)
    for size in (0, 1, 6, 7, 8, 11):
        got = call(np.zeros(size, np.float32))
        want = ((size - 7) // 2, (size + 1) % 3, 2 * size)
        assert (got is None) if min(want) < 0 else got[0].shape == want
    with pytest.raises(CuvilError, match="failed with code 7: the stub fails at 9"):
        call(np.zeros(9, np.float32))
