"""GPT-2 small's decode step: one token after 64 cached positions (the K/V cache an input), 12 layers of d=768.

A plain PyTorch form (its Linears on 3-D activations export as MatMul + Add, which ONNX Runtime's MatMulNBits
quantizer rewrites) with random weights; the step reads every weight once, so its time is the bytes of the weights.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .workloads import Built, _rng


class DecodeBlock(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, past_k, past_v):
        b, t, d = x.shape
        q, k, v = (y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for y in self.qkv(self.ln1(x)).split(d, dim=-1))
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class DecodeStep(nn.Module):
    def __init__(self, layers: int = 12, d: int = 768, heads: int = 12):
        super().__init__()
        self.blocks = nn.ModuleList(DecodeBlock(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)

    def forward(self, x, past_k, past_v):
        for i, block in enumerate(self.blocks):
            x = block(x, past_k[i], past_v[i])
        return self.ln(x)


def decode_workload(layers: int = 12, d: int = 768, heads: int = 12, past: int = 64) -> Built:
    g = _rng(6)
    model = DecodeStep(layers, d, heads)
    x = torch.randn(1, 1, d, generator=g)
    cache = [torch.randn(layers, 1, heads, past, d // heads, generator=g) for _ in range(2)]
    return Built(model, (x, *cache))
