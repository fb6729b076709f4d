"""Library emitter for `resize` (ONNX Resize: nearest, linear, cubic; every coordinate transform).

Each resized axis gets a table, computed at call time in double exactly as the reference does: per output
index its source indices (clamped into the input) and, for linear and cubic, their weights. Every mode is
separable, so an output element is the sum over the product of the axes' taps; nearest copies the source
element (any dtype), the others accumulate in double and round once.
"""
from __future__ import annotations

from .c_exprs import load, store_value
from .library_util import c_dim, close_loops, flat, open_block, open_loops, prod, scratch_parts

TAPS = {"nearest": 1, "linear": 2, "cubic": 4}
COORDS = {"half_pixel": 0, "half_pixel_symmetric": 1, "pytorch_half_pixel": 2, "align_corners": 3, "asymmetric": 4}
NEAREST = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}

TAPS_FN = """/* resize: the source coordinate of output index o along one axis, then its neighbours (clamped into
 * [0, n_in)) in idx and their weights in w; taps 1 = nearest (idx only), 2 = linear, 4 = cubic (Keys, coefficient
 * a). The CUDA backend's kernels call it per output element. */
{qualifiers} void cuvil_resize_taps(int64_t o, int64_t n_in, int64_t n_out, double scale, int transform,
                                    int nearest, int taps, double a, int exclude, int64_t *idx, double *w)
{{
    const double x = (double)o;
    double c;
    if (transform == 3) c = n_out > 1 ? x * (double)(n_in - 1) / (double)(n_out - 1) : 0.0;
    else if (transform == 4) c = x / scale;
    else if (transform == 2 && n_out == 1) c = 0.0;
    else if (transform == 1)
        c = (double)n_in / 2 * (1 - (double)n_out / (scale * (double)n_in)) + (x + 0.5) / scale - 0.5;
    else c = (x + 0.5) / scale - 0.5;
    if (taps == 1) {{
        double r = nearest == 0 ? ceil(c - 0.5) : nearest == 1 ? floor(c + 0.5) : nearest == 2 ? floor(c) : ceil(c);
        idx[0] = r < 0 ? 0 : r > (double)(n_in - 1) ? n_in - 1 : (int64_t)r;
        return;
    }}
    const double left = ceil(c) - 1, t = c - left;  /* the neighbour below c (c - 1 when c is whole) */
    double sum = 0;
    if (taps == 2) {{
        w[0] = 1 - t;
        w[1] = t;
    }} else {{
        const double u[4] = {{t + 1, t, 1 - t, 2 - t}};
        for (int k = 0; k < 4; k++)
            w[k] = k == 1 || k == 2 ? ((a + 2) * u[k] - (a + 3)) * u[k] * u[k] + 1
                                    : ((a * u[k] - 5 * a) * u[k] + 8 * a) * u[k] - 4 * a;
    }}
    for (int k = 0; k < taps; k++) {{
        const double j = left + k - (taps / 2 - 1);
        if (exclude && (j < 0 || j > (double)(n_in - 1))) w[k] = 0;
        idx[k] = j < 0 ? 0 : j > (double)(n_in - 1) ? n_in - 1 : (int64_t)j;
        sum += w[k];
    }}
    if (exclude)
        for (int k = 0; k < taps; k++) w[k] /= sum;
}}
"""

TABLE = TAPS_FN.format(qualifiers="static inline") + """
/* resize: the taps of every output index along one axis. */
static void cuvil_resize_table(int64_t n_in, int64_t n_out, double scale, int transform, int nearest, int taps,
                               double a, int exclude, int64_t *restrict idx, double *restrict w)
{
    for (int64_t o = 0; o < n_out; o++)
        cuvil_resize_taps(o, n_in, n_out, scale, transform, nearest, taps, a, exclude, idx + o * taps,
                          taps > 1 ? w + o * taps : NULL);
}
"""


def _resized_axes(x, attrs) -> list:
    """Axes the reference resamples: a new size, or a scale other than 1 (an unchanged axis is skipped)."""
    scales = attrs["scales"]
    return [a for a, (n_in, n_out) in enumerate(zip(x.type.shape, attrs["sizes"]))
            if n_out != n_in or (scales and scales[a] != 1.0)]


def _tables(gen, d: int, x, attrs, axes: list, taps: int) -> None:
    parts = []
    for a in axes:
        parts.append((f"ix{a}", "int64_t", c_dim(attrs["sizes"][a] * taps)))
        if taps > 1:
            parts.append((f"w{a}", "double", c_dim(attrs["sizes"][a] * taps)))
    scratch_parts(gen, d, parts)
    for a in axes:
        n_in, n_out = c_dim(x.type.shape[a]), c_dim(attrs["sizes"][a])
        scale = repr(float(attrs["scales"][a])) if attrs["scales"] else f"(double){n_out} / (double){n_in}"
        weights = f"w{a}" if taps > 1 else "NULL"
        gen.line(d, f"cuvil_resize_table({n_in}, {n_out}, {scale}, {COORDS[attrs['coordinate_transformation_mode']]}, "
                    f"{NEAREST[attrs['nearest_mode']]}, {taps}, {float(attrs['cubic_coeff_a'])!r}, "
                    f"{int(attrs['exclude_outside'])}, ix{a}, {weights});")


def _resize(gen, op, depth: int) -> None:
    x, y = op.operands[0], op.results[0]
    attrs, dt = op.attrs, x.type.dtype
    taps = TAPS[attrs["mode"]]
    axes = _resized_axes(x, attrs)
    gen.helpers["cuvil_resize_table"] = TABLE
    d = open_block(gen, depth, op, {"x": x, "y": y}, f" ({attrs['mode']})")
    _tables(gen, d, x, attrs, axes, taps)
    rank = x.type.rank
    loops = [f"i{k}" for k in range(rank)]
    inner = open_loops(gen, d, loops, y.type.shape, c_dim(y.type.numel * taps ** len(axes)))
    strides = [prod(x.type.shape[k + 1:]) for k in range(rank)]
    coords = {a: f"ix{a}[i{a} * {taps} + t{a}]" if taps > 1 else f"ix{a}[i{a}]" for a in axes}
    at = " + ".join(f"{coords.get(k, loops[k])} * {c_dim(s)}" if s != 1 else coords.get(k, loops[k])
                    for k, s in enumerate(strides)) or "0"
    out = f"y[{flat(loops, y.type.shape)}]"
    if taps == 1 or not axes:
        gen.line(inner, f"{out} = x[{at}];")
    else:
        gen.line(inner, "double acc = 0;")
        deep = open_loops(gen, inner, [f"t{a}" for a in axes], [taps] * len(axes))
        weight = " * ".join(f"w{a}[i{a} * {taps} + t{a}]" for a in axes)
        gen.line(deep, f"acc += {weight} * (double){load(dt, 'x', at)};")
        close_loops(gen, deep, len(axes))
        gen.line(inner, f"{out} = {store_value(dt, 'acc')};")
    close_loops(gen, inner, rank)
    gen.line(depth, "}")


EMITTERS = {"resize": _resize}
