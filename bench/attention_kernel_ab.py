"""The fused attention kernel of two revisions at the suite's sizes: `python -m bench.attention_kernel_ab [--base REV]`.

`cuvil_attention` (kernels/attention.c) as built from this worktree ("new") and from git revision `--base` ("old",
default HEAD), on ViT's (2x3 heads, 197 tokens, with and without its additive mask), Whisper-tiny's (6 heads, 1500
tokens) and a Llama decode step's (1 query row, 128 keys) shapes, timed interleaved round by round in one process (2
threads unless CUVIL_NUM_THREADS says otherwise). Prints medians (or minima, --min), GFLOP/s of the two GEMMs,
new/old ratios and the largest difference between the two outputs relative to max |o|.
"""
import argparse
import ctypes
import time

import numpy as np

from bench.conv_ab import ab_line, old_units
from cuvil.backends.cpu import kernels

# name: (batch, rows, keys, d, dv, additive mask?)
SHAPES = {"vit 197": (6, 197, 197, 64, 64, False), "vit 197 masked": (6, 197, 197, 64, 64, True),
          "whisper 1500": (6, 1500, 1500, 64, 64, False), "llama decode 129": (32, 1, 129, 64, 64, False)}


class Attention(ctypes.Structure):
    """cuvil_attention_t (cuvil_kernels.h)."""
    _fields_ = [(n, ctypes.c_int64) for n in ("batch", "rows", "keys", "d", "dv")] + \
        [(n, ctypes.c_void_p) for n in ("q", "k", "v", "mask")] + \
        [(n, ctypes.c_int) for n in ("mask_kind", "k_transposed", "guarded")] + \
        [("scale", ctypes.c_float), ("o", ctypes.c_void_p)]


def _problem(shape, rng) -> dict:
    batch, rows, keys, d, dv, masked = shape
    arrays = {"q": rng.standard_normal((batch, rows, d)), "k": rng.standard_normal((batch, keys, d)),
              "v": rng.standard_normal((batch, keys, dv))}
    if masked:
        arrays["mask"] = np.where(rng.random((batch, rows, keys)) < 0.1, -1e4, 0.0)
    arrays = {k: kernels.aligned_array(v.astype(np.float32)) for k, v in arrays.items()}
    outs = {side: kernels.aligned_empty((batch, rows, dv)) for side in ("old", "new")}
    args = {side: Attention(batch, rows, keys, d, dv, arrays["q"].ctypes.data, arrays["k"].ctypes.data,
                            arrays["v"].ctypes.data, arrays["mask"].ctypes.data if masked else None, int(masked), 0, 2,
                            d ** -0.5, outs[side].ctypes.data) for side in outs}
    return {"arrays": arrays, "outs": outs, "args": args, "flops": 2 * batch * rows * keys * (d + dv)}


def main(base: str, rounds: int, names: list, stat) -> None:
    new, old = kernels.load(units=("attention",)), old_units(base, ("attention.c",), ("attention",))["attention"]
    fns = {"new": new.cuvil_attention, "old": old.cuvil_attention}
    rng = np.random.default_rng(0)
    for name in names:
        p = _problem(SHAPES[name], rng)
        times = {k: [] for k in fns}
        for r in range(rounds + 1):
            for side in (("new", "old") if r % 2 else ("old", "new")):
                t0 = time.perf_counter()
                fns[side](ctypes.byref(p["args"][side]))
                if r:  # the first round warms caches and scratch buffers
                    times[side].append(time.perf_counter() - t0)
        med = {k: float(stat(v)) for k, v in times.items()}
        print(f"{name:18s}: " + ab_line(med, p["flops"], p["outs"]["old"], p["outs"]["new"]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="HEAD", help="the git revision of the old kernel")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--shape", action="append", choices=list(SHAPES), help="one of the shapes (default all)")
    parser.add_argument("--min", action="store_true", help="the fastest round instead of the median (a loaded machine)")
    args = parser.parse_args()
    main(args.base, args.rounds, args.shape or list(SHAPES), np.min if args.min else np.median)
