"""Each ATen converter family against PyTorch: small functions exported, converted, interpreted, compared."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree

import cuvil

from .helpers import check, compile_torch, run_both

g = torch.Generator().manual_seed(0)


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g).to(dtype)


def ints(*shape, hi=5, dtype=torch.int64):
    return torch.randint(0, hi, shape, generator=g, dtype=dtype)


def index_puts(x, i, v):
    a, b, c, d = x.clone(), x.clone(), x.clone(), x.clone()
    a[i] = v
    b[:, i] += 1.0
    c[i, i] = v[:, 0]
    d[i[:, None], i[None]] = 2.0
    return a, b, c, d, x.index_put((i,), v, accumulate=True)


def slice_assigns(x, y, z):
    a, b, c, d = x.clone(), x.clone(), x.clone(), torch.zeros(4, 5, dtype=torch.long)
    a[1:3] = y
    b[:, ::2] = 5.0
    c[:, -2] = z
    d[1:, 1:] = torch.arange(12).reshape(3, 4)
    return a, b, c, d, torch.slice_scatter(x, y, 0, 2), torch.select_scatter(x, z, 1, 0)


# id -> (function, example inputs). Every case runs through export -> IR -> interpreter -> compare.
CASES = {
    # elementwise: promotion and broadcasting made explicit
    "add_broadcast_alpha": (lambda x, y: torch.add(x, y, alpha=2), (r(3, 4), r(4))),
    "sub_rsub_scalar": (lambda x: (x - 1.5, 2 - x), (r(3, 4),)),
    "int_times_float": (lambda x, y: x * y + 1, (ints(3, 4), r(3, 4))),
    "int_true_div": (lambda x, y: x / y, (ints(3, 4) + 1, ints(3, 4) + 1)),
    "div_modes": (lambda x, y: (torch.div(x, y, rounding_mode="trunc"), torch.div(x, y, rounding_mode="floor")),
                  (r(3, 4) * 5, r(3, 4))),
    "int_div_modes": (lambda x, y: (torch.div(x, y, rounding_mode="trunc"), x // y, x % y),
                      (ints(3, 4, hi=20) - 10, ints(3, 4) + 1)),
    "pow_variants": (lambda x: (x ** 2, x ** 3, x.abs() ** 0.5, x.abs() ** 1.7, 2 ** x), (r(3, 4),)),
    "unary_math": (lambda x: (x.exp(), x.abs().log(), x.abs().sqrt(), x.abs().rsqrt(), x.tanh(), x.sigmoid(),
                              x.sin(), x.cos(), x.floor(), x.ceil(), x.round(), x.sign(), x.neg(), x.erf(),
                              x.abs().log1p(), x.expm1(), x.abs().log2(), x.reciprocal()), (r(3, 4),)),
    "inverse_and_hyperbolic": (lambda x, y: (x.clamp(-0.9, 0.9).asin(), x.clamp(-0.9, 0.9).acos(), y.atan(), x.sinh(),
                                             x.cosh(), y.asinh(), (y.abs() + 1).acosh(), x.clamp(-0.9, 0.9).atanh(),
                                             torch.trunc(y * 3), torch.erfc(y), torch.expm1(x * 1e-6) * 1e6,
                                             torch.log1p(x.abs() * 1e-6) * 1e6, torch.log10(y.abs() + 1),
                                             torch.exp2(x)),
                               (r(3, 4), r(3, 4) * 3)),
    "float_binary": (lambda x, y: (torch.atan2(x, y), torch.hypot(x, y), torch.copysign(x, y), torch.fmax(x, y),
                                   torch.fmin(x, y), torch.nextafter(x, y)),
                     (r(3, 4), torch.tensor([[3.0, 1.0, -2.0, 0.5]] * 3))),
    "fmax_ignores_nan": (lambda x, y: (torch.fmax(x, y), torch.fmin(y, x)),
                         (r(3, 4), torch.tensor([float("nan"), 1.0, 2.0, 3.0]))),
    "bool_arithmetic_is_logic": (lambda x, y: ((x > 0) * (y > 0), (x > 0) + (y > 0), torch.maximum(x > 0, y > 0),
                                               torch.minimum(x > 0, y > 0), torch.isfinite(x), torch.isclose(x, y),
                                               torch.logaddexp(x, y)),
                                 (torch.tensor([1.0, float("inf"), -3.0, -2.0]), torch.tensor([1.0, 2.0, 3.0, -2.0]))),
    "int_bitwise": (lambda i, j: (i & j, i | 6, i ^ j, i << 2, i >> j, ~i, torch.bitwise_left_shift(i, j)),
                    (ints(3, 4, hi=100) - 50, ints(3, 4))),
    "int_exp_is_float": (lambda x: torch.exp(x), (ints(3),)),
    "compare_promote": (lambda x, y: (x < y, x >= 1, x == y, x != 0.5), (r(3, 4), ints(3, 4))),
    "logic": (lambda x, y: (torch.logical_and(x > 0, y > 0), (x > 0) | (y > 0), (x > 0) ^ (y > 0), ~(x > 0),
                            torch.logical_not(x)), (r(3, 4), r(3, 4))),
    "bitwise_not_int": (lambda x: ~x, (ints(5) - 2,)),
    "where_masked_fill": (lambda x, m: (torch.where(m, x, -1.0), x.masked_fill(m, float("-inf")),
                                        torch.where(m, 1, 0)), (r(3, 4), r(3, 4) > 0)),
    "clamp": (lambda x, lo: (x.clamp(-0.5, 0.5), x.clamp(min=0), x.clamp(max=lo), F.relu6(x * 4),
                             F.hardtanh(x)), (r(3, 4), r(3, 4))),
    "activations": (lambda x: (F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), F.hardswish(x),
                               F.hardsigmoid(x), F.leaky_relu(x, 0.2), F.elu(x), F.selu(x), F.celu(x, 0.5),
                               F.softplus(x), F.softplus(x, beta=2), F.mish(x), F.relu(x)), (r(3, 4) * 3,)),
    "rrelu_eval": (lambda x: (F.rrelu(x), F.rrelu(x, 0.1, 0.3), torch.nn.RReLU().eval()(x)), (r(3, 4),)),
    "isnan_isinf": (lambda x: (x.isnan(), x.isinf()), (torch.tensor([1.0, float("nan"), float("inf")]),)),
    "casts": (lambda x: (x.int(), x.half(), x.to(torch.float64), x.bool(), (x > 0).float()), (r(3, 4) * 3,)),
    "float16_math": (lambda x: (x * x + 1).sigmoid(), (r(3, 4, dtype=torch.float16),)),
    "bfloat16_math": (lambda x: (x * x + 1).tanh(), (r(3, 4, dtype=torch.bfloat16),)),
    "float64_math": (lambda x: (x * x + 1).exp(), (r(3, 4, dtype=torch.float64),)),
    # reductions
    "sum_mean": (lambda x: (x.sum(), x.sum(1), x.mean((0, 2), keepdim=True), x.mean(), (x > 0).sum(-1)),
                 (r(2, 3, 4),)),
    "max_min": (lambda x: (x.amax(1), x.amin((0, 1)), x.max(1), x.min(-1, keepdim=True), x.max(), x.argmax(1),
                           x.argmin(), torch.max(x, -x)), (r(2, 3, 4),)),
    "var_std": (lambda x: (x.var(1), x.std(), x.var(0, unbiased=False), torch.var_mean(x, 1, keepdim=True),
                           x.std(-1, correction=0)), (r(3, 5),)),
    "prod_any_all_norm": (lambda x: (x.prod(1), (x > 0).any(1), (x > -2).all(), x.norm(dim=1), x.logsumexp(1),
                                     torch.linalg.vector_norm(x, ord=1)), (r(3, 4),)),
    "cumsum_topk": (lambda x: (x.cumsum(1), torch.topk(x, 2, dim=1), torch.topk(x, 2, largest=False)), (r(3, 5),)),
    "kthvalue_median": (lambda x: (torch.kthvalue(x, 2, 1), torch.median(x, 0), torch.median(x),
                                   x.median(1, keepdim=True), x.kthvalue(3, dim=0, keepdim=True)), (r(4, 5),)),
    "cdist": (lambda x, y: (torch.cdist(x, y), torch.cdist(x, y, p=1), torch.cdist(x[0], y[0], p=float("inf")),
                            torch.cdist(x, y[:1], p=3)), (r(2, 5, 4), r(2, 3, 4))),
    # movement
    "views": (lambda x: (x.view(6, 4), x.reshape(-1), x.unsqueeze(1), x.flatten(1), x.unflatten(2, (2, 2)),
                         x[None, :, None].squeeze(), x.permute(2, 0, 1), x.transpose(0, 2), x[0].t(), x.mT),
              (r(2, 3, 4),)),
    "expand_repeat": (lambda x: (x.expand(2, 3, 4), x.repeat(2, 1, 3), x.expand_as(torch.empty(5, 3, 4))),
                      (r(3, 1),)),
    "slice_select": (lambda x: (x[1:], x[:, ::2], x[..., -2:], x[:, 1], x[-1], x[:, -1], x.narrow(1, 1, 2),
                                x[1:3, 1:-1]), (r(4, 5, 3),)),
    "index_gather": (lambda x, i: (x[i], x[:, i], x[i, i], x[i[:, None], i[None, :]], x[:, [0, 2]],
                                   torch.gather(x, 1, (i % 5).expand(4, 2)), x.index_select(1, i % 5)),
                     (r(4, 5), torch.tensor([3, -1]))),
    "cat_stack_split": (lambda x, y: (torch.cat([x, y], 1), torch.stack([x, x], 2), *x.split(2, 1),
                                      *torch.split(x, [1, 3], 1), *x.chunk(2), *x.unbind(0)), (r(4, 4), r(4, 2))),
    "cat_promotes": (lambda x, y: torch.cat([x, y]), (r(2, 3), ints(1, 3))),
    "as_strided": (lambda x: (F.adaptive_avg_pool1d(x.transpose(1, 2), 1), torch.as_strided(x[0], (3, 2), (1, 3), 1),
                              torch.as_strided(x[0].t(), (2, 2), (2, 1))), (r(2, 4, 3),)),
    "pad_flip_tril": (lambda x: (F.pad(x, (1, 2)), F.pad(x, (1, 0, 0, 2), value=3.0), x.flip(0), x.flip((0, 1)),
                                 x.tril(), x.triu(1), x.tril(-1)), (r(4, 5),)),
    "index_put": (lambda x, i, v: index_puts(x, i, v), (r(4, 5), torch.tensor([3, 0]), r(2, 5))),
    "slice_scatter_copy": (lambda x, y, z: slice_assigns(x, y, z), (r(4, 5), r(2, 5), r(4))),
    "scatter_sort": (lambda x, i, v: (x.scatter(1, i, 0.5), x.scatter(0, i, v), x.scatter_add(0, i, v),
                                      x.scatter_reduce(1, i, v, "amax"), x.scatter(1, i, v, reduce="multiply"),
                                      torch.sort(x, 1), torch.sort(x, 0, descending=True), x.argsort(1),
                                      torch.sort(x, stable=True, dim=0)),
                     (r(4, 5), torch.tensor([[1, 3], [0, 2]]), r(3, 3))),
    "scatter_reduce_modes": (lambda x, i, v, k: (*(x.scatter_reduce(1, i, v, mode, include_self=own)
                                                   for mode in ("sum", "prod", "mean", "amax", "amin")
                                                   for own in (True, False)),
                                                 k.scatter_reduce(1, i, k[:, :3] * 3, "mean"),
                                                 k.scatter_reduce(1, i, k[:, :3], "amin", include_self=False)),
                             (r(3, 5), torch.tensor([[1, 1, 3], [0, 4, 0], [2, 2, 2]]), r(3, 3),
                              ints(3, 5, hi=9) - 4)),
    "max_pool_indices": (lambda x, t, v: (F.max_pool2d(x, 3, 2, 1, return_indices=True),
                                          F.max_pool2d(x, 2, 1, 0, 2, ceil_mode=True, return_indices=True),
                                          F.max_pool1d(t, 2, return_indices=True),
                                          F.max_pool3d(v, 2, 1, 1, return_indices=True),
                                          F.adaptive_max_pool2d(x, (3, 2), return_indices=True),
                                          F.adaptive_max_pool1d(t, 1, return_indices=True)),
                         (r(2, 3, 6, 8), torch.tensor([[[1.0, 1.0, 3.0, 2.0, 5.0, 5.0, -float("inf"), -float("inf")]]]),
                          r(1, 2, 3, 4, 4))),  # ties: the first maximum
    "max_pool_indices_nan": (lambda t: (F.max_pool1d(t, 2, return_indices=True)[1],
                                        F.adaptive_max_pool1d(t, 1, return_indices=True)[1]),  # the last NaN
                             (torch.tensor([[[1.0, 1.0, float("nan"), 2.0, float("nan"), float("nan"), 0.0, 0.0]]]),)),
    "roll": (lambda x: (torch.roll(x, 1, 1), torch.roll(x, (2, -1), (0, 1))), (r(4, 5),)),
    "embedding": (lambda w, i: F.embedding(i, w), (r(10, 4), ints(2, 3, hi=10))),
    "creation": (lambda x: (torch.arange(5), torch.arange(2, 11, 3), torch.arange(0, 1, 0.25) + x[0, 0],
                            torch.zeros_like(x), torch.ones(2, 3, dtype=torch.int32), torch.full((2,), 7.0),
                            torch.full_like(x, 2), x.new_zeros(3), x.new_ones(2), x.new_full((2,), 4.0)), (r(2, 3),)),
    # nn
    "linear_matmul": (lambda x, w, b, v: (F.linear(x, w, b), F.linear(x, w), x @ w.T, x[0] @ w.T, w @ x[0, 0],
                                          torch.bmm(x, x.transpose(1, 2)), torch.addmm(b, x[0], w.T),
                                          v @ x, x.transpose(1, 2) @ v.transpose(-1, -2)),
                      (r(2, 3, 4), r(5, 4), r(5), r(6, 1, 5, 3))),
    "bilinear": (lambda a, b, w, bias: (F.bilinear(a, b, w, bias), F.bilinear(a[0], b[0], w)),
                 (r(2, 3, 4), r(2, 3, 5), r(6, 4, 5), r(6))),
    "einsum": (lambda a, b: torch.einsum("bij,bjk->bik", a, b), (r(2, 3, 4), r(2, 4, 5))),
    "conv": (lambda x, w, wt, w1: (F.conv2d(x, w, padding=1), F.conv2d(x, w, stride=2, dilation=2, padding=(2, 1)),
                                   F.conv_transpose2d(x, wt, stride=2, padding=1, output_padding=1),
                                   F.conv1d(x[:, :, 0], w1, groups=3)),
             (r(1, 3, 8, 8), r(4, 3, 3, 3), r(3, 2, 3, 3), r(6, 1, 3))),
    "norms": (lambda x, w, b: (F.layer_norm(x, (8,), w[:8], b[:8]), F.layer_norm(x, (4, 8)),
                               F.group_norm(x[None], 2, w[:4], b[:4]), F.batch_norm(x[None], b[:4], w[:4].abs(),
                                                                                   w[:4], b[:4]),
                               F.instance_norm(x[None])), (r(4, 4, 8), r(8), r(8))),
    "softmax": (lambda x: (F.softmax(x, -1), F.log_softmax(x, 1), F.softmax(x, 0, dtype=torch.float64)), (r(3, 4),)),
    "softmax_half": (lambda x: F.softmax(x, 0), (r(3, 4, dtype=torch.float16),)),
    "pooling": (lambda x: (F.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 2, ceil_mode=True), F.avg_pool2d(x, 3, 2, 1),
                           F.avg_pool2d(x, 2, count_include_pad=False), F.adaptive_avg_pool2d(x, 1),
                           F.adaptive_avg_pool2d(x, (3, 2)), F.adaptive_max_pool2d(x, 1), F.max_pool1d(x[0], 2)),
                (r(1, 2, 6, 4),)),
    "adaptive_pool_uneven": (lambda x: (F.adaptive_avg_pool2d(x, (4, 3)), F.adaptive_max_pool2d(x, (2, 6)),
                                        F.adaptive_avg_pool1d(x[0], 5), F.adaptive_max_pool3d(x[None], (1, 4, 3))),
                             (r(1, 2, 6, 4),)),
    "upsample": (lambda x: (F.interpolate(x, scale_factor=2), F.interpolate(x, size=(5, 7), mode="bilinear"),
                            F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
                            F.pixel_shuffle(x.repeat(1, 2, 1, 1), 2)), (r(1, 2, 3, 4),)),
    "attention": (lambda q, k, v, m, bias: (F.scaled_dot_product_attention(q, k, v),
                                            F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                            F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                                            F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3)),
                  (r(2, 3, 5, 4), r(2, 3, 5, 4), r(2, 3, 5, 4), torch.tril(torch.ones(5, 5, dtype=torch.bool)),
                   r(2, 1, 5, 5))),
    "attention_fully_masked_rows": (lambda q, m, bias: (F.scaled_dot_product_attention(q, q, q, attn_mask=m),
                                                       F.scaled_dot_product_attention(q, q, q, attn_mask=bias)),
                                    (r(1, 2, 3, 4), torch.tensor([[True] * 3, [False] * 3, [True, False, True]]),
                                     torch.tensor([[0.0] * 3, [float("-inf")] * 3, [0.0, 1.0, -1.0]]))),
    "attention_broadcast_heads": (lambda q, k, v: (F.scaled_dot_product_attention(q, k, v),
                                                   F.scaled_dot_product_attention(q, k[:1], v, is_causal=True)),
                                  (r(2, 4, 3, 2), r(2, 1, 3, 2), r(2, 1, 3, 2))),
    "attention_gqa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                      (r(1, 4, 3, 2), r(1, 2, 3, 2), r(1, 2, 3, 2))),
    # What the OpInfo sweep (bench/opinfo.py) found: unbatched adaptive pools, norms of order -inf and 0,
    # reductions over dim 0 of a 0-d tensor, a 0-d bfloat16 result.
    "opinfo_unbatched_adaptive_pools": (lambda x: (F.adaptive_avg_pool2d(x, (3, 2)), F.adaptive_max_pool2d(x, (2, 3)),
                                                   F.adaptive_avg_pool1d(x[0], 3), F.adaptive_avg_pool2d(x, 1),
                                                   F.adaptive_avg_pool3d(x[None], (1, 2, 2))), (r(8, 5, 7),)),
    "cumprod": (lambda x, i: (torch.cumprod(x, 1), torch.cumprod(i, 0), x.cumprod(dim=-1, dtype=torch.float64)),
                (r(3, 40), ints(4, 3, hi=3) - 1)),
    "diagonals": (lambda x: (torch.diagonal(x), torch.diagonal(x, 1, 1, 2), torch.diagonal(x, -2, 2, 0),
                             torch.trace(x[0]), torch.diagonal(x, 7, 1, 2), torch.diag(x[0], 1)), (r(3, 4, 5),)),
    "native_norms_statistics": (lambda x, w: (torch.native_layer_norm(x, [5, 4], None, None, 1e-5),
                                              torch.native_layer_norm(x, [4], w[:4], w[2:6], 1e-5),
                                              torch.native_group_norm(x, w, w, 2, 6, 20, 3, 1e-5),
                                              torch.native_batch_norm(x, w, w, None, None, True, 0.1, 1e-5)),
                                (r(2, 6, 5, 4), r(6))),
    "opinfo_norm_orders": (lambda x: (torch.linalg.vector_norm(x, ord=float("-inf")),
                                      torch.linalg.vector_norm(x, ord=0, dim=1), torch.norm(x, p=float("-inf")),
                                      torch.linalg.vector_norm(x, ord=-2, dim=0)),
                           (torch.tensor([[0.0, 1.5, -2.0], [0.0, 0.0, 3.0]]),)),
    "opinfo_zero_dim_reductions": (lambda x: (x.sum(0), x.mean(-1), x.amax(0), x.logsumexp(0), x.all(0), x.any(-1),
                                              x.prod(0), x.sum(0, keepdim=True)), (torch.tensor(1.5),)),
    "opinfo_instance_norm_with_running_stats": (lambda x, rm, rv: F.instance_norm(x, rm.clone(), rv.clone(),
                                                                                  use_input_stats=True),
                                                (r(4, 3, 5), torch.zeros(3), torch.ones(3))),
    "opinfo_zero_dim_bfloat16": (lambda x: (x.bfloat16(), x.to(torch.float16)), (torch.tensor(1.5),)),
    "opinfo_zero_dim_index_reductions": (lambda x: (x.median(0), x.median(-1, keepdim=True), x.kthvalue(1, 0),
                                                    x.max(0), x.min(-1)), (torch.tensor(1.5),)),
    # special functions, each as its own op (torch.special's names, int inputs promoted to float)
    "special_gamma_family": (lambda x, n: (torch.lgamma(x), torch.digamma(x), torch.special.polygamma(0, x),
                                           torch.mvlgamma(x.abs() + 3, 3), torch.lgamma(n), torch.digamma(n)),
                             (r(3, 4) * 5, ints(3, 4) + 1)),
    "special_normal_family": (lambda x, p: (torch.special.ndtr(x), torch.special.log_ndtr(x * 8),
                                            torch.special.ndtri(p), torch.erfinv(p * 2 - 1), torch.special.erfinv(p)),
                              (r(3, 4), torch.rand(3, 4, generator=g))),
    "special_bessel_family": (lambda x: (torch.i0(x), torch.special.i0e(x), torch.special.i1(x),
                                         torch.special.i1e(x * 4)), (r(3, 4) * 6,)),
    "special_erfcx_and_modified_bessel": (lambda x: (torch.special.erfcx(x), torch.special.log_ndtr(x),
                                                     torch.special.modified_bessel_i0(x),
                                                     torch.special.modified_bessel_i1(x)),
                                          (torch.tensor([-30.0, -3.0, 0.0, 1.0, 4.9, 5.1, 30.0, 1e4]),)),
    "signbit_ldexp_angle": (lambda x, e: (torch.signbit(x), torch.ldexp(x[:4], e[:4]), torch.angle(x[:4]),
                                          torch.signbit(e)),
                            (torch.tensor([-0.0, 0.0, -1.0, 2.0, float("nan")]), torch.tensor([1, -2, 0, 3, -1]))),
    "addmv_dist_cdist_p0": (lambda c, a, v: (torch.addmv(c, a, v, beta=0.5, alpha=2), torch.dist(a, v, 0),
                                             torch.dist(a, v), torch.cdist(a, a[:2], p=0)), (r(3), r(3, 4), r(4))),
    "unfold_narrow_copy": (lambda x, s: (x.unfold(1, 2, 1), x.unfold(0, 2, 2), x.unfold(-1, 3, 2), s.unfold(0, 1, 1),
                                         torch.narrow_copy(x, 1, 1, 2), torch.index_select(s, 0, torch.tensor([0]))),
                           (r(4, 5), torch.tensor(1.5))),
    # PyTorch's binary search, NaNs included: an unordered comparison moves right, as there
    "searchsorted_bucketize": (lambda s, v, b: (torch.searchsorted(s, v), torch.searchsorted(s, v, side="right"),
                                                torch.searchsorted(s[0], v, out_int32=True), torch.bucketize(v, b),
                                                torch.bucketize(v, b, right=True), torch.searchsorted(b, 0.5)),
                               (torch.sort(ints(3, 9, hi=6).float())[0], ints(3, 4, hi=7).float() - 0.5,
                                torch.tensor([1.0, 2.0, float("nan"), float("nan")]))),
    "polygamma_zeta": (lambda x, q: (torch.polygamma(1, x), torch.polygamma(3, x),
                                     torch.special.zeta(x.abs() + 1.5, q.abs()), torch.special.zeta(3.0, q)),
                       (r(3, 4) * 4, r(3, 4) * 3)),
    "searchsorted_sorter": (lambda s, v: torch.searchsorted(s, v, sorter=torch.argsort(s)), (r(2, 7), r(2, 3))),
    # index_reduce: repeated indices, places no index reaches, with and without self
    "index_reduce": (lambda x, s0, s1: tuple(x.index_reduce(d, torch.tensor(i), s, op, include_self=inc)
                                             for op in ("prod", "mean", "amax", "amin") for inc in (True, False)
                                             for d, i, s in ((0, [0, 2, 0], s0), (1, [3, 3], s1))),
                     (r(4, 5), r(3, 5), r(4, 2))),
    "special_elementary": (lambda x, p: (torch.sinc(x), torch.special.entr(p), torch.logit(p), torch.logit(p, 0.1),
                                         torch.xlogy(p - 0.5, p), torch.special.xlog1py(x, p), torch.xlogy(2.0, p)),
                           (r(3, 4), torch.rand(3, 4, generator=g))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_converter_matches_pytorch(name):
    fn, inputs = CASES[name]
    check(fn, *inputs)


def test_attention_dropout_is_refused_not_skipped():
    import cuvil

    def fn(q):
        return F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)

    with pytest.raises(cuvil.UnsupportedError, match="dropout_p=0.5"):
        check(fn, r(1, 2, 3, 4))


def test_dynamic_dims_through_views_and_reductions():
    from torch.export import Dim

    def fn(x, y):
        z = torch.cat([x, y], 0).reshape(-1, 2, 4)
        return z.mean(0), z.sum(), torch.arange(x.shape[0]) * 2, x[-1], F.softmax(x, 0)

    dims = {"x": {0: Dim("n")}, "y": {0: Dim("m")}}
    compiled = check(fn, r(4, 8), r(2, 8), dynamic_shapes=dims, more=[((r(6, 8), r(4, 8)), None)])
    args = compiled.module.main.args
    assert [str(a.type) for a in args] == ["f32[n,8]", "f32[m,8]"]


def test_repeat_by_a_symbolic_count():
    from torch.export import Dim

    def fn(x, p):  # DeBERTa-v2 repeats its relative positions once per batch row
        return p.repeat(x.shape[0], 1, 2) + x[:, :1, :1], p.repeat(2, x.shape[0], 1, 1)

    check(fn, r(3, 4, 6), r(1, 4, 3), dynamic_shapes={"x": {0: Dim("b")}, "p": None},
          more=[((r(5, 4, 6), r(1, 4, 3)), None)])


def test_derived_dims_become_expressions():
    from torch.export import Dim

    n = Dim("n")

    def fn(x, y):
        return x.reshape(2, -1) + y, x[: y.shape[0]] * y, torch.cat([x, y]).sum()

    compiled = check(fn, r(6), r(3), dynamic_shapes={"x": {0: 2 * n}, "y": {0: n}}, more=[((r(10), r(5)), None)])
    assert [str(a.type) for a in compiled.module.main.args] == ["f32[2*n]", "f32[n]"]


def test_input_sizes_given_as_multiples_of_a_dim():
    """export suggests `h = 2 * Dim("_h")` for a UNet's even heights: the input size gets its own symbol, the root
    is derived from it, and an odd size is refused at the call."""
    import cuvil
    from torch.export import Dim

    def fn(x):
        n = x.shape[0] // 4
        return F.interpolate(F.max_pool2d(x, 2), scale_factor=2) + x, x.reshape(n, 4, *x.shape[1:]).sum(1)

    h, b = Dim("_h", min=2, max=32), Dim("b")
    compiled = check(fn, r(8, 2, 8, 6), dynamic_shapes={"x": {0: 4 * b, 2: 2 * h}},
                     more=[((r(4, 2, 12, 6),), None)])
    assert [str(a.type) for a in compiled.module.main.args] == ["f32[b_x4,2,_h_x2,6]"]
    with pytest.raises(cuvil.ShapeError, match="_h_x2"):
        compiled(r(8, 2, 9, 6))



def test_nanmedian_and_scans_with_nans():
    """nanmedian skips NaN (NaN where a whole line is, at an index PyTorch leaves unspecified: not compared),
    cummax/cummin propagate it: compared with NaN as equal."""
    nan = float("nan")
    x = torch.tensor([[3.0, nan, 1.0, 7.0, 2.0], [nan, nan, nan, nan, nan], [5.0, 4.0, nan, nan, -1.0],
                      [0.5, 9.0, 8.0, -3.0, 6.0]])

    def fn(x):
        return (x.nanmedian(1)[0], x[2:].nanmedian(1), x.nanmedian(0, keepdim=True), x.nanmedian(), x[1].nanmedian(),
                x[2:].nanmedian(), torch.cummax(x, 1),
                torch.cummin(x, 0), torch.logcumsumexp(x * 40, 1))
    got, want = run_both(fn, compile_torch(fn, (x,)), (x,))
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want)):
        torch.testing.assert_close(g, w, equal_nan=True)


@pytest.mark.parametrize("norm", ["batch", "instance"])
def test_training_norms_update_running_statistics_in_place(norm):
    """Batch statistics normalise; the running statistics passed in are updated in place, as eagerly."""
    def fn(x, mean, var):
        if norm == "batch":
            return F.batch_norm(x, mean, var, training=True, momentum=0.3)
        return F.instance_norm(x, mean, var, use_input_stats=True, momentum=0.3)
    x, mean, var = r(4, 3, 5), r(3), r(3).abs() + 0.5
    compiled = compile_torch(fn, (x, mean.clone(), var.clone()))
    eager_stats, compiled_stats = (mean.clone(), var.clone()), (mean.clone(), var.clone())
    for _ in range(2):  # the second call starts from the first's updates
        torch.testing.assert_close(compiled(x, *compiled_stats), fn(x, *eager_stats))
    for got, want, before in zip(compiled_stats, eager_stats, (mean, var)):
        assert not torch.equal(want, before)
        torch.testing.assert_close(got, want)


def test_module_buffer_updates_are_refused_by_name():
    """A module that updates its own buffer in forward (a module's state, not an input): refused, the kind named."""
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            self.calls.add_(1)
            return x * self.calls

    with pytest.raises(cuvil.UnsupportedError, match="mutates state .BUFFER_MUTATION.; export the module in eval"):
        compile_torch(Counter(), (r(4, 3),))
