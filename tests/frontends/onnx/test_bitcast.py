"""ONNX BitCast: bits kept exactly (NaN payloads, -0, carried unsigned types) in the interpreter and compiled."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T

import cuvil

from .helpers import helper, model

PAIRS = [(np.float32, T.FLOAT, np.int32, T.INT32), (np.int32, T.INT32, np.float32, T.FLOAT),
         (np.float64, T.DOUBLE, np.int64, T.INT64), (np.uint32, T.UINT32, np.int32, T.INT32),
         (np.int32, T.INT32, np.uint32, T.UINT32), (np.int16, T.INT16, np.uint16, T.UINT16),
         (np.int64, T.INT64, np.uint64, T.UINT64), (np.uint8, T.UINT8, np.int8, T.INT8),
         (np.uint8, T.UINT8, np.bool_, T.BOOL)]


def _bitcast_model(src: int, dst: int, shape=(2, 4)):
    return model([helper.make_node("BitCast", ["x"], ["y"], to=dst)], [("x", src, shape)], [("y", dst, shape)],
                 opset=26)


def _patterns(np_type):
    """Every byte value at every position, so NaN payloads, sign bits and -0 all occur."""
    raw = np.arange(8 * np.dtype(np_type).itemsize, dtype=np.uint8) * 37 + 3
    raw[:4] = 0xFF
    if np_type is np.uint8:
        raw = np.array([0, 1, 0, 1, 1, 0, 0, 1], np.uint8)
    return raw.view(np_type).reshape(2, 4)


@pytest.mark.parametrize("src_np, src, dst_np, dst", PAIRS, ids=[f"{p[0].__name__}-{p[2].__name__}" for p in PAIRS])
def test_bits_are_kept_exactly(src_np, src, dst_np, dst):
    x = _patterns(src_np)
    want = x.view(dst_np) if dst_np is not np.bool_ else x != 0
    loaded = cuvil.load_onnx(_bitcast_model(src, dst))
    for got in (loaded(x)[0], loaded.optimize()(x)[0]):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()


def test_a_signalling_nan_keeps_its_payload_compiled():
    x = np.array([0x7F800001, 0x7FA00000, -0x7FFFFFFF, 0x7FC00001], np.int32)
    loaded = cuvil.load_onnx(_bitcast_model(T.INT32, T.FLOAT, (4,)))
    assert loaded.optimize()(x)[0].view(np.int32).tolist() == x.tolist()


def test_widths_that_differ_are_refused():
    with pytest.raises(cuvil.errors.CuvilError, match="same bit-width"):
        cuvil.load_onnx(_bitcast_model(T.FLOAT, T.INT64))


def test_narrow_floats_are_refused_clearly():
    with pytest.raises(cuvil.errors.UnsupportedError, match="BitCast of float8"):
        cuvil.load_onnx(_bitcast_model(T.FLOAT8E4M3FN, T.INT8))
