"""Library emitters for index and scan ops: gather_elements, scatter_elements, argmax, argmin, cumsum, cumprod, topk.

Data-dependent indices never leave their tensor: before an op reads through them, every index is checked to lie in
[-size, size) of its axis (cuvil_check_indices); the first that does not stops the call with the interpreter's
IndexRangeError message. A checked index wraps once (negative counts from the end) and is read as it is.
"""
from __future__ import annotations

from ...ir.dtypes import DType
from .c_exprs import index_check, load, store_value
from .library_util import axis_split, c_dim, close_loops, compute, flat, open_block, open_loops, par_if, storage, \
    tag, wide


# -- gather_elements / scatter_elements ------------------------------------------------------------------
def _check_indices(gen, depth: int, op, idx) -> None:
    gen.line(depth, index_check(op, "ix", idx.type, op.operands[0].type.shape[op.attrs["axis"]]))


def _element_coords(gen, depth: int, op, idx_ptr: str, idx_type) -> list:
    """Declare `j`, the (checked) index along `axis` wrapped into it, and return data's coordinates for the loop
    variables i0.. over the indices' shape. A coordinate that may exceed data's size (symbolic sizes the shape rule
    could not compare) is clamped."""
    data, axis = op.operands[0], op.attrs["axis"]
    n = c_dim(data.type.shape[axis])
    loops = [f"i{k}" for k in range(idx_type.rank)]
    gen.line(depth, f"int64_t j = (int64_t){idx_ptr}[{flat(loops, idx_type.shape)}];")
    if op.attrs.get("negative", True):
        gen.line(depth, f"j = j < 0 ? j + {n} : j;")
    coords = []
    for k, (i, d) in enumerate(zip(idx_type.shape, data.type.shape)):
        safe = i == d or isinstance(i, int) and isinstance(d, int) and i <= d
        coords.append("j" if k == axis else loops[k] if safe else f"CUVIL_MIN({loops[k]}, {c_dim(d)} - 1)")
    return coords


def _gather_elements(gen, op, depth: int) -> None:
    data, idx = op.operands
    out = op.results[0]
    d = open_block(gen, depth, op, {"x": data, "ix": idx, "y": out})
    _check_indices(gen, d, op, idx)
    loops = [f"i{k}" for k in range(idx.type.rank)]
    if data.type.numel == 0:
        gen.line(d, f"memset(y, 0, {c_dim(out.type.numel)} * sizeof(*y));  /* nothing to gather from: zeros */")
    else:
        if not isinstance(data.type.numel, int):
            gen.line(d, f"if ({c_dim(data.type.numel)} == 0) memset(y, 0, {c_dim(out.type.numel)} * sizeof(*y));")
            gen.line(d, "else")
        inner = open_loops(gen, d, loops, idx.type.shape, c_dim(out.type.numel))
        coords = _element_coords(gen, inner, op, "ix", idx.type)
        gen.line(inner, f"y[{flat(loops, out.type.shape)}] = x[{flat(coords, data.type.shape)}];")
        close_loops(gen, inner, idx.type.rank)
    gen.line(depth, "}")


# reduction -> C combining the current value `a` with the update `b`, per kind of element type
_COMBINE_WIDE = {"add": "{a} + {b}", "mul": "{a} * {b}", "max": "CUVIL_MAX({a}, {b})", "min": "CUVIL_MIN({a}, {b})"}
_COMBINE_INT = {"add": "({t})((uint64_t){a} + (uint64_t){b})", "mul": "({t})((uint64_t){a} * (uint64_t){b})",
                "max": "CUVIL_MAX({a}, {b})", "min": "CUVIL_MIN({a}, {b})"}
_COMBINE_BOOL = {"add": "{a} | {b}", "mul": "{a} & {b}", "max": "{a} | {b}", "min": "{a} & {b}"}


