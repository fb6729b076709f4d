"""Index ops on the device: gather_elements, scatter_elements, argmax, argmin, topk (the CPU's semantics).

A data-dependent index outside its axis records the op's code in the run's error word and is skipped (the host raises
the interpreter's IndexRangeError). scatter_elements copies the data, then runs one thread per line of the updates
along the axis: duplicate indices of a line combine in index order (no reduction: the last update wins), and the
lines write disjoint lines of the output, so no atomics are needed. Float reductions combine in the compute type
(f32 for f32, f16 and bf16): the CPU rounds once from f64, so a long chain of duplicates may differ in the last bits.
argmax, argmin and topk run a thread per line, NaN counting as the extreme as in NumPy; topk keeps a heap of the k
best in its index output (the CPU's algorithm), so it stays n log k a line.
"""
from __future__ import annotations

from ...ir.dtypes import DType
from ..common.c_exprs import CType, c_dim
from ..common.index import wrapped_index
from ..cpu.library_misc import _COMBINE_BOOL, _COMBINE_INT, _COMBINE_WIDE, _isnan
from ..cpu.library_util import flat as _flat
from .elements import device_helper, element_kernel, load_as, prod, store_as
from .kernels import CUDA_STORAGE


def _checked(gen, op, raw: str) -> list:
    """Lines declaring `j`, index `raw` wrapped into the op's axis, skipping this element (after recording the error)
    when it lies outside."""
    n = c_dim(op.operands[0].type.shape[op.attrs["axis"]])
    return [f"const int64_t j = {wrapped_index(op, raw, n)};",
            f"if ((uint64_t)j >= (uint64_t){n}) {{ cuvil_fail(cuvil_err, {gen.error_code(op)}, (int64_t)({raw})); "
            "continue; }"]


def _data_coords(op, coords: list, idx_shape) -> list:
    """Data's coordinates for the index tensor's `coords`, `j` along the axis; one that may exceed data's size
    (symbolic sizes the shape rule could not compare) is clamped, as on the CPU."""
    data, axis = op.operands[0].type, op.attrs["axis"]
    out = []
    for k, (c, i, d) in enumerate(zip(coords, idx_shape, data.shape)):
        safe = i == d or isinstance(i, int) and isinstance(d, int) and i <= d
        out.append("j" if k == axis else c if safe else f"CUVIL_MIN({c}, {c_dim(d)} - 1)")
    return out


def _gather_elements(gen, op) -> None:
    data, idx = op.operands
    y = op.results[0]
    coords = [f"o{k}" for k in range(idx.type.rank)]
    at = _flat(coords, idx.type.shape)
    src = _flat(_data_coords(op, coords, idx.type.shape), data.type.shape)
    body = [f"y[{at}] = 0;", *_checked(gen, op, f"ix[{at}]"), f"if ({c_dim(data.type.numel)} > 0) y[{at}] = x[{src}];"]
    element_kernel(gen, op, "gather_elements", idx.type.shape, body, {"x": data, "ix": idx}, {"y": y}, err=True)


def _copy(gen, op, src, dst) -> None:
    element_kernel(gen, op, "copy", [src.type.numel], ["y[o] = x[o];"], {"x": src}, {"y": dst})


def _scatter_elements(gen, op) -> None:
    data, idx, upd = op.operands
    y = op.results[0]
    dt, red, axis = data.type.dtype, op.attrs["reduction"], op.attrs["axis"]
    _copy(gen, op, data, y)
    line = list(idx.type.shape)
    line[axis] = 1
    coords = [f"o{k}" if k != axis else "r" for k in range(idx.type.rank)]
    at_u = _flat(coords, idx.type.shape)
    at_y = _flat(_data_coords(op, coords, idx.type.shape), data.type.shape)
    if red == "none":
        value = f"u[{at_u}]"
    elif dt.is_float:
        t = CType(dt).name
        value = store_as(dt, f"({t})({_COMBINE_WIDE[red].format(a=load_as(dt, 'y', at_y), b=load_as(dt, 'u', at_u))})")
    else:
        value = (_COMBINE_BOOL if dt is DType.bool else _COMBINE_INT)[red].format(a=f"y[{at_y}]", b=f"u[{at_u}]",
                                                                               t=CUDA_STORAGE[dt])
    body = [f"if ({c_dim(data.type.numel)} == 0) continue;",
            f"for (int64_t r = 0; r < {c_dim(idx.type.shape[axis])}; r++) {{",
            *("    " + s for s in _checked(gen, op, f"ix[{at_u}]")), f"    y[{at_y}] = {value};", "}"]
    element_kernel(gen, op, f"scatter_elements_{red}", line, body, {"ix": idx, "u": upd}, {"y": y}, err=True)


