"""Small models for the CUDA backend's tests (torch only to build them: each becomes IR through torch.export)."""
from __future__ import annotations

import numpy as np

from cuvil.backends.cuda import codegen
from cuvil.compiler import clone_module
from cuvil.passes import default_pipeline, run_pipeline


def tiny_cnn():
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), nn.ReLU6(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(8, 5)).eval()
    return net, (torch.randn(2, 3, 16, 16),)


def tiny_transformer():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, vocab=50, d=32, heads=4):
            super().__init__()
            self.heads = heads
            self.embed = nn.Embedding(vocab, d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, ids):
            x = self.embed(ids)
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
            return x + self.mlp(self.ln2(x))

    torch.manual_seed(0)
    return Block().eval(), (torch.randint(0, 50, (2, 8)),)


MODELS = {"cnn": tiny_cnn, "transformer": tiny_transformer}


def cuda_module(name: str):
    """The model's IR after the CUDA pipeline, and its example inputs as NumPy arrays."""
    from cuvil.frontends.torch.compile import convert

    net, inputs = MODELS[name]()
    module, _, _ = convert(net, inputs)
    module = clone_module(module)
    run_pipeline(module, default_pipeline("cuda"))
    return module, [np.asarray(x.numpy()) for x in inputs]


def cuda_program(name: str) -> codegen.CudaProgram:
    return codegen.generate(cuda_module(name)[0])
