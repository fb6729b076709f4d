"""The supported `torch.*` and `torch.nn.functional.*` functions and tensor methods, as converter tables.

Imported only once torch is: the Python frontend never imports torch itself before a torch tensor (or a
function using torch) shows up.
"""
from __future__ import annotations

import collections

import torch
import torch.nn.functional as F

from ...errors import UnsupportedError
from ...ir.dtypes import DType
from . import calls_more as M
from . import emit as E
from .calls import (binary, clip, copy, dtype_arg, einsum, full_of, item, like, predicate,
                    split, square, tile, triangle, unary, unary_any)
from .emit import tensor
from .values import TV, result_dtype, to_dtype, user_dtype

MaxResult = collections.namedtuple("torch_return_types", ["values", "indices"])


def _dim(dim):
    return None if dim in ((), []) else dim


def t_reduce(irop: str, fname: str):
    def conv(cx, input, dim=None, keepdim=False, *, dtype=None):
        return E.reduce(cx, irop, fname, input, _dim(dim), keepdim, dtype_arg(dtype) if dtype is not None else None)
    return conv


def t_max(irop: str, elem: str, arg: str, fname: str):
    """torch.max(x), torch.max(x, dim) -> (values, indices), torch.max(x, other)."""
    def conv(cx, input, dim=None, keepdim=False, *, other=None):
        other = dim if isinstance(dim, TV) else other
        if other is not None:
            return E.binary(cx, elem, fname, input, other)
        if dim is None:
            return E.reduce(cx, irop, "max", input)
        return MaxResult(E.reduce(cx, irop, "max", input, dim, keepdim), E.arg_reduce(cx, arg, input, dim, keepdim))
    return conv


def t_arg(irop: str):
    def conv(cx, input, dim=None, keepdim=False):
        return E.arg_reduce(cx, irop, input, dim, keepdim)
    return conv


def t_any_all(irop: str):
    def conv(cx, input, dim=None, keepdim=False):
        return E.any_all(cx, irop, input, _dim(dim), keepdim)
    return conv


def t_var(root: bool):
    def conv(cx, input, dim=None, *, correction=None, unbiased=None, keepdim=False):
        ddof = correction if correction is not None else (0 if unbiased is False else 1)
        return E.variance(cx, input, _dim(dim), keepdim, ddof, root)
    return conv


def t_cumsum(cx, input, dim, *, dtype=None):
    t = tensor(cx, input)
    d = dtype_arg(dtype) if dtype is not None else result_dtype(cx.mode, "sum", t)
    return TV(cx.b.cumsum(E.to(cx, t, d).value, axis=E.axes_of(dim, t.rank)[0]))


def t_softmax(irop: str):
    def conv(cx, input, dim=None, _stacklevel=3, dtype=None):
        if dim is None:
            raise UnsupportedError(f"{irop} needs dim= (the implicit dim is deprecated in torch)")
        t = tensor(cx, input)
        t = E.to(cx, t, dtype_arg(dtype) if dtype is not None else E.float_result(cx, None, t))
        return TV(cx.b.emit(irop, t.value, axis=E.axes_of(dim, t.rank)[0]))
    return conv


def t_logsumexp(cx, input, dim, keepdim=False):
    t = E.to(cx, tensor(cx, input), E.float_result(cx, None, input))
    return TV(cx.b.logsumexp(t.value, axes=E.axes_of(dim, t.rank), keepdims=bool(keepdim)))


def t_add(irop: str, fname: str):
    def conv(cx, input, other, *, alpha=1):
        if alpha != 1:
            other = E.binary(cx, "mul", "mul", other, alpha)
        return E.binary(cx, irop, fname, input, other)
    return conv


def t_div(cx, input, other, *, rounding_mode=None):
    if rounding_mode is None:
        return E.binary(cx, "div", "true_divide", input, other)
    if rounding_mode == "floor":
        return E.binary(cx, "floordiv", "floor_divide", input, other)
    dtype = E.common_dtype(cx.mode, input, other)
    if rounding_mode == "trunc" and not dtype.is_float:
        return E.combine(cx, "div", [input, other], dtype)  # the IR's integer division truncates
    raise UnsupportedError(f"torch.div rounding_mode={rounding_mode!r} is supported for integers only")


