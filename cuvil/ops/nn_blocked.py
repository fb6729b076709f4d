"""Blocked-layout convolution: `conv_nchwc`, the op the layout pass (`cuvil.passes.layout`) rewrites f32
2-D convolutions into (and `dwconv_nchwc`, `spatial_sum_nchwc`: the depthwise conv and the sum over H and W).

x is [N, C/cb, H, W, cb] (channel blocks outermost, one block of cb channels innermost), the weight is
pre-packed as [O/ob, C/cb, kh, kw, cb, ob] and the bias is [O/ob, ob]; the result is [N, O/ob, OH, OW, ob].
Channel counts are padded up to whole blocks (padded weights and bias are zero). An optional fourth operand
(a residual of the result's shape) is added before the activation, so a residual block's add and relu
become the convolution's epilogue; the activation is one of `EPILOGUES` (relu6: clip to [0, 6]). With
`channels` > 0 the result is the plain [N, channels, OH, OW] instead (the first `channels` output channels), so
a chain that ends in a convolution needs no conversion back.
`algorithm` is how a backend computes it, not what: "winograd" (3x3 kernels, stride 1, dilation 1, full input
blocks) asks for F(4x4, 3x3), four times fewer multiply-adds at about two decimal digits of accuracy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..ir.dtypes import DType
from .common import require_dtype
from .nn import _ref_conv, _spatial_out
from .registry import Attr, get_op, register_op

if TYPE_CHECKING:
    from ..ir.builder import Builder
    from ..ir.core import Value


def _conv_nchwc_shape(ctx, types, a):
    x, w, bias = types[:3]
    for t in types:
        require_dtype(ctx, t, lambda d: d is DType.f32, "conv_nchwc")
    if x.rank != 5 or w.rank != 6 or bias.rank != 2:
        raise ctx.error(f"'conv_nchwc' needs x [N, C/cb, H, W, cb], w [O/ob, C/cb, kh, kw, cb, ob] and bias "
                        f"[O/ob, ob], got {x}, {w} and {bias}")
    ctx.require_equal(x.shape[1], w.shape[1], f"'conv_nchwc' channel blocks of x {x} and weight {w}")
    ctx.require_equal(x.shape[4], w.shape[4], f"'conv_nchwc' channel block size of x {x} and weight {w}")
    ctx.require_equal(bias.shape[0], w.shape[0], f"'conv_nchwc' output blocks of bias {bias} and weight {w}")
    ctx.require_equal(bias.shape[1], w.shape[5], f"'conv_nchwc' output block size of bias {bias} and weight {w}")
    if a["algorithm"] == "winograd" and not (w.shape[2:4] == (3, 3) and a["strides"] == (1, 1)
                                             and a["dilations"] == (1, 1) and w.shape[4] == w.shape[5]):
        raise ctx.error(f"'conv_nchwc' algorithm 'winograd' needs a 3x3 kernel, stride 1, dilation 1 and full "
                        f"input blocks, got weight {w}, strides {list(a['strides'])}, dilations "
                        f"{list(a['dilations'])}")
    plain = x.with_shape((x.shape[0], x.shape[1] * x.shape[4], x.shape[2], x.shape[3]))
    oh, ow = _spatial_out(ctx, "conv_nchwc", plain, w.shape[2:4], a)
    out = x.with_shape((x.shape[0], w.shape[0], oh, ow, w.shape[5]))
    if a["channels"]:
        if not 0 < a["channels"] <= w.shape[0] * w.shape[5] or len(types) == 4:
            raise ctx.error(f"'conv_nchwc' plain output of {a['channels']} channels needs 1 to "
                            f"{w.shape[0] * w.shape[5]} channels and no residual")
        return [x.with_shape((x.shape[0], a["channels"], oh, ow))]
    if len(types) == 4:
        if types[3].rank != 5:
            raise ctx.error(f"'conv_nchwc' residual {types[3]} must have the result's shape {out}")
        for i, (p, q) in enumerate(zip(types[3].shape, out.shape)):
            ctx.require_equal(p, q, f"'conv_nchwc' residual {types[3]} dim {i} against the result {out}")
    return [out]


def unblock(x: np.ndarray) -> np.ndarray:
    """[N, C/cb, H, W, cb] -> [N, C, H, W]."""
    n, cb, h, w, b = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w)


def block(x: np.ndarray, size: int) -> np.ndarray:
    """[N, C, H, W] -> [N, C/size, H, W, size], C padded with zeros to a multiple of `size`."""
    n, c, h, w = x.shape
    x = np.pad(x, [(0, 0), (0, -c % size), (0, 0), (0, 0)])
    return x.reshape(n, x.shape[1] // size, size, h, w).transpose(0, 1, 3, 4, 2)


def pack_weight(w: np.ndarray, cb: int, ob: int) -> np.ndarray:
    """[O, C, kh, kw] -> [O/ob, C/cb, kh, kw, cb, ob], both channel counts zero-padded to whole blocks."""
    o, c, kh, kw = w.shape
    w = np.pad(w, [(0, -o % ob), (0, -c % cb), (0, 0), (0, 0)])
    return np.ascontiguousarray(w.reshape(-1, ob, w.shape[1] // cb, cb, kh, kw).transpose(0, 2, 4, 5, 3, 1))


# activation -> the op (and attributes) it stands for
EPILOGUES = {"relu": ("relu", {}), "relu6": ("clip", {"min": 0.0, "max": 6.0}), "sigmoid": ("sigmoid", {}),
             "tanh": ("tanh", {}), "silu": ("silu", {}), "hardswish": ("hardswish", {})}


def _ref_conv_nchwc(xs, a):
    x, w, bias = (v.astype(np.float64) for v in xs[:3])
    plain_w = w.transpose(0, 5, 1, 4, 2, 3).reshape(w.shape[0] * w.shape[5], w.shape[1] * w.shape[4], *w.shape[2:4])
    y = _ref_conv([unblock(x), plain_w, bias.reshape(-1)], {**a, "groups": 1})
    y = block(y, w.shape[5])
    if len(xs) == 4:
        y = y + xs[3].astype(np.float64)
    if a["activation"] != "none":
        name, attrs = EPILOGUES[a["activation"]]
        y = get_op(name).reference([y], get_op(name).complete_attrs(attrs))
    return (unblock(y)[:, :a["channels"]] if a["channels"] else y).astype(np.float32)


def to_blocked(b: Builder, v: Value, size: int) -> Value:
    """[N, C, H, W] -> [N, C/size, H, W, size]: channels padded with zeros to whole blocks."""
    n, c, h, w = v.type.shape
    padded = c + -c % size
    if padded != c:
        v = b.pad(v, pads=(0, 0, 0, 0, 0, padded - c, 0, 0))
    return b.transpose(b.reshape(v, shape=(n, padded // size, size, h, w)), perm=(0, 1, 3, 4, 2))


def from_blocked(b: Builder, v: Value, channels: int) -> Value:
    """[N, C/size, H, W, size] -> [N, C, H, W]: the padding channels dropped."""
    n, blocks, h, w, size = v.type.shape
    plain = b.reshape(b.transpose(v, perm=(0, 1, 4, 2, 3)), shape=(n, blocks * size, h, w))
    return plain if blocks * size == channels else b.slice(plain, starts=(0,), ends=(channels,), axes=(1,))


def _decompose(b, xs, a):
    """Unblock, the plain conv, block again: for backends (or block sizes) without a blocked kernel."""
    x, w, bias = xs[:3]
    ob, cb, kh, kw, c, size = w.type.shape
    plain_w = b.reshape(b.transpose(w, perm=(0, 5, 1, 4, 2, 3)), shape=(ob * size, cb * c, kh, kw))
    y = b.conv(from_blocked(b, x, cb * c), plain_w, b.reshape(bias, shape=(ob * size,)), strides=a["strides"],
               pads=a["pads"], dilations=a["dilations"])
    y = to_blocked(b, y, size)
    if len(xs) == 4:
        y = b.add(y, xs[3])
    if a["activation"] != "none":
        name, attrs = EPILOGUES[a["activation"]]
        y = b.emit(name, y, **attrs)
    return from_blocked(b, y, a["channels"]) if a["channels"] else y


def _normalize(types, attrs):
    out = dict(attrs)
    for key, n, fill in (("strides", 2, 1), ("dilations", 2, 1), ("pads", 4, 0)):
        value = tuple(attrs[key]) or (fill,) * n
        if len(value) != n or min(value) < fill:
            raise ValueError(f"'conv_nchwc' {key} needs {n} entries >= {fill}, got {list(attrs[key])}")
        out[key] = value
    return out


register_op("conv_nchwc", operands=(3, 4), shape=_conv_nchwc_shape, reference=_ref_conv_nchwc, normalize=_normalize,
            decompose=_decompose,
            attrs={"strides": Attr("ints", ()), "dilations": Attr("ints", ()), "pads": Attr("ints", ()),
                   "activation": Attr("str", "none", ("none", *EPILOGUES)), "channels": Attr("int", 0),
                   "algorithm": Attr("str", "direct", ("direct", "winograd"))},
            doc="2-D conv in blocked layout: x [N,C/cb,H,W,cb], w [O/ob,C/cb,kh,kw,cb,ob], bias [O/ob,ob], "
                "optional residual added before the activation; channels > 0: plain [N,channels,OH,OW] result; "
                "algorithm: direct or winograd (3x3, stride 1)")


# -- dwconv_nchwc: the depthwise conv (one channel per group) in the same layout -------------------------------------
def _dwconv_nchwc_shape(ctx, types, a):
    x, w, bias = types
    for t in types:
        require_dtype(ctx, t, lambda d: d is DType.f32, "dwconv_nchwc")
    if x.rank != 5 or w.rank != 4 or bias.rank != 2:
        raise ctx.error(f"'dwconv_nchwc' needs x [N, C/cb, H, W, cb], w [C/cb, kh, kw, cb] and bias [C/cb, cb], "
                        f"got {x}, {w} and {bias}")
    for i, (p, q) in enumerate(((x.shape[1], w.shape[0]), (x.shape[4], w.shape[3]))):
        ctx.require_equal(p, q, f"'dwconv_nchwc' {('channel blocks', 'block size')[i]} of x {x} and weight {w}")
        ctx.require_equal(bias.shape[i], w.shape[(0, 3)[i]],
                          f"'dwconv_nchwc' {('channel blocks', 'block size')[i]} of bias {bias} and weight {w}")
    plain = x.with_shape((x.shape[0], x.shape[1] * x.shape[4], x.shape[2], x.shape[3]))
    oh, ow = _spatial_out(ctx, "dwconv_nchwc", plain, w.shape[1:3], a)
    return [x.with_shape((x.shape[0], x.shape[1], oh, ow, x.shape[4]))]


def pack_depthwise(w: np.ndarray, size: int) -> np.ndarray:
    """[C, 1, kh, kw] -> [C/size, kh, kw, size], C zero-padded to whole blocks."""
    c, _, kh, kw = w.shape
    w = np.pad(w[:, 0], [(0, -c % size), (0, 0), (0, 0)])
    return np.ascontiguousarray(w.reshape(-1, size, kh, kw).transpose(0, 2, 3, 1))


def _plain_depthwise(w):
    """[C/cb, kh, kw, cb] -> [C, 1, kh, kw]."""
    blocks, kh, kw, size = w.shape
    return w.transpose(0, 3, 1, 2).reshape(blocks * size, 1, kh, kw)


def _ref_dwconv_nchwc(xs, a):
    x, w, bias = (v.astype(np.float64) for v in xs)
    y = block(_ref_conv([unblock(x), _plain_depthwise(w), bias.reshape(-1)], {**a, "groups": x.shape[1] * x.shape[4]}),
              x.shape[4])
    if a["activation"] != "none":
        name, attrs = EPILOGUES[a["activation"]]
        y = get_op(name).reference([y], get_op(name).complete_attrs(attrs))
    return y.astype(np.float32)


def _decompose_dw(b, xs, a):
    """Unblock, the plain depthwise conv, block again."""
    x, w, bias = xs
    blocks, kh, kw, size = w.type.shape
    plain_w = b.reshape(b.transpose(w, perm=(0, 3, 1, 2)), shape=(blocks * size, 1, kh, kw))
    y = b.conv(from_blocked(b, x, blocks * size), plain_w, b.reshape(bias, shape=(blocks * size,)),
               strides=a["strides"], pads=a["pads"], dilations=a["dilations"], groups=blocks * size)
    y = to_blocked(b, y, size)
    if a["activation"] != "none":
        name, attrs = EPILOGUES[a["activation"]]
        y = b.emit(name, y, **attrs)
    return y


register_op("dwconv_nchwc", operands=3, shape=_dwconv_nchwc_shape, reference=_ref_dwconv_nchwc,
            normalize=_normalize, decompose=_decompose_dw,
            attrs={"strides": Attr("ints", ()), "dilations": Attr("ints", ()), "pads": Attr("ints", ()),
                   "activation": Attr("str", "none", ("none", *EPILOGUES))},
            doc="depthwise 2-D conv in blocked layout: x [N,C/cb,H,W,cb], w [C/cb,kh,kw,cb], bias [C/cb,cb]")


# -- spatial_sum_nchwc: the sum over H and W in the same layout (a global pool, squeeze-excite's mean) --------------
def _spatial_sum_nchwc_shape(ctx, types, a):
    (x,) = types
    require_dtype(ctx, x, lambda d: d is DType.f32, "spatial_sum_nchwc")
    if x.rank != 5:
        raise ctx.error(f"'spatial_sum_nchwc' needs x [N, C/cb, H, W, cb], got {x}")
    return [x.with_shape((x.shape[0], x.shape[1], 1, 1, x.shape[4]))]


def _ref_spatial_sum_nchwc(xs, a):
    return np.sum(xs[0].astype(np.float64), axis=(2, 3), keepdims=True).astype(np.float32)


register_op("spatial_sum_nchwc", operands=1, shape=_spatial_sum_nchwc_shape, reference=_ref_spatial_sum_nchwc,
            decompose=lambda b, xs, a: b.reduce_sum(xs[0], axes=(2, 3), keepdims=True),
            doc="sum over H and W in blocked layout: x [N,C/cb,H,W,cb] -> [N,C/cb,1,1,cb]")