def _scatter_elements(gen, op, depth: int) -> None:
    """Sequential, so duplicate indices combine in index order and, without a reduction, the last update
    wins. Float reductions run on a float64 copy of the data and round once, as the reference does."""
    data, idx, upd = op.operands
    dt, red = data.type.dtype, op.attrs["reduction"]
    d = open_block(gen, depth, op, {"x": data, "ix": idx, "u": upd, "y": op.results[0]}, f" ({red})")
    _check_indices(gen, d, op, idx)
    numel = c_dim(data.type.numel)
    wide_copy = red != "none" and dt.is_float
    if wide_copy:
        gen.line(d, f"double *restrict acc = {gen.scratch(f'{numel} * 8', 'double')};")
        gen.line(d, f"for (int64_t t = 0; t < {numel}; t++) acc[t] = {load(dt, 'x', 't')};")
    else:
        gen.line(d, f"memcpy(y, x, {numel} * sizeof(*y));")
    loops = [f"i{k}" for k in range(idx.type.rank)]
    if data.type.numel != 0:
        guard = not isinstance(data.type.numel, int)  # an empty data tensor has no element to write
        if guard:
            gen.line(d, f"if ({numel} > 0) {{")
        inner = open_loops(gen, d + guard, loops, idx.type.shape)
        coords = _element_coords(gen, inner, op, "ix", idx.type)
        at = f"{'acc' if wide_copy else 'y'}[{flat(coords, data.type.shape)}]"
        u = f"u[{flat(loops, upd.type.shape)}]"
        if red == "none":
            value = u
        elif dt.is_float:
            value = _COMBINE_WIDE[red].format(a=at, b=load(dt, "u", flat(loops, upd.type.shape)))
        else:
            value = (_COMBINE_BOOL if dt is DType.bool else _COMBINE_INT)[red].format(a=at, b=u, t=storage(dt))
        gen.line(inner, f"{at} = {value};")
        close_loops(gen, inner, idx.type.rank + guard)
    if wide_copy:
        gen.line(d, f"for (int64_t t = 0; t < {numel}; t++) y[t] = {store_value(dt, 'acc[t]')};")
    gen.line(depth, "}")


# -- argmax / argmin -----------------------------------------------------------------------------------
def _isnan(dt: DType):
    return (lambda v: f"({v} != {v})") if dt.is_float else (lambda v: "0")


def _arg_helper(name: str, dt: DType, cmp: str) -> str:
    """NaN counts as the extreme (NumPy): the first NaN wins, or the last one with select_last_index."""
    s, t, nan = storage(dt), compute(dt), _isnan(dt)
    return f"""static void {name}(const {s} *x, int64_t *y, int64_t outer, int64_t n, int64_t inner, int last)
{{
    #pragma omp parallel for collapse(2) {par_if("outer * n * inner")}
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {{
            const {s} *p = x + o * n * inner + i;
            {t} best = n > 0 ? {load(dt, "p", "0")} : 0;
            int64_t at = 0;
            for (int64_t j = 1; j < n; j++) {{
                {t} v = {load(dt, "p", "j * inner")};
                int take = last ? ({nan("v")} || (!{nan("best")} && v {cmp}= best))
                                : (!{nan("best")} && ({nan("v")} || v {cmp} best));
                if (take) {{ best = v; at = j; }}
            }}
            y[o * inner + i] = at;
        }}
}}
"""


def _arg(cmp: str):
    def emit(gen, op, depth: int) -> None:
        x, out = op.operands[0], op.results[0]
        name = f"{op.name}_{tag(x.type.dtype)}"
        gen.helpers[name] = _arg_helper(name, x.type.dtype, cmp)
        outer, n, inner = axis_split(x.type.shape, op.attrs["axis"])
        px, py = gen.args_of([x, out])
        gen.line(depth, f"{name}({px}, {py}, {outer}, {n}, {inner}, {int(op.attrs['select_last_index'])});")
    return emit


# -- cumsum, cumprod -----------------------------------------------------------------------------------------
CUMSUM_BLOCK = 64  # columns summed side by side: contiguous rows of a block, accumulators in registers


def _scan_helper(name: str, dt: DType, product: bool) -> str:
    s, w = storage(dt), wide(dt)
    init, combine = ("1", "*=") if product else ("0", "+=")
    total = store_value(dt, "acc[c]") if dt.is_float else f"({s})acc[c]"
    return f"""static void {name}(const {s} *x, {s} *y, int64_t outer, int64_t n, int64_t inner, int exclusive,
                      int reverse)
{{
    int64_t blocks = (inner + {CUMSUM_BLOCK - 1}) / {CUMSUM_BLOCK};
    #pragma omp parallel for collapse(2) {par_if("outer * n * inner")}
    for (int64_t o = 0; o < outer; o++)
        for (int64_t b = 0; b < blocks; b++) {{
            int64_t c0 = b * {CUMSUM_BLOCK}, w = CUVIL_MIN(inner - c0, (int64_t){CUMSUM_BLOCK});
            {w} acc[{CUMSUM_BLOCK}];
            for (int64_t c = 0; c < w; c++) acc[c] = {init};
            for (int64_t step = 0; step < n; step++) {{
                int64_t at = (o * n + (reverse ? n - 1 - step : step)) * inner + c0;
                for (int64_t c = 0; c < w; c++) {{
                    {w} v = ({w}){load(dt, "x", "at + c")};
                    if (!exclusive) acc[c] {combine} v;
                    y[at + c] = {total};
                    if (exclusive) acc[c] {combine} v;
                }}
            }}
        }}
}}
"""


