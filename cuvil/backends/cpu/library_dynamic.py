"""Library emitters for ops whose result size depends on the data (cuvil/ops/dynamic.py): each helper returns the
size it found, which the entry stores in that size's `s_<symbol>` for the loops after it. Results are written at
their run-time size, row-major and packed, inside buffers the memory plan sized for the upper bound."""
from __future__ import annotations

from ...ir.dtypes import DType
from .c_exprs import c_string, load
from .library_util import axis_split, c_dim, storage, tag


def _nonzero_helper(name: str, dt: DType) -> str:
    """Two passes over x: count the nonzeros (the result's row length), then write each one's coordinates."""
    nz = f"{load(dt, 'x', 'i')} != 0"
    return f"""static int64_t {name}(const {storage(dt)} *x, int64_t *out, int64_t numel, const int64_t *dims, int rank)
{{
    int64_t n = 0;
    for (int64_t i = 0; i < numel; i++) n += ({nz});
    for (int64_t i = 0, j = 0; i < numel; i++) {{
        if (!({nz})) continue;
        int64_t rest = i;
        for (int a = rank - 1; a >= 0; a--) {{
            out[a * n + j] = rest % dims[a];
            rest /= dims[a];
        }}
        j++;
    }}
    return n;
}}
"""


def _nonzero(gen, op, depth: int) -> None:
    x, out = op.operands[0], op.results[0]
    name = f"nonzero_{tag(x.type.dtype)}"
    gen.helpers[name] = _nonzero_helper(name, x.type.dtype)
    px, py = gen.args_of([x, out])
    dims = ", ".join(c_dim(d) for d in x.type.shape)
    gen.line(depth, f"s_{op.attrs['size']} = {name}({px}, {py}, {c_dim(x.type.numel)}, (const int64_t[]){{{dims}}}, "
                    f"{x.type.rank});")


def _unique_compare(name: str, dt: DType) -> str:
    """Slices a and b of x ([outer, d, inner]) compared lexicographically; NaNs sort last and equal each other."""
    t = "float" if dt in (DType.f16, DType.bf16) else storage(dt)
    nan = ("        if (va != va || vb != vb) {\n            if (va != va && vb != vb) continue;\n"
           "            return va != va ? 1 : -1;\n        }\n") if dt.is_float else ""
    return f"""static int {name}_cmp(const {storage(dt)} *x, int64_t a, int64_t b, int64_t outer, int64_t d,
                  int64_t inner)
{{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {{
            {t} va = {load(dt, "x", "(o * d + a) * inner + i")}, vb = {load(dt, "x", "(o * d + b) * inner + i")};
{nan}            if (va < vb) return -1;
            if (va > vb) return 1;
        }}
    return 0;
}}
"""


