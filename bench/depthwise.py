"""MobileNetV2's depthwise convolutions on the two kernels, layer by layer: `python -m bench.depthwise [--rounds N]`.

Each 3x3 depthwise layer of MobileNetV2 at 224x224, batch 1 (pad 1, relu6), through the kernel library's plain
NCHW `cuvil_dwconv2d` and its blocked `cuvil_dwconv_nchwc` (the layout pass's choice), timed interleaved round by
round in one process (2 threads unless CUVIL_NUM_THREADS says otherwise). Prints medians (or minima, --min),
GFLOP/s, blocked/plain ratios and the largest difference between the two results relative to max |y|.
"""
import argparse
import time

import numpy as np

from cuvil.backends.cpu import kernels
from cuvil.ops.nn_blocked import block, pack_depthwise, unblock

# (channels, stride, input size)
MOBILENET_V2 = [(32, 1, 112), (96, 2, 112), (144, 1, 56), (144, 2, 56), (192, 1, 28), (192, 2, 28), (384, 1, 14),
                (576, 1, 14), (576, 2, 14), (960, 1, 7)]


def _layer(lib, c, stride, size, rng) -> dict:
    out = (size + 2 - 3) // stride + 1
    x = rng.standard_normal((1, c, size, size)).astype(np.float32)
    w = (rng.standard_normal((c, 1, 3, 3)) / 3).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    b = lib.cuvil_conv_nchwc_block()
    plain = {"x": kernels.aligned_array(x), "w": kernels.aligned_array(w), "bias": kernels.aligned_array(bias),
             "y": kernels.aligned_empty((1, c, out, out)),
             "geom": np.array([size, size, out, out, 3, 3, stride, stride, 1, 1, 1, 1], np.int64)}
    blocked = {"x": kernels.aligned_array(block(x, b)), "w": kernels.aligned_array(pack_depthwise(w, b)),
               "bias": kernels.aligned_array(np.pad(bias, (0, -c % b))),
               "y": kernels.aligned_empty((1, -(-c // b), out, out, b)),
               "geom": np.array([1, -(-c // b), size, size, out, out, 3, 3, stride, stride, 1, 1, 1, 1], np.int64)}
    p = {k: v.ctypes.data for k, v in plain.items()}
    q = {k: v.ctypes.data for k, v in blocked.items()}
    fns = {"plain": lambda: lib.cuvil_dwconv2d(1, c, c, p["x"], p["w"], p["bias"], p["y"], p["geom"], 0.0, 6.0),
           "blocked": lambda: lib.cuvil_dwconv_nchwc(q["x"], q["w"], q["bias"], q["y"], q["geom"],
                                                     kernels.ACTIVATIONS["relu6"])}
    return {"fns": fns, "flops": 2 * 9 * c * out * out,
            "diff": lambda: float(np.abs(unblock(blocked["y"])[:, :c] - plain["y"]).max()
                                  / max(np.abs(plain["y"]).max(), 1e-30))}


def main(rounds: int, stat) -> None:
    lib, rng = kernels.load(), np.random.default_rng(0)
    total = {"plain": 0.0, "blocked": 0.0}
    for c, stride, size in MOBILENET_V2:
        layer = _layer(lib, c, stride, size, rng)
        times = {k: [] for k in layer["fns"]}
        for r in range(rounds + 1):
            for kind in (("blocked", "plain") if r % 2 else ("plain", "blocked")):
                t0 = time.perf_counter()
                layer["fns"][kind]()
                if r:  # the first round warms caches and scratch buffers
                    times[kind].append(time.perf_counter() - t0)
        med = {k: float(stat(v)) for k, v in times.items()}
        total = {k: total[k] + med[k] for k in total}
        print(f"dw3x3 {c:4d} s{stride} {size:3d}x{size:<3d}: plain {med['plain'] * 1e3:6.3f} ms "
              f"({layer['flops'] / med['plain'] / 1e9:5.1f} GFLOP/s)  blocked {med['blocked'] * 1e3:6.3f} ms "
              f"({layer['flops'] / med['blocked'] / 1e9:5.1f})  blocked/plain {med['blocked'] / med['plain']:5.2f}"
              f"  diff {layer['diff']():.1e}")
    print(f"all layers once: plain {total['plain'] * 1e3:.2f} ms, blocked {total['blocked'] * 1e3:.2f} ms, "
          f"blocked/plain {total['blocked'] / total['plain']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--min", action="store_true", help="the fastest round instead of the median (a loaded machine)")
    args = parser.parse_args()
    main(args.rounds, np.min if args.min else np.median)
