"""NumPy binding of the bf16 convolution (conv_lowp.c), for tests and benchmarks; generated code calls the C.

The path is the bf16 GEMM's (`kernels_lowp.use_path`: "amx_bf16", "avx512_bf16" or "generic").
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...ir.dtypes import DType
from . import kernels
from .kernels_int8 import conv_geometry


def conv_bf16(x, w, bias=None, *, strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), act="none", residual=None,
              opt_level=3) -> np.ndarray:
    """The `conv_bf16` op on NCHW f32 x: w [O, C, KH, KW] (any float, rounded to bf16 here); `residual` (f32, the
    output's shape) is added before `act`."""
    x = np.ascontiguousarray(x, np.float32)
    (n, c, h, wd), (o, _, kh, kw) = x.shape, w.shape
    if w.shape[1] != c:
        raise ShapeError(f"conv_bf16: x has {c} channels but w is {w.shape}")
    oh = (h + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.empty((n, o, oh, ow), np.float32)
    if residual is not None:
        residual = np.ascontiguousarray(residual, np.float32)
        if residual.shape != out.shape:
            raise ShapeError(f"conv_bf16: residual must have shape {out.shape}, got {residual.shape}")
    if bias is not None:
        bias = np.ascontiguousarray(bias, np.float32)
        if bias.shape != (o,):
            raise ShapeError(f"conv_bf16: bias must have shape ({o},), got {bias.shape}")
    lib = kernels.load(opt_level)
    bits = np.ascontiguousarray(np.asarray(w).astype(DType.bf16.numpy)).view(np.uint16)
    packed = kernels.aligned_empty(lib.cuvil_conv_bf16_packed_bytes(o, c, kh, kw), np.uint8)
    lib.cuvil_conv_bf16_pack(o, c, kh, kw, bits.ctypes.data, packed.ctypes.data)
    geom = conv_geometry(x.shape, w.shape, out.shape, strides, dilations, pads)
    scratch = kernels.aligned_empty(lib.cuvil_conv_bf16_scratch_bytes(geom.ctypes.data), np.uint8)
    lib.cuvil_conv_bf16(x.ctypes.data, packed.ctypes.data, None if bias is None else bias.ctypes.data,
                        None if residual is None else residual.ctypes.data, kernels.ACTIVATIONS[act], out.ctypes.data,
                        geom.ctypes.data, scratch.ctypes.data)
    return out
