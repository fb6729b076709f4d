"""Batch-1 (small-M) products at every precision's kernel against Cuvil's fp32 GEMM, interleaved round by round.

    python bench/gemv_lowp.py                         # W2's and GPT-2's shapes, 1 row, the process's threads
    python bench/gemv_lowp.py --rows 1,4 --threads 1 --rounds 30
    python bench/gemv_lowp.py --rows 1,16,64 --group 128   # int4's batch paths; larger groups (fewer tables)

Each shape is K,N (y[M, N] = x[M, K] @ W): fp32 on the weight packed once (what compiled code runs), bf16 and fp16
on gemm_lowp.c's 16-bit panels, int8 on gemm_int8.c (activations quantised per row in the call), int4 on
gemm_int4.c (groups of --group, 32 by default; K a multiple of it). The kernels are called through ctypes with every
buffer made beforehand, so the figures are the kernels' own. Prints the median microseconds and each ratio to fp32; the
weight bytes each reads are the bound (fp32 4, bf16/fp16 2, int8 1, int4 0.5 + 0.16 of scales and zero points).
"""
from __future__ import annotations

import argparse
import ctypes
import time

import numpy as np

from cuvil.backends.cpu import kernels, kernels_int8, kernels_lowp
from cuvil.ops.quantized import pack_int4

SHAPES = ((784, 1024), (1024, 1024), (768, 2304), (768, 3072), (3072, 768))


def _runners(m: int, k: int, n: int, group: int = 32) -> dict:
    """name -> a call of the kernel on prepared buffers."""
    rng = np.random.default_rng(0)
    lib = kernels.load(3)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    out = kernels.aligned_empty((m, n))
    fp32 = kernels.PackedB(w)
    runs = {"fp32": lambda: kernels.sgemm_packed(a, fp32, out)}
    for precision in ("bf16", "fp16"):
        packed = kernels_lowp.PackedLowp(w, precision)
        runs[precision] = lambda p=packed: kernels_lowp.lowp_gemm(a, p, out)
    scale = np.abs(w).max(axis=0) / 127
    q8 = np.clip(np.rint(w.T / scale[:, None]), -127, 127).astype(np.int8)
    packed8, scale = kernels_int8.pack(q8), scale.astype(np.float32)
    scratch = kernels.aligned_empty(lib.cuvil_qlinear_scratch_bytes(m, k), np.uint8)
    args = kernels_int8.QGemmArgs(M=m, N=n, K=k, packed=packed8.ctypes.data, w_scale=scale.ctypes.data, bias=None,
                                  act=0, C=out.ctypes.data, rsc=n, csc=1, out_scale=0.0, out_zero=0)
    runs["int8"] = lambda: lib.cuvil_qlinear(ctypes.byref(args), a.ctypes.data, 0, 0.0, 0, scratch.ctypes.data)
    if k % group == 0:
        q4 = pack_int4(rng.integers(0, 16, (n, k)))
        s4 = np.full((n, k // group), 0.01, np.float32)
        z4 = np.full((n, k // group), 8, np.uint8)
        scratch4 = kernels.aligned_empty(lib.cuvil_gemm_int4_scratch_bytes(m, k, group), np.uint8)
        runs["int4"] = lambda: lib.cuvil_gemm_int4(m, n, k, group, a.ctypes.data, q4.ctypes.data, s4.ctypes.data,
                                                   z4.ctypes.data, None, 0, out.ctypes.data, scratch4.ctypes.data)
    return runs


def measure(m: int, k: int, n: int, rounds: int, calls: int, group: int = 32) -> dict:
    """name -> median microseconds per call over `rounds` rounds, the peers' order rotating each round."""
    runs = _runners(m, k, n, group)
    names, times = list(runs), {name: [] for name in runs}
    for fn in runs.values():
        fn()
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t = time.perf_counter()
            for _ in range(calls):
                runs[name]()
            times[name].append((time.perf_counter() - t) / calls * 1e6)
    return {name: float(np.median(t)) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1")
    parser.add_argument("--threads", type=int, default=0, help="0: the process's default")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--group", type=int, default=32, help="int4's group size (32, 64 or 128)")
    args = parser.parse_args()
    if args.threads:
        kernels.load(3).cuvil_set_num_threads(args.threads)
    for m in (int(r) for r in args.rows.split(",")):
        for k, n in SHAPES:
            t = measure(m, k, n, args.rounds, args.calls, args.group)
            cells = "  ".join(f"{name} {us:7.1f} us ({us / t['fp32']:.2f})" for name, us in t.items())
            print(f"M={m} K={k} N={n}: {cells}", flush=True)


if __name__ == "__main__":
    main()