def _lines(x, axis: int) -> tuple:
    """(domain of the lines along `axis`: [outer, inner], n, inner, C of the line's first element at o0, o1)."""
    outer, n, inner = prod(x.shape[:axis]), x.shape[axis], prod(x.shape[axis + 1:])
    return [outer, inner], c_dim(n), c_dim(inner), f"(o0 * {c_dim(n)}) * {c_dim(inner)} + o1"


def _arg(cmp: str):
    def emit(gen, op) -> None:
        x, y = op.operands[0], op.results[0]
        dt = x.type.dtype
        domain, n, inner, start = _lines(x.type, op.attrs["axis"])
        t, nan = CType(dt).name, _isnan(dt)
        last = int(op.attrs["select_last_index"])
        take = (f"{nan('v')} || (!{nan('best')} && v {cmp}= best)" if last
                else f"!{nan('best')} && ({nan('v')} || v {cmp} best)")
        body = [f"const {CUDA_STORAGE[dt]} *p = x + {start};",
                f"{t} best = {n} > 0 ? {load_as(dt, 'p', '0')} : ({t})0;", "int64_t at = 0;",
                f"for (int64_t j = 1; j < {n}; j++) {{",
                f"    const {t} v = {load_as(dt, 'p', f'j * {inner}')};",
                f"    if ({take}) {{ best = v; at = j; }}", "}", f"y[o0 * {inner} + o1] = at;"]
        element_kernel(gen, op, op.name, domain, body, {"x": x}, {"y": y})
    return emit


def _topk_helper(name: str, dt: DType) -> str:
    """A heap of the k best in the line's index output (worst at the root), then a heap sort: best first. The order
    is total (NaN above every number, ties by lower index), so the result is the stable sort's."""
    s, t, nan = CUDA_STORAGE[dt], CType(dt).name, _isnan(dt)
    v = lambda at: load_as(dt, "p", f"({at}) * inner")  # noqa: E731 (the line's element at index `at`)
    return device_helper(name, f"""\
static __device__ int {name}_before({t} va, int64_t a, {t} vb, int64_t b, int largest)
{{
    const int na = {nan("va")}, nb = {nan("vb")};
    if (na || nb) return na && nb ? a < b : (largest ? na : nb);
    if (va == vb) return a < b;
    return largest ? va > vb : va < vb;
}}

static __device__ void {name}_sift(const {s} *p, int64_t inner, int64_t *h, int64_t at, int64_t size, int largest)
{{
    for (;;) {{
        int64_t worst = at;
        for (int64_t c = 2 * at + 1; c <= 2 * at + 2 && c < size; c++)
            if ({name}_before({v("h[worst * inner]")}, h[worst * inner], {v("h[c * inner]")}, h[c * inner], largest))
                worst = c;
        if (worst == at) return;
        const int64_t tmp = h[at * inner]; h[at * inner] = h[worst * inner]; h[worst * inner] = tmp;
        at = worst;
    }}
}}

static __device__ void {name}_line(const {s} *p, {s} *vals, int64_t *h, int64_t n, int64_t inner, int64_t k,
                                   int largest)
{{
    for (int64_t j = 0; j < n && k > 0; j++) {{
        if (j < k) {{  /* grow: the new element rises while it is worse than its parent */
            int64_t at = j;
            h[at * inner] = j;
            while (at > 0 && {name}_before({v("h[(at - 1) / 2 * inner]")}, h[(at - 1) / 2 * inner], {v("j")}, j,
                                           largest)) {{
                h[at * inner] = h[(at - 1) / 2 * inner];
                at = (at - 1) / 2;
                h[at * inner] = j;
            }}
        }} else if ({name}_before({v("j")}, j, {v("h[0]")}, h[0], largest)) {{
            h[0] = j;
            {name}_sift(p, inner, h, 0, k, largest);
        }}
    }}
    for (int64_t end = k - 1; end > 0; end--) {{
        const int64_t tmp = h[0]; h[0] = h[end * inner]; h[end * inner] = tmp;
        {name}_sift(p, inner, h, 0, end, largest);
    }}
    for (int64_t r = 0; r < k; r++) vals[r * inner] = p[h[r * inner] * inner];
}}
""")


def _topk(gen, op) -> None:
    x = op.operands[0]
    values, indices = op.results
    dt, k = x.type.dtype, op.attrs["k"]
    name = f"cuvil_topk_{dt.value}"
    gen.helpers[name] = _topk_helper(name, dt)
    domain, n, inner, start = _lines(x.type, op.attrs["axis"])
    out = f"(o0 * {c_dim(k)}) * {inner} + o1"
    body = [f"{name}_line(x + {start}, vals + {out}, idx + {out}, {n}, {inner}, {c_dim(k)}, "
            f"{int(op.attrs['largest'])});"]
    element_kernel(gen, op, "topk", domain, body, {"x": x}, {"vals": values, "idx": indices})


EMITTERS = {"gather_elements": _gather_elements, "scatter_elements": _scatter_elements, "argmax": _arg(">"),
            "argmin": _arg("<"), "topk": _topk}
