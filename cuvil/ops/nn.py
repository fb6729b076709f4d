"""Neural-network ops: matmul, convolutions and pooling (this module); normalisation and softmax
(`nn_norm`), resize and einsum (`nn_resize`, `nn_einsum`) register when this module is imported.

Window ops take x as [N, C, *spatial] with 1 to 3 spatial dims. Their `strides`, `dilations`, `pads` and
`output_padding` attributes may be given empty; the normal form spells one entry per spatial dim (pads:
all begins, then all ends), so equivalent programs print alike. References compute in float64 with an
im2col formulation (one batched GEMM per conv), fast enough to interpret a ResNet-50 in seconds.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..ir.dtypes import DType
from ..ir.types import TensorType
from .common import require_dtype, unify_dtypes
from .elementwise import is_float
from .registry import Attr, register_op

# Attribute -> the value that fills an empty attribute, which is also its minimum.
_WINDOW_FILL = {"strides": 1, "dilations": 1, "pads": 0, "output_padding": 0}
_MATMUL_INTS = (DType.i32, DType.i64)


def f64(x):
    return x.astype(np.float64)


# -- matmul ------------------------------------------------------------------------------------------------
def _matmul_shape(ctx, types, attrs):
    a, b = types
    dtype = unify_dtypes(ctx, types, "matmul")
    require_dtype(ctx, a, lambda d: d.is_float or d in _MATMUL_INTS, "matmul")
    if a.rank < 2 or b.rank < 2:
        raise ctx.error(f"'matmul' needs operands of rank 2 or more (reshape vectors), got {a} and {b}")
    ctx.require_equal(a.shape[-1], b.shape[-2], f"'matmul' contraction size of {a} and {b}")
    if a.rank == 2 or b.rank == 2:  # a shared weight or a shared input: the other side's batch dims
        batch = a.shape[:-2] if b.rank == 2 else b.shape[:-2]
    elif a.rank != b.rank:
        raise ctx.error(f"'matmul' batch dims of {a} and {b} differ in rank (insert broadcast_to)")
    else:
        batch = tuple(ctx.require_equal(p, q, f"'matmul' batch dim {i} of {a} and {b}")
                      for i, (p, q) in enumerate(zip(a.shape[:-2], b.shape[:-2])))
    return [TensorType(dtype, (*batch, a.shape[-2], b.shape[-1]))]


def _ref_matmul(xs, attrs):
    a, b = xs
    if a.dtype.kind in "iu":  # integers accumulate in their own type, wrapping like the C kernels
        return np.matmul(a, b)
    return np.matmul(f64(a), f64(b)).astype(a.dtype)


register_op("matmul", operands=2, shape=_matmul_shape, reference=_ref_matmul,
            doc="a[..., M, K] @ b[..., K, N]; batch dims equal, or one side rank 2 and shared")


# -- window attributes (conv, conv_transpose, pools) ---------------------------------------------------------
def _per_dim(name, key, value, n, fill):
    value = value or (fill,) * n
    if len(value) != n:
        raise ValueError(f"'{name}' {key} needs {n} entries for x's spatial dims, got {list(value)}")
    if min(value) < fill:
        raise ValueError(f"'{name}' {key} must be >= {fill}, got {list(value)}")
    return tuple(value)


def _normalize_window(name):
    def normalize(types, attrs):
        s = types[0].rank - 2
        if not 1 <= s <= 3:
            raise ValueError(f"'{name}' needs x of rank 3 to 5 ([N, C, *spatial]), got {types[0]}")
        out = dict(attrs)
        for key in _WINDOW_FILL.keys() & attrs.keys():
            out[key] = _per_dim(name, key, attrs[key], 2 * s if key == "pads" else s, _WINDOW_FILL[key])
        kernel = attrs.get("kernel", (1,) * s)  # pools only; required, so never filled
        if len(kernel) != s or min(kernel, default=0) < 1:
            raise ValueError(f"'{name}' kernel needs {s} sizes >= 1 for x {types[0]}, got {list(kernel)}")
        return out
    return normalize


def window_out(n, k, stride, dil, pb, pe, ceil=False):
    """Output length of a sliding window (ONNX/PyTorch rule). In ceil mode the last window must start inside
    the input or its begin padding; which case applies follows from the attributes alone, so the size stays
    a plain expression for symbolic n."""
    span = dil * (k - 1) + 1
    room = n + pb + pe - span
    if not ceil:
        return room // stride + 1
    if stride <= span - pe:
        return (room + stride - 1) // stride + 1
    if pe >= span:
        return (room + stride - 1) // stride
    return (n + pb - 1) // stride + 1


def _geometry(x_shape, kernel, a):
    s = len(kernel)
    dil = a.get("dilations") or (1,) * s
    return list(zip(x_shape[2:], kernel, a["strides"], dil, a["pads"][:s], a["pads"][s:]))


_AXIS_WORDS = {1: ("columns",), 2: ("rows", "columns"), 3: ("planes", "rows", "columns")}


def _spatial_out(ctx, name, x, kernel, a):
    """The output sizes; each call must give at least one window per spatial dim (the kernels rely on it)."""
    out, ceil = [], a.get("ceil_mode", False)
    window = "x".join(map(str, kernel)) + " window"
    window = ("the dilated " if any(d > 1 for d in a.get("dilations") or ()) else "the ") + window
    for (n, k, st, d, pb, pe), axis in zip(_geometry(x.shape, kernel, a), _AXIS_WORDS[len(kernel)]):
        o = window_out(n, k, st, d, pb, pe, ceil)
        if ceil:  # the last window may overhang the padded input: one output is what it takes
            ctx.require_at_least(o, 1, f"'{name}': {window} (ceil mode) leaves {{lhs}} {axis} of output")
        else:
            ctx.require_at_least(n + pb + pe, d * (k - 1) + 1,
                                 f"'{name}': {window} spans {{rhs}} {axis} but the padded input has {{lhs}}")
        out.append(o)
    return out


def _channels(ctx, got, want, message):
    """Demand equal channel counts with a message in the op's terms when both are known."""
    if isinstance(got, int) and isinstance(want, int) and got != want:
        raise ctx.error(message)
    return ctx.require_equal(got, want, message)


