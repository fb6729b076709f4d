"""Transcendentals on one thread: elements per nanosecond of Cuvil's compiled exp, sigmoid, tanh, erf and gelu on an
L2-resident tensor, against PyTorch's (one intra-op thread), interleaved in one process.

    python -m bench.transcendentals [--n 65536] [--calls 2000] [--rounds 5]

Each op is a torch module compiled through the torch route (`num_threads=1`), so it is the loop kernel generated
code runs (kernels/cuvil_math.inc's scalar form, vectorised by GCC). The goal is >= 1 element/ns. Times are the
calling thread's CPU time (both peers compute on it), so other processes' load does not count.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def modules() -> dict:
    import torch

    class Op(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return self.fn(x)

    return {"exp": Op(torch.exp), "sigmoid": Op(torch.sigmoid), "tanh": Op(torch.tanh), "erf": Op(torch.erf),
            "gelu (erf)": Op(torch.nn.functional.gelu),
            "gelu (tanh)": Op(lambda x: torch.nn.functional.gelu(x, approximate="tanh"))}


def measure(n: int, calls: int, rounds: int) -> dict:
    """(op, peer) -> elements per ns: the best of `rounds` interleaved batches of `calls` calls."""
    import torch

    import cuvil

    torch.set_num_threads(1)
    x = torch.from_numpy(np.random.default_rng(0).uniform(-6, 6, n).astype(np.float32))
    runs = {}
    for name, m in modules().items():
        compiled = cuvil.compile(m, (x,), num_threads=1)
        np.testing.assert_allclose(np.asarray(compiled(x)), m(x).numpy(), rtol=2e-6, atol=2e-6, err_msg=name)
        runs[(name, "cuvil")] = lambda c=compiled: c(x)
        runs[(name, "torch")] = lambda m=m: m(x)
    best: dict = {}
    for _ in range(rounds):
        for key, call in runs.items():
            t0 = time.thread_time()  # this thread's CPU time: both peers run on it; a loaded machine's waits drop out
            for _ in range(calls):
                call()
            per_ns = n * calls / ((time.thread_time() - t0) * 1e9)
            best[key] = max(best.get(key, 0.0), per_ns)
    return best


KERNEL_FUNCTIONS = ("exp", "sigmoid", "tanh", "erf", "gelu_erf", "gelu_tanh")
KERNELS = '#include <time.h>\n#include "cuvil_rt.h"\n' + "".join(f"""
static void loop_{f}(long n, const float *restrict x, float *restrict y)
{{
#pragma omp simd
    for (long i = 0; i < n; i++) y[i] = cuvil_{f}f(x[i]);
}}
""" for f in KERNEL_FUNCTIONS) + """
/* Elements per ns of this thread's CPU time: the best of `rounds` batches of `reps` passes of function k. */
double per_ns(int k, long n, const float *x, float *y, int reps, int rounds)
{
    void (*fns[])(long, const float *, float *) = {""" + ", ".join(f"loop_{f}" for f in KERNEL_FUNCTIONS) + """};
    double best = 0;
    for (int r = 0; r < rounds; r++) {
        struct timespec a, b;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        for (int j = 0; j < reps; j++) fns[k](n, x, y);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        double rate = (double)n * reps / ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec));
        best = rate > best ? rate : best;
    }
    return best;
}
"""


def kernel_rates(n: int, reps: int, rounds: int) -> dict:
    """The loops alone, as generated code has them (cuvil_math.inc's scalar forms in `omp simd`, -O3): elements/ns."""
    import ctypes

    from cuvil.backends.cpu import backend, kernels, toolchain

    lib = toolchain.load_library(KERNELS, name="bench-transcendentals", opt_level=3, extra_flags=backend.model_flags(),
                                 include_dirs=[backend.runtime_dir(), kernels.include_dir()])
    lib.per_ns.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.per_ns.restype = ctypes.c_double
    x = kernels.aligned_array(np.random.default_rng(0).uniform(-6, 6, n))
    y = kernels.aligned_empty(n)
    return {f: lib.per_ns(k, n, x.ctypes.data, y.ctypes.data, reps, rounds) for k, f in enumerate(KERNEL_FUNCTIONS)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.transcendentals", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=65536, help="floats per call (256 KB: L2-resident)")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    print("load:", os.popen("uptime").read().strip())
    best = measure(args.n, args.calls, args.rounds)
    print(f"elements per ns of thread CPU time, one thread, {args.n} floats (call overhead included):")
    for name in modules():
        print(f"  {name:12s} cuvil {best[(name, 'cuvil')]:5.2f}   torch {best[(name, 'torch')]:5.2f}")
    print("the loops alone (no call), elements per ns:")
    for name, rate in kernel_rates(args.n, args.calls, args.rounds).items():
        print(f"  {name:12s} {rate:5.2f}")


if __name__ == "__main__":
    main()
