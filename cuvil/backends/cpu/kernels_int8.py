"""NumPy bindings of the int8 and int4 kernels (gemm_int8.c, conv_int8.c and its uint8 max_pool, gemm_int4.c), for
tests and the benchmarks.

    >>> import numpy as np
    >>> from cuvil.backends.cpu import kernels_int8
    >>> w = np.array([[1, -2], [3, 4]], np.int8)
    >>> kernels_int8.qlinear(np.array([[2.0, 1.0]], np.float32), w, np.ones(2, np.float32), x_scale=1.0,
    ...                      x_zero=128, opt_level=1).tolist()
    [[0.0, 10.0]]

`isa(cap)` caps the code path (3 VNNI, 2 AVX-512BW, 1 AVX2, 0 C) while its block runs: every path is exact, so
all give the same answer.
"""
from __future__ import annotations

import contextlib
import ctypes

import numpy as np

from ...errors import ShapeError
from . import kernels


class QGemmArgs(ctypes.Structure):
    """cuvil_qgemm_args (cuvil_kernels.h)."""

    _fields_ = [("M", ctypes.c_int64), ("N", ctypes.c_int64), ("K", ctypes.c_int64), ("A", ctypes.c_void_p),
                ("lda", ctypes.c_int64), ("a_scale", ctypes.c_void_p), ("a_zero", ctypes.c_void_p),
                ("a_step", ctypes.c_int64), ("packed", ctypes.c_void_p), ("w_scale", ctypes.c_void_p),
                ("bias", ctypes.c_void_p), ("act", ctypes.c_int), ("C", ctypes.c_void_p), ("rsc", ctypes.c_int64),
                ("csc", ctypes.c_int64), ("out_scale", ctypes.c_float), ("out_zero", ctypes.c_int32)]


@contextlib.contextmanager
def isa(cap: int, opt_level: int = 3):
    """Cap the int8/int4 kernels' code path inside the block (then back to the CPU's best, or CUVIL_INT8_ISA)."""
    lib = kernels.load(opt_level)
    lib.cuvil_int8_set_isa(cap)
    try:
        yield lib.cuvil_int8_isa()
    finally:
        lib.cuvil_int8_set_isa(-1)


def best_isa(opt_level: int = 3) -> int:
    return kernels.load(opt_level).cuvil_int8_isa()


def pack(w: np.ndarray, opt_level: int = 3) -> np.ndarray:
    """W [N, K] int8 packed for cuvil_qgemm (its layout belongs to the loaded library)."""
    w = np.ascontiguousarray(w, np.int8)
    lib = kernels.load(opt_level)
    out = kernels.aligned_empty(lib.cuvil_qgemm_packed_bytes(*w.shape), np.uint8)
    lib.cuvil_qgemm_pack(w.shape[0], w.shape[1], w.ctypes.data, out.ctypes.data)
    return out


def _vector(v, n: int, what: str):
    if v is None:
        return None
    v = np.ascontiguousarray(v, np.float32)
    if v.shape != (n,):
        raise ShapeError(f"qlinear: {what} must have shape ({n},), got {v.shape}")
    return v


def qlinear(x, w, w_scale, bias=None, *, x_scale=0.0, x_zero=0, act="none", out_scale=0.0, out_zero=0,
            opt_level=3) -> np.ndarray:
    """The `qlinear_i8` op on 2-D x (f32, or u8 already quantized): x @ w^T with the fused epilogue."""
    x = np.ascontiguousarray(x)
    if x.ndim != 2 or x.dtype not in (np.float32, np.uint8) or w.ndim != 2 or x.shape[1] != w.shape[1]:
        raise ShapeError(f"qlinear: x [M, K] f32/u8 and w [N, K], got {x.dtype} {x.shape} and {w.shape}")
    (m, k), n = x.shape, w.shape[0]
    lib = kernels.load(opt_level)
    packed, scale, bias = pack(w, opt_level), _vector(w_scale, n, "w_scale"), _vector(bias, n, "bias")
    out = np.empty((m, n), np.uint8 if out_scale > 0 else np.float32)
    scratch = kernels.aligned_empty(lib.cuvil_qlinear_scratch_bytes(m, k), np.uint8)
    args = QGemmArgs(M=m, N=n, K=k, packed=packed.ctypes.data, w_scale=scale.ctypes.data,
                     bias=None if bias is None else bias.ctypes.data, act=kernels.ACTIVATIONS[act],
                     C=out.ctypes.data, rsc=n, csc=1, out_scale=out_scale, out_zero=out_zero)
    lib.cuvil_qlinear(ctypes.byref(args), x.ctypes.data, int(x.dtype == np.uint8), x_scale, x_zero,
                      scratch.ctypes.data)
    return out


