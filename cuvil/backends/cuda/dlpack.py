"""DLPack (https://dmlc.github.io/dlpack/latest/) for the CUDA runtime's arrays, through ctypes: `to_capsule` makes
the "dltensor" PyCapsule of a C-contiguous buffer (a DLManagedTensor whose deleter drops the owner it keeps alive),
`from_capsule` reads one (device, dtype, shape, strides, data) without taking it over.

Exchange with torch and CuPy is zero-copy both ways: `torch.from_dlpack(y)` of a run_device output, and inputs
that only offer `__dlpack__` (JAX arrays on the GPU, for instance).
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT, KDL_BOOL = 0, 1, 2, 4, 6
CAPSULE, USED = b"dltensor", b"used_dltensor"


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
# the same two over a raw PyObject* (the capsule destructor's argument: no reference to count)
_raw_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))

_live: dict = {}  # address of a DLManagedTensor -> what keeps it and its buffer alive until its deleter runs
_lock = threading.Lock()


@DELETER
def _delete(managed) -> None:
    with _lock:
        _live.pop(ctypes.addressof(managed.contents), None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule) -> None:
    """A capsule nobody consumed (still named "dltensor") deletes its tensor; a consumer renames it and calls the
    deleter itself."""
    if _raw_valid(capsule, CAPSULE):
        managed = ctypes.cast(_raw_pointer(capsule, CAPSULE), ctypes.POINTER(DLManagedTensor))
        managed.contents.deleter(managed)


def dl_dtype(dtype) -> DLDataType:
    d = np.dtype(dtype)
    if d.kind == "V" and d.itemsize == 2:  # bf16 as stored by ml_dtypes / raw bits
        return DLDataType(KDL_BFLOAT, 16, 1)
    code = {"i": KDL_INT, "u": KDL_UINT, "f": KDL_FLOAT, "b": KDL_BOOL}[d.kind]
    return DLDataType(code, 8 * d.itemsize, 1)


def numpy_dtype(t: DLDataType) -> np.dtype:
    kinds = {KDL_INT: "i", KDL_UINT: "u", KDL_FLOAT: "f", KDL_BOOL: "b"}
    if t.lanes != 1 or t.code not in kinds or t.bits % 8:
        raise TypeError(f"a DLPack dtype (code {t.code}, {t.bits} bits, {t.lanes} lanes) Cuvil does not take")
    return np.dtype("?") if t.code == KDL_BOOL else np.dtype(f"{kinds[t.code]}{t.bits // 8}")


def to_capsule(ptr: int, shape: tuple, dtype, device: tuple, owner) -> object:
    """The "dltensor" capsule of the C-contiguous buffer at `ptr` on `device` ((type, id)); `owner` is kept alive
    until the consumer (or the capsule's end) deletes the tensor."""
    managed = DLManagedTensor()
    dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
    t = managed.dl_tensor
    t.data, t.device, t.ndim, t.dtype = ptr, DLDevice(*device), len(shape), dl_dtype(dtype)
    t.shape, t.strides, t.byte_offset = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64)), None, 0
    managed.deleter = _delete
    with _lock:
        _live[ctypes.addressof(managed)] = (managed, dims, owner)
    return _api.PyCapsule_New(ctypes.addressof(managed), CAPSULE, ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def from_capsule(capsule) -> dict:
    """device ((type, id)), dtype, shape, strides (elements, or None: C order) and data address of a "dltensor"
    capsule, which the caller keeps alive while it reads the data."""
    if not _api.PyCapsule_IsValid(capsule, CAPSULE):
        raise TypeError("not a DLPack capsule (a PyCapsule named 'dltensor' that nobody consumed)")
    t = ctypes.cast(_api.PyCapsule_GetPointer(capsule, CAPSULE), ctypes.POINTER(DLManagedTensor)).contents.dl_tensor
    shape = tuple(t.shape[k] for k in range(t.ndim))
    strides = tuple(t.strides[k] for k in range(t.ndim)) if t.strides else None
    return {"device": (t.device.device_type, t.device.device_id), "dtype": numpy_dtype(t.dtype), "shape": shape,
            "strides": strides, "data": (t.data or 0) + t.byte_offset}
