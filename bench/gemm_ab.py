"""The fp32 GEMM of two revisions, shape by shape: `python -m bench.gemm_ab [--base REV]`.

`cuvil_sgemm` with a bias and an activation (the epilogue runs) as the kernel library builds it from this worktree
("new") and from git revision `--base` ("old", default HEAD; gemm.c there, plus gemm_kernel.c and gemm_epilogue.c
where it has them, each compiled as the library compiles its units and linked into one library), timed interleaved
round by round in one process (2 threads unless CUVIL_NUM_THREADS says otherwise). Prints medians (or minima,
--min), GFLOP/s, new/old ratios and the largest difference between the two results relative to max |C|.
"""
import argparse
import ctypes
import time

import numpy as np

from bench.conv_ab import ab_line, sources_at
from cuvil.backends.cpu import kernels, toolchain

# (M, N, K, activation): BERT-base's QKV and FFN GEMMs, a ResNet im2col conv, its last layer's, a GEMV, and a shape
# whose tiles are partial on every side
SHAPES = [(128, 768, 768, "gelu_tanh"), (128, 3072, 768, "gelu_erf"), (3136, 64, 576, "relu"),
          (49, 512, 4608, "relu"), (1, 1000, 1280, "none"), (77, 130, 600, "sigmoid")]
GEMM_SOURCES = ("gemm.c", "gemm_kernel.c", "gemm_epilogue.c")


def old_gemm(rev: str) -> ctypes.CDLL:
    """The GEMM of `rev` as one library (its pool and helpers resolve into the loaded core, RTLD_GLOBAL)."""
    folder, names = sources_at(rev, GEMM_SOURCES)
    kernels.load()
    objects = [toolchain.build_library(f'#include "cuvil_internal.h"\n#include "{name}"\n', name="obj-gemm-ab",
                                       include_dirs=[folder], flags=toolchain.object_flags(2),
                                       depends=[folder / n for n in names]).path for name in names]
    return ctypes.CDLL(str(toolchain.link_library(objects, name="gemm-ab").path))


def main(base: str, rounds: int, stat) -> None:
    new, old = kernels.load(), old_gemm(base)
    fns = {"new": new.cuvil_sgemm, "old": old.cuvil_sgemm}
    fns["old"].argtypes, fns["old"].restype = fns["new"].argtypes, None
    rng, ratios = np.random.default_rng(0), []
    for m, n, k, act in SHAPES:
        a, b = (kernels.aligned_array(rng.standard_normal(s)) for s in ((m, k), (k, n)))
        bias = kernels.aligned_array(rng.standard_normal(n))
        cs = {kind: kernels.aligned_empty((m, n)) for kind in fns}
        times = {kind: [] for kind in fns}
        for r in range(rounds + 1):
            for kind in (("new", "old") if r % 2 else ("old", "new")):
                t0 = time.perf_counter()
                fns[kind](m, n, k, 1.0, a.ctypes.data, k, 1, b.ctypes.data, n, 1, 0.0, cs[kind].ctypes.data, n,
                          bias.ctypes.data, kernels.ACTIVATIONS[act])
                if r:  # the first round warms caches and packing buffers
                    times[kind].append(time.perf_counter() - t0)
        med = {kind: float(stat(v)) for kind, v in times.items()}
        ratios.append(med["new"] / med["old"])
        print(f"({m}, {n}, {k}) {act}: " + ab_line(med, 2 * m * n * k, cs["old"], cs["new"]), flush=True)
    print(f"new/old geometric mean over {len(SHAPES)} shapes: {float(np.exp(np.mean(np.log(ratios)))):.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="HEAD", help="the git revision of the old GEMM")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--min", action="store_true", help="the fastest round instead of the median (a loaded machine)")
    args = parser.parse_args()
    main(args.base, args.rounds, np.min if args.min else np.median)
