"""Softmax and normalisation ops: composites over reduce ops, with float64 references.

Decompositions are numerically stable (softmax subtracts the max; variances are two-pass, mean of squared
deviations) and broadcast explicitly: per-channel parameters are reshaped to [1, C, 1, ...] and reduced
statistics, kept as size-1 dims, are broadcast back to x's (possibly symbolic) shape.
"""
from __future__ import annotations

import math

import numpy as np

from .common import norm_axis, require_dtype, unify_dtypes
from .elementwise import is_float
from .registry import Attr, register_op


def f64(x):
    return x.astype(np.float64)


def _normalize_axis(name):
    def normalize(types, attrs):
        return {**attrs, "axis": norm_axis(attrs["axis"], types[0].rank, name)}
    return normalize


def _float_like_x(name, min_rank=1):
    def check(ctx, types):
        unify_dtypes(ctx, types, name)
        require_dtype(ctx, types[0], is_float, name)
        if types[0].rank < min_rank:
            raise ctx.error(f"'{name}' needs x of rank {min_rank} or more, got {types[0]}")
    return check


# -- decomposition helpers ---------------------------------------------------------------------------------
def _expand(b, v, like):
    """Broadcast v (same rank as `like`, size-1 where it is smaller) to like's shape."""
    return b.broadcast_to(v, shape=like.type.shape)


def _full(b, value, like):
    return b.full(value, like.type.shape, like.type.dtype)


def _standardize(b, x, axes, eps):
    """(x - mean) / sqrt(var + eps) over `axes`."""
    mean = b.reduce_mean(x, axes=axes, keepdims=True)
    dev = b.sub(x, _expand(b, mean, x))
    var = b.reduce_mean(b.mul(dev, dev), axes=axes, keepdims=True)
    return b.mul(dev, _expand(b, b.rsqrt(b.add(var, _full(b, eps, var))), x))


def _per_channel(b, v, x):
    """A [C] parameter as x's shape: reshape to [1, C, 1, ...], then broadcast."""
    shape = (1, v.type.shape[0]) + (1,) * (x.type.rank - 2)
    return _expand(b, b.reshape(v, shape=shape), x)


def _channel_affine(b, y, scale, bias):
    return b.add(b.mul(y, _per_channel(b, scale, y)), _per_channel(b, bias, y))


def _ref_standardize(x, axes, eps):
    mean = x.mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)


def _channel_shape(x, v):
    return v.reshape(-1, *(1,) * (x.ndim - 2))


# -- softmax, log_softmax ------------------------------------------------------------------------------------
def _softmax_shape(name):
    check = _float_like_x(name, 0)

    def shape(ctx, types, a):
        check(ctx, types)
        return [types[0]]
    return shape


def _shifted(b, x, axis):
    return b.sub(x, _expand(b, b.reduce_max(x, axes=(axis,), keepdims=True), x))


def _dec_softmax(b, ops, a):
    e = b.exp(_shifted(b, ops[0], a["axis"]))
    return b.div(e, _expand(b, b.reduce_sum(e, axes=(a["axis"],), keepdims=True), e))


def _dec_log_softmax(b, ops, a):
    z = _shifted(b, ops[0], a["axis"])
    return b.sub(z, _expand(b, b.log(b.reduce_sum(b.exp(z), axes=(a["axis"],), keepdims=True)), z))


def _ref_log_softmax(xs, a):
    x = f64(xs[0])
    z = x - x.max(axis=a["axis"], keepdims=True, initial=-np.inf)  # an empty axis has no maximum
    return (z - np.log(np.exp(z).sum(axis=a["axis"], keepdims=True))).astype(xs[0].dtype)


def _ref_softmax(xs, a):
    return np.exp(_ref_log_softmax([f64(xs[0])], a)).astype(xs[0].dtype)


for _name, _ref, _dec in (("softmax", _ref_softmax, _dec_softmax), ("log_softmax", _ref_log_softmax,
                                                                     _dec_log_softmax)):
    register_op(_name, attrs={"axis": Attr("int", -1)}, shape=_softmax_shape(_name), reference=_ref,
                decompose=_dec, normalize=_normalize_axis(_name), doc="over one axis, max-shifted")


# -- layer_norm ----------------------------------------------------------------------------------------------
def _layer_norm_shape(ctx, types, a):
    _float_like_x("layer_norm")(ctx, types)
    x, axis = types[0], a["axis"]
    for t, what in zip(types[1:], ("scale", "bias")):
        if t.rank != x.rank - axis:
            raise ctx.error(f"'layer_norm' {what} {t} must have the shape of x's dims {axis}.. ({x})")
        for i, (p, q) in enumerate(zip(t.shape, x.shape[axis:])):
            ctx.require_equal(p, q, f"'layer_norm' {what} dim {i} and x dim {axis + i}")
    return [x]


