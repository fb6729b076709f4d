"""Library emitter for `tree_ensemble`: the IR's node table repacked once (at load when it is a module constant,
else per call into scratch) into one compact node per entry, walked branch-free by `LANES` lanes side by side.

A packed node is (threshold, feature << 3 | NaN bit << 2 | == bit << 1 | < bit, false successor, true successor):
GT, GTE and NEQ become LEQ, LT and EQ with their successors swapped, so a step is `v < t & lt | v == t & eq |
v != v & nan` (exact for every mode and NaN; a NaN threshold, which no comparison but NEQ satisfies, keeps a
constant direction). Leaf k is entry n + k, a node that goes to itself, so a walk takes exactly the tree's depth in
steps with no test for its end, and a lane that finished early marks time. The lanes are rows of one tree when the
batch has `LANES` rows or more (a block of `ROW_BLOCK` rows goes through every tree in turn, so a tree's nodes stay
in cache; threads split the blocks), else trees of one row (batch 1), so the walks' loads overlap and the compiler
vectorises a step across lanes (gathers on AVX-512 and AVX2). Per row the trees' weights are added in tree order.
"""
from __future__ import annotations

from ...errors import UnsupportedError
from ...ir.dtypes import DType
from .c_exprs import STORAGE
from .library_util import c_dim

ROW_BLOCK = 64
LANES = 16  # walks side by side: independent load chains, one vector of int32 node indices
MAX_FEATURES = 1 << 24  # rows walk as lanes below it: a lane's offset (lane * features + feature) stays an int32
FEATURE_LIMIT = 1 << 29  # a packed node holds its feature in 29 bits
MAX_ENTRIES = 1 << 30  # packed node indices are int32