def _scan(gen, op, depth: int) -> None:
    x, out = op.operands[0], op.results[0]
    name = f"{op.name}_{tag(x.type.dtype)}"
    gen.helpers[name] = _scan_helper(name, x.type.dtype, product=op.name == "cumprod")
    outer, n, inner = axis_split(x.type.shape, op.attrs["axis"])
    px, py = gen.args_of([x, out])
    gen.line(depth, f"{name}({px}, {py}, {outer}, {n}, {inner}, {int(op.attrs['exclusive'])}, "
                    f"{int(op.attrs['reverse'])});")


# -- topk ----------------------------------------------------------------------------------------------
def _topk_helper(name: str, dt: DType) -> str:
    """A heap of the k best kept in the index output itself (worst at the root): n log k per row, then a
    heap sort leaves them best first. The order is total (NaN above every number, ties by lower index), so
    the result is the stable sort's whatever the heap does."""
    s, t, nan = storage(dt), compute(dt), _isnan(dt)
    return f"""static inline int {name}_before({t} va, int64_t a, {t} vb, int64_t b, int largest)
{{
    int na = {nan("va")}, nb = {nan("vb")};
    if (na || nb) return na && nb ? a < b : (largest ? na : nb);
    if (va == vb) return a < b;
    return largest ? va > vb : va < vb;
}}

static void {name}_sift(const {s} *p, int64_t inner, int64_t *h, int64_t stride, int64_t at, int64_t size,
                        int largest)
{{
    for (;;) {{
        int64_t worst = at;
        for (int64_t c = 2 * at + 1; c <= 2 * at + 2 && c < size; c++)
            if ({name}_before({load(dt, "p", "h[worst * stride] * inner")}, h[worst * stride],
                              {load(dt, "p", "h[c * stride] * inner")}, h[c * stride], largest)) worst = c;
        if (worst == at) return;
        int64_t tmp = h[at * stride]; h[at * stride] = h[worst * stride]; h[worst * stride] = tmp;
        at = worst;
    }}
}}

static void {name}(const {s} *x, {s} *vals, int64_t *idx, int64_t outer, int64_t n, int64_t inner, int64_t k,
                   int largest)
{{
    #pragma omp parallel for collapse(2) {par_if("outer * n * inner")}
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {{
            const {s} *p = x + o * n * inner + i;
            int64_t *h = idx + o * k * inner + i;
            for (int64_t j = 0; j < n && k > 0; j++) {{
                if (j < k) {{  /* grow: the new element rises while it is worse than its parent */
                    int64_t at = j;
                    h[at * inner] = j;
                    while (at > 0 && {name}_before({load(dt, "p", "h[(at - 1) / 2 * inner] * inner")},
                                                   h[(at - 1) / 2 * inner], {load(dt, "p", "j * inner")}, j,
                                                   largest)) {{
                        h[at * inner] = h[(at - 1) / 2 * inner];
                        at = (at - 1) / 2;
                        h[at * inner] = j;
                    }}
                }} else if ({name}_before({load(dt, "p", "j * inner")}, j, {load(dt, "p", "h[0] * inner")}, h[0],
                                          largest)) {{
                    h[0] = j;
                    {name}_sift(p, inner, h, inner, 0, k, largest);
                }}
            }}
            for (int64_t end = k - 1; end > 0; end--) {{
                int64_t tmp = h[0]; h[0] = h[end * inner]; h[end * inner] = tmp;
                {name}_sift(p, inner, h, inner, 0, end, largest);
            }}
            for (int64_t r = 0; r < k; r++) vals[(o * k + r) * inner + i] = p[h[r * inner] * inner];
        }}
}}
"""


def _topk(gen, op, depth: int) -> None:
    x = op.operands[0]
    values, indices = op.results
    name = f"topk_{tag(x.type.dtype)}"
    gen.helpers[name] = _topk_helper(name, x.type.dtype)
    outer, n, inner = axis_split(x.type.shape, op.attrs["axis"])
    px, pv, pi = gen.args_of([x, values, indices])
    gen.line(depth, f"{name}({px}, {pv}, {pi}, {outer}, {n}, {inner}, {op.attrs['k']}, "
                    f"{int(op.attrs['largest'])});")


EMITTERS = {"gather_elements": _gather_elements, "scatter_elements": _scatter_elements, "argmax": _arg(">"),
            "argmin": _arg("<"), "cumsum": _scan, "cumprod": _scan, "topk": _topk}
