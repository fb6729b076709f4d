"""GEMMs through cuBLASLt (ctypes over the pip wheel's libcublasLt, `nvidia-cublas-cu12`, or the system's), with
the bias and relu/gelu epilogues. Row-major C = A @ B is computed as the column-major C^T = B^T A^T, so the bias
(one value per column of C) is cuBLASLt's per-row bias of D.

`gemm_layouts` is the pure part (what each matrix layout and operation is), shared with the recording fake in the
tests; `CublasLt` makes the descriptors once per GEMM and shape and calls cublasLtMatmul on the runtime's stream.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from ...errors import UnsupportedError
from .driver import CudaDriverError
from .toolchain import wheel_libraries

CUDA_R = {"f32": 0, "f16": 2, "bf16": 14}
ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2}
CUBLAS_COMPUTE_32F = 68
CUBLAS_OP = {False: 0, True: 1}
DESC_TRANSA, DESC_TRANSB, DESC_EPILOGUE, DESC_BIAS_POINTER = 3, 4, 7, 8
LAYOUT_BATCH_COUNT, LAYOUT_STRIDED_BATCH_OFFSET = 5, 6
EPILOGUE = {("none", False): 1, ("relu", False): 2, ("gelu", False): 32, ("none", True): 4, ("relu", True): 6,
            ("gelu", True): 36}
WORKSPACE_BYTES = 32 << 20  # what cuBLASLt's Hopper kernels ask for at most


@dataclass(frozen=True)
class Layout:
    rows: int
    cols: int
    ld: int
    stride: int  # elements between batch items


@dataclass(frozen=True)
class GemmLayouts:
    """The column-major problem cuBLASLt solves: D (n x m) = op_a(A') @ op_b(B'), A' = B's buffer, B' = A's."""

    a: Layout
    b: Layout
    d: Layout
    trans_a: bool
    trans_b: bool
    batch: int
    epilogue: int


def gemm_layouts(step, env_value) -> GemmLayouts:
    """The layouts of Gemm `step` with its dims evaluated by `env_value`."""
    m, n, k, batch = (env_value(d) for d in (step.m, step.n, step.k, step.batch))
    sa, sb = env_value(step.stride_a), env_value(step.stride_b)
    a = Layout(k, n, k, sb) if step.tb else Layout(n, k, n, sb)  # B's buffer, [N, K] when stored transposed
    b = Layout(m, k, m, sa) if step.ta else Layout(k, m, k, sa)  # A's buffer, [K, M] when stored transposed
    return GemmLayouts(a, b, Layout(n, m, n, m * n), step.tb, step.ta, batch,
                       EPILOGUE[(step.epilogue, step.bias is not None)])


@functools.lru_cache(maxsize=None)
def _library():
    for c in wheel_libraries("libcublasLt"):
        try:
            return ctypes.CDLL(c)
        except OSError:
            continue
    raise UnsupportedError("the CUDA backend's GEMMs need cuBLASLt: pip install 'cuvil[cuda]' (nvidia-cublas-cu12)")


class CublasLt:
    """cuBLASLt on one stream: `matmul(step, layouts, a, b, c, bias, workspace, stream)` with device pointers."""

    def __init__(self, lib=None):
        self.lib = lib or _library()
        self.handle = ctypes.c_void_p()
        self._check("cublasLtCreate", ctypes.byref(self.handle))
        self._descs: dict = {}

    def _check(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise CudaDriverError(f"{name} failed: cublasStatus {rc}")

    def _set(self, fn: str, obj, attr: int, value) -> None:
        self._check(fn, obj, ctypes.c_int(attr), ctypes.byref(value), ctypes.c_size_t(ctypes.sizeof(value)))

    def _layout(self, dtype: str, lay: Layout, batch: int):
        h = ctypes.c_void_p()
        self._check("cublasLtMatrixLayoutCreate", ctypes.byref(h), ctypes.c_int(CUDA_R[dtype]),
                    ctypes.c_uint64(lay.rows), ctypes.c_uint64(lay.cols), ctypes.c_int64(lay.ld))
        if batch > 1:
            self._set("cublasLtMatrixLayoutSetAttribute", h, LAYOUT_BATCH_COUNT, ctypes.c_int32(batch))
            self._set("cublasLtMatrixLayoutSetAttribute", h, LAYOUT_STRIDED_BATCH_OFFSET, ctypes.c_int64(lay.stride))
        return h

    def _descriptors(self, dtype: str, g: GemmLayouts):
        key = (dtype, g)
        if key not in self._descs:
            desc = ctypes.c_void_p()
            self._check("cublasLtMatmulDescCreate", ctypes.byref(desc), ctypes.c_int(CUBLAS_COMPUTE_32F),
                        ctypes.c_int(CUDA_R["f32"]))
            self._set("cublasLtMatmulDescSetAttribute", desc, DESC_TRANSA, ctypes.c_int32(CUBLAS_OP[g.trans_a]))
            self._set("cublasLtMatmulDescSetAttribute", desc, DESC_TRANSB, ctypes.c_int32(CUBLAS_OP[g.trans_b]))
            self._set("cublasLtMatmulDescSetAttribute", desc, DESC_EPILOGUE, ctypes.c_uint32(g.epilogue))
            self._descs[key] = (desc, *(self._layout(dtype, lay, g.batch) for lay in (g.a, g.b, g.d)))
        return self._descs[key]

    def matmul(self, step, g: GemmLayouts, a: int, b: int, c: int, bias: int, workspace: int, stream: int) -> None:
        desc, la, lb, ld = self._descriptors(step.dtype, g)
        if bias:
            self._set("cublasLtMatmulDescSetAttribute", desc, DESC_BIAS_POINTER, ctypes.c_uint64(bias))
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        # A' is B's buffer and B' is A's (the column-major swap); C and D are the output
        self._check("cublasLtMatmul", self.handle, desc, ctypes.byref(one), ctypes.c_uint64(b), la, ctypes.c_uint64(a),
                    lb, ctypes.byref(zero), ctypes.c_uint64(c), ld, ctypes.c_uint64(c), ld, None,
                    ctypes.c_uint64(workspace), ctypes.c_size_t(WORKSPACE_BYTES), ctypes.c_void_p(stream))
