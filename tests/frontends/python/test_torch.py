"""Supported torch, torch.nn.functional and tensor-method calls on torch CPU tensors, compared with eager torch."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import cuvil

from .helpers import TARGET, assert_same, check, t32

X, Y, W, B = t32(3, 4), t32(3, 4), t32(5, 4), t32(5)
IMG, K = t32(2, 3, 8, 8), t32(4, 3, 3, 3)
L = torch.tensor([[0, 2, 1], [3, 3, 0]])


def operators(x, y):
    return x + y * 2, x / y.abs().add(1), x // 0.5, x % 0.7, x ** 2, -x, x @ y.T, x > y, (x > 0) & (y > 0), \
        x.int() // 2, x.long() / 2, x.int() + 1.5


def methods(x):
    return (x.sum(), x.sum(dim=1, keepdim=True), x.mean(0), x.amax(dim=(0, 1)), x.max(), x.max(dim=1).values,
            x.max(1)[1], x.min(dim=0, keepdim=True).indices, x.argmax(dim=1), x.prod(1), x.var(), x.std(dim=0),
            x.var(dim=1, unbiased=False), (x > 0).any(), (x > -5).all(dim=1), x.cumsum(dim=1),
            x.logsumexp(dim=1), x.softmax(dim=-1), x.log_softmax(1))


def movement(x, img):
    return (x.view(4, 3), x.reshape(2, -1), x.permute(1, 0), x.transpose(0, 1), x.t(), x.T, x.mT, x.unsqueeze(0),
            x[None].squeeze(0), x.flatten(), img.flatten(1), x.expand(2, 3, 4), x[:, :1].expand(-1, 4),
            x.repeat(2, 1), x.size(), x.size(-1), x.dim(), x.numel(), x.shape[0], img.mean(dim=(2, 3)),
            x.contiguous().clone().detach(), x.chunk(2, dim=1)[1], x.split(1, dim=0)[2], x.expand_as(img[0, 0, :3, :4]))


def casts(x):
    return x.float(), x.double(), x.half(), x.long(), x.bool(), x.to(torch.float64), x.to("cpu"), x.type(torch.int32),
    x.to(dtype=torch.float16), x.type_as(x.long()), x.dtype == torch.float32


def torch_functions(x, y):
    p = x.abs() + 0.5
    return (torch.relu(x), torch.sigmoid(x), torch.tanh(x), torch.exp(x), torch.log(p), torch.sqrt(p),
            torch.rsqrt(p), torch.erf(x), torch.abs(x), torch.neg(x), torch.floor(x), torch.round(x),
            torch.clamp(x, -0.5, 0.5), torch.clamp(x, min=0.0), torch.where(x > 0, x, y), torch.maximum(x, y),
            torch.minimum(x, y), torch.max(x, y), torch.add(x, y, alpha=2), torch.sub(x, y), torch.mul(x, 3),
            torch.div(x, p), torch.div(x, p, rounding_mode="floor"), torch.pow(p, 2), torch.matmul(x, y.T),
            torch.cat([x, y], dim=1), torch.stack((x, y)), torch.sum(x, dim=0), torch.mean(x), torch.softmax(x, 1),
            torch.einsum("ij,kj->ik", x, y), torch.transpose(x, 0, 1), torch.permute(x, (1, 0)),
            torch.unsqueeze(x, -1), torch.flatten(x), torch.zeros(2, 3), torch.ones((3,)), torch.full((2,), 1.5),
            torch.zeros_like(x), torch.ones_like(x, dtype=torch.int64), torch.full_like(x, 2.0),
            torch.arange(4) + x[0].long(), torch.tensor([1.0, 2.0, 3.0, 4.0]) * x, torch.logical_not(x > 0),
            torch.isnan(x), x.masked_fill(x < 0, 0.0), torch.square(x), torch.argmax(x))


def functional(x, w, b, img, k, idx):
    return (F.relu(x), F.relu6(x * 4), F.leaky_relu(x, 0.2), F.elu(x), F.selu(x), F.gelu(x),
            F.gelu(x, approximate="tanh"), F.silu(x), F.sigmoid(x), F.tanh(x), F.softplus(x), F.softplus(x, beta=2.0),
            F.hardsigmoid(x), F.hardswish(x), F.hardtanh(x), F.softmax(x, dim=1), F.log_softmax(x, dim=0),
            F.layer_norm(x, (4,)), F.layer_norm(x, (4,), w[0], b[:4], eps=1e-3), F.linear(x, w, b), F.linear(x, w),
            F.dropout(x, 0.5, training=False), F.embedding(idx, w), F.conv2d(img, k, padding=1),
            F.conv2d(img, k, b[:4], stride=2), F.conv2d(img, k, padding="same"), F.max_pool2d(img, 2),
            F.avg_pool2d(img, 3, stride=1, padding=1), F.adaptive_avg_pool2d(img, 1),
            F.batch_norm(img, b[:3], b[:3].abs() + 1, training=False), F.group_norm(img, 3))


def gathers_flips_norms(x, i):
    return (torch.flip(x, [0]), x.flip(-1), x.flip(0, 1), torch.roll(x, 1, 1), torch.roll(x, 2), x.roll(-1, 0),
            torch.gather(x, 1, i), x.gather(0, i[:2] % x.shape[0]), torch.index_select(x, 0, i[:, 0] % x.shape[0]),
            x.index_select(1, i[0]), torch.norm(x), x.norm(dim=-1), x.norm(p=2, dim=0, keepdim=True),
            torch.trunc(x * 3), x.trunc(), F.normalize(x, dim=-1), F.normalize(x))


def attention(q, k, v, m):
    sdpa = F.scaled_dot_product_attention
    return (sdpa(q, k, v), sdpa(q, k, v, is_causal=True), sdpa(q, k, v, attn_mask=m), sdpa(q, k, v, m > 0, scale=.3))


IDX = torch.tensor([[1, 0, 3, 2], [0, 0, 1, 1], [3, 3, 3, 3]])


@pytest.mark.parametrize("fn,args", [
    (operators, (X, Y)), (methods, (X,)), (movement, (X, IMG)), (casts, (X,)), (torch_functions, (X, Y)),
    (functional, (X, W, B, IMG, K, L)), (gathers_flips_norms, (X, IDX)),
    (attention, (t32(2, 3, 5, 4), t32(2, 3, 6, 4), t32(2, 3, 6, 4), t32(5, 6))),
], ids=lambda v: getattr(v, "__name__", ""))
def test_torch_matches_eager(fn, args):
    check(fn, *args, rtol=2e-3, atol=2e-3)


def item_and_scalars(x):
    s = x.sum().item()
    return x * s, x.max().item() > 0, torch.where(x > 0, 1.0, 0.0)


def test_item_and_python_scalars():
    check(item_and_scalars, X)


def test_torch_outputs_are_tensors_and_numpy_outputs_arrays():
    got = check(lambda_free_identity, X)
    assert isinstance(got, torch.Tensor)
    assert isinstance(check(lambda_free_identity, X.numpy()), np.ndarray)


def lambda_free_identity(x):
    return x * 1


WQKV = t32(16, 48, low=-0.5, high=0.5)


def causal_attention(x, n_head=4):
    B, T, C = x.size()
    q, k, v = (x @ WQKV).split(C, dim=2)
    k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
    q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
    v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    mask = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    return (att @ v).transpose(1, 2).contiguous().view(B, T, C)


def test_causal_attention_with_a_symbolic_sequence_length():
    f = cuvil.jit(causal_attention, target=TARGET, dynamic_dims={"x": {1: "T"}})
    for t in (3, 7):
        x = t32(2, t, 16)
        assert_same(f(x), causal_attention(x), rtol=1e-4, atol=1e-5)
    assert f.compile_count == 1


def named_result(x):
    r = x.max(dim=1)
    if x.sum() > 0:
        r = x.min(dim=1)
    return r


def test_named_tuples_merge_and_return():
    for x in (X.abs(), -X.abs()):
        got = check(named_result, x)
        assert torch.equal(got.indices, named_result(x).indices)