def _ref_layer_norm(xs, a):
    x = f64(xs[0])
    y = _ref_standardize(x, tuple(range(a["axis"], x.ndim)), a["epsilon"]) * f64(xs[1])
    return (y + f64(xs[2]) if len(xs) == 3 else y).astype(xs[0].dtype)


def _dec_layer_norm(b, ops, a):
    x, axis = ops[0], a["axis"]
    y = _standardize(b, x, tuple(range(axis, x.type.rank)), a["epsilon"])
    lead = (1,) * axis
    params = [_expand(b, b.reshape(p, shape=lead + p.type.shape), y) for p in ops[1:]]
    y = b.mul(y, params[0])
    return b.add(y, params[1]) if len(params) == 2 else y


_EPS = {"epsilon": Attr("float", 1e-5)}
register_op("layer_norm", operands=(2, 3), attrs={"axis": Attr("int", -1), **_EPS}, shape=_layer_norm_shape,
            reference=_ref_layer_norm, decompose=_dec_layer_norm, normalize=_normalize_axis("layer_norm"),
            doc="normalise over dims axis..; scale and optional bias shaped like those dims")


# -- per-channel norms: batch_norm, instance_norm, group_norm --------------------------------------------------
def _channel_norm_shape(name, min_rank, params):
    check = _float_like_x(name, min_rank)

    def shape(ctx, types, a):
        check(ctx, types)
        x = types[0]
        for t, what in zip(types[1:], params):
            if t.rank != 1:
                raise ctx.error(f"'{name}' {what} must have shape [C] = [{x.shape[1]}], got {t}")
            ctx.require_equal(t.shape[0], x.shape[1], f"'{name}' {what} size and x's channel count")
        if "num_groups" in a:
            _check_groups(ctx, x, a["num_groups"])
        return [x]
    return shape


def _check_groups(ctx, x, groups):
    c = x.shape[1]
    if not isinstance(c, int):
        raise ctx.error(f"'group_norm' needs a static channel count, got {x}")
    if groups < 1 or c % groups:
        raise ctx.error(f"'group_norm' num_groups ({groups}) must be >= 1 and divide the channel count ({c})")


def _ref_batch_norm(xs, a):
    x, scale, bias, mean, var = (f64(v) for v in xs)
    inv = scale / np.sqrt(var + a["epsilon"])
    return (x * _channel_shape(x, inv) + _channel_shape(x, bias - mean * inv)).astype(xs[0].dtype)


def _dec_batch_norm(b, ops, a):
    x, scale, bias, mean, var = ops
    inv = b.mul(scale, b.rsqrt(b.add(var, _full(b, a["epsilon"], var))))
    return _channel_affine(b, x, inv, b.sub(bias, b.mul(mean, inv)))


def _ref_instance_norm(xs, a):
    x, scale, bias = (f64(v) for v in xs)
    y = _ref_standardize(x, tuple(range(2, x.ndim)), a["epsilon"])
    return (y * _channel_shape(x, scale) + _channel_shape(x, bias)).astype(xs[0].dtype)


def _dec_instance_norm(b, ops, a):
    x, scale, bias = ops
    return _channel_affine(b, _standardize(b, x, tuple(range(2, x.type.rank)), a["epsilon"]), scale, bias)


def _ref_group_norm(xs, a):
    x, scale, bias = (f64(v) for v in xs)
    grouped = x.reshape(x.shape[0], a["num_groups"], -1)
    y = _ref_standardize(grouped, (2,), a["epsilon"]).reshape(x.shape)
    return (y * _channel_shape(x, scale) + _channel_shape(x, bias)).astype(xs[0].dtype)


def _dec_group_norm(b, ops, a):
    x, scale, bias = ops
    n, c, *spatial = x.type.shape
    g = a["num_groups"]
    grouped = b.reshape(x, shape=(n, g, c // g * math.prod(spatial)))
    y = b.reshape(_standardize(b, grouped, (2,), a["epsilon"]), shape=x.type.shape)
    return _channel_affine(b, y, scale, bias)


register_op("batch_norm", operands=5, attrs=_EPS, reference=_ref_batch_norm, decompose=_dec_batch_norm,
            shape=_channel_norm_shape("batch_norm", 2, ("scale", "bias", "mean", "var")),
            doc="inference: (x - mean) / sqrt(var + eps) * scale + bias per channel")
register_op("instance_norm", operands=3, attrs=_EPS, reference=_ref_instance_norm, decompose=_dec_instance_norm,
            shape=_channel_norm_shape("instance_norm", 3, ("scale", "bias")),
            doc="normalise each (n, c) over the spatial dims, then scale and shift per channel")
register_op("group_norm", operands=3, attrs={"num_groups": Attr("int"), **_EPS}, reference=_ref_group_norm,
            decompose=_dec_group_norm, shape=_channel_norm_shape("group_norm", 3, ("scale", "bias")),
            doc="normalise over each group of C/num_groups channels and the spatial dims; scale, bias [C]")
