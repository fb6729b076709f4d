"""conv_int8.c (its convolution and uint8 max_pool), conv_lowp.c, the int8 GEMM (cuvil_qlinear) and the int4 GEMM with
exactly sized buffers from malloc (AddressSanitizer's redzones around each), on every code path, over the geometries
of test_conv_int8.py and test_max_pool_u8.py and GEMM shapes with every kind of tail: run by test_conv_int8_asan.py
under libasan."""
import ctypes

import numpy as np

from cuvil.backends.cpu import kernels, kernels_int8 as k8
from cuvil.ops import get_op
from tests.quantize.test_conv_int8 import GEOMETRIES
from tests.quantize.test_max_pool_u8 import CASES as POOLS

_libc = ctypes.CDLL(None)
_libc.malloc.restype, _libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]


def _exact(data: bytes) -> int:
    """A malloc'ed copy of `data`, no byte more (at least one byte)."""
    p = _libc.malloc(max(len(data), 1))
    ctypes.memmove(p, data, len(data))
    return p


def _conv(lib, geom, x_u8: bool, out_u8: bool, residual: bool) -> None:
    shape, o, (kh, kw), strides, pads, dilations = geom
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, shape).astype(np.uint8) if x_u8 else rng.standard_normal(shape).astype(np.float32)
    w = rng.integers(-127, 128, (o, shape[1], kh, kw)).astype(np.int8)
    oh = (shape[2] + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (shape[3] + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    out_shape = (shape[0], o, oh, ow)
    geom_arr = k8.conv_geometry(shape, w.shape, out_shape, strides, dilations, pads)
    bufs = {"x": _exact(x.tobytes()), "w": _exact(w.tobytes()), "scale": _exact(np.full(o, 0.01, np.float32).tobytes()),
            "bias": _exact(np.ones(o, np.float32).tobytes()),
            "res": _exact(np.ones(out_shape, np.uint8 if residual == "u8" else np.float32).tobytes())
            if residual else None,
            "packed": _exact(bytes(lib.cuvil_qconv_packed_bytes(o, shape[1], kh, kw))),
            "scratch": _exact(bytes(lib.cuvil_qconv_scratch_bytes(geom_arr.ctypes.data))),
            "y": _exact(bytes(int(np.prod(out_shape)) * (1 if out_u8 else 4))), "g": _exact(geom_arr.tobytes())}
    lib.cuvil_qconv_pack(o, shape[1], kh, kw, bufs["w"], bufs["packed"])
    lib.cuvil_qconv(bufs["x"], int(x_u8), 0.05 if x_u8 else 0.0, 3 if x_u8 else 0, bufs["packed"], bufs["scale"],
                    bufs["bias"], bufs["res"], 0.2 if residual == "u8" else 0.0, 1, 1, bufs["y"],
                    0.1 if out_u8 else 0.0, 2, bufs["g"], bufs["scratch"])
    for p in bufs.values():
        if p is not None:
            _libc.free(p)


def _qlinear(lib, m: int, k: int, n: int, x_u8: bool, out_u8: bool) -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (m, k)).astype(np.uint8) if x_u8 else rng.standard_normal((m, k)).astype(np.float32)
    w = rng.integers(-127, 128, (n, k)).astype(np.int8)
    bufs = {"x": _exact(x.tobytes()), "w": _exact(w.tobytes()), "scale": _exact(np.full(n, 0.01, np.float32).tobytes()),
            "bias": _exact(np.ones(n, np.float32).tobytes()),
            "packed": _exact(bytes(lib.cuvil_qgemm_packed_bytes(n, k))),
            "scratch": _exact(bytes(lib.cuvil_qlinear_scratch_bytes(m, k))),
            "y": _exact(bytes(m * n * (1 if out_u8 else 4)))}
    lib.cuvil_qgemm_pack(n, k, bufs["w"], bufs["packed"])
    args = k8.QGemmArgs(M=m, N=n, K=k, packed=bufs["packed"], w_scale=bufs["scale"], bias=bufs["bias"], act=1,
                        C=bufs["y"], rsc=n, csc=1, out_scale=0.1 if out_u8 else 0.0, out_zero=2)
    lib.cuvil_qlinear(ctypes.byref(args), bufs["x"], int(x_u8), 0.05 if x_u8 else 0.0, 3 if x_u8 else 0,
                      bufs["scratch"])
    for p in bufs.values():
        _libc.free(p)


def _int4(lib, m: int, k: int, n: int, group: int) -> None:
    rng = np.random.default_rng(4)
    groups = k // group
    bufs = {"x": _exact(rng.standard_normal((m, k)).astype(np.float32).tobytes()),
            "q": _exact(rng.integers(0, 256, (n, k // 2)).astype(np.uint8).tobytes()),
            "scale": _exact(np.full((n, groups), 0.01, np.float32).tobytes()),
            "zero": _exact(np.full((n, groups), 8, np.uint8).tobytes()),
            "bias": _exact(np.ones(n, np.float32).tobytes()),
            "scratch": _exact(bytes(lib.cuvil_gemm_int4_scratch_bytes(m, k, group))),
            "y": _exact(bytes(m * n * 4))}
    lib.cuvil_gemm_int4(m, n, k, group, bufs["x"], bufs["q"], bufs["scale"], bufs["zero"], bufs["bias"], 1, bufs["y"],
                        bufs["scratch"])
    for p in bufs.values():
        _libc.free(p)


def _max_pool(lib, case) -> None:
    shape, (kh, kw), strides, pads, dilations, ceil = case
    x = np.random.default_rng(6).integers(0, 256, shape).astype(np.uint8)
    out_hw = get_op("max_pool").reference([x], {"kernel": (kh, kw), "strides": strides, "pads": pads,
                                                "dilations": dilations, "ceil_mode": ceil}).shape[2:]
    geom = np.array([*shape[2:], *out_hw, kh, kw, *strides, *dilations, *pads[:2]], np.int64)
    bufs = {"x": _exact(x.tobytes()), "y": _exact(bytes(shape[0] * shape[1] * out_hw[0] * out_hw[1])),
            "g": _exact(geom.tobytes())}
    lib.cuvil_max_pool_u8(bufs["x"], bufs["y"], shape[0] * shape[1], bufs["g"])
    for p in bufs.values():
        _libc.free(p)


def _conv_bf16(lib, geom) -> None:
    shape, o, (kh, kw), strides, pads, dilations = geom
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    oh = (shape[2] + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (shape[3] + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    out_shape = (shape[0], o, oh, ow)
    geom_arr = k8.conv_geometry(shape, (o, shape[1], kh, kw), out_shape, strides, dilations, pads)
    bufs = {"x": _exact(x.tobytes()), "w": _exact(np.full((o, shape[1], kh, kw), 0x3f80, np.uint16).tobytes()),
            "bias": _exact(np.ones(o, np.float32).tobytes()), "res": _exact(np.ones(out_shape, np.float32).tobytes()),
            "packed": _exact(bytes(lib.cuvil_conv_bf16_packed_bytes(o, shape[1], kh, kw))),
            "scratch": _exact(bytes(lib.cuvil_conv_bf16_scratch_bytes(geom_arr.ctypes.data))),
            "y": _exact(bytes(int(np.prod(out_shape)) * 4)), "g": _exact(geom_arr.tobytes())}
    lib.cuvil_conv_bf16_pack(o, shape[1], kh, kw, bufs["w"], bufs["packed"])
    lib.cuvil_conv_bf16(bufs["x"], bufs["packed"], bufs["bias"], bufs["res"], 1, bufs["y"], bufs["g"],
                        bufs["scratch"])
    for p in bufs.values():
        _libc.free(p)


def main() -> None:
    lib = kernels.load(1)
    for cap in [p for p in (4, 3, 2, 1, 0) if p <= lib.cuvil_int8_isa()]:
        lib.cuvil_int8_set_isa(cap)
        for m, k, n in ((1, 7, 5), (5, 64, 16), (16, 65, 33), (33, 260, 70), (47, 1, 17)):
            for x_u8, out_u8 in ((False, False), (True, True)):
                _qlinear(lib, m, k, n, x_u8, out_u8)
        for m, k, n, group in ((1, 64, 5, 32), (4, 96, 9, 32), (6, 64, 7, 64), (16, 32, 3, 32), (17, 64, 70, 32),
                               (70, 128, 130, 128)):
            _int4(lib, m, k, n, group)
        for geom in GEOMETRIES.values():
            for x_u8, out_u8, residual in ((False, False, False), (True, True, False), (False, False, True),
                                           (True, True, "u8")):
                _conv(lib, geom, x_u8, out_u8, residual)
        for case in POOLS.values():
            _max_pool(lib, case)
    lib.cuvil_int8_set_isa(-1)
    for path in (2, 1, 0):
        lib.cuvil_lowp_set_path(path)
        for geom in GEOMETRIES.values():
            _conv_bf16(lib, geom)
    lib.cuvil_lowp_set_path(-1)
    print("qconv asan ok")


if __name__ == "__main__":
    main()
