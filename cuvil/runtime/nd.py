"""`cuvil.nd`: the runtime API's tensors, by TVM's names (`tvm.nd.array`, `.numpy()`, `.shape`, `.dtype`).

An `NDArray` is a view of a NumPy array: `cuvil.nd.array(x)` of a C-contiguous array shares its memory (no copy),
and `.numpy()` returns that same memory (TVM's copies). Runtime calls read inputs from it and write outputs into
it in place.

    >>> import numpy as np, cuvil
    >>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> a = cuvil.nd.array(x)
    >>> a.shape, str(a.dtype), a.numpy() is x
    ((2, 3), 'float32', True)
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..ir.dtypes import DType
from .pool import ALIGN, aligned_view

DEVICES = ("cpu",)


class NDArray:
    """A tensor the runtime reads or writes in place: a C-contiguous NumPy array, wrapped without copying."""

    __slots__ = ("_data",)

    def __init__(self, data: np.ndarray):
        if not isinstance(data, np.ndarray) or not data.flags.c_contiguous:
            raise TypeError("NDArray wraps a C-contiguous numpy.ndarray; use cuvil.nd.array(x) to make one")
        self._data = data

    shape = property(lambda self: self._data.shape)
    dtype = property(lambda self: self._data.dtype, doc="a numpy.dtype (equal to TVM's string: == 'float32')")
    ndim = property(lambda self: self._data.ndim)
    size = property(lambda self: self._data.size)
    nbytes = property(lambda self: self._data.nbytes)
    device = property(lambda self: "cpu")

    def numpy(self) -> np.ndarray:
        """The array itself (no copy): later runs that write into this NDArray change it."""
        return self._data

    def __array__(self, dtype=None, copy=None):
        if copy:
            return np.array(self._data, dtype=dtype, copy=True)
        return self._data if dtype is None else self._data.astype(dtype, copy=False)

    def copyfrom(self, source) -> "NDArray":
        """Overwrite the contents with `source` (same shape; cast to this dtype), in place."""
        source = np.asarray(source)
        if source.shape != self.shape:
            raise ValueError(f"copyfrom: shape {source.shape} does not match this array's {self.shape}")
        np.copyto(self._data, source, casting="same_kind")
        return self

    def __repr__(self) -> str:
        return f"<cuvil.nd.NDArray {self.dtype}{list(self.shape)} on cpu>\n{self._data!r}"


def array(obj, device: str = "cpu", dtype=None) -> NDArray:
    """An NDArray of `obj`: the same memory when it is a C-contiguous NumPy array of that dtype, else a copy.
    The device comes second, as in `tvm.nd.array(x, dev)`."""
    _check_device(device)
    data = obj.numpy() if isinstance(obj, NDArray) else obj
    want = None if dtype is None else numpy_dtype(dtype)
    return NDArray(np.ascontiguousarray(data, dtype=want))


def empty(shape, dtype="float32", device: str = "cpu") -> NDArray:
    """An uninitialised NDArray (64-byte aligned), e.g. to bind as an output."""
    _check_device(device)
    dtype, shape = numpy_dtype(dtype), tuple(int(n) for n in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return NDArray(aligned_view(np.empty(nbytes + ALIGN, np.uint8), nbytes).view(dtype).reshape(shape))


def numpy_dtype(dtype) -> np.dtype:
    """A NumPy dtype from a NumPy name or type, or a Cuvil name (`f32`, `i64`)."""
    if isinstance(dtype, str) and dtype in DType._value2member_map_:
        return DType(dtype).numpy
    return np.dtype(dtype)


def as_numpy(x) -> np.ndarray:
    """The NumPy array behind a runtime argument (an NDArray, or anything NumPy takes), without copying."""
    return x._data if isinstance(x, NDArray) else x


def _check_device(device: str) -> None:
    if device not in DEVICES:
        raise UnsupportedError(f"device {device!r} is not supported yet (supported: {', '.join(DEVICES)})")


__all__ = ["NDArray", "array", "empty"]