def _unique_helper(name: str, dt: DType) -> str:
    """A stable bottom-up merge sort of the slice indices, groups of equal neighbours, then (unsorted) the groups
    renumbered by first occurrence; `work` holds 3 * d indices. Returns the number of groups (at most d)."""
    cmp = f"{name}_cmp(x, {{a}}, {{b}}, outer, d, inner)"
    return _unique_compare(name, dt) + f"""
static int64_t {name}(const {storage(dt)} *x, {storage(dt)} *y, int64_t *first, int64_t *inverse, int64_t *counts,
                      int64_t outer, int64_t d, int64_t inner, int sorted, int64_t *work)
{{
    int64_t *order = work, *tmp = work + d, *rank = work + 2 * d, u = 0;
    for (int64_t i = 0; i < d; i++) order[i] = i;
    for (int64_t w = 1; w < d; w *= 2) {{
        for (int64_t lo = 0; lo < d; lo += 2 * w) {{
            int64_t mid = CUVIL_MIN(lo + w, d), hi = CUVIL_MIN(lo + 2 * w, d), p = lo, q = mid, k = lo;
            while (p < mid && q < hi) tmp[k++] = {cmp.format(a="order[q]", b="order[p]")} < 0 ? order[q++] : order[p++];
            while (p < mid) tmp[k++] = order[p++];
            while (q < hi) tmp[k++] = order[q++];
        }}
        memcpy(order, tmp, (size_t)d * sizeof(int64_t));
    }}
    for (int64_t k = 0; k < d; k++) {{
        if (k == 0 || {cmp.format(a="order[k - 1]", b="order[k]")} != 0) {{
            first[u] = order[k];
            counts[u++] = 0;
        }}
        counts[u - 1]++;
        inverse[order[k]] = u - 1;
    }}
    if (!sorted) {{
        for (int64_t i = 0; i < d; i++) rank[i] = -1;
        for (int64_t g = 0; g < u; g++) rank[first[g]] = g;
        for (int64_t i = 0, next = 0; i < d; i++)
            if (rank[i] >= 0) tmp[rank[i]] = next++;
        for (int64_t g = 0; g < u; g++) {{
            order[tmp[g]] = first[g];
            rank[tmp[g]] = counts[g];
        }}
        for (int64_t g = 0; g < u; g++) {{
            first[g] = order[g];
            counts[g] = rank[g];
        }}
        for (int64_t i = 0; i < d; i++) inverse[i] = tmp[inverse[i]];
    }}
    for (int64_t o = 0; o < outer; o++)
        for (int64_t g = 0; g < u; g++)
            memcpy(y + (o * u + g) * inner, x + (o * d + first[g]) * inner, (size_t)inner * sizeof(*x));
    return u;
}}
"""


def _unique(gen, op, depth: int) -> None:
    x = op.operands[0]
    name = f"unique_{tag(x.type.dtype)}"
    gen.helpers[name] = _unique_helper(name, x.type.dtype)
    outer, d, inner = axis_split(x.type.shape, op.attrs["axis"])
    work = gen.scratch(f"3 * {d} * 8", "int64_t")
    args = ", ".join(gen.args_of([x, *op.results]))
    gen.line(depth, f"s_{op.attrs['size']} = {name}({args}, {outer}, {d}, {inner}, {int(op.attrs['sorted'])}, {work});")


NMS_HELPERS = """static void cuvil_box_edges(const float *b, int center, float *e)
{
    if (center) {
        e[0] = b[0] - b[2] / 2; e[1] = b[0] + b[2] / 2; e[2] = b[1] - b[3] / 2; e[3] = b[1] + b[3] / 2;
    } else {
        e[0] = CUVIL_MIN(b[1], b[3]); e[1] = CUVIL_MAX(b[1], b[3]);
        e[2] = CUVIL_MIN(b[0], b[2]); e[3] = CUVIL_MAX(b[0], b[2]);
    }
}

static int cuvil_boxes_overlap(const float *b1, const float *b2, int center, float threshold)
{
    float p[4], q[4];
    cuvil_box_edges(b1, center, p);
    cuvil_box_edges(b2, center, q);
    float iw = CUVIL_MIN(p[1], q[1]) - CUVIL_MAX(p[0], q[0]), ih = CUVIL_MIN(p[3], q[3]) - CUVIL_MAX(p[2], q[2]);
    if (iw <= 0 || ih <= 0) return 0;
    float inter = iw * ih, a1 = (p[1] - p[0]) * (p[3] - p[2]), a2 = (q[1] - q[0]) * (q[3] - q[2]);
    float uni = a1 + a2 - inter;
    return inter > 0 && a1 > 0 && a2 > 0 && uni > 0 && inter / uni > threshold;
}

static int64_t cuvil_nms(const float *boxes, const float *scores, int64_t batches, int64_t classes, int64_t n,
                         int64_t limit, float iou, float floor, int filter, int center, int64_t *out, int64_t *work)
{
    int64_t *cand = work, *tmp = work + n, *kept = work + 2 * n, total = 0;
    for (int64_t b = 0; b < batches; b++)
        for (int64_t c = 0; c < classes; c++) {
            const float *s = scores + (b * classes + c) * n, *bx = boxes + b * n * 4;
            int64_t m = 0, k = 0;
            for (int64_t i = 0; i < n; i++)
                if (!filter || s[i] > floor) cand[m++] = i;
            for (int64_t w = 1; w < m; w *= 2) {  /* stable: by score descending, then index */
                for (int64_t lo = 0; lo < m; lo += 2 * w) {
                    int64_t mid = CUVIL_MIN(lo + w, m), hi = CUVIL_MIN(lo + 2 * w, m), p = lo, q = mid, j = lo;
                    while (p < mid && q < hi) tmp[j++] = s[cand[q]] > s[cand[p]] ? cand[q++] : cand[p++];
                    while (p < mid) tmp[j++] = cand[p++];
                    while (q < hi) tmp[j++] = cand[q++];
                }
                memcpy(cand, tmp, (size_t)m * sizeof(int64_t));
            }
            for (int64_t j = 0; j < m && k < limit; j++) {
                int keep = 1;
                for (int64_t q = 0; q < k && keep; q++) keep = !cuvil_boxes_overlap(bx + 4 * cand[j], bx + 4 * kept[q],
                                                                                 center, iou);
                if (!keep) continue;
                kept[k++] = cand[j];
                out[3 * total] = b; out[3 * total + 1] = c; out[3 * total + 2] = cand[j];
                total++;
            }
        }
    return total;
}
"""


