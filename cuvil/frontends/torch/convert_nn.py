"""ATen neural-network ops: convolutions, linear layers and matmuls, normalisation (inference), softmax,
attention (decomposed into matmul and softmax), pooling (adaptive pooling as a window, or axis by axis),
upsampling, einsum and nn.Bilinear's _trilinear.
"""
from __future__ import annotations

import itertools
import math

from ...ir.dtypes import DType
from ...ops.common import broadcast_shapes
from .context import aten


# -- convolution -----------------------------------------------------------------------------------------
@aten("convolution", "_convolution")
def convolution(cx, x, w, bias, stride, padding, dilation, transposed, output_padding, groups, *rest):
    s = x.type.rank - 2
    operands = [x, w] + ([bias] if bias is not None else [])
    attrs = dict(strides=_per_dim(stride, s), dilations=_per_dim(dilation, s), pads=_per_dim(padding, s) * 2,
                 groups=groups)
    if transposed:
        return cx.b.conv_transpose(*operands, output_padding=_per_dim(output_padding, s), **attrs)
    return cx.b.conv(*operands, **attrs)


def _per_dim(values, s: int) -> list:
    values = list(values)
    return values * s if len(values) == 1 else values


# -- matmuls ---------------------------------------------------------------------------------------------
@aten("linear")
def linear(cx, x, w, bias=None):
    y = matmul(cx, x, cx.b.transpose(w))
    return y if bias is None else cx.b.add(y, cx.broadcast(bias, y.type.shape))


@aten("mm", "bmm")
def mm(cx, a, b):
    return cx.b.matmul(a, b)


@aten("matmul")
def matmul(cx, a, b):
    """torch.matmul: vectors gain and then lose a unit axis; batch dims broadcast when both sides have them."""
    va, vb = a.type.rank == 1, b.type.rank == 1
    a = cx.b.reshape(a, shape=(1, a.type.shape[0])) if va else a
    b = cx.b.reshape(b, shape=(b.type.shape[0], 1)) if vb else b
    if a.type.rank > 2 and b.type.rank > 2 and a.type.shape[:-2] != b.type.shape[:-2]:
        batch = broadcast_shapes(a.type.shape[:-2], b.type.shape[:-2])
        a, b = (cx.broadcast(t, batch + t.type.shape[-2:]) for t in (a, b))
    elif a.type.rank == 2 and b.type.rank > 2:  # the IR shares a rank-2 operand on either side
        a = cx.broadcast(a, b.type.shape[:-2] + a.type.shape)
    y = cx.b.matmul(a, b)
    if va or vb:
        y = cx.b.reshape(y, shape=cx.out_shape())
    return y


@aten("addmv")
def addmv(cx, c, a, v, beta=1, alpha=1):
    """beta * c + alpha * (a @ v), the vector as a one-column matrix."""
    y = cx.b.reshape(cx.b.matmul(a, cx.b.reshape(v, shape=(v.type.shape[0], 1))), shape=(a.type.shape[0],))
    return addmm(cx, c, y, None, beta, alpha)


@aten("addmm", "baddbmm", "addbmm")
def addmm(cx, c, a, b, beta=1, alpha=1):
    y = a if b is None else cx.b.matmul(a, b)
    if cx.op_name == "addbmm":
        y = cx.b.reduce_sum(y, axes=[0], keepdims=False)
    y = y if alpha == 1 else cx.b.mul(y, cx.tensor(alpha, y.type.dtype, y.type.shape))
    if beta == 0:
        return y
    c = cx.tensor(c, y.type.dtype, y.type.shape)
    return cx.b.add(y, c if beta == 1 else cx.b.mul(c, cx.tensor(beta, y.type.dtype, y.type.shape)))



