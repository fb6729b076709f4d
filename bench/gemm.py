"""Cuvil's fp32 GEMM against NumPy (OpenBLAS) and PyTorch, interleaved round by round in one process.

    python bench/gemm.py                      # every shape, 1 and 2 threads
    python bench/gemm.py --shapes 2048,2048,2048 --threads 2 --variant mr8=CUVIL_MR=8,CUVIL_NV=2

Shapes are M,K,N (as in shared/PEERS.md: W1 is 1024x512 @ 512x256): C[M,N] = A[M,K] @ B[K,N]. "cuvil" takes B
as it is, "cuvil-packed" takes B packed beforehand (constant weights). Prints median and p90 milliseconds,
GFLOP/s and the share of two peaks: the one shared/PEERS.md gives for its machine (266 GFLOP/s per core) and an
FMA loop measured here in the same run. OpenBLAS's worker threads spin after each call and slow whatever runs
next, so the script re-executes itself with OPENBLAS_THREAD_TIMEOUT=20 (and without OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE), and it alternates the order of the peers between rounds. `--variant name=DEFINES` adds the
kernel library compiled with other block sizes as one more peer. For M = 1 a pseudo-peer "read-B" only reads the
packed weights once with the same threads: the bandwidth floor of a matrix-vector product, in the same units.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

FAIR_ENV = {"OPENBLAS_THREAD_TIMEOUT": "20"}
UNFAIR_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
if os.environ.get("OPENBLAS_THREAD_TIMEOUT") != "20" or any(v in os.environ for v in UNFAIR_ENV):
    env = {k: v for k, v in os.environ.items() if k not in UNFAIR_ENV} | FAIR_ENV
    os.execve(sys.executable, [sys.executable, *sys.argv], env)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cuvil.backends.cpu import kernels, toolchain  # noqa: E402

SHAPES = [(1024, 512, 256), (128, 768, 3072), (64, 784, 1024), (1, 784, 1024), (2048, 2048, 2048)]  # M, K, N
PEERS_PEAK_PER_CORE = 266.0  # GFLOP/s, shared/PEERS.md (Zen 5 at 4.15 GHz)
FMA_LOOP = r"""
#ifdef __AVX512F__
typedef float vf __attribute__((vector_size(64)));
#else /* AVX2 and narrower: a 512-bit vector fits no register there, and the "+v" operands below need one */
typedef float vf __attribute__((vector_size(32)));
#endif
#define STEP(x) x = x * b + c
int fma_lanes(void) { return sizeof(vf) / sizeof(float); }
/* 2 * lanes * 12 * iters FLOP per thread in 12 independent FMA chains (named variables: an array would live in
 * memory); returns a value that depends on them all, so that nothing is optimised away. */
