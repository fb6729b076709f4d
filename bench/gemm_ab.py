"""The fp32 GEMM of two revisions, shape by shape: `python -m bench.gemm_ab [--base REV]`.

`cuvil_sgemm` with a bias and an activation (the epilogue runs) as the kernel library builds it from this worktree
("new") and from git revision `--base` ("old", default HEAD; gemm.c there, plus gemm_kernel.c and gemm_epilogue.c
where it has them, each compiled as the library compiles its units and linked into one library), timed interleaved
round by round in one process (2 threads unless CUVIL_NUM_THREADS says otherwise). Prints medians (or minima,
--min), GFLOP/s, new/old ratios and the largest difference between the two results relative to max |C|.

`--cold`: instead, `cuvil_sgemm_packed` on GPT-2 small's four GEMMs at 64 tokens (`--rows`), each round one model's
worth of pre-packed weights (12 layers, 340 MB, past L3) in layer order, as a model's call reads them from memory.
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
GPT2_SHAPES, GPT2_LAYERS = [(64, 2304, 768), (64, 768, 768), (64, 3072, 768), (64, 768, 3072)], 12  # M, N, K


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


def packed_weights(lib, rng, shapes, layers: int) -> list:
    """[layer][shape] B pre-packed by `lib` (both libraries pack alike: the layout is the kernels' ABI)."""
    out = []
    for _ in range(layers):
        row = []
        for _, n, k in shapes:
            b = kernels.aligned_array(rng.standard_normal((k, n)))
            p = kernels.aligned_empty((lib.cuvil_sgemm_packed_size(k, n),))
            lib.cuvil_sgemm_pack_b(k, n, b.ctypes.data, n, 1, p.ctypes.data)
            row.append(p)
        out.append(row)
    return out


def main_cold(base: str, rounds: int, stat, rows: int = 64, layers: int = GPT2_LAYERS) -> None:
    """Each side runs every layer's GEMMs in turn (weights from memory) on `rows` tokens; the sides alternate round by
    round."""
    new, old = kernels.load(), old_gemm(base)
    old.cuvil_sgemm_packed.argtypes, old.cuvil_sgemm_packed.restype = new.cuvil_sgemm_packed.argtypes, None
    rng = np.random.default_rng(0)
    weights = packed_weights(new, rng, GPT2_SHAPES, layers)
    shapes = [(rows, n, k) for _, n, k in GPT2_SHAPES]
    a = {k: kernels.aligned_array(rng.standard_normal((rows, k))) for _, _, k in shapes}
    cs = {kind: [kernels.aligned_empty((m, n)) for m, n, _ in shapes] for kind in ("old", "new")}
    fns, times = {"new": new.cuvil_sgemm_packed, "old": old.cuvil_sgemm_packed}, {"old": [], "new": []}
    for r in range(rounds + 1):
        for kind in (("new", "old") if r % 2 else ("old", "new")):
            t0 = time.perf_counter()
            for layer in weights:
                for (m, n, k), w, c in zip(shapes, layer, cs[kind]):
                    fns[kind](m, n, k, 1.0, a[k].ctypes.data, k, 1, w.ctypes.data, 0.0, c.ctypes.data, n, None, 0)
            if r:
                times[kind].append(time.perf_counter() - t0)
    med = {kind: float(stat(v)) for kind, v in times.items()}
    flops = layers * sum(2 * m * n * k for m, n, k in shapes)
    print(f"GPT-2's GEMMs at {rows} rows, {layers} layers ({layers * 27} MB of weights): "
          + ab_line(med, flops, np.concatenate([c.ravel() for c in cs["old"]]),
                    np.concatenate([c.ravel() for c in cs["new"]])))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="HEAD", help="the git revision of the old GEMM")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--min", action="store_true", help="the fastest round instead of the median (a loaded machine)")
    parser.add_argument("--cold", action="store_true", help="GPT-2's pre-packed GEMMs, weights from memory")
    parser.add_argument("--rows", type=int, default=64, help="--cold: the GEMMs' M (tokens)")
    parser.add_argument("--layers", type=int, default=GPT2_LAYERS, help="--cold: layers of weights (1: 27 MB, in L3)")
    args = parser.parse_args()
    stat = np.min if args.min else np.median
    if args.cold:
        main_cold(args.base, args.rounds, stat, args.rows, args.layers)
    else:
        main(args.base, args.rounds, stat)
