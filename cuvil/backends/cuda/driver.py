"""The CUDA driver API as the runtime uses it: a small Python interface, implemented over `libcuda.so.1` by ctypes
(`CudaDriver`) and, in the tests, by a recording fake that checks every call (tests/backends/cuda/fake_driver.py).

Each method is one driver call, named as in cuda.h, with Python values in and out; a failing call raises
`CudaDriverError` with the driver's name for the error. Device pointers, streams, modules, functions, graphs are ints.
A kernel launch takes its parameters as (ctype, value) pairs, so a recorder can check each one's size.
"""
from __future__ import annotations

import ctypes
import functools

from ...errors import CuvilError, UnsupportedError

CU_STREAM_NON_BLOCKING = 1
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_MEMHOSTALLOC_PORTABLE = 1


class CudaDriverError(CuvilError):
    """A CUDA driver call that failed; the message names the call and the driver's error."""


class CudaDriver:
    """The driver API over ctypes. `CudaDriver.load()` opens libcuda.so.1 (UnsupportedError where there is none)."""

    def __init__(self, lib):
        self.lib = lib

    @classmethod
    @functools.lru_cache(maxsize=None)
    def load(cls) -> "CudaDriver":
        for name in ("libcuda.so.1", "libcuda.so"):
            try:
                return cls(ctypes.CDLL(name))
            except OSError:
                continue
        raise UnsupportedError("target='cuda' needs an NVIDIA driver (libcuda.so.1), and this machine has none; "
                               "cuvil.export(..., target='cuda') still builds a .cuv here for a machine that has one")

    def _call(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(text))
            raise CudaDriverError(f"{name} failed: {text.value.decode() if text.value else rc}")

    def _out(self, name: str, ctype, *args):
        v = ctype()
        self._call(name, ctypes.byref(v), *args)
        return v.value or 0

    # -- device and context ----------------------------------------------------------------------------------
    def cuInit(self, flags: int = 0) -> None:
        self._call("cuInit", ctypes.c_uint(flags))

    def cuDeviceGet(self, ordinal: int) -> int:
        return self._out("cuDeviceGet", ctypes.c_int, ctypes.c_int(ordinal))

    def cuDeviceGetAttribute(self, attribute: int, device: int) -> int:
        return self._out("cuDeviceGetAttribute", ctypes.c_int, ctypes.c_int(attribute), ctypes.c_int(device))

    def cuDevicePrimaryCtxRetain(self, device: int) -> int:
        return self._out("cuDevicePrimaryCtxRetain", ctypes.c_void_p, ctypes.c_int(device))

    def cuCtxSetCurrent(self, ctx: int) -> None:
        self._call("cuCtxSetCurrent", ctypes.c_void_p(ctx))

    def cuCtxGetStreamPriorityRange(self) -> tuple:
        least, greatest = ctypes.c_int(), ctypes.c_int()
        self._call("cuCtxGetStreamPriorityRange", ctypes.byref(least), ctypes.byref(greatest))
        return least.value, greatest.value

    # -- modules ---------------------------------------------------------------------------------------------
    def cuModuleLoadData(self, image: bytes) -> int:
        buf = ctypes.create_string_buffer(image)  # NUL-terminated: PTX text needs it, a cubin ignores it
        return self._out("cuModuleLoadData", ctypes.c_void_p, buf)

    def cuModuleGetFunction(self, module: int, name: str) -> int:
        return self._out("cuModuleGetFunction", ctypes.c_void_p, ctypes.c_void_p(module), name.encode())

    def cuModuleUnload(self, module: int) -> None:
        self._call("cuModuleUnload", ctypes.c_void_p(module))

    # -- memory ----------------------------------------------------------------------------------------------
    def cuMemAlloc(self, nbytes: int) -> int:
        return self._out("cuMemAlloc_v2", ctypes.c_uint64, ctypes.c_size_t(max(nbytes, 1)))

    def cuMemFree(self, ptr: int) -> None:
        self._call("cuMemFree_v2", ctypes.c_uint64(ptr))

    def cuMemHostAlloc(self, nbytes: int, flags: int = CU_MEMHOSTALLOC_PORTABLE) -> int:
        return self._out("cuMemHostAlloc", ctypes.c_void_p, ctypes.c_size_t(max(nbytes, 1)), ctypes.c_uint(flags))

    def cuMemFreeHost(self, ptr: int) -> None:
        self._call("cuMemFreeHost", ctypes.c_void_p(ptr))

    def cuMemcpyHtoDAsync(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._call("cuMemcpyHtoDAsync_v2", ctypes.c_uint64(dst), ctypes.c_void_p(src), ctypes.c_size_t(nbytes),
                   ctypes.c_void_p(stream))

    def cuMemcpyDtoHAsync(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._call("cuMemcpyDtoHAsync_v2", ctypes.c_void_p(dst), ctypes.c_uint64(src), ctypes.c_size_t(nbytes),
                   ctypes.c_void_p(stream))

    def cuMemcpyDtoDAsync(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._call("cuMemcpyDtoDAsync_v2", ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_size_t(nbytes),
                   ctypes.c_void_p(stream))

    def cuMemsetD32Async(self, dst: int, value: int, count: int, stream: int) -> None:
        self._call("cuMemsetD32Async", ctypes.c_uint64(dst), ctypes.c_uint(value), ctypes.c_size_t(count),
                   ctypes.c_void_p(stream))

    # -- streams, launches, graphs ---------------------------------------------------------------------------
    def cuStreamCreateWithPriority(self, flags: int, priority: int) -> int:
        return self._out("cuStreamCreateWithPriority", ctypes.c_void_p, ctypes.c_uint(flags), ctypes.c_int(priority))

    def cuStreamSynchronize(self, stream: int) -> None:
        self._call("cuStreamSynchronize", ctypes.c_void_p(stream))

    def cuStreamDestroy(self, stream: int) -> None:
        self._call("cuStreamDestroy_v2", ctypes.c_void_p(stream))

    def cuLaunchKernel(self, func: int, grid: tuple, block: tuple, shared: int, stream: int, params: list) -> None:
        values = [ctype(v) for ctype, v in params]
        ptrs = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p)
                                                         for v in values])
        self._call("cuLaunchKernel", ctypes.c_void_p(func), *(ctypes.c_uint(g) for g in grid),
                   *(ctypes.c_uint(b) for b in block), ctypes.c_uint(shared), ctypes.c_void_p(stream), ptrs, None)

    def cuStreamBeginCapture(self, stream: int, mode: int = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) -> None:
        self._call("cuStreamBeginCapture_v2", ctypes.c_void_p(stream), ctypes.c_int(mode))

    def cuStreamEndCapture(self, stream: int) -> int:
        graph = ctypes.c_void_p()
        self._call("cuStreamEndCapture", ctypes.c_void_p(stream), ctypes.byref(graph))
        return graph.value or 0

    def cuGraphInstantiate(self, graph: int) -> int:
        return self._out("cuGraphInstantiateWithFlags", ctypes.c_void_p, ctypes.c_void_p(graph), ctypes.c_ulonglong(0))

    def cuGraphLaunch(self, exec_graph: int, stream: int) -> None:
        self._call("cuGraphLaunch", ctypes.c_void_p(exec_graph), ctypes.c_void_p(stream))

    def cuGraphExecDestroy(self, exec_graph: int) -> None:
        self._call("cuGraphExecDestroy", ctypes.c_void_p(exec_graph))

    def cuGraphDestroy(self, graph: int) -> None:
        self._call("cuGraphDestroy", ctypes.c_void_p(graph))