float fma_loop(int threads, long iters)
{
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
        vf b = {0}, c = {0};
        b += 1.0000001f, c += 0.9999999f;
        vf a0 = b, a1 = b + c, a2 = b + b, a3 = c, a4 = c + c, a5 = b * c, a6 = b - c, a7 = c - b, a8 = b * b,
           a9 = c * c, a10 = a2 + c, a11 = a4 + b;
        for (long it = 0; it < iters; it++) {
            STEP(a0), STEP(a1), STEP(a2), STEP(a3), STEP(a4), STEP(a5);
            STEP(a6), STEP(a7), STEP(a8), STEP(a9), STEP(a10), STEP(a11);
            __asm__("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
            __asm__("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
        }
        vf s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
        sink += s[0];
    }
    return sink;
}
"""


READ_LOOP = r"""
typedef float vf __attribute__((vector_size(64)));
/* Sum n floats (n a multiple of 64, 64-byte aligned) in four chains per thread: a read at full bandwidth. */
float read_all(int threads, const float *x, long n)
{
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        long lo = n / 64 * t / nt * 64, hi = n / 64 * (t + 1) / nt * 64;
        vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (long i = lo; i < hi; i += 64) {
            a0 += *(const vf *)(x + i), a1 += *(const vf *)(x + i + 16);
            a2 += *(const vf *)(x + i + 32), a3 += *(const vf *)(x + i + 48);
        }
        vf s = (a0 + a1) + (a2 + a3);
        sink += s[0];
    }
    return sink;
}
"""


def measured_peak(threads: int, clock=time.perf_counter) -> float:
    """GFLOP/s of an FMA loop on AVX-512 vectors (256-bit ones without AVX-512F): best of three."""
    lib = toolchain.load_library(FMA_LOOP, name="bench-fma-peak", opt_level=2)
    lib.fma_loop.argtypes, lib.fma_loop.restype = [ctypes.c_int, ctypes.c_long], ctypes.c_float
    lanes, iters, best = lib.fma_lanes(), 20_000_000, 0.0
    for _ in range(3):
        start = clock()
        lib.fma_loop(threads, iters)
        best = max(best, 2 * lanes * 12 * iters * threads / (clock() - start) / 1e9)
    return best


def openblas_kernel() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (install threadpoolctl to see it)"
    info = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}" for i in threadpool_info()
            if i.get("user_api") == "blas"]
    return ", ".join(info) or "none found"


def set_blas_threads(threads: int):
    try:
        from threadpoolctl import threadpool_limits
        return threadpool_limits(threads, user_api="blas")
    except ImportError:
        print("note: threadpoolctl is not installed; NumPy keeps its own thread count")
        return None


def peers(shape, threads, variants):
    """name -> zero-argument callable computing the product into a preallocated output."""
    m, k, n = shape
    rng = np.random.default_rng(0)
    a, b = kernels.aligned_array(rng.standard_normal((m, k))), kernels.aligned_array(rng.standard_normal((k, n)))
    c = kernels.aligned_empty((m, n))
    out = {}
    for name, defines in variants.items():
        lib = kernels.load(3, defines)
        lib.cuvil_set_num_threads(threads)
        args = (m, n, k, 1.0, a.ctypes.data, k, 1, b.ctypes.data, n, 1, 0.0, c.ctypes.data, n, None, 0)
        out[name] = lambda lib=lib, args=args: lib.cuvil_sgemm(*args)
    packed = kernels.PackedB(b)
    args = (m, n, k, 1.0, a.ctypes.data, k, 1, packed.data.ctypes.data, 0.0, c.ctypes.data, n, None, 0)
    # the lambda holds `packed`: ctypes pointers in `args` do not keep its buffer alive
    out["cuvil-packed"] = lambda packed=packed: kernels.load(3).cuvil_sgemm_packed(*args)
    if m == 1:
        reader = toolchain.load_library("#include <omp.h>\n" + READ_LOOP, name="bench-read-loop", opt_level=2)
        reader.read_all.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_long]
        reader.read_all.restype = ctypes.c_float
        floats = packed.data.size // 64 * 64
        out["read-B"] = lambda packed=packed: reader.read_all(threads, packed.data.ctypes.data, floats)
    out["numpy"] = lambda: np.matmul(a, b, out=c)
    try:
        import torch
        torch.set_num_threads(threads)
        ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
        out["torch"] = lambda: torch.mm(ta, tb, out=tc)
    except ImportError:
        pass
    return out


def run_shape(shape, threads, rounds, variants, budget_s, clock=time.perf_counter):
    fns = peers(shape, threads, variants)
    for fn in fns.values():  # warm up: caches, thread pools, page faults
        for _ in range(3):
            fn()
    per_round = {}
    for name, fn in fns.items():
        start = time.perf_counter()
        fn()
        per_round[name] = max(1, min(50, int(budget_s / rounds / len(fns) / (time.perf_counter() - start))))
    samples = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            time.sleep(0.02)  # let the previous peer's spinning threads go to sleep
            fn = fns[name]
            for _ in range(per_round[name]):
                start = clock()
                fn()
                samples[name].append(clock() - start)
    return {name: (np.median(s), np.percentile(s, 90)) for name, s in samples.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=None, help="M,K,N triples")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=1.5, help="time budget per shape and thread count")
    parser.add_argument("--variant", action="append", default=[], help="name=DEF1,DEF2 (kernel -D flags)")
    parser.add_argument("--clock", choices=["wall", "thread"], default="wall",
                        help="thread: CPU time of the calling thread, for 1-thread runs on a machine shared with "
                             "other work (time spent preempted does not count; other threads' work is not seen)")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    variants = {"cuvil": ()} | {v.split("=", 1)[0]: tuple(v.split("=", 1)[1].split(",")) for v in args.variant}
    lib = kernels.load(3)
    print(f"cuvil kernels: {lib.cuvil_kernels_config().decode()}; OpenBLAS: {openblas_kernel()}")
    print(f"env: OPENBLAS_THREAD_TIMEOUT={os.environ.get('OPENBLAS_THREAD_TIMEOUT')}, cpu features "
          f"{sorted(toolchain.cpu_features())}, {toolchain.physical_cores()} physical cores")
    for threads in (int(t) for t in args.threads.split(",")):
        limiter = set_blas_threads(threads)
        clock = time.thread_time if args.clock == "thread" and threads == 1 else time.perf_counter
        peak_here, peak_peers = measured_peak(threads, clock), PEERS_PEAK_PER_CORE * threads
        print(f"\n## {threads} thread(s): FMA-loop peak here {peak_here:.0f} GFLOP/s; PEERS.md peak {peak_peers:.0f}")
        print(f"{'M,K,N':>16} {'peer':>12} {'median ms':>10} {'p90 ms':>9} {'GFLOP/s':>8} {'%PEERS':>7} {'%here':>6}")
        for shape in shapes:
            flops = 2.0 * np.prod(shape, dtype=np.float64)
            for name, (med, p90) in run_shape(shape, threads, args.rounds, variants, args.seconds, clock).items():
                gf = flops / med / 1e9
                print(f"{','.join(map(str, shape)):>16} {name:>12} {med * 1e3:10.3f} {p90 * 1e3:9.3f} {gf:8.1f} "
                      f"{100 * gf / peak_peers:6.0f}% {100 * gf / peak_here:5.0f}%", flush=True)
        if limiter is not None:
            limiter.unregister()


if __name__ == "__main__":
    main()