def _nms(gen, op, depth: int) -> None:
    boxes, scores, limit, iou, floor = gen.args_of(op.operands)
    batches, n, _ = (c_dim(d) for d in op.operands[0].type.shape)
    classes = c_dim(op.operands[1].type.shape[1])
    gen.helpers["cuvil_nms"] = NMS_HELPERS
    work = gen.scratch(f"3 * {n} * 8", "int64_t")
    gen.line(depth, f"s_{op.attrs['size']} = cuvil_nms({boxes}, {scores}, {batches}, {classes}, {n}, {limit}[0], "
                    f"{iou}[0], {floor}[0], {int(op.attrs['score_threshold'])}, {int(op.attrs['center_point_box'])}, "
                    f"{gen.args_of(op.results)[0]}, {work});")


RANGE_HELPER = """/* [lo, hi) of an axis of d as ONNX Slice reads it (negative from the end, clamped), or with `exact`
 * both required in [0, d]: the first that is not stops the call as an index error. */
static int cuvil_dynamic_range(int64_t *lo, int64_t *hi, int64_t d, int exact, const char *loc, int64_t axis)
{
    int64_t *ends[2] = {lo, hi};
    for (int k = 0; k < 2; k++) {
        int64_t v = *ends[k];
        if (exact && (v < 0 || v > d)) return cuvil_index_error("dynamic_slice", loc, v, axis, d);
        v = v < 0 ? v + d : v;
        *ends[k] = v < 0 ? 0 : (v > d ? d : v);
    }
    if (*hi < *lo) *hi = *lo;
    return 0;
}
"""


def _dynamic_slice(gen, op, depth: int) -> None:
    start, end, *xs = op.operands
    axis, u = op.attrs["axis"], f"s_{op.attrs['size']}"
    outer, d, inner = axis_split(xs[0].type.shape, axis)
    gen.helpers["cuvil_dynamic_range"] = RANGE_HELPER
    lo, hi = gen.args_of([start, end])
    gen.line(depth, "{")
    gen.line(depth + 1, f"int64_t lo_ = {lo}[0], hi_ = {hi}[0];")
    gen.line(depth + 1, f"CUVIL_TRY(cuvil_dynamic_range(&lo_, &hi_, {d}, {int(op.attrs['exact'])}, "
                        f"{c_string(str(op.loc))}, {axis}));")
    gen.line(depth + 1, f"{u} = hi_ - lo_;")
    for x, y in zip(gen.args_of(xs), gen.args_of(op.results)):
        gen.line(depth + 1, f"for (int64_t o = 0; o < {outer}; o++) memcpy({y} + o * {u} * {inner}, "
                            f"{x} + (o * {d} + lo_) * {inner}, (size_t)({u} * {inner}) * sizeof(*{x}));")
    gen.line(depth, "}")


EMITTERS = {"nonzero": _nonzero, "unique": _unique, "non_max_suppression": _nms, "dynamic_slice": _dynamic_slice}