def _check_conv_operands(ctx, name, types, groups):
    x, w = types[:2]
    unify_dtypes(ctx, types, name)
    require_dtype(ctx, x, is_float, name)
    if w.rank != x.rank:
        raise ctx.error(f"'{name}' weight {w} must have the rank of x {x}")
    if groups < 1:
        raise ctx.error(f"'{name}' groups must be >= 1, got {groups}")


def _check_bias(ctx, name, types, out_channels):
    if len(types) == 3:
        if types[2].rank != 1:
            raise ctx.error(f"'{name}' bias must have shape [{out_channels}], got {types[2]}")
        _channels(ctx, types[2].shape[0], out_channels,
                  f"'{name}' bias has {types[2].shape[0]} entries, the output has {out_channels} channels")


def _divisible(ctx, name, what, n, groups):
    if isinstance(n, int) and n % groups:
        raise ctx.error(f"'{name}' {what} ({n}) is not divisible by groups ({groups})")


# -- conv ----------------------------------------------------------------------------------------------------
def _conv_shape(ctx, types, a):
    x, w = types[:2]
    g = a["groups"]
    _check_conv_operands(ctx, "conv", types, g)
    o, per_group = w.shape[:2]
    _channels(ctx, x.shape[1], per_group * g, f"'conv' weight has {per_group} input channels per group, x has "
                                              f"{x.shape[1]}" + (f" in {g} groups" if g > 1 else ""))
    _divisible(ctx, "conv", "output channel count", o, g)
    _check_bias(ctx, "conv", types, o)
    return [x.with_shape((x.shape[0], o, *_spatial_out(ctx, "conv", x, w.shape[2:], a)))]


def windows(x, kernel, strides, dilations):
    """View x [N, C, *spatial] as [N, C, *out, *kernel]: every (strided, dilated) window, no copy."""
    s = len(kernel)
    span = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
    view = sliding_window_view(x, span, axis=tuple(range(2, 2 + s)))
    return view[(slice(None),) * 2 + tuple(slice(None, None, st) for st in strides)
                + tuple(slice(None, None, d) for d in dilations)]


def _pad(x, pads, value=0.0):
    s = len(pads) // 2
    return np.pad(x, [(0, 0), (0, 0)] + list(zip(pads[:s], pads[s:])), constant_values=value)