def t_sizes(cx, size, args):
    """torch.zeros(2, 3) and torch.zeros((2, 3)) alike."""
    return E.shape_arg((size, *args))


def t_zeros(value):
    def conv(cx, size, *more, dtype=None, device=None, requires_grad=False):
        return full_of(cx, t_sizes(cx, size, more), value, dtype, DType.f32)
    return conv


def t_full(cx, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    return full_of(cx, size, fill_value, dtype, DType.f32)


def t_split(cx, tensor_, split_size_or_sections, dim=0):
    t = tensor(cx, tensor_)
    ax = E.axes_of(dim, t.rank)[0]
    n = t.shape[ax]
    if isinstance(split_size_or_sections, int):
        if not isinstance(n, int):
            raise UnsupportedError("torch.split by a size needs a static size along dim")
        k = split_size_or_sections
        sizes = [k] * (n // k) + ([n % k] if n % k else [])
    else:
        sizes = list(split_size_or_sections)
    return split(cx, t, sizes, ax)


def t_chunk(cx, input, chunks, dim=0):
    t = tensor(cx, input)
    ax = E.axes_of(dim, t.rank)[0]
    n = t.shape[ax]
    if not isinstance(n, int):  # equal pieces; the split records chunks * (n // chunks) == n for every call
        return split(cx, t, [n // chunks] * chunks, ax)
    return t_split(cx, t, -(-n // chunks), dim)


def t_clamp(cx, input, min=None, max=None):  # noqa: A002 (torch's names)
    return clip(cx, "clamp", input, min, max)


_ELEMENTWISE = {
    **{n: unary(n, n) for n in ("exp", "log", "sqrt", "rsqrt", "tanh", "sin", "cos", "tan", "sigmoid", "erf",
                                "reciprocal", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                                "erfc", "log2", "log10", "log1p", "expm1", "exp2")},
    **{n: unary_any(op, n) for n, op in [("abs", "abs"), ("neg", "neg"), ("negative", "neg"), ("sign", "sign"),
                                         ("floor", "floor"), ("ceil", "ceil"), ("round", "round"),
                                         ("relu", "relu")]},
    "square": square,
    "add": t_add("add", "add"), "sub": t_add("sub", "sub"), "subtract": t_add("sub", "sub"),
    "mul": binary("mul", "mul"), "multiply": binary("mul", "mul"), "div": t_div, "divide": t_div,
    "true_divide": binary("div", "true_divide"), "floor_divide": binary("floordiv", "floor_divide"),
    "remainder": binary("mod", "remainder"), "pow": binary("pow", "pow"),
    "maximum": binary("max", "maximum"), "minimum": binary("min", "minimum"),
    **{n: binary(n, n) for n in ("eq", "ne", "lt", "le", "gt", "ge")},
    **{n: binary(op, op) for n, op in [("greater", "gt"), ("less", "lt"), ("greater_equal", "ge"),
                                       ("less_equal", "le"), ("not_equal", "ne")]},
    **{f"logical_{n}": binary(n, f"logical_{n}") for n in ("and", "or", "xor")},
    "logical_not": E.logical_not, "isnan": predicate("isnan"), "isinf": predicate("isinf"),
    "clamp": t_clamp, "clip": t_clamp, "matmul": E.matmul, "mm": E.matmul, "bmm": E.matmul,
    **{n: lambda cx, input, other, op=op: E.bitwise(cx, op, input, other) for n, op in [
        ("bitwise_and", "bitwise_and"), ("bitwise_or", "bitwise_or"), ("bitwise_xor", "bitwise_xor"),
        ("bitwise_left_shift", "shift_left"), ("bitwise_right_shift", "shift_right")]},
    "bitwise_not": lambda cx, input: E.invert(cx, input),
}
_REDUCTIONS = {
    "sum": t_reduce("reduce_sum", "sum"), "mean": t_reduce("reduce_mean", "mean"),
    "amax": t_reduce("reduce_max", "amax"), "amin": t_reduce("reduce_min", "amin"),
    "prod": t_reduce("reduce_prod", "prod"), "max": t_max("reduce_max", "max", "argmax", "maximum"),
    "min": t_max("reduce_min", "min", "argmin", "minimum"), "argmax": t_arg("argmax"), "argmin": t_arg("argmin"),
    "any": t_any_all("reduce_max"), "all": t_any_all("reduce_min"), "var": t_var(False), "std": t_var(True),
    "cumsum": t_cumsum, "softmax": t_softmax("softmax"), "log_softmax": t_softmax("log_softmax"),
    "logsumexp": t_logsumexp,
}
_SORTING = {
    "topk": M.t_topk, "sort": M.t_sort, "argsort": M.t_argsort, "msort": lambda cx, input: M.t_sort(cx, input, 0)[0],
    "cumprod": lambda cx, input, dim, *, dtype=None: M.cumprod(cx, input, dim, dtype_arg(dtype) if dtype else None),
    "cummax": lambda cx, input, dim: M.cumulative_extreme(cx, input, dim, True),
    "cummin": lambda cx, input, dim: M.cumulative_extreme(cx, input, dim, False),
    "unique": M.torch_unique,
    "nonzero": lambda cx, input, *, as_tuple=False: M.np_nonzero(cx, input) if as_tuple else M.argwhere(cx, input),
    "argwhere": lambda cx, input: M.argwhere(cx, input), "masked_select": M.masked_select,
}
TORCH_FUNCS = {
    **_ELEMENTWISE, **_REDUCTIONS,
    "where": lambda cx, condition, input, other: E.where(cx, condition, input, other), "einsum": einsum,
    "cat": lambda cx, tensors, dim=0: E.concat(cx, tensors, dim), "concat": lambda cx, tensors, dim=0:
    E.concat(cx, tensors, dim), "stack": lambda cx, tensors, dim=0: E.stack(cx, tensors, dim),
    "reshape": lambda cx, input, shape: E.reshape(cx, input, shape),
    "transpose": lambda cx, input, dim0, dim1: E.swap(cx, input, dim0, dim1),
    "permute": lambda cx, input, dims: E.transpose(cx, input, dims),
    "squeeze": lambda cx, input, dim=None: E.squeeze(cx, input, dim, strict=False),
    "unsqueeze": lambda cx, input, dim: E.unsqueeze(cx, input, dim),
    "flatten": lambda cx, input, start_dim=0, end_dim=-1: E.flatten(cx, input, start_dim, end_dim),
    "zeros": t_zeros(0.0), "ones": t_zeros(1.0), "full": t_full,
    "zeros_like": like(0.0), "ones_like": like(1.0), "full_like": like(None),
    "split": t_split, "chunk": t_chunk, "tril": lambda cx, input, diagonal=0: triangle(True)(cx, input, diagonal),
    "triu": lambda cx, input, diagonal=0: triangle(False)(cx, input, diagonal),
    "flip": lambda cx, input, dims: M.flip(cx, input, tuple(dims)),
    "roll": lambda cx, input, shifts, dims=None: M.roll(cx, input, shifts, dims),
    "gather": M.t_gather, "index_select": M.t_index_select, "norm": M.t_norm, "trunc": M.trunc, "fix": M.trunc,
    "clone": lambda cx, input, memory_format=None: copy(cx, input),
    **_SORTING,
}
TORCH_FOLD_ONLY = ("tensor", "as_tensor", "arange", "eye", "linspace")


# -- torch.nn.functional -------------------------------------------------------------------------------------------
def act(irop: str, **fixed):
    """An activation; torch's `inplace=` is accepted (tensors are never modified here)."""
    def conv(cx, input, inplace=False, **attrs):
        return E.unary(cx, irop, None, input, **fixed, **attrs)
    return conv


def f_leaky_relu(cx, input, negative_slope=0.01, inplace=False):
    return E.unary(cx, "leaky_relu", None, input, alpha=negative_slope)


def f_elu(cx, input, alpha=1.0, inplace=False):
    return E.unary(cx, "elu", None, input, alpha=alpha)


def f_gelu(cx, input, approximate="none"):
    return E.unary(cx, "gelu", None, input, approximate=approximate)


def f_softplus(cx, input, beta=1.0, threshold=20.0):
    if beta == 1:
        return E.unary(cx, "softplus", None, input)
    scaled = E.unary(cx, "softplus", None, E.binary(cx, "mul", "mul", input, beta))
    return E.binary(cx, "div", "true_divide", scaled, beta)


def f_hardtanh(cx, input, min_val=-1.0, max_val=1.0, inplace=False):
    return clip(cx, "clamp", input, min_val, max_val)


def f_layer_norm(cx, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    x = E.to(cx, tensor(cx, input), E.float_result(cx, None, input))
    shape = tuple(normalized_shape) if isinstance(normalized_shape, (tuple, list)) else (normalized_shape,)
    scale = weight if weight is not None else TV(cx.b.full(1.0, shape, x.dtype))
    params = [E.to(cx, tensor(cx, p), x.dtype).value for p in (scale, bias) if p is not None]
    return TV(cx.b.layer_norm(x.value, *params, axis=x.rank - len(shape), epsilon=float(eps)))


def f_linear(cx, input, weight, bias=None):
    out = E.matmul(cx, input, E.transpose(cx, weight))
    return out if bias is None else E.binary(cx, "add", "add", out, bias)


def f_dropout(cx, input, p=0.5, training=True, inplace=False):
    if training:
        raise UnsupportedError("dropout with training=True is random; pass training=False for inference")
    return input


def f_embedding(cx, input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                sparse=False):
    if max_norm is not None:
        raise UnsupportedError("F.embedding with max_norm is not supported")
    return TV(cx.b.gather(tensor(cx, weight).value, E.to(cx, tensor(cx, input), DType.i64).value, axis=0))


def _tuple(v, n: int) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _pads(padding, kernel, dilation) -> tuple:
    """torch padding (ints, 'valid' or 'same') as [begins..., ends...]."""
    n = len(kernel)
    if padding == "valid":
        return (0,) * 2 * n
    if padding == "same":
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple(t // 2 for t in total) + tuple(t - t // 2 for t in total)
    return _tuple(padding, n) * 2


def f_conv(cx, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    x, w = tensor(cx, input), tensor(cx, weight)
    n = x.rank - 2
    dil = _tuple(dilation, n)
    ops = [x.value, E.to(cx, w, x.dtype).value] + ([E.to(cx, tensor(cx, bias), x.dtype).value] if bias is not None
                                                   else [])
    return TV(cx.b.conv(*ops, strides=_tuple(stride, n), dilations=dil, pads=_pads(padding, w.shape[2:], dil),
                        groups=groups))


def f_max_pool(cx, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    if return_indices:
        raise UnsupportedError("max_pool with return_indices=True is not supported")
    x = tensor(cx, input)
    n = x.rank - 2
    kernel = _tuple(kernel_size, n)
    return TV(cx.b.max_pool(x.value, kernel=kernel, strides=_tuple(stride or kernel_size, n),
                            pads=_pads(padding, kernel, (1,) * n), dilations=_tuple(dilation, n),
                            ceil_mode=ceil_mode))


def f_avg_pool(cx, input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    if divisor_override is not None:
        raise UnsupportedError("avg_pool with divisor_override is not supported")
    x = tensor(cx, input)
    n = x.rank - 2
    kernel = _tuple(kernel_size, n)
    return TV(cx.b.avg_pool(x.value, kernel=kernel, strides=_tuple(stride or kernel_size, n),
                            pads=_pads(padding, kernel, (1,) * n), ceil_mode=ceil_mode,
                            count_include_pad=count_include_pad))


def f_adaptive_avg_pool(cx, input, output_size):
    if any(s != 1 for s in _tuple(output_size, 1)):
        raise UnsupportedError("adaptive_avg_pool is supported for output size 1 (global pooling) only")
    return TV(cx.b.global_avg_pool(tensor(cx, input).value))


def _channel_param(cx, p, x: TV, fill: float):
    return E.to(cx, tensor(cx, p), x.dtype).value if p is not None else cx.b.full(fill, (x.shape[1],), x.dtype)


def f_batch_norm(cx, input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                 eps=1e-5):
    if training:
        raise UnsupportedError("batch_norm with training=True is not supported; pass training=False")
    x = tensor(cx, input)
    ops = [_channel_param(cx, p, x, f) for p, f in ((weight, 1.0), (bias, 0.0), (running_mean, 0.0),
                                                      (running_var, 1.0))]
    return TV(cx.b.batch_norm(x.value, *ops, epsilon=float(eps)))


def f_group_norm(cx, input, num_groups, weight=None, bias=None, eps=1e-5):
    x = tensor(cx, input)
    ops = [_channel_param(cx, p, x, f) for p, f in ((weight, 1.0), (bias, 0.0))]
    return TV(cx.b.group_norm(x.value, *ops, num_groups=num_groups, epsilon=float(eps)))


F_FUNCS = {
    "relu": lambda cx, input, inplace=False: unary_any("relu", "relu")(cx, input),
    "relu6": lambda cx, input, inplace=False: clip(cx, "clamp", input, 0.0, 6.0),
    "leaky_relu": f_leaky_relu, "elu": f_elu, "selu": act("selu"), "gelu": f_gelu, "silu": act("silu"),
    "sigmoid": unary("sigmoid", "sigmoid"), "tanh": unary("tanh", "tanh"), "softplus": f_softplus,
    "hardsigmoid": act("hardsigmoid", alpha=1 / 6, beta=0.5), "hardswish": act("hardswish"), "hardtanh": f_hardtanh,
    "softmax": t_softmax("softmax"), "log_softmax": t_softmax("log_softmax"), "layer_norm": f_layer_norm,
    "linear": f_linear, "dropout": f_dropout, "embedding": f_embedding, "normalize": M.f_normalize,
    "scaled_dot_product_attention": M.f_sdpa,
    **{f"conv{n}d": f_conv for n in (1, 2, 3)}, **{f"max_pool{n}d": f_max_pool for n in (1, 2, 3)},
    **{f"avg_pool{n}d": f_avg_pool for n in (1, 2, 3)},
    **{f"adaptive_avg_pool{n}d": f_adaptive_avg_pool for n in (1, 2, 3)},
    "batch_norm": f_batch_norm, "group_norm": f_group_norm,
}


# -- tensor methods ------------------------------------------------------------------------------------------------
def m_to(cx, x, *args, dtype=None, **kw):
    """x.to(dtype), x.to("cpu"), x.to(other): only dtype changes matter on the CPU."""
    for a in args:
        if isinstance(a, TV):
            dtype = a.dtype
        elif to_dtype(a) is not None and not isinstance(a, str):
            dtype = a
        elif str(a) != "cpu":
            raise UnsupportedError(f"x.to({a!r}): only dtypes and the CPU device are supported")
    return E.cast(cx, x, dtype_arg(dtype)) if dtype is not None else x


def m_view(cx, x, *shape):
    if len(shape) == 1 and to_dtype(shape[0]) is not None and not isinstance(shape[0], (int, tuple, list)):
        raise UnsupportedError("x.view(dtype) reinterprets bits and is not supported; use x.to(dtype)")
    return E.reshape(cx, x, E.shape_arg(shape))


def m_expand(cx, x, *sizes):
    t = tensor(cx, x)
    sizes = E.shape_arg(sizes)
    lead = len(sizes) - t.rank
    shape = tuple(t.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    return E.to(cx, t, shape=E.static_sizes(shape, "expand sizes"))


def m_size(cx, x, dim=None):
    return tuple(x.shape) if dim is None else x.shape[E.axes_of(dim, x.rank)[0]]


def m_masked_fill(cx, x, mask, value):
    t = tensor(cx, x)
    return E.where(cx, mask, E.to(cx, tensor(cx, value), t.dtype) if isinstance(value, TV) else value, t)


def caster(dtype: DType):
    """x.float(), x.long() ..."""
    return lambda cx, x, memory_format=None: E.cast(cx, x, dtype)


_CASTS = {"float": DType.f32, "double": DType.f64, "half": DType.f16, "bfloat16": DType.bf16, "int": DType.i32,
          "long": DType.i64, "short": DType.i16, "char": DType.i8, "byte": DType.u8, "bool": DType.bool}
_IDENTITY = ("contiguous", "detach", "cpu", "numpy")  # these share memory with x: the same tensor
TORCH_METHODS = {
    **_ELEMENTWISE, **_REDUCTIONS,
    **{n: caster(d) for n, d in _CASTS.items()},
    **{n: (lambda cx, x, *a, **k: x) for n in _IDENTITY}, "clone": lambda cx, x, memory_format=None: copy(cx, x),
    "to": m_to, "type": lambda cx, x, dtype: E.cast(cx, x, dtype_arg(dtype)),
    "type_as": lambda cx, x, other: E.cast(cx, x, other.dtype), "view": m_view,
    "reshape": lambda cx, x, *shape: E.reshape(cx, x, E.shape_arg(shape)),
    "transpose": lambda cx, x, dim0, dim1: E.swap(cx, x, dim0, dim1),
    "permute": lambda cx, x, *dims: E.transpose(cx, x, E.shape_arg(dims)),
    "t": lambda cx, x: E.transpose(cx, x),
    "unsqueeze": lambda cx, x, dim: E.unsqueeze(cx, x, dim),
    "squeeze": lambda cx, x, dim=None: E.squeeze(cx, x, dim, strict=False),
    "flatten": lambda cx, x, start_dim=0, end_dim=-1: E.flatten(cx, x, start_dim, end_dim),
    "size": m_size, "dim": lambda cx, x: x.rank, "ndimension": lambda cx, x: x.rank,
    "numel": lambda cx, x: x.type.numel, "item": item,
    "expand": m_expand, "expand_as": lambda cx, x, other: E.to(cx, x, shape=other.shape),
    "repeat": lambda cx, x, *sizes: tile(cx, x, E.shape_arg(sizes)),
    "masked_fill": m_masked_fill, "where": lambda cx, x, condition, y: E.where(cx, condition, x, y),
    "split": t_split, "chunk": t_chunk, "tril": lambda cx, x, diagonal=0: triangle(True)(cx, x, diagonal),
    "triu": lambda cx, x, diagonal=0: triangle(False)(cx, x, diagonal),
    "flip": lambda cx, x, *dims: M.flip(cx, x, E.shape_arg(dims)),
    "roll": lambda cx, x, shifts, dims=None: M.roll(cx, x, shifts, dims),
    "gather": M.t_gather, "index_select": M.t_index_select, "norm": M.t_norm, "trunc": M.trunc, "fix": M.trunc,
    **_SORTING,
}
TORCH_ATTRS = {
    "T": lambda cx, x: E.transpose(cx, x),
    "mT": lambda cx, x: E.swap(cx, x, -2, -1),
    "shape": lambda cx, x: tuple(x.shape),
    "ndim": lambda cx, x: x.rank,
    "dtype": lambda cx, x: user_dtype(x.dtype, "torch"),
}


def torch_table() -> dict:
    table = {}
    for ns, module, funcs, fold in (("torch", torch, TORCH_FUNCS, TORCH_FOLD_ONLY), ("F", F, F_FUNCS, ())):
        for name, conv in funcs.items():
            fn = getattr(module, name, None)
            if fn is not None:
                table.setdefault(fn, (ns, name, conv))
        for name in fold:
            table.setdefault(getattr(module, name), (ns, name, None))
    return table
