"""Python bindings of the 16-bit-weight GEMM (gemm_lowp.c), for tests and benchmarks; generated code calls the C.

    >>> import numpy as np
    >>> from cuvil.backends.cpu import kernels_lowp
    >>> w = kernels_lowp.PackedLowp(np.ones((3, 4), np.float32), "bf16", opt_level=1)
    >>> kernels_lowp.lowp_gemm(np.ones((2, 3), np.float32), w).tolist()
    [[3.0, 3.0, 3.0, 3.0], [3.0, 3.0, 3.0, 3.0]]
"""
from __future__ import annotations

import contextlib

import numpy as np

from ...errors import ShapeError
from ...ir.dtypes import DType
from .kernels import LOWP_PATHS, _act, _bias, _matrix, _output, _ptr_of, aligned_empty, load

STORED = {"bf16": DType.bf16, "fp16": DType.f16}


class PackedLowp:
    """A constant K x N weight rounded to bf16 or fp16 and packed once for `lowp_gemm`."""

    def __init__(self, b, precision: str, opt_level: int = 3):
        b = np.asarray(b)
        if b.ndim != 2:
            raise ShapeError(f"PackedLowp: the weight must be 2-D, got shape {b.shape}")
        self.k, self.n = b.shape
        self.is_f16 = int(precision == "fp16")
        self.opt_level = opt_level
        bits = np.ascontiguousarray(b.astype(STORED[precision].numpy)).view(np.uint16)
        lib = load(opt_level)
        self.data = aligned_empty(lib.cuvil_lowp_packed_size(self.k, self.n, self.is_f16), np.uint16)
        lib.cuvil_lowp_pack_b(self.k, self.n, self.is_f16, bits.ctypes.data, self.n, 1, self.data.ctypes.data)


def lowp_gemm(a, packed: PackedLowp, out=None, *, bias=None, act="none") -> np.ndarray:
    """`act(a @ w + bias)` with the packed 16-bit weight, on the path `use_path` chose (default: the CPU's best)."""
    a, rsa, csa = _matrix(a, "a")
    m, k = a.shape
    if k != packed.k:
        raise ShapeError(f"lowp_gemm: a is {a.shape} but the packed weight is ({packed.k}, {packed.n})")
    c, bias = _output(out, (m, packed.n)), _bias(bias, packed.n)
    load(packed.opt_level).cuvil_lowp_gemm_packed(m, packed.n, k, a.ctypes.data, rsa, csa, packed.data.ctypes.data,
                                                  packed.is_f16, c.ctypes.data, c.strides[0] // 4, _ptr_of(bias),
                                                  _act(act))
    return c


@contextlib.contextmanager
def use_path(name: str, opt_level: int = 3):
    """Run the bf16 GEMM on path `name` ("amx_bf16", "avx512_bf16", "generic") inside the block, or on the best
    below it that this CPU runs; yields the path in use. Afterwards the CPU's choice is made again."""
    lib = load(opt_level)
    used = lib.cuvil_lowp_set_path(LOWP_PATHS.index(name))
    try:
        yield LOWP_PATHS[used]
    finally:
        lib.cuvil_lowp_set_path(-1)