def _grouped_matmul(cols, w, groups):
    """cols [N, C, *out, *k] (C = groups * cg), w [O, cg, *k] -> [N, O, *out] as one batched GEMM."""
    n, c, s = cols.shape[0], cols.shape[1], w.ndim - 2
    out = cols.shape[2:2 + s]
    cols = cols.reshape(n, groups, c // groups, *cols.shape[2:])
    cols = cols.transpose(1, 0, *range(3, 3 + s), 2, *range(3 + s, 3 + 2 * s))
    per_group = math.prod(w.shape[1:])  # sizes spelled out: -1 is ambiguous for an empty batch
    cols = cols.reshape(groups, n * math.prod(out), per_group)
    wm = w.reshape(groups, w.shape[0] // groups, per_group).transpose(0, 2, 1)
    y = np.matmul(cols, wm).reshape(groups, n, *out, w.shape[0] // groups)
    return y.transpose(1, 0, 2 + s, *range(2, 2 + s)).reshape(n, w.shape[0], *out)


def _add_bias(y, xs):
    if len(xs) == 3:
        y = y + f64(xs[2]).reshape(len(xs[2]), *(1,) * (y.ndim - 2))
    return y.astype(xs[0].dtype)


def _ref_conv(xs, a):
    x, w = f64(xs[0]), f64(xs[1])
    cols = windows(_pad(x, a["pads"]), w.shape[2:], a["strides"], a["dilations"])
    return _add_bias(_grouped_matmul(cols, w, a["groups"]), xs)


_CONV_ATTRS = {"strides": Attr("ints", ()), "dilations": Attr("ints", ()), "pads": Attr("ints", ()),
               "groups": Attr("int", 1)}
register_op("conv", operands=(2, 3), attrs=_CONV_ATTRS, shape=_conv_shape, reference=_ref_conv,
            normalize=_normalize_window("conv"), doc="x [N, C, *s], w [O, C/groups, *k], bias [O] (ONNX Conv)")


# -- conv_transpose ------------------------------------------------------------------------------------------
def _transpose_out(n, k, st, d, pb, pe, op):
    return st * (n - 1) + op + d * (k - 1) + 1 - pb - pe


def _conv_transpose_shape(ctx, types, a):
    x, w = types[:2]
    g = a["groups"]
    _check_conv_operands(ctx, "conv_transpose", types, g)
    _channels(ctx, w.shape[0], x.shape[1], f"'conv_transpose' weight has {w.shape[0]} input channels, "
                                           f"x has {x.shape[1]}")
    _divisible(ctx, "conv_transpose", "input channel count", x.shape[1], g)
    o = w.shape[1] * g
    _check_bias(ctx, "conv_transpose", types, o)
    out = []
    geometry = zip(_geometry(x.shape, w.shape[2:], a), a["output_padding"], _AXIS_WORDS[x.rank - 2])
    for (n, k, st, d, pb, pe), op, axis in geometry:
        if op >= max(st, d):
            raise ctx.error(f"'conv_transpose' output_padding {op} must be smaller than the stride or the dilation")
        size = _transpose_out(n, k, st, d, pb, pe, op)
        ctx.require_at_least(size, 1, f"'conv_transpose': pads {list(a['pads'])} leave {{lhs}} {axis} of output")
        out.append(size)
    return [x.with_shape((x.shape[0], o, *out))]


def _ref_conv_transpose(xs, a):
    """Each input pixel scatters x * w into the output: one GEMM, then one strided add per kernel tap."""
    x, w, g = f64(xs[0]), f64(xs[1]), a["groups"]
    n, c, s = x.shape[0], x.shape[1], x.ndim - 2
    sizes, kernel, strides, dil = x.shape[2:], w.shape[2:], a["strides"], a["dilations"]
    pixels = math.prod(sizes)
    xm = x.reshape(n, g, c // g, pixels).transpose(1, 0, 3, 2).reshape(g, n * pixels, c // g)
    cols = np.matmul(xm, w.reshape(g, c // g, math.prod(w.shape[1:]))).reshape(g, n, *sizes, w.shape[1], *kernel)
    cols = cols.transpose(1, 0, 2 + s, *range(3 + s, 3 + 2 * s), *range(2, 2 + s))
    cols = cols.reshape(n, w.shape[1] * g, *kernel, *sizes)
    full = [st * (m - 1) + d * (k - 1) + 1 + op
            for m, k, st, d, op in zip(sizes, kernel, strides, dil, a["output_padding"])]
    y = np.zeros((n, cols.shape[1], *full))
    for tap in np.ndindex(*kernel):
        at = tuple(slice(t * d, t * d + st * (m - 1) + 1, st) for t, d, st, m in zip(tap, dil, strides, sizes))
        y[(slice(None), slice(None)) + at] += cols[(slice(None), slice(None)) + tap]
    pads = a["pads"]
    y = y[(slice(None), slice(None)) + tuple(slice(pb, f - pe) for pb, pe, f in zip(pads[:s], pads[s:], full))]
    return _add_bias(y, xs)


register_op("conv_transpose", operands=(2, 3), attrs={**_CONV_ATTRS, "output_padding": Attr("ints", ())},
            shape=_conv_transpose_shape, reference=_ref_conv_transpose, normalize=_normalize_window("conv_transpose"),
            doc="x [N, C, *s], w [C, O/groups, *k], bias [O] (ONNX ConvTranspose with explicit pads)")


# -- pooling -------------------------------------------------------------------------------------------------
def _pool_shape(name, accepts):
    def shape(ctx, types, a):
        x = types[0]
        require_dtype(ctx, x, accepts, name)
        return [x.with_shape((*x.shape[:2], *_spatial_out(ctx, name, x, a["kernel"], a)))]
    return shape


def _pool_padded(x, a, fill, pad_fill=None):
    """x padded by `pads` (with `pad_fill`, default `fill`) and, in ceil mode, by what the last window
    overhangs (with `fill`); returns the padded array and the output spatial sizes."""
    s, geo = len(a["kernel"]), _geometry(x.shape, a["kernel"], a)
    out = [window_out(*g, a["ceil_mode"]) for g in geo]
    over = [max(0, (o - 1) * st + d * (k - 1) + 1 - (n + pb + pe)) for o, (n, k, st, d, pb, pe) in zip(out, geo)]
    padded = _pad(x, a["pads"], fill if pad_fill is None else pad_fill)
    return _pad(padded, (0,) * s + tuple(over), fill), out


def _pool_windows(x, a, fill, pad_fill=None):
    """[N, C, *out, *kernel]: the pooling windows."""
    padded, out = _pool_padded(x, a, fill, pad_fill)
    view = windows(padded, a["kernel"], a["strides"], a.get("dilations") or (1,) * len(out))
    return view[(slice(None),) * 2 + tuple(slice(0, o) for o in out)]


def _ref_max_pool(xs, a):
    x = xs[0]
    fill = -np.inf if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else np.iinfo(x.dtype).min
    v = _pool_windows(x, a, fill)
    return v.max(axis=tuple(range(v.ndim - len(a["kernel"]), v.ndim))).astype(x.dtype)


def _ref_avg_pool(xs, a):
    """Window sums over window counts; the count covers the explicit pads if count_include_pad, never the
    ceil-mode overhang (as PyTorch and ONNX do)."""
    x, s = xs[0], len(a["kernel"])
    axes = tuple(range(2 + s, 2 + 2 * s))
    total = _pool_windows(f64(x), a, 0.0).sum(axis=axes)
    count = _pool_windows(np.ones((1, 1, *x.shape[2:])), a, 0.0, float(a["count_include_pad"])).sum(axis=axes)
    with np.errstate(all="ignore"):
        return (total / count).astype(x.dtype)


_POOL_ATTRS = {"kernel": Attr("ints"), "strides": Attr("ints", ()), "pads": Attr("ints", ()),
               "ceil_mode": Attr("bool", False)}
register_op("max_pool", attrs={**_POOL_ATTRS, "dilations": Attr("ints", ())},
            shape=_pool_shape("max_pool", lambda d: d.is_float or d in (DType.i8, DType.u8)),
            reference=_ref_max_pool, normalize=_normalize_window("max_pool"), doc="ONNX MaxPool (no indices)")
register_op("avg_pool", attrs={**_POOL_ATTRS, "count_include_pad": Attr("bool", False)},
            shape=_pool_shape("avg_pool", is_float), reference=_ref_avg_pool, normalize=_normalize_window("avg_pool"),
            doc="ONNX AveragePool")


# -- global pooling: one reduce over the spatial axes ----------------------------------------------------------
def _global_shape(name):
    def shape(ctx, types, a):
        x = types[0]
        require_dtype(ctx, x, is_float, name)
        if x.rank < 3:
            raise ctx.error(f"'{name}' needs x of rank 3 or more ([N, C, *spatial]), got {x}")
        return [x.with_shape((*x.shape[:2], *(1,) * (x.rank - 2)))]
    return shape


def _global(name, reduce_op, np_reduce):
    def ref(xs, a):
        x = xs[0]
        return np_reduce(f64(x), axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype)

    def dec(b, ops, a):
        return b.emit(reduce_op, ops[0], axes=tuple(range(2, ops[0].type.rank)), keepdims=True)

    register_op(name, shape=_global_shape(name), reference=ref, decompose=dec,
                doc=f"{reduce_op} over the spatial axes, kept as size 1")


_global("global_avg_pool", "reduce_mean", np.mean)
_global("global_max_pool", "reduce_max", np.max)

from . import nn_einsum, nn_norm, nn_resize  # noqa: E402, F401  (the rest of the nn family registers itself)
