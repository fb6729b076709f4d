"""Library emitter for `tree_ensemble`: a blocked walk over the flattened node table (constants of the module).

Rows go in blocks of `ROW_BLOCK`, threads split the blocks, and each block walks every tree in turn, so a tree's
nodes stay in cache while its rows go through it. `LANES` rows walk a tree side by side for the tree's depth (and
a row left over, batch 1 among them, walks `LANES` trees side by side), so independent chains of loads overlap;
every step is branch-free: the six comparisons are packed in one
word and the node's kind picks its bit (a NaN feature takes the node's missing-value direction), the next node is
read from the successor pair by that bit, and a row that reached its leaf keeps it. An empty table (only leaf
roots) never reads a node: its depths are 0.
"""
from __future__ import annotations

from .c_exprs import STORAGE
from .library_util import c_dim

ROW_BLOCK = 64
LANES = 8  # rows walking a tree together: independent load chains the core overlaps

_KERNEL = """/* The successor of node n for the row xr. */
static inline int64_t {step}(const int64_t *restrict n, const {x} *restrict xr, {x} th)
{{
    const {x} v = xr[n[0]];
    const int cmp = (v <= th) | (v < th) << 1 | (v >= th) << 2 | (v > th) << 3 | (v == th) << 4 | (v != th) << 5;
    const int go = v != v ? (int)(n[3] >> 3) & 1 : cmp >> (n[3] & 7) & 1;
    return n[2 - go];
}}

/* {lanes} walks side by side for `depth` steps (independent chains of loads the core overlaps); a walk that
 * reached its leaf (j < 0) stays there. */
static inline void {walk}(const int64_t *restrict nodes, const {x} *restrict thresholds,
                          const {x} *restrict const *xr, int64_t *restrict j, int64_t depth)
{{
    for (int64_t d = 0; d < depth; d++)
        for (int l = 0; l < {lanes}; l++) {{
            const int64_t at = j[l] < 0 ? 0 : j[l];
            const int64_t next = {step}(nodes + 4 * at, xr[l], thresholds[at]);
            j[l] = j[l] < 0 ? j[l] : next;
        }}
}}

/* y[0:targets] += the weights of leaf -j-1 (of leaf 0 for a walk that did not end in a leaf: a bad depth). */
static inline void {add}(const {w} *restrict weights, int64_t j, int64_t targets, {w} *restrict y)
{{
    const {w} *restrict leaf = weights + (j < 0 ? -j - 1 : 0) * targets;
    for (int64_t k = 0; k < targets; k++) y[k] += leaf[k];
}}

/* tree_ensemble: per row, the sum over trees of the weights of the leaf reached. Node j = (feature, true,
 * false, kind); a successor -k-1 is leaf k; kind & 7 picks the comparison, kind & 8 sends NaN to true. Roots are
 * (first node, depth). Rows go through a tree {lanes} at a time; a row left over goes through {lanes} trees at a
 * time. */
static void {name}(int64_t rows, int64_t features, int64_t trees, int64_t targets, const {x} *restrict x,
                   const int64_t *restrict nodes, const {x} *restrict thresholds, const int64_t *restrict roots,
                   const {w} *restrict weights, {w} *restrict y)
{{
    const int64_t blocks = (rows + {block} - 1) / {block};
    #pragma omp parallel for if (blocks > 1 && rows * trees >= 4096) num_threads(cuvil_get_num_threads()) \\
        schedule(static)
    for (int64_t b = 0; b < blocks; b++) {{
        const int64_t r0 = b * {block}, r1 = r0 + {block} < rows ? r0 + {block} : rows;
        for (int64_t i = r0 * targets; i < r1 * targets; i++) y[i] = 0;
        const int64_t full = r0 + (r1 - r0) / {lanes} * {lanes};
        for (int64_t t = 0; t < trees; t++)
            for (int64_t r = r0; r < full; r += {lanes}) {{  /* {lanes} rows side by side through tree t */
                const {x} *restrict xr[{lanes}];
                int64_t j[{lanes}];
                for (int l = 0; l < {lanes}; l++) {{
                    xr[l] = x + (r + l) * features;
                    j[l] = roots[2 * t];
                }}
                {walk}(nodes, thresholds, xr, j, roots[2 * t + 1]);
                for (int l = 0; l < {lanes}; l++)
                    {add}(weights, j[l], targets, y + (r + l) * targets);
            }}
        for (int64_t r = full; r < r1; r++) {{  /* a row left over: {lanes} trees side by side */
            const {x} *restrict xr[{lanes}];
            int64_t j[{lanes}], t = 0;
            for (int l = 0; l < {lanes}; l++) xr[l] = x + r * features;
            for (; t + {lanes} <= trees; t += {lanes}) {{
                int64_t depth = 0;
                for (int l = 0; l < {lanes}; l++) {{
                    j[l] = roots[2 * (t + l)];
                    depth = roots[2 * (t + l) + 1] > depth ? roots[2 * (t + l) + 1] : depth;
                }}
                {walk}(nodes, thresholds, xr, j, depth);
                for (int l = 0; l < {lanes}; l++)
                    {add}(weights, j[l], targets, y + r * targets);
            }}
            for (; t < trees; t++) {{
                int64_t k = roots[2 * t];
                for (int64_t d = 0; d < roots[2 * t + 1] && k >= 0; d++)
                    k = {step}(nodes + 4 * k, xr[0], thresholds[k]);
                {add}(weights, k, targets, y + r * targets);
            }}
        }}
    }}
}}
"""


def _tree_ensemble(gen, op, depth: int) -> None:
    x, nodes, thresholds, roots, weights = op.operands
    y = op.results[0]
    xt, wt = STORAGE[x.type.dtype], STORAGE[weights.type.dtype]
    name = f"cuvil_tree_ensemble_{x.type.dtype.value}_{weights.type.dtype.value}"
    gen.helpers[name] = _KERNEL.format(name=name, x=xt, w=wt, block=ROW_BLOCK, lanes=LANES, step=f"{name}_step",
                                       add=f"{name}_add", walk=f"{name}_walk")
    args = ", ".join(gen.args_of([x, nodes, thresholds, roots, weights, y]))
    rows, features = x.type.shape
    trees, targets = roots.type.shape[0], weights.type.shape[1]
    where = f"  /* at {op.loc} */" if str(op.loc) else ""
    gen.line(depth, f"{name}({c_dim(rows)}, {c_dim(features)}, {c_dim(trees)}, {c_dim(targets)}, {args});{where}")


EMITTERS = {"tree_ensemble": _tree_ensemble}
