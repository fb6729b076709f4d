"""Tree ensembles and the quantized ops on the device, a thread per output row or element, with the reference's
arithmetic (ops/ml.py, ops/quantized.py).

- tree_ensemble: a thread per row walks every tree in order (node j = feature, true, false, kind; a successor -k-1 is
  leaf k; kind & 7 picks the comparison, kind & 8 sends NaN to true) and sums the leaves' weights.
- qlinear_i8, qconv_i8: x quantized to u8 as the reference rounds (static scale, an already-quantized u8 x, or the
  dynamic range of x's row, for qconv of x's image), the int64 dot with the i8 weight, then scale, bias, activation
  and the optional u8 requantisation in f32. The dynamic range is found by the thread that needs it (a second pass
  over the row or image): correct everywhere first; a range kernel before it would be faster for large images.
- linear_i4: the 4-bit weight unpacked as the kernel library packs it (per run of 32 k, byte j holds k j and j + 16),
  dequantised and accumulated in f64 like the reference.
"""
from __future__ import annotations

from ...ir.dtypes import DType
from ..common.c_exprs import c_dim, elementwise_expr
from .elements import device_helper, element_kernel, prod

_TREE_STEP = """/* The successor of node n (feature, true, false, kind) for the row xr (the CPU's branch-free rule). */
static __device__ __forceinline__ int64_t {name}(const int64_t *n, const {x} *xr, {x} th)
{{
    const {x} v = xr[n[0]];
    const int cmp = (v <= th) | (v < th) << 1 | (v >= th) << 2 | (v > th) << 3 | (v == th) << 4 | (v != th) << 5;
    const int go = v != v ? (int)(n[3] >> 3) & 1 : cmp >> (n[3] & 7) & 1;
    return n[2 - go];
}}
"""


def _tree_ensemble(gen, op) -> None:
    x, nodes, thresholds, roots, weights = op.operands
    y = op.results[0]
    step = f"cuvil_tree_step_{x.type.dtype.value}"
    gen.helpers[step] = device_helper(step, _TREE_STEP.format(name=step, x="double" if x.type.dtype is DType.f64
                                                              else "float"))
    features, trees, targets = c_dim(x.type.shape[1]), c_dim(roots.type.shape[0]), c_dim(weights.type.shape[1])
    body = [f"for (int64_t k = 0; k < {targets}; k++) y[o0 * {targets} + k] = 0;",
            f"for (int64_t t = 0; t < {trees}; t++) {{",
            "    int64_t j = roots[2 * t];",
            "    for (int64_t d = 0; d < roots[2 * t + 1] && j >= 0; d++)",
            f"        j = {step}(nodes + 4 * j, x + o0 * {features}, thresholds[j]);",
            f"    const int64_t leaf = (j < 0 ? -j - 1 : 0) * {targets};",
            f"    for (int64_t k = 0; k < {targets}; k++) y[o0 * {targets} + k] += weights[leaf + k];", "}"]
    ins = {"x": x, "nodes": nodes, "thresholds": thresholds, "roots": roots, "weights": weights}
    element_kernel(gen, op, "tree_ensemble", [x.type.shape[0]], body, ins, {"y": y})


_ACTIVATIONS = {"relu": ("relu", {}), "gelu_tanh": ("gelu", {"approximate": "tanh"}),
                "gelu_erf": ("gelu", {"approximate": "none"}), "sigmoid": ("sigmoid", {}), "tanh": ("tanh", {}),
                "relu6": ("clip", {"min": 0.0, "max": 6.0})}


def _activate(act: str, v: str, dtype: DType) -> str:
    if act == "none":
        return v
    name, attrs = _ACTIVATIONS[act]
    return elementwise_expr(name, [v], attrs, dtype)


def _quantized_input(op, x, first: str, count: str) -> tuple:
    """(lines declaring `sa` (f32) and `za` (int), C of x's u8 value at a C offset), the `count` elements from `first`
    sharing one dynamic range."""
    a = op.attrs
    if x.type.dtype is DType.u8:
        return [f"const float sa = {float(a['x_scale'])!r}f; const int za = {a['x_zero']};"], lambda i: f"x[{i}]"
    if a["x_scale"] > 0:
        lines = [f"const float sa = {float(a['x_scale'])!r}f; const int za = {a['x_zero']};"]
    else:  # the row's (image's) range widened to hold 0, onto 0..255 (quantized.dynamic_range)
        lines = ["float lo = 0.0f, hi = 0.0f;",
                 f"for (int64_t i = {first}; i < {first} + {count}; i++) {{ lo = CUVIL_MIN(lo, x[i]); "
                 "hi = CUVIL_MAX(hi, x[i]); }",
                 "const float sa = hi > lo ? (hi - lo) / 255.0f : 1.0f;",
                 "const int za = (int)CUVIL_MIN(CUVIL_MAX(rintf(-lo / sa), 0.0f), 255.0f);"]
    lines.append("const float inv = 1.0f / sa;")
    return lines, lambda i: f"(int)CUVIL_MIN(CUVIL_MAX(rintf(x[{i}] * inv) + (float)za, 0.0f), 255.0f)"


