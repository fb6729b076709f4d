"""Library ops compiled and run under AddressSanitizer by test_library_ops.py (a subprocess, libasan preloaded).

Each op is a program of its own whose result is its output (an exactly sized NumPy buffer), and the arena is
allocated at its exact size, so writing past an output, an input or the op's scratch space (at the arena's
end) aborts the run.
gather_elements/scatter_elements get indices far out of range, which must raise IndexRangeError before anything is
read, and index tensors larger than the data (sizes the shape rule cannot compare when symbolic), where the other
coordinates clamp: the generated code never touches memory outside.
"""
import sys

import numpy as np

from cuvil.backends.cpu import executable
from cuvil.backends.cpu.backend import conv_block
from cuvil.compiler import compile_module
from cuvil.errors import IndexRangeError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from cuvil.passes.layout import to_blocked

# exact-size heap buffers (no alignment slack) for the arena and packed weights
executable.aligned_empty = lambda shape, dtype=np.float32, align=64: np.empty(shape, dtype)


def programs(types: list, make) -> list:
    """One module per value `make(builder)` returns, each computing only that value (DCE drops the rest)."""
    out = []
    for i in range(len(make(Builder.new_function(Module(), "main", types)))):
        m = Module()
        b = Builder.new_function(m, "main", types)
        b.ret(make(b)[i])
        out.append(m)
    return out


def index_programs() -> list:
    n, d, r, k = sym("n"), sym("d"), sym("r"), sym("k")

    def make(b):
        x, idx, upd, xi = b.args
        return [b.gather_elements(x, idx, axis=1), b.scatter_elements(x, idx, upd, axis=1),
                b.scatter_elements(x, idx, upd, axis=1, reduction="add"),
                b.scatter_elements(xi, idx, b.cast(upd, dtype="i32"), axis=1, reduction="max"),
                b.gather_elements(xi, idx, axis=0)]
    return programs([TensorType("f32", (n, d)), TensorType("i64", (r, k)), TensorType("f32", (r, k)),
                     TensorType("i32", (n, d))], make)


