"""Cases for the quantized ops, against dequantised float64 arithmetic (an oracle independent of the references,
which mirror the kernels' rounding): y = ((q - zero) * scale) @ (w * w_scale)^T + bias."""
import numpy as np

from cuvil.ops.quantized import pack_int4
from tests.ops.cases import Case, rand

_RNG = np.random.default_rng(3)
W = _RNG.integers(-127, 128, (6, 20)).astype(np.int8)
WS = (_RNG.random(6) * 0.02 + 0.001).astype(np.float32)
B = rand(6, seed=4)
X = rand(3, 20, seed=5)
XU8 = _RNG.integers(0, 256, (3, 20)).astype(np.uint8)


def _linear_oracle(x_scale, x_zero, relu=False):
    def expected(xs):
        x = xs[0]
        q = x.astype(np.float64) if x.dtype == np.uint8 else np.clip(np.rint(x / np.float32(x_scale)) + x_zero, 0, 255)
        y = ((q - x_zero) * x_scale) @ (xs[1] * xs[2][:, None].astype(np.float64)).T + xs[3]
        return [np.maximum(y, 0) if relu else y]
    return expected


def _conv_oracle(xs):
    x, w, s = xs[0].astype(np.float64), xs[1].astype(np.float64), xs[2].astype(np.float64)
    q = (np.clip(np.rint(x / 0.05) + 128, 0, 255) - 128) * 0.05
    n, c, h, wd = q.shape
    out = np.zeros((n, w.shape[0], h - 2, wd - 2))
    for i in range(h - 2):
        for j in range(wd - 2):
            out[:, :, i, j] = np.einsum("ncij,ocij->no", q[:, :, i:i + 3, j:j + 3], w)
    return [out * s[None, :, None, None]]


def _int4_case(m, k, n, group):
    q = _RNG.integers(0, 16, (n, k))
    scale = (_RNG.random((n, k // group)) * 0.1).astype(np.float32)
    zero = _RNG.integers(0, 16, (n, k // group)).astype(np.uint8)
    x = rand(m, k, seed=k)

    def expected(xs):
        w = (q - np.repeat(zero, group, 1).astype(np.float64)) * np.repeat(scale, group, 1)
        return [xs[0].astype(np.float64) @ w.T]
    return Case("linear_i4", [x, pack_int4(q), scale, zero], {"group": group}, expected, rtol=1e-5, atol=1e-4,
                id=f"g{group}")


CASES = [
    Case("qlinear_i8", [X, W, WS, B], {"x_scale": 0.02, "x_zero": 128}, _linear_oracle(0.02, 128), rtol=1e-5,
         atol=1e-5, id="static"),
    Case("qlinear_i8", [X, W, WS, B], {"x_scale": 0.03, "x_zero": 90, "act": "relu"}, _linear_oracle(0.03, 90, True),
         rtol=1e-5, atol=1e-5, id="static-relu"),
    Case("qlinear_i8", [XU8, W, WS, B], {"x_scale": 0.01, "x_zero": 7}, _linear_oracle(0.01, 7), rtol=1e-5, atol=1e-5,
         id="u8-input"),
    Case("qlinear_i8", [X, W, WS, B], {}, id="dynamic"),
    Case("qlinear_i8", [X, W, WS], {"x_scale": 0.02, "x_zero": 128, "out_scale": 0.05, "out_zero": 10},
         id="u8-output"),
    Case("qconv_i8", [rand(2, 3, 6, 5, seed=6), _RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8),
                      np.full(4, 0.01, np.float32)], {"x_scale": 0.05, "x_zero": 128}, _conv_oracle, rtol=1e-5,
         atol=1e-5, id="static"),
    Case("qconv_i8", [rand(1, 2, 7, 7, seed=7), _RNG.integers(-127, 128, (3, 2, 3, 3)).astype(np.int8),
                      np.full(3, 0.01, np.float32), rand(3, seed=8)],
         {"strides": [2, 2], "pads": [1, 1, 1, 1], "act": "relu"}, id="dynamic-strided"),
    Case("qconv_i8", [rand(1, 2, 5, 5, seed=9), _RNG.integers(-127, 128, (3, 2, 3, 3)).astype(np.int8),
                      np.full(3, 0.01, np.float32), rand(3, seed=10), rand(1, 3, 5, 5, seed=11)],
         {"pads": [1, 1, 1, 1], "act": "relu", "residual": True}, id="f32-residual"),
    Case("qconv_i8", [_RNG.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8),
                      _RNG.integers(-127, 128, (3, 2, 3, 3)).astype(np.int8), np.full(3, 0.01, np.float32),
                      _RNG.integers(0, 256, (1, 3, 5, 5)).astype(np.uint8)],
         {"pads": [1, 1, 1, 1], "x_scale": 0.05, "x_zero": 100, "act": "relu", "residual": True, "res_scale": 0.02,
          "res_zero": 30, "out_scale": 0.05, "out_zero": 5}, id="u8-residual-u8-out"),
    _int4_case(1, 64, 5, 32),
    _int4_case(3, 128, 4, 64),
    _int4_case(2, 128, 3, 128),
]
