"""Library emitter for `tree_ensemble`: a blocked walk over the flattened node table (constants of the module).

Rows go in blocks of `ROW_BLOCK`, threads split the blocks, and each block walks every tree in turn, so a tree's
nodes stay in cache while its rows go through it. A step is branch-free: the six comparisons are packed in one
word and the node's kind picks its bit (a NaN feature takes the node's missing-value direction), and the next
node is read from the successor pair by that bit.
"""
from __future__ import annotations

from .c_exprs import STORAGE
from .library_util import c_dim

ROW_BLOCK = 64

_KERNEL = """/* tree_ensemble: per row, the sum over trees of the weights of the leaf reached. Node j = (feature, true,
 * false, kind); a successor -k-1 is leaf k; kind & 7 picks the comparison, kind & 8 sends NaN to true. */
static void {name}(int64_t rows, int64_t features, int64_t trees, int64_t targets, const {x} *restrict x,
                   const int64_t *restrict nodes, const {x} *restrict thresholds, const int64_t *restrict roots,
                   const {w} *restrict weights, {w} *restrict y)
{{
    const int64_t blocks = (rows + {block} - 1) / {block};
    #pragma omp parallel for if (blocks > 1 && rows * trees >= 4096) num_threads(cuvil_get_num_threads()) \
        schedule(static)
    for (int64_t b = 0; b < blocks; b++) {{
        const int64_t r0 = b * {block}, r1 = r0 + {block} < rows ? r0 + {block} : rows;
        for (int64_t i = r0 * targets; i < r1 * targets; i++) y[i] = 0;
        for (int64_t t = 0; t < trees; t++)
            for (int64_t r = r0; r < r1; r++) {{
                const {x} *restrict xr = x + r * features;
                int64_t j = roots[t];
                while (j >= 0) {{
                    const int64_t *restrict n = nodes + 4 * j;
                    const {x} v = xr[n[0]], th = thresholds[j];
                    const int cmp = (v <= th) | (v < th) << 1 | (v >= th) << 2 | (v > th) << 3 | (v == th) << 4
                                    | (v != th) << 5;
                    const int go = v != v ? (int)(n[3] >> 3) & 1 : cmp >> (n[3] & 7) & 1;
                    j = n[2 - go];
                }}
                const {w} *restrict leaf = weights + (-j - 1) * targets;
                {w} *restrict yr = y + r * targets;
                for (int64_t k = 0; k < targets; k++) yr[k] += leaf[k];
            }}
    }}
}}
"""


def _tree_ensemble(gen, op, depth: int) -> None:
    x, nodes, thresholds, roots, weights = op.operands
    y = op.results[0]
    xt, wt = STORAGE[x.type.dtype], STORAGE[weights.type.dtype]
    name = f"cuvil_tree_ensemble_{x.type.dtype.value}_{weights.type.dtype.value}"
    gen.helpers[name] = _KERNEL.format(name=name, x=xt, w=wt, block=ROW_BLOCK)
    args = ", ".join(gen.args_of([x, nodes, thresholds, roots, weights, y]))
    rows, features = x.type.shape
    trees, targets = roots.type.shape[0], weights.type.shape[1]
    where = f"  /* at {op.loc} */" if str(op.loc) else ""
    gen.line(depth, f"{name}({c_dim(rows)}, {c_dim(features)}, {c_dim(trees)}, {c_dim(targets)}, {args});{where}")


EMITTERS = {"tree_ensemble": _tree_ensemble}
