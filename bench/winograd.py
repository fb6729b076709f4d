"""Winograd F(4x4, 3x3) against the direct blocked convolution, kernel by kernel: `python -m bench.winograd`.

ResNet-18's 3x3 stride-1 layer shapes (batch 1, pad 1) through the kernel library's `cuvil_conv_winograd` and
`cuvil_conv_nchwc` on the same blocked input, timed interleaved round by round (2 threads by default,
`CUVIL_NUM_THREADS` to change); prints medians, direct-equivalent GFLOP/s and the Winograd result's error
relative to max |y| of the direct one.
"""
import sys
import time

import numpy as np

from cuvil.backends.cpu import kernels
from cuvil.ops.nn_blocked import block, pack_weight

LAYERS = [(64, 56), (128, 28), (256, 14), (512, 7)]  # (channels, map size)


def _layer(lib, c: int, size: int, rng) -> dict:
    b = lib.cuvil_conv_nchwc_block()
    x = kernels.aligned_array(block(rng.standard_normal((1, c, size, size)).astype(np.float32), b))
    w = kernels.aligned_array(pack_weight((rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32),
                                          b, b))
    ob, cb = w.shape[:2]
    u = kernels.aligned_empty(lib.cuvil_winograd_weight_size(ob, cb))
    lib.cuvil_winograd_weight(w.ctypes.data, ob, cb, u.ctypes.data)
    bias = kernels.aligned_array(rng.standard_normal(ob * b))
    geom = np.array([1, cb, size, size, b, ob, size, size, 3, 3, 1, 1, 1, 1, 1, 1, 0], np.int64)
    ys = {k: kernels.aligned_empty((1, ob, size, size, b)) for k in ("winograd", "direct")}
    fns = {"winograd": (lib.cuvil_conv_winograd, u), "direct": (lib.cuvil_conv_nchwc, w)}

    def call(kind):
        fn, weights = fns[kind]
        fn(x.ctypes.data, weights.ctypes.data, bias.ctypes.data, None, ys[kind].ctypes.data, geom.ctypes.data, 0)
    return {"call": call, "ys": ys, "flops": 2 * 9 * c * c * size * size}


def main(rounds: int = 30) -> None:
    lib, rng = kernels.load(), np.random.default_rng(0)
    for c, size in LAYERS:
        layer = _layer(lib, c, size, rng)
        times = {"winograd": [], "direct": []}
        for r in range(rounds):
            for kind in (("winograd", "direct") if r % 2 else ("direct", "winograd")):
                t0 = time.perf_counter()
                layer["call"](kind)
                times[kind].append(time.perf_counter() - t0)
        y, ref = layer["ys"]["winograd"], layer["ys"]["direct"]
        err = float(np.abs(y - ref).max() / np.abs(ref).max())
        med = {k: float(np.median(v)) for k, v in times.items()}
        print(f"{c:4d} ch {size:3d}x{size:<3d} winograd {med['winograd'] * 1e3:7.3f} ms "
              f"({layer['flops'] / med['winograd'] / 1e9:5.0f} GFLOP/s)  direct {med['direct'] * 1e3:7.3f} ms "
              f"({layer['flops'] / med['direct'] / 1e9:5.0f})  speed-up {med['direct'] / med['winograd']:4.2f}x  "
              f"error {err:.1e} of max |y|")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