def _epilogue(op, col: str, bias: bool) -> list:
    """y from the int64 `acc` (za already removed): scale, bias, a qconv_i8 residual, activation, then f32 or
    requantised u8."""
    a = op.attrs
    lines = [f"float v = (float)acc * (sa * ws[{col}]);"] + ([f"v = v + bias[{col}];"] if bias else [])
    if a.get("residual") and a["res_scale"] > 0:
        lines.append(f"v = v + (float)((int)res[o] - {a['res_zero']}) * {float(a['res_scale'])!r}f;")
    elif a.get("residual"):
        lines.append("v = v + res[o];")
    lines.append(f"v = {_activate(a['act'], 'v', DType.f32)};")
    if a["out_scale"] > 0:
        lines.append(f"v = rintf(v / {float(a['out_scale'])!r}f) + {float(a['out_zero'])!r}f;")
        lines.append("y[o] = (uint8_t)CUVIL_MIN(CUVIL_MAX(v, 0.0f), 255.0f);")
    else:
        lines.append("y[o] = v;")
    return lines


def _qlinear(gen, op) -> None:
    x, w = op.operands[:2]
    y = op.results[0]
    n, k = w.type.shape
    kk = c_dim(k)
    lines, q = _quantized_input(op, x, f"o0 * {kk}", kk)
    dot = f"acc += (int64_t)({q(f'o0 * {kk} + r')} - za) * (int64_t)w[o1 * {kk} + r];"
    body = lines + ["int64_t acc = 0;", f"for (int64_t r = 0; r < {kk}; r++) {dot}"] + \
        _epilogue(op, "o1", len(op.operands) > 3)
    ins = dict(zip(("x", "w", "ws", "bias"), op.operands))
    element_kernel(gen, op, "qlinear_i8", [prod(x.type.shape[:-1]), n], body, ins, {"y": y})


def _qconv(gen, op) -> None:
    x, w = op.operands[0].type, op.operands[1].type
    y = op.results[0]
    a = op.attrs
    c, h, wd = (c_dim(d) for d in x.shape[1:])
    image = c_dim(prod(x.shape[1:]))
    lines, q = _quantized_input(op, op.operands[0], f"o0 * {image}", image)
    body = lines + ["int64_t acc = 0;", f"for (int64_t ci = 0; ci < {c}; ci++)"]
    for d, size in enumerate((h, wd)):
        body.append(f"for (int64_t w{d} = 0; w{d} < {c_dim(w.shape[2 + d])}; w{d}++) {{")
        body.append(f"const int64_t p{d} = o{2 + d} * {a['strides'][d]} + w{d} * {a['dilations'][d]} - {a['pads'][d]};")
        body.append(f"if (p{d} < 0 || p{d} >= {size}) continue;  /* padding holds the zero point: 0 once centered */")
    body.append(f"acc += (int64_t)({q(f'((o0 * {c} + ci) * {h} + p0) * {wd} + p1')} - za) * "
                f"(int64_t)w[((o1 * {c} + ci) * {c_dim(w.shape[2])} + w0) * {c_dim(w.shape[3])} + w1];")
    n_in = len(op.operands) - int(a["residual"])  # x, w, w_scale and an optional bias; then the residual
    body += ["}", "}"] + _epilogue(op, "o1", n_in > 3)
    ins = dict(zip(("x", "w", "ws", "bias"), op.operands[:n_in])) | ({"res": op.operands[-1]} if a["residual"] else {})
    element_kernel(gen, op, "qconv_i8", y.type.shape, body, ins, {"y": y})


def _linear_i4(gen, op) -> None:
    x, q = op.operands[:2]
    y = op.results[0]
    n, k, g = q.type.shape[0], x.type.shape[-1], op.attrs["group"]
    half, groups = k // 2, k // g
    body = ["double acc = 0;", f"for (int64_t r = 0; r < {k}; r++) {{",
            f"    const uint8_t b = q[o1 * {half} + r / 32 * 16 + r % 16];",
            "    const double v = (double)((r % 32) < 16 ? b & 15 : b >> 4);",
            f"    const int64_t at = o1 * {groups} + r / {g};",
            f"    acc += (double)x[o0 * {k} + r] * ((v - (double)zero[at]) * (double)scale[at]);", "}"]
    if len(op.operands) > 4:
        body.append("acc += (double)bias[o1];")
    body.append(f"y[o] = (float)({_activate(op.attrs['act'], 'acc', DType.f64)});")
    ins = dict(zip(("x", "q", "scale", "zero", "bias"), op.operands))
    element_kernel(gen, op, "linear_i4", [prod(x.type.shape[:-1]), n], body, ins, {"y": y})


EMITTERS = {"tree_ensemble": _tree_ensemble, "qlinear_i8": _qlinear, "qconv_i8": _qconv, "linear_i4": _linear_i4}
