"""`cuvil.load` of a `.cuv` held in memory (bytes, a memoryview, a uint8 array: what Ray's object store hands a
worker): used in place when 64-byte aligned, copied into an aligned buffer otherwise, so that saved prepared
buffers (packed GEMM panels) and constants stay aligned views whatever address the caller's bytes start at."""
import numpy as np
import pytest

import cuvil
from cuvil.backends.cpu.kernels import aligned_empty

from .models import winograd_conv_onnx

pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def winograd_cuv(tmp_path_factory):
    """A Winograd convolution and a MatMul 64 wide, whose packed panels are saved in the file's `prepared` section
    in place of its weight (the convolution's weight is stored, and transformed at load)."""
    model, _ = winograd_conv_onnx(np.random.default_rng(3), 64)
    optimized = cuvil.load_onnx(model.SerializeToString()).optimize()
    path = tmp_path_factory.mktemp("memory") / "winograd.cuv"
    cuvil.export(optimized, path)
    x = np.random.default_rng(4).standard_normal((1, 16, 20, 20)).astype(np.float32)
    return path.read_bytes(), x, optimized(x)[0]


def _at_offset(data: bytes, offset: int) -> np.ndarray:
    """`data` in a uint8 array starting `offset` bytes past a 64-byte boundary."""
    raw = aligned_empty(len(data) + 64, np.uint8)
    view = raw[offset:offset + len(data)]
    view[:] = np.frombuffer(data, np.uint8)
    return view


@pytest.mark.parametrize("offset", [0, 1, 16, 32])
def test_load_from_memory_at_any_alignment(winograd_cuv, offset):
    data, x, expected = winograd_cuv
    buf = _at_offset(data, offset)
    art = cuvil.load(memoryview(buf))
    assert art.metadata["entries"]["main"]["prepared"], "the file should hold saved prepared buffers"
    np.testing.assert_array_equal(art(x), expected)
    consts, prepared = art.constants("main")
    stored = [a for a in [*consts.values(), *prepared.values()] if a is not None]  # None: a weight left out
    assert stored and all(a.ctypes.data % 64 == 0 for a in stored)
    (panels,) = prepared.values()  # the MatMul's; the Winograd transform is made at load
    assert np.shares_memory(panels, buf) is (offset == 0)  # in place when aligned, else a copy


def test_load_from_a_uint8_array_and_from_bytes(winograd_cuv):
    data, x, expected = winograd_cuv
    np.testing.assert_array_equal(cuvil.load(_at_offset(data, 0))(x), expected)
    np.testing.assert_array_equal(cuvil.load(data)(x), expected)