def window_programs() -> list:
    n, h, w = sym("n"), sym("h"), sym("w")

    def make(b):
        x, x16 = b.args
        rng = np.random.default_rng(0)

        def const(*shape, dtype=np.float32):
            return b.constant(rng.standard_normal(shape).astype(dtype))
        xb, host = to_blocked(b, x, 4), conv_block()  # the host's block: the kernel library's Winograd
        xh = to_blocked(b, x, host)
        return [b.conv(x, const(6, 4, 3, 3), const(6), strides=(2, 2), pads=(1, 1, 1, 1)),
                b.conv(x, const(8, 1, 3, 3), groups=4, strides=(2, 1), pads=(0, 1, 2, 0)),
                b.conv(x, const(5, 4, 1, 1), const(5)),
                b.conv(x16, const(6, 2, 2, 3, dtype=np.float16), groups=2, dilations=(2, 1)),
                b.conv_transpose(x, const(4, 3, 3, 3), const(3), strides=(2, 2), pads=(1, 0, 0, 1),
                                 output_padding=(1, 0)),
                b.conv_transpose(x, const(4, 3, 2, 3), const(3), strides=(2, 3)),
                b.max_pool(x, kernel=(3, 2), strides=(2, 2), dilations=(1, 2), ceil_mode=True),
                b.avg_pool(x, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1), ceil_mode=True,
                           count_include_pad=True),
                b.resize(x, sizes=(n, 4, h * 2, w + 3), mode="cubic", exclude_outside=True),
                b.resize(x16, sizes=(n, 4, 3, w * 2), coordinate_transformation_mode="align_corners"),
                b.conv_nchwc(xb, const(1, 1, 3, 3, 4, 8), const(1, 8), strides=(2, 2), pads=(1, 0, 2, 1)),
                b.conv_nchwc(xb, const(2, 1, 3, 2, 4, 8), const(2, 8), b.conv_nchwc(xb, const(2, 1, 1, 1, 4, 8),
                             const(2, 8)), dilations=(2, 3), pads=(2, 3, 2, 0), activation="relu"),
                b.conv_nchwc(xb, const(2, 1, 3, 3, 4, 8), const(2, 8), pads=(1, 1, 1, 1), channels=11),
                b.conv_nchwc(xh, const(2, 1, 3, 3, host, host), const(2, host),
                             b.conv_nchwc(xh, const(2, 1, 3, 3, host, host), const(2, host), pads=(0, 2, 0, 0)),
                             pads=(0, 2, 0, 0), activation="relu", algorithm="winograd"),
                b.conv_nchwc(xh, const(1, 1, 3, 3, host, host), const(1, host), pads=(2, 1, 1, 2), channels=5,
                             algorithm="winograd"),
                b.conv_nchwc(xh, const(2, 1, 3, 2, host, host), const(2, host), strides=(2, 1), dilations=(1, 2),
                             pads=(3, 0, 1, 2), activation="relu"),  # the host's direct kernel on a padded copy
                b.conv_nchwc(xh, const(1, 1, 1, 1, host, host), const(1, host), xh, activation="relu6"),
                b.conv_nchwc(xh, const(3, 1, 1, 1, host, host), const(3, host), activation="hardswish",
                             channels=3 * host - 3),  # 1x1: planes as rows, cut into parts; the last block partial
                b.conv_nchwc(xh, const(2, 1, 3, 3, host, host), const(2, host), pads=(1, 1, 1, 1), activation="silu",
                             channels=2 * host - 3),  # the strip-wide SiLU of both blocks, a plain output
                b.max_pool(xh, kernel=(3, 2, 1), strides=(2, 1, 1), pads=(1, 0, 0, 2, 1, 0), ceil_mode=True),
                b.dwconv_nchwc(xh, const(1, 3, 3, host), const(1, host), strides=(2, 1), pads=(1, 0, 2, 1),
                               activation="relu6"),
                b.dwconv_nchwc(xh, const(1, 5, 2, host), const(1, host), dilations=(1, 3), pads=(0, 4, 1, 0),
                               activation="hardswish"),
                b.spatial_sum_nchwc(xh),
                b.conv_nchwc(to_blocked(b, x, 4 if host > 4 else 2), const(1, 1, 5, 5, 4 if host > 4 else 2, host),
                             const(1, host), strides=(2, 2), pads=(2, 2, 2, 2), channels=7,
                             activation="hardswish")]  # a narrow input
    return programs([TensorType("f32", (n, 4, h, w)), TensorType("f16", (n, 4, h, w))], make)


def scan_programs() -> list:
    n = sym("n")

    def make(b):
        x, q = b.args
        return [*b.topk(x, k=5, axis=1, largest=False), b.cumsum(x, axis=0, exclusive=True, reverse=True),
                b.argmin(x, axis=1), b.einsum(q, q, equation="bqd,bkd->bqk"), b.einsum(q, equation="bqd->dq")]
    return programs([TensorType("f32", (n, 37)), TensorType("f32", (2, n, 8))], make)


def tree_programs() -> list:
    """A forest whose walks end at the table's last node and leaf (any overrun of the table is caught)."""
    nodes = np.int64([[0, 1, -1, 8], [2, -2, 2, 3], [1, -3, -4, 5]])

    def make(b):
        (x,) = b.args
        roots = np.int64([[0, 3], [1, 2], [-4, 0]])  # (first node, depth)
        weights = np.float32([[1, 2], [3, 4], [5, 6], [7, 8]])
        return [b.tree_ensemble(x, b.constant(nodes), b.constant(np.float32([0.1, -0.3, 0.5])), b.constant(roots),
                                b.constant(weights))]
    return programs([TensorType("f32", (sym("n"), 3))], make)