@aten("_trilinear")
def trilinear(cx, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """nn.Bilinear's kernel: each input with unit axes inserted at its `expand` positions, the three multiplied
    (broadcast) and summed over `sumdim`."""
    rank = i1.type.rank + len(expand1)
    parts = [_unsqueezed(cx, v, e, rank) for v, e in ((i1, expand1), (i2, expand2), (i3, expand3))]
    shape = broadcast_shapes(*(v.type.shape for v in parts))
    product = cx.b.mul(cx.b.mul(*(cx.broadcast(v, shape) for v in parts[:2])), cx.broadcast(parts[2], shape))
    return cx.b.reduce_sum(product, axes=list(sumdim), keepdims=False) if sumdim else product


def _unsqueezed(cx, v, expand, rank: int):
    dims, it = [], iter(v.type.shape)
    for k in range(rank):
        dims.append(1 if k in set(expand) else next(it))
    return cx.b.reshape(v, shape=tuple(dims))

@aten("einsum")
def einsum(cx, equation, tensors, path=None):
    return cx.b.einsum(*tensors, equation=equation)


# -- normalisation ---------------------------------------------------------------------------------------
def _param(cx, v, value, size, dtype):
    return v if v is not None else cx.b.full(value, (size,), dtype)


@aten("_native_batch_norm_legit_no_training")
def batch_norm_inference(cx, x, w, b, mean, var, momentum, eps):
    c, dtype = x.type.shape[1], x.type.dtype
    y = cx.b.batch_norm(x, _param(cx, w, 1, c, dtype), _param(cx, b, 0, c, dtype), mean, var, epsilon=float(eps))
    return (y, *_no_saved_statistics(cx, x))


def _no_saved_statistics(cx, x):
    """What PyTorch saves outside training: two empty tensors."""
    return tuple(cx.b.full(0, (0,), x.type.dtype) for _ in range(2))


@aten("batch_norm", "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional")
def batch_norm(cx, x, w, b, *args):
    """With running statistics and training off, the IR's batch_norm; otherwise (instance norm, or a functional
    batch norm in training mode) the statistics of this batch, with no state updated."""
    if cx.node.target._overloadname == "no_stats":
        mean = var = None
        training, eps = args[0], args[2]
    else:
        mean, var, training, eps = args[0], args[1], args[2], args[4]
    if training or mean is None:
        y, batch_mean, batch_var = _batch_statistics_norm(cx, x, w, b, float(eps))
    else:
        y = batch_norm_inference(cx, x, w, b, mean, var, 0.0, eps)[0]
    if cx.op_name == "batch_norm":
        return y
    # the batch's mean and 1 / std, [C], in training mode (PyTorch's are empty otherwise)
    saved = _saved_statistics(cx, x, batch_mean, batch_var, eps) if training or mean is None \
        else _no_saved_statistics(cx, x)
    if cx.op_name.endswith("_functional"):  # running statistics: their updates are outputs too
        updates = _running_updates(cx, x, mean, var, batch_mean, batch_var, float(args[3])) if training \
            else (mean, var)
        return (y, *saved, *updates)
    return (y, *saved)


@aten("_batch_norm_with_update_functional")
def batch_norm_with_update(cx, x, w, b, mean, var, momentum, eps):
    """Batch norm in training mode with its running-statistic updates as outputs (and PyTorch's empty reserve)."""
    y, batch_mean, batch_var = _batch_statistics_norm(cx, x, w, b, float(eps))
    updates = _running_updates(cx, x, mean, var, batch_mean, batch_var, float(momentum))
    reserve = cx.b.full(0, (0,), DType.u8)
    return (y, *_saved_statistics(cx, x, batch_mean, batch_var, eps), reserve, *updates)


def _saved_statistics(cx, x, batch_mean, batch_var, eps):
    """The batch's mean and 1 / sqrt(var + eps), [C], as PyTorch saves them for the backward pass."""
    c = x.type.shape[1]
    inv = cx.b.rsqrt(cx.b.add(batch_var, cx.tensor(float(eps), x.type.dtype, batch_var.type.shape)))
    return cx.b.reshape(batch_mean, shape=(c,)), cx.b.reshape(inv, shape=(c,))


def _running_updates(cx, x, mean, var, batch_mean, batch_var, momentum):
    """(1 - momentum) * running + momentum * batch, with the batch variance unbiased, as PyTorch updates them."""
    count = x.type.numel // x.type.shape[1]
    if not isinstance(count, int):
        raise cx.error("batch norm in training mode with symbolic sizes is not supported")
    unbiased = cx.b.mul(batch_var, cx.tensor(count / max(count - 1, 1), x.type.dtype, batch_var.type.shape))
    out = []
    for running, batch in ((mean, batch_mean), (var, unbiased)):
        t = running.type
        keep = cx.b.mul(running, cx.tensor(1 - momentum, t.dtype, t.shape))
        out.append(cx.b.add(keep, cx.b.mul(cx.b.reshape(batch, shape=t.shape), cx.tensor(momentum, t.dtype, t.shape))))
    return out


def _batch_statistics_norm(cx, x, w, b, eps):
    """The batch-normalised x and the batch's mean and (biased) variance, kept [1, C, 1, ...]."""
    axes = [0] + list(range(2, x.type.rank))
    batch_mean = cx.b.reduce_mean(x, axes=axes, keepdims=True)
    dev = cx.b.sub(x, cx.broadcast(batch_mean, x.type.shape))
    var = cx.b.reduce_mean(cx.b.mul(dev, dev), axes=axes, keepdims=True)
    inv = cx.b.rsqrt(cx.b.add(var, cx.tensor(eps, x.type.dtype, var.type.shape)))
    y = cx.b.mul(dev, cx.broadcast(inv, x.type.shape))
    shape = (1, x.type.shape[1]) + (1,) * (x.type.rank - 2)
    for param, op in ((w, "mul"), (b, "add")):
        if param is not None:
            y = cx.b.emit(op, y, cx.broadcast(cx.b.reshape(param, shape=shape), x.type.shape))
    return y, batch_mean, var


@aten("layer_norm", "native_layer_norm")
def layer_norm(cx, x, shape, w=None, b=None, eps=1e-5, *rest):
    axis = x.type.rank - len(shape)
    params = x.type.shape[axis:]
    w = w if w is not None else cx.b.full(1, params, x.type.dtype)
    y = cx.b.layer_norm(x, w, *([b] if b is not None else []), axis=axis, epsilon=float(eps))
    if cx.op_name == "layer_norm":
        return y
    return (y, *_mean_rstd(cx, x, list(range(axis, x.type.rank)), float(eps)))  # unused ones are dead code


@aten("group_norm", "native_group_norm")
def group_norm(cx, x, *args):
    if cx.op_name == "group_norm":
        groups, w, b, eps = args[0], args[1], args[2], args[3]
    else:
        w, b, groups, eps = args[0], args[1], args[5], args[6]
    c, dtype = x.type.shape[1], x.type.dtype
    y = cx.b.group_norm(x, _param(cx, w, 1, c, dtype), _param(cx, b, 0, c, dtype), num_groups=groups,
                        epsilon=float(eps))
    if cx.op_name == "group_norm":
        return y
    n = x.type.shape[0]
    grouped = cx.b.reshape(x, shape=(n, groups, x.type.numel // (n * groups)))  # mean and rstd are [N, groups]
    return (y, *[cx.b.reshape(s, shape=(n, groups)) for s in _mean_rstd(cx, grouped, [2], float(eps))])


def _mean_rstd(cx, x, axes, eps):
    """The mean and 1 / sqrt(biased variance + eps) over `axes`, kept as size-1 axes: native norms' extra outputs."""
    mean = cx.b.reduce_mean(x, axes=axes, keepdims=True)
    dev = cx.b.sub(x, cx.broadcast(mean, x.type.shape))
    var = cx.b.reduce_mean(cx.b.mul(dev, dev), axes=axes, keepdims=True)
    return mean, cx.b.rsqrt(cx.b.add(var, cx.tensor(eps, x.type.dtype, var.type.shape)))


@aten("_softmax", "softmax", "_log_softmax", "log_softmax")
def softmax(cx, x, dim, *rest):
    x = cx.tensor(x, cx.out_dtype())
    return cx.b.emit("log_softmax" if "log" in cx.op_name else "softmax", x, axis=dim)


@aten("_safe_softmax")
def safe_softmax(cx, x, dim, dtype=None):
    return _safe_softmax(cx, cx.tensor(x, cx.out_dtype()), dim)


def _safe_softmax(cx, x, axis):
    """Softmax whose fully masked rows (all -inf) give zeros instead of NaN, as PyTorch's attention does."""
    t = x.type
    top = cx.b.reduce_max(x, axes=[axis], keepdims=True)
    empty = cx.b.eq(top, cx.tensor(-math.inf, t.dtype, top.type.shape))
    return cx.b.where(cx.broadcast(empty, t.shape), cx.tensor(0, t.dtype, t.shape), cx.b.softmax(x, axis=axis))


# -- attention -------------------------------------------------------------------------------------------
@aten("scaled_dot_product_attention")
def sdpa(cx, q, k, v, mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """softmax(q @ k^T * scale + mask) @ v; a bool mask (or is_causal) sets the excluded scores to -inf, and
    rows with every score excluded give zeros (PyTorch's safe softmax)."""
    if dropout_p:
        raise cx.error(f"dropout_p={dropout_p} drops random attention weights even in eval mode; Cuvil compiles "
                       f"deterministic inference: pass dropout_p=0.0 (e.g. `dropout_p=self.p if self.training else 0`)")
    t = q.type
    if enable_gqa and k.type.shape[-3] != t.shape[-3]:
        k, v = (_repeat_heads(cx, z, t.shape[-3]) for z in (k, v))
    scale = 1 / math.sqrt(t.shape[-1]) if scale is None else scale
    kt = cx.b.transpose(k, perm=list(range(k.type.rank - 2)) + [k.type.rank - 1, k.type.rank - 2])
    scores = matmul(cx, q, kt)  # batch dims broadcast: one key/value head shared by all (multi-query attention)
    st = scores.type
    scores = cx.b.mul(scores, cx.tensor(scale, st.dtype, st.shape))
    if is_causal:
        mask = _causal(cx, st.shape)
    if mask is not None:
        mask = cx.broadcast(mask, st.shape)
        if mask.type.dtype is DType.bool:
            scores = cx.b.where(mask, scores, cx.tensor(-math.inf, st.dtype, st.shape))
        else:
            scores = cx.b.add(scores, cx.tensor(mask, st.dtype))
        return matmul(cx, _safe_softmax(cx, scores, st.rank - 1), v)
    return matmul(cx, cx.b.softmax(scores, axis=-1), v)


def _causal(cx, shape):
    rows = cx.b.iota(shape=shape[-2:], axis=0)
    cols = cx.b.iota(shape=shape[-2:], axis=1)
    return cx.b.le(cols, rows)


def _repeat_heads(cx, z, heads):
    """[..., Hk, S, E] -> [..., H, S, E], each key/value head shared by H/Hk query heads."""
    *lead, hk, s, e = z.type.shape
    spread = cx.b.reshape(z, shape=(*lead, hk, 1, s, e))
    wide = cx.b.broadcast_to(spread, shape=(*lead, hk, heads // hk, s, e))
    return cx.b.reshape(wide, shape=(*lead, heads, s, e))


# -- pooling ---------------------------------------------------------------------------------------------
@aten("max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices", "max_pool2d_with_indices",
      "max_pool3d_with_indices")
def max_pool(cx, x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    s = x.type.rank - 2
    window = dict(kernel=_per_dim(kernel, s), strides=_per_dim(stride or kernel, s), pads=_per_dim(padding, s),
                  dilations=_per_dim(dilation, s))
    y = cx.b.max_pool(x, **{**window, "pads": window["pads"] * 2}, ceil_mode=bool(ceil_mode))
    return (y, _pool_indices(cx, x, y, **window)) if cx.op_name.endswith("with_indices") else y


def _pool_indices(cx, x, y, kernel, strides, pads, dilations):
    """Where each window's maximum is, as a flat index over the input's spatial axes (i64), as PyTorch gives it: the
    first maximum in scan order, the last NaN of a window that has one. One comparison per kernel offset. None for
    symbolic spatial sizes (getitem then says the output is not computed); unused, the ops are dropped as dead code."""
    s, lead = len(kernel), x.type.rank - len(kernel)
    spatial, out = x.type.shape[lead:], y.type.shape[lead:]
    if not all(isinstance(d, int) for d in (*spatial, *out)):
        return None
    spans = [(o - 1) * st + 1 for o, st in zip(out, strides)]
    right = [max(0, (k - 1) * d + span - p - n) for k, d, span, p, n in zip(kernel, dilations, spans, pads, spatial)]
    padded = cx.b.pad(x, pads=[0] * lead + list(pads) + [0] * lead + right, value=-math.inf)
    starts = [cx.b.iota(shape=y.type.shape, axis=lead + i, dtype=DType.i64) for i in range(s)]
    starts = [cx.b.mul(c, cx.tensor(st, DType.i64, y.type.shape)) for c, st in zip(starts, strides)]
    best, nan_at = cx.tensor(0, DType.i64, y.type.shape), cx.tensor(0, DType.i64, y.type.shape)
    hits = []
    for offset in itertools.product(*(range(k) for k in kernel)):
        at = [o * d for o, d in zip(offset, dilations)]
        win = cx.b.slice(padded, starts=at, ends=[a + span for a, span in zip(at, spans)],
                         axes=list(range(lead, lead + s)), steps=list(strides))
        coords = [cx.b.add(c, cx.tensor(a - p, DType.i64, y.type.shape)) for c, a, p in zip(starts, at, pads)]
        flat, inside = coords[0], _within(cx, coords[0], spatial[0])
        for c, n in zip(coords[1:], spatial[1:]):
            flat = cx.b.add(cx.b.mul(flat, cx.tensor(n, DType.i64, y.type.shape)), c)
            inside = cx.b.emit("and", inside, _within(cx, c, n))
        hits.append((cx.b.emit("and", inside, cx.b.eq(win, y)), flat))
        nan_at = cx.b.where(cx.b.isnan(win), flat, nan_at)
    for hit, flat in reversed(hits):
        best = cx.b.where(hit, flat, best)
    return cx.b.where(cx.b.isnan(y), nan_at, best)


def _within(cx, c, n: int):
    """0 <= c < n, elementwise: a window position inside the input, not in its padding."""
    zero, size = cx.tensor(0, DType.i64, c.type.shape), cx.tensor(n, DType.i64, c.type.shape)
    return cx.b.emit("and", cx.b.ge(c, zero), cx.b.lt(c, size))


@aten("avg_pool1d", "avg_pool2d", "avg_pool3d")
def avg_pool(cx, x, kernel, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True, divisor=None):
    if divisor is not None:
        raise cx.error("avg_pool with divisor_override is not supported")
    s = x.type.rank - 2
    return cx.b.avg_pool(x, kernel=_per_dim(kernel, s), strides=_per_dim(stride or kernel, s),
                         pads=_per_dim(padding, s) * 2, ceil_mode=bool(ceil_mode),
                         count_include_pad=bool(count_include_pad))


@aten("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "_adaptive_avg_pool2d",
      "_adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d")
def adaptive_pool(cx, x, output_size):
    """Adaptive pooling is a plain window when every input size is a multiple of the output size; otherwise,
    with static sizes, one axis at a time (window i covers [floor(i*n/o), ceil((i+1)*n/o)) on each axis, so the
    max or mean over the box is the max or mean over each axis in turn)."""
    is_max = "max" in cx.op_name
    s = int(cx.op_name[-2])  # adaptive_avg_pool2d: 2 spatial axes
    if x.type.rank == s + 1:  # an unbatched input: pooled as a batch of one
        y = adaptive_pool(_Batched(cx), cx.b.reshape(x, shape=(1, *x.type.shape)), output_size)
        drop = [cx.b.reshape(v, shape=v.type.shape[1:]) if v is not None else None
                for v in (y if is_max else (y,))]
        return tuple(drop) if is_max else drop[0]
    spatial, out = x.type.shape[2:], cx.out_shape(0 if is_max else None)[-s:]
    reduce = "reduce_max" if is_max else "reduce_mean"
    if all(isinstance(n, int) and isinstance(o, int) and n % o == 0 for n, o in zip(spatial, out)):
        kernel = [n // o for n, o in zip(spatial, out)]
        if all(o == 1 for o in out):
            y = cx.b.emit(reduce, x, axes=list(range(2, x.type.rank)), keepdims=True)
        else:
            y = cx.b.emit("max_pool" if is_max else "avg_pool", x, kernel=kernel, strides=kernel)
        window = dict(kernel=kernel, strides=kernel, pads=[0] * s, dilations=[1] * s)
        return (y, _pool_indices(cx, x, y, **window)) if is_max else y
    if all(o == 1 for o in out):
        y = cx.b.emit(reduce, x, axes=list(range(2, x.type.rank)), keepdims=True)
    elif all(isinstance(n, int) and isinstance(o, int) for n, o in zip(spatial, out)):
        y = x
        for axis, (n, o) in enumerate(zip(spatial, out), start=2):
            y = _adaptive_axis(cx, y, axis, n, o, reduce)
    else:
        raise cx.error(f"adaptive pooling from {list(spatial)} to {list(out)} with symbolic sizes needs input sizes "
                       f"that are multiples of the output sizes")
    return (y, None) if is_max else y


class _Batched:
    """The context of an adaptive pool seen with a batch axis in front (for unbatched inputs)."""

    def __init__(self, cx):
        self.b, self.op_name, self.error, self.tensor, self._cx = cx.b, cx.op_name, cx.error, cx.tensor, cx

    def out_shape(self, i=None):
        return (1, *self._cx.out_shape(i))


def _adaptive_axis(cx, x, axis: int, n: int, o: int, reduce: str):
    """Adaptive pooling of `x` along one axis from n to o: equal windows as a reshape, uneven ones one by one."""
    if n == o:
        return x
    shape = x.type.shape
    if n % o == 0:
        y = cx.b.reshape(x, shape=shape[:axis] + (o, n // o) + shape[axis + 1:])
        return cx.b.emit(reduce, y, axes=[axis + 1], keepdims=False)
    parts = [cx.b.emit(reduce, cx.b.slice(x, starts=[i * n // o], ends=[-(-(i + 1) * n // o)], axes=[axis]),
                       axes=[axis], keepdims=True) for i in range(o)]
    return cx.b.concat(*parts, axis=axis)


# -- upsampling ------------------------------------------------------------------------------------------
_RESIZE = {"upsample_nearest1d": "nearest", "upsample_nearest2d": "nearest", "upsample_nearest3d": "nearest",
           "upsample_linear1d": "linear", "upsample_bilinear2d": "linear", "upsample_trilinear3d": "linear",
           "upsample_bicubic2d": "cubic", "_upsample_nearest_exact2d": "nearest"}


@aten(*_RESIZE)
def upsample(cx, x, output_size, *rest):
    """PyTorch's nearest picks floor(out * in / out_size) (ONNX asymmetric + floor); linear and cubic use
    half-pixel centres unless align_corners."""
    mode = _RESIZE[cx.op_name]
    align = bool(rest[0]) if mode != "nearest" and rest and isinstance(rest[0], bool) else False
    if mode == "nearest":
        coords, nearest = ("half_pixel", "round_prefer_ceil") if "exact" in cx.op_name else ("asymmetric", "floor")
    else:
        coords, nearest = ("align_corners" if align else "pytorch_half_pixel"), "floor"
    sizes = cx.out_shape()
    return cx.b.resize(x, sizes=sizes, mode=mode, coordinate_transformation_mode=coords, nearest_mode=nearest,
                       cubic_coeff_a=-0.75)


@aten("pixel_shuffle")
def pixel_shuffle(cx, x, r):
    n, c, h, w = x.type.shape
    y = cx.b.reshape(x, shape=(n, c // (r * r), r, r, h, w))
    y = cx.b.transpose(y, perm=[0, 1, 4, 2, 5, 3])
    return cx.b.reshape(y, shape=(n, c // (r * r), h * r, w * r))