_KERNEL = """typedef struct {{ {x} threshold; uint32_t code; int32_t next[2]; }} {node};

/* The packed entry of successor k (node k, or leaf -k-1 at n - k - 1), clamped into the table. */
static inline int64_t {entry}(int64_t k, int64_t n, int64_t last)
{{
    const int64_t e = k >= 0 ? k : -(k + 1) > last - n ? last : n - (k + 1);
    return e > last ? last : e;
}}

/* The packed table (see library_trees.py) of n nodes (feature, true, false, kind) and `leaves` self-looping
 * leaves; a bad feature or successor is clamped into the table, so any table walks in bounds. */
static void {pack}(int64_t n, int64_t leaves, int64_t features, const int64_t *restrict nodes,
                   const {x} *restrict thresholds, {node} *restrict out)
{{
    const int64_t last = n + leaves - 1;
    for (int64_t j = 0; j < n; j++) {{
        const int64_t *nd = nodes + 4 * j;
        const {x} th = thresholds[j];
        const int64_t mode = nd[3] & 7, f = nd[0] < 0 || nd[0] >= features ? 0 : nd[0];
        /* LEQ LT GTE GT EQ NEQ: swapped (GTE GT NEQ), then the packed test's < and == bits */
        int swap = mode == 2 || mode == 3 || mode == 5, lt = mode <= 3, eq = mode == 0 || mode == 3 || mode >= 4;
        if (mode > 5 || th != th) {{ swap = mode == 5 && th != th; lt = eq = 0; }}
        const int nan = ((nd[3] >> 3) & 1) ^ swap;
        int64_t to[2];
        for (int s = 0; s < 2; s++) to[s] = {entry}(nd[1 + s], n, last);
        out[j] = ({node}){{th, (uint32_t)f << 3 | (uint32_t)nan << 2 | (uint32_t)eq << 1 | (uint32_t)lt,
                          {{(int32_t)to[1 - swap], (int32_t)to[swap]}}}};
    }}
    for (int64_t k = n; k <= last; k++) out[k] = ({node}){{0, 0, {{(int32_t)k, (int32_t)k}}}};
}}

/* {lanes} walks side by side for `depth` steps: lane l reads x[off[l] + feature] at node j[l]. */
static inline void {walk}(const {node} *restrict table, const {x} *restrict x, const int32_t *restrict off,
                          int32_t *restrict j, int64_t depth)
{{
    /* the fields through flat arrays, which the vectoriser gathers from (it gives up on struct members) */
    const uint32_t *restrict words = (const uint32_t *)table;
    const {x} *restrict thresholds = (const {x} *)table;
    for (int64_t d = 0; d < depth; d++) {{
        #pragma omp simd
        for (int l = 0; l < {lanes}; l++) {{
            const uint32_t code = words[{words} * j[l] + {code_at}];
            const {x} v = x[off[l] + (int32_t)(code >> 3)], th = thresholds[{th_stride} * j[l]];
            const uint32_t go = ((v < th) & code) | ((v == th) & (code >> 1)) | ((v != v) & (code >> 2));
            j[l] = (int32_t)words[{words} * j[l] + {code_at} + 1 + (go & 1)];
        }}
    }}
}}

/* Tree t's packed root and the steps its walk takes, at most `cap` (a walk passes each node once at most, and
 * leaves loop on themselves). */
static inline int32_t {root}(const int64_t *restrict roots, int64_t t, int64_t n, int64_t last, int64_t cap,
                             int64_t *depth)
{{
    const int64_t d = roots[2 * t + 1];
    *depth = d < 0 ? 0 : d > cap ? cap : d;
    return (int32_t){entry}(roots[2 * t], n, last);
}}

/* y[0:targets] += the weights of the leaf at entry j (of leaf 0 for a walk stopped at a node: a bad depth). */
static inline void {add}(const {w} *restrict weights, int64_t n, int32_t j, int64_t targets, {w} *restrict y)
{{
    const {w} *restrict leaf = weights + (j < n ? 0 : j - n) * targets;
    for (int64_t k = 0; k < targets; k++) y[k] += leaf[k];
}}

/* Rows [r0, r1): {lanes} rows side by side through each tree, a row left over through {lanes} trees at a time. */
static void {rows}(int64_t r0, int64_t r1, int64_t features, int64_t trees, int64_t targets, int64_t n,
                   int64_t last, int64_t cap, const {x} *restrict x, const {node} *restrict table,
                   const int64_t *restrict roots, const {w} *restrict weights, {w} *restrict y)
{{
    int32_t off[{lanes}], j[{lanes}];
    int64_t depth, most;
    for (int64_t i = r0 * targets; i < r1 * targets; i++) y[i] = 0;
    const int64_t full = features < {max_features} ? r0 + (r1 - r0) / {lanes} * {lanes} : r0;
    for (int l = 0; l < {lanes}; l++) off[l] = (int32_t)(l * features);
    for (int64_t t = 0; t < trees; t++)
        for (int64_t r = r0; r < full; r += {lanes}) {{
            const int32_t start = {root}(roots, t, n, last, cap, &depth);
            for (int l = 0; l < {lanes}; l++) j[l] = start;
            {walk}(table, x + r * features, off, j, depth);
            for (int l = 0; l < {lanes}; l++) {add}(weights, n, j[l], targets, y + (r + l) * targets);
        }}
    for (int l = 0; l < {lanes}; l++) off[l] = 0;
    for (int64_t r = full; r < r1; r++)
        for (int64_t t = 0; t < trees; t += {lanes}) {{
            const int64_t count = trees - t < {lanes} ? trees - t : {lanes};
            most = 0;
            for (int l = 0; l < {lanes}; l++) {{  /* lanes past the last tree walk it again, unused */
                j[l] = {root}(roots, t + (l < count ? l : count - 1), n, last, cap, &depth);
                most = depth > most ? depth : most;
            }}
            {walk}(table, x + r * features, off, j, most);
            for (int l = 0; l < count; l++) {add}(weights, n, j[l], targets, y + r * targets);
        }}
}}

"""