def bad_tree_programs() -> list:
    """Node tables as inputs (packed by each call into scratch), f32 and f64: any values they hold must walk inside
    x, the table and the weights (features, successors and roots out of range are clamped, depths capped)."""
    def make(b):
        x, nodes, thresholds, roots, weights = b.args
        return [b.tree_ensemble(x, nodes, thresholds, roots, weights)]
    return [(np.dtype(dt.replace("f", "float")), m) for dt in ("f32", "f64") for m in programs(
        [TensorType(dt, (sym("n"), 3)), TensorType("i64", (sym("k"), 4)), TensorType(dt, (sym("k"),)),
         TensorType("i64", (sym("t"), 2)), TensorType("f32", (sym("l"), 2))], make)]


def run_bad_trees(rng) -> None:
    big = 2 ** 62
    for dt, m in bad_tree_programs():
        exe = compile_module(m)
        for n, k, t, leaves in [(0, 3, 2, 4), (1, 3, 20, 4), (37, 5, 3, 1), (70, 0, 2, 3), (5, 4, 2, 0)]:
            x = rng.standard_normal((n, 3)).astype(dt)
            x[::3] = np.nan
            nodes = rng.integers(-9, 9, (k, 4))
            nodes[::2] = [big, -big, big, -1]
            roots = np.stack([rng.integers(-9, 9, t), rng.integers(-3, 9, t)], axis=1)
            roots[::3] = [-big, big]
            exe(x, nodes, rng.standard_normal(k).astype(dt), roots, np.ones((leaves, 2), np.float32))


def check(exe, m: Module, inputs) -> None:
    for g, w in zip(exe(*inputs), interpret(m, inputs)):
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-2, atol=1e-2)


def run_index(m: Module, rng) -> None:
    exe = compile_module(m)
    for n, d, r, k in [(3, 5, 3, 4), (2, 4, 6, 7), (0, 3, 2, 2), (1, 1, 4, 1)]:
        x, xi = rng.standard_normal((n, d)).astype(np.float32), rng.integers(-9, 9, (n, d)).astype(np.int32)
        upd = rng.standard_normal((r, k)).astype(np.float32)
        for idx in (rng.integers(-10 ** 9, 10 ** 9, (r, k)), np.full((r, k), -(2 ** 62)), np.full((r, k), 2 ** 62)):
            expect_index_error(exe, x, idx, upd, xi)
        if n > 0:  # indices in range, in an index tensor that may be larger than the data: clamped coordinates
            exe(x, rng.integers(-min(n, d), min(n, d), (r, k)), upd, xi)
    x, idx = np.arange(12, dtype=np.float32).reshape(3, 4), np.array([[0, 2], [-1, 2], [1, -3]])
    check(exe, m, [x, idx, np.ones((3, 2), np.float32), x.astype(np.int32)])


def expect_index_error(exe, *inputs) -> None:
    try:
        exe(*inputs)
    except IndexRangeError:
        return
    raise AssertionError("an index out of range did not raise IndexRangeError")


def main() -> int:
    rng = np.random.default_rng(0)
    for m in index_programs():
        run_index(m, rng)
    for m in window_programs():
        exe = compile_module(m)
        for n, h, w in [(1, 6, 7), (2, 9, 6), (13, 5, 4)]:  # 13 images on narrow maps: strips across images
            x = rng.standard_normal((n, 4, h, w)).astype(np.float32)
            check(exe, m, [x, x.astype(np.float16)])
    for m in scan_programs():
        exe = compile_module(m)
        for n in (0, 1, 6):
            check(exe, m, [rng.standard_normal((n, 37)).astype(np.float32),
                           rng.standard_normal((2, n, 8)).astype(np.float32)])
    for m in tree_programs():
        exe = compile_module(m)
        for n in (0, 1, 70, 130):
            x = rng.standard_normal((n, 3)).astype(np.float32)
            x[::5] = np.nan
            check(exe, m, [x])
    run_bad_trees(rng)
    print("library asan programs ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