def conv_geometry(x_shape, w_shape, out_shape, strides, dilations, pads) -> np.ndarray:
    """The geom array of cuvil_qconv2d."""
    return np.array([*x_shape, w_shape[0], *out_shape[2:], *w_shape[2:], *strides, *dilations, *pads[:2]], np.int64)


def qconv_pack(w: np.ndarray, opt_level: int = 3) -> np.ndarray:
    """W [O, C, KH, KW] int8 packed for cuvil_qconv (conv_int8.c)."""
    w = np.ascontiguousarray(w, np.int8)
    lib = kernels.load(opt_level)
    out = kernels.aligned_empty(lib.cuvil_qconv_packed_bytes(*w.shape), np.uint8)
    lib.cuvil_qconv_pack(*w.shape, w.ctypes.data, out.ctypes.data)
    return out


def qconv2d(x, w, w_scale, bias=None, *, strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), x_scale=0.0,
            x_zero=0, act="none", out_scale=0.0, out_zero=0, residual=None, res_scale=0.0, res_zero=0,
            opt_level=3) -> np.ndarray:
    """The `qconv_i8` op on NCHW x (f32 or u8); `residual` (the output's shape: f32, or u8 dequantized with
    `res_scale` and `res_zero`) is added before `act`."""
    x = np.ascontiguousarray(x)
    (n, _, h, wd), (o, _, kh, kw) = x.shape, w.shape
    oh = (h + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.empty((n, o, oh, ow), np.uint8 if out_scale > 0 else np.float32)
    if residual is not None:
        residual = np.ascontiguousarray(residual, np.uint8 if res_scale > 0 else np.float32)
        if residual.shape != out.shape:
            raise ShapeError(f"qconv2d: residual must have shape {out.shape}, got {residual.shape}")
    geom = conv_geometry(x.shape, w.shape, out.shape, strides, dilations, pads)
    lib = kernels.load(opt_level)
    packed = qconv_pack(w, opt_level)
    scale, bias = _vector(w_scale, o, "w_scale"), _vector(bias, o, "bias")
    scratch = kernels.aligned_empty(lib.cuvil_qconv_scratch_bytes(geom.ctypes.data), np.uint8)
    lib.cuvil_qconv(x.ctypes.data, int(x.dtype == np.uint8), x_scale, x_zero, packed.ctypes.data, scale.ctypes.data,
                    None if bias is None else bias.ctypes.data, None if residual is None else residual.ctypes.data,
                    res_scale, res_zero, kernels.ACTIVATIONS[act], out.ctypes.data, out_scale, out_zero,
                    geom.ctypes.data, scratch.ctypes.data)
    return out


def max_pool_u8(x, kernel, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), out_hw=None,
                opt_level=3) -> np.ndarray:
    """max_pool of uint8 NCHW x (cuvil_max_pool_u8); `out_hw` the output's H and W (default: floor mode)."""
    x = np.ascontiguousarray(x, np.uint8)
    (n, c, h, w), (kh, kw) = x.shape, kernel
    if out_hw is None:
        out_hw = ((h + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1,
                  (w + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1)
    out = np.empty((n, c, *out_hw), np.uint8)
    geom = np.array([h, w, *out_hw, kh, kw, *strides, *dilations, *pads[:2]], np.int64)
    kernels.load(opt_level).cuvil_max_pool_u8(x.ctypes.data, out.ctypes.data, n * c, geom.ctypes.data)
    return out


def gemm_int4(x, packed, scale, zero, group: int, bias=None, *, act="none", opt_level=3) -> np.ndarray:
    """The `linear_i4` op on 2-D x: x @ W^T + bias with W in the packed int4 layout (cuvil.ops.quantized)."""
    x = np.ascontiguousarray(x, np.float32)
    (m, k), n = x.shape, packed.shape[0]
    if packed.shape != (n, k // 2) or k % group or scale.shape != (n, k // group):
        raise ShapeError(f"gemm_int4: x {x.shape}, packed {packed.shape}, scale {scale.shape}, group {group}")
    lib = kernels.load(opt_level)
    packed, zero = np.ascontiguousarray(packed, np.uint8), np.ascontiguousarray(zero, np.uint8)
    scale, bias = np.ascontiguousarray(scale, np.float32), _vector(bias, n, "bias")
    out = np.empty((m, n), np.float32)
    scratch = kernels.aligned_empty(lib.cuvil_gemm_int4_scratch_bytes(m, k, group), np.uint8)
    lib.cuvil_gemm_int4(m, n, k, group, x.ctypes.data, packed.ctypes.data, scale.ctypes.data, zero.ctypes.data,
                        None if bias is None else bias.ctypes.data, kernels.ACTIVATIONS[act], out.ctypes.data,
                        scratch.ctypes.data)
    return out
