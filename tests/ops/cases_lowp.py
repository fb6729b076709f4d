"""Cases for the bf16 convolution, against float64 arithmetic on the bf16-rounded operands (an oracle that shares
only the rounding with the reference): a direct loop over taps."""
import numpy as np

from cuvil.ir.dtypes import DType
from tests.ops.cases import Case, rand

_RNG = np.random.default_rng(11)


def _bf16(x):
    return np.asarray(x, np.float32).astype(DType.bf16.numpy)


def _oracle(stride, pad, relu):
    def expected(xs):
        x = np.pad(_bf16(xs[0]).astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        w = xs[1].astype(np.float64)
        o, _, kh, kw = w.shape
        oh, ow = (x.shape[2] - kh) // stride + 1, (x.shape[3] - kw) // stride + 1
        y = np.zeros((x.shape[0], o, oh, ow)) + xs[2].reshape(1, -1, 1, 1)
        for i in range(kh):
            for j in range(kw):
                patch = x[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                y += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
        return [np.maximum(y, 0) if relu else y]
    return expected


CASES = [
    Case("conv_bf16", [rand(2, 5, 7, 6, seed=12), _bf16(_RNG.standard_normal((9, 5, 3, 3))), rand(9, seed=13)],
         {"pads": [1, 1, 1, 1], "act": "relu"}, _oracle(1, 1, True), rtol=1e-5, atol=1e-5, id="3x3-relu"),
    Case("conv_bf16", [rand(1, 20, 9, 9, seed=14), _bf16(_RNG.standard_normal((17, 20, 3, 3))), rand(17, seed=15)],
         {"strides": [2, 2], "pads": [1, 1, 1, 1]}, _oracle(2, 1, False), rtol=1e-5, atol=1e-5, id="stride2"),
]
