"""Normalisation and softmax: BatchNormalization (inference, and training mode's batch statistics),
InstanceNormalization, LayerNormalization (with its Mean and InvStdDev outputs), GroupNormalization
(per-group parameters before opset 21), Softmax/LogSoftmax (2-D coercion before opset 13)."""
from __future__ import annotations

from .convert_reduce import coerce_2d
from .registry import converter


def _like_x(ctx, i, x):
    return ctx.cast(ctx.x(i), x.type.dtype)


@converter("BatchNormalization")
def batch_norm(ctx):
    x = ctx.x(0)
    scale, bias, mean, var = (_like_x(ctx, i, x) for i in range(1, 5))
    eps = ctx.attr("epsilon", 1e-5)
    if ctx.opset < 9 and not ctx.attr("spatial", 1):
        raise ctx.unsupported("per-activation (spatial=0) batch normalisation is not supported")
    if not (ctx.opset >= 14 and ctx.attr("training_mode", 0)):
        return [ctx.b.batch_norm(x, scale, bias, mean, var, epsilon=eps)]
    axes = (0,) + tuple(range(2, x.type.rank))
    batch_mean = ctx.b.reduce_mean(x, axes=axes, keepdims=False)
    centred = ctx.b.sub(x, ctx.expand(ctx.b.reduce_mean(x, axes=axes, keepdims=True), x.type.shape))
    batch_var = ctx.b.reduce_mean(ctx.b.mul(centred, centred), axes=axes, keepdims=False)
    y = ctx.b.batch_norm(x, scale, bias, batch_mean, batch_var, epsilon=eps)
    momentum = ctx.attr("momentum", 0.9)

    def running(old, new):
        kept = ctx.b.mul(old, ctx.scalar_like(momentum, old))
        return ctx.b.add(kept, ctx.b.mul(new, ctx.scalar_like(1 - momentum, new)))
    return [y, running(mean, batch_mean), running(var, batch_var)]


@converter("InstanceNormalization")
def instance_norm(ctx):
    x = ctx.x(0)
    return [ctx.b.instance_norm(x, _like_x(ctx, 1, x), _like_x(ctx, 2, x), epsilon=ctx.attr("epsilon", 1e-5))]


@converter("LayerNormalization")
def layer_norm(ctx):
    x = ctx.x(0)
    axis = ctx.attr("axis", -1)
    axis = axis + x.type.rank if axis < 0 else axis
    tail = x.type.shape[axis:]
    params = [ctx.expand(_like_x(ctx, i, x), tail) for i in (1, 2) if ctx.has(i)]
    eps = ctx.attr("epsilon", 1e-5)
    y = ctx.b.layer_norm(x, *params, axis=axis, epsilon=eps)
    wants_stats = any(ctx.node.output[1:])
    if not wants_stats:
        return [y]
    axes = tuple(range(axis, x.type.rank))
    mean = ctx.b.reduce_mean(x, axes=axes, keepdims=True)
    dev = ctx.b.sub(x, ctx.expand(mean, x.type.shape))
    var = ctx.b.reduce_mean(ctx.b.mul(dev, dev), axes=axes, keepdims=True)
    return [y, mean, ctx.b.rsqrt(ctx.b.add(var, ctx.scalar_like(eps, var)))]


@converter("GroupNormalization")
def group_norm(ctx):
    x, groups = ctx.x(0), ctx.attr("num_groups")
    scale, bias = _like_x(ctx, 1, x), _like_x(ctx, 2, x)
    c = x.type.shape[1]
    if ctx.opset < 21 and scale.type.shape[0] == groups and c != groups:  # one value per group: repeat per channel
        scale, bias = (ctx.b.reshape(ctx.expand(ctx.b.reshape(v, shape=(groups, 1)), (groups, c // groups)),
                                     shape=(c,)) for v in (scale, bias))
    return [ctx.b.group_norm(x, scale, bias, num_groups=groups, epsilon=ctx.attr("epsilon", 1e-5))]


def _softmax(ir_op):
    def convert(ctx):
        x = ctx.x(0)
        if ctx.opset >= 13:
            return [ctx.b.emit(ir_op, x, axis=ctx.attr("axis", -1))]
        return [ctx.b.reshape(ctx.b.emit(ir_op, coerce_2d(ctx, x), axis=1), shape=x.type.shape)]
    return convert


converter("Softmax")(_softmax("softmax"))
converter("LogSoftmax")(_softmax("log_softmax"))
