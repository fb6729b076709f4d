"""DLPack for the CUDA runtime (dlpack.py) against the recording fake driver: run_device outputs are "dltensor"
capsules on kDLCUDA with the layout torch reads (checked through a ctypes reader, and by torch.from_dlpack where
the capsule is of host memory), inputs that offer only `__dlpack__` are taken zero-copy, host tensors are refused."""
import ctypes
import gc

import numpy as np
import pytest

from cuvil.backends.cuda import dlpack
from cuvil.errors import ShapeError
from cuvil.ir import TensorType
from tests.backends.cuda.test_runtime import _build, _module


class _DLPackOnly:
    """A device tensor of the fake driver that offers DLPack alone (as a JAX GPU array does)."""

    def __init__(self, driver, array: np.ndarray, device=dlpack.KDL_CUDA):
        self.ptr, self.array, self.device = driver.cuMemAlloc(array.nbytes), array, device
        ctypes.memmove(self.ptr, array.ctypes.data, array.nbytes)
        self.streams = []

    def __dlpack_device__(self):
        return (self.device, 0)

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return dlpack.to_capsule(self.ptr, self.array.shape, self.array.dtype, (self.device, 0), self)


def _read(t: dict) -> np.ndarray:
    out = np.empty(t["shape"], t["dtype"])
    ctypes.memmove(out.ctypes.data, t["data"], out.nbytes)
    return out


def test_run_device_outputs_are_cuda_dlpack_capsules(cuda_compiler):
    m = _module(lambda b, x: (b.reshape(x, shape=(6,)),), TensorType("f32", (2, 3)))
    f, d = _build(m)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = f.run_device([_DLPackOnly(d, x)])
    assert y.__dlpack_device__() == (dlpack.KDL_CUDA, 0)
    capsule = y.__dlpack__()
    t = dlpack.from_capsule(capsule)
    assert t["device"] == (dlpack.KDL_CUDA, 0) and t["shape"] == (6,) and t["strides"] is None
    assert t["dtype"] == np.float32 and t["data"] == y.ptr
    np.testing.assert_array_equal(_read(t), x.reshape(6))
    del capsule, t
    gc.collect()
    assert not any(owner is y for _, _, owner in dlpack._live.values())  # an unconsumed capsule deletes its tensor
    with pytest.raises(BufferError):
        y.__dlpack__(dl_device=(dlpack.KDL_CPU, 0))


def test_dlpack_only_inputs_are_read_in_place_on_the_functions_stream(cuda_compiler):
    m = _module(lambda b, x: (b.reshape(x, shape=(6,)),), TensorType("f32", (2, 3)))
    f, d = _build(m)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    src = _DLPackOnly(d, x)
    (y,) = f.run_device([src])
    np.testing.assert_array_equal(_read(dlpack.from_capsule(y.__dlpack__())), x.reshape(6))
    assert src.streams == [f.stream]  # the producer orders its work before this stream's
    assert d.count("cuMemcpyHtoDAsync") == 0 and d.count("cuMemcpyDtoHAsync") == 0  # device to device only


def test_host_dlpack_tensors_are_refused_with_a_clear_error(cuda_compiler):
    torch = pytest.importorskip("torch")
    m = _module(lambda b, x: (b.neg(x),), TensorType("f32", (2, 3)))
    f, d = _build(m)
    with pytest.raises(ShapeError, match="run_device takes device arrays"):
        f.run_device([torch.zeros((2, 3))])
    with pytest.raises(ShapeError, match="run_device takes device arrays"):
        f.run_device([_DLPackOnly(d, np.zeros((2, 3), np.float32), device=dlpack.KDL_CPU)])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int8, np.uint8, np.bool_])
def test_torch_reads_the_capsule_layout(dtype):
    """The same builder on host memory (kDLCPU): torch.from_dlpack takes it over, reads the values, and calls the
    deleter when it lets go."""
    torch = pytest.importorskip("torch")
    a = (np.arange(12) % 3).astype(dtype).reshape(3, 4)

    class Host:
        def __dlpack_device__(self):
            return (dlpack.KDL_CPU, 0)

        def __dlpack__(self, stream=None):
            return dlpack.to_capsule(a.ctypes.data, a.shape, a.dtype, (dlpack.KDL_CPU, 0), a)

    before = len(dlpack._live)
    t = torch.from_dlpack(Host())
    assert tuple(t.shape) == (3, 4) and t.data_ptr() == a.ctypes.data  # zero-copy
    np.testing.assert_array_equal(t.numpy(), a)
    del t
    gc.collect()
    assert len(dlpack._live) == before