# its own helper, starting at its signature, so that its loop over row blocks runs on Cuvil's pool (pooled_helper)
_ENTRY = """static void {name}(int64_t rows, int64_t features, int64_t trees, int64_t targets, int64_t n,
                   int64_t leaves, const {x} *restrict x, const {node} *restrict table, const int64_t *restrict roots,
                   const {w} *restrict weights, {w} *restrict y)
{{
    /* tree_ensemble: per row, the sum over trees of the weights of the leaf reached (table: {pack}) */
    const int64_t blocks = (rows + {block} - 1) / {block}, last = n + leaves - 1, cap = features > 0 ? n : 0;
    if (leaves == 0 || n + leaves > {max_entries}) trees = 0;  /* no walk can end in a leaf; or int32 indices wrap */
    #pragma omp parallel for if((rows * trees * 16) >= 4096) num_threads(cuvil_get_num_threads()) schedule(static)
    for (int64_t b = 0; b < blocks; b++) {{
        const int64_t r0 = b * {block}, r1 = r0 + {block} < rows ? r0 + {block} : rows;
        {rows}(r0, r1, features, trees, targets, n, last, cap, x, table, roots, weights, y);
    }}
}}
"""


def _table(gen, op, name: str, depth: int) -> str:
    """The packed table: prepared once at load from constant operands, else packed by this call into scratch."""
    x, nodes, thresholds, _, weights = op.operands
    n, leaves = nodes.type.shape[0], weights.type.shape[0]
    if isinstance(n, int) and isinstance(leaves, int) and n + leaves > MAX_ENTRIES:
        raise UnsupportedError(f"tree_ensemble at {op.loc}: {n} nodes and {leaves} leaves, over {MAX_ENTRIES}")
    node_ptr, th_ptr = gen.args_of([nodes, thresholds])
    entries, features = f"({c_dim(n)} + {c_dim(leaves)})", c_dim(x.type.shape[1])
    size = f"{entries} * (int64_t)sizeof({name}_node)"
    pack = f"{name}_pack({c_dim(n)}, {c_dim(leaves)}, {features}, {{nodes}}, {th_ptr}, (void *)dst)"
    if "consts[" in th_ptr and isinstance(x.type.shape[1], int):
        packed = gen.prepared(nodes, f"({size} + 3) / 4", pack.format(nodes="(const int64_t *)src"))
        if packed is not None:
            return f"((const {name}_node *){packed})"
    base = gen.scratch(size, "uint8_t")
    gen.line(depth, pack.replace("(void *)dst", f"(void *){base}").format(nodes=node_ptr) + ";")
    return f"((const {name}_node *){base})"


def _tree_ensemble(gen, op, depth: int) -> None:
    x, nodes, _, roots, weights = op.operands
    y = op.results[0]
    features = x.type.shape[1]
    if isinstance(features, int) and features > FEATURE_LIMIT:
        raise UnsupportedError(f"tree_ensemble at {op.loc}: x has {features} features, over {FEATURE_LIMIT}")
    xt, wt = STORAGE[x.type.dtype], STORAGE[weights.type.dtype]
    name = f"cuvil_tree_ensemble_{x.type.dtype.value}_{weights.type.dtype.value}"
    parts = {p: f"{name}_{p}" for p in ("node", "entry", "pack", "walk", "root", "add", "rows")}
    wide = x.type.dtype is DType.f64  # a node of 24 bytes: (f64, u32, i32, i32)
    fields = dict(name=name, x=xt, w=wt, block=ROW_BLOCK, lanes=LANES, max_features=MAX_FEATURES,
                  max_entries=MAX_ENTRIES, words=6 if wide else 4, code_at=2 if wide else 1,
                  th_stride=3 if wide else 4, **parts)
    gen.helpers[f"{name}_parts"] = _KERNEL.format(**fields)
    gen.helpers[name] = _ENTRY.format(**fields)
    table = _table(gen, op, name, depth)
    px, pr, pw, py = gen.args_of([x, roots, weights, y])
    rows = x.type.shape[0]
    dims = ", ".join(c_dim(d) for d in (rows, features, roots.type.shape[0], weights.type.shape[1],
                                         nodes.type.shape[0], weights.type.shape[0]))
    where = f"  /* at {op.loc} */" if str(op.loc) else ""
    gen.line(depth, f"{name}({dims}, {px}, {table}, {pr}, {pw}, {py});{where}")


EMITTERS = {"tree_ensemble": _tree_ensemble}
