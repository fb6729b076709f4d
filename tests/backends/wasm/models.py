"""The models the wasm32 tests export: an MLP, a CNN (blocked convolutions), a data-dependent loop, a dynamic
batch and a small transformer. Each comes with the calls to compare (several input sets where sizes vary)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import cuvil

MODELS = ("mlp", "cnn", "control_flow", "dynamic", "transformer")
RNG = np.random.default_rng(7)
W1 = RNG.standard_normal((64, 128)).astype(np.float32) * 0.1
B1 = RNG.standard_normal(128).astype(np.float32)
W2 = RNG.standard_normal((128, 10)).astype(np.float32) * 0.1


@dataclass
class Model:
    obj: object  # what cuvil.export takes
    example: tuple | None  # example_inputs for cuvil.export (None: the signatures compiled so far)
    calls: list  # input lists to run on every target


def mlp_fn(x):
    return np.tanh(np.maximum(x @ W1 + B1, 0) @ W2)


def grow(x):
    while x.sum() < 100.0:
        x = x * 2.0 + 1.0
    return x


def affine(x, w):
    return np.maximum(x @ w + 1.0, 0.0)


def build(name: str) -> Model:
    return globals()[f"_{name}"]()


def _mlp() -> Model:
    x = RNG.standard_normal((4, 64)).astype(np.float32)
    return Model(cuvil.jit(mlp_fn), (x,), [[x]])


def _cnn() -> Model:
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3),
                              torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Conv2d(32, 16, 1), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)).eval()
    x = torch.randn(2, 3, 20, 20)
    return Model(cuvil.compile(net, (x,)), None, [[x.numpy()]])


def _control_flow() -> Model:
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    fn = cuvil.jit(grow)
    return Model(fn, (x,), [[x], [x * 0.01]])


def _dynamic() -> Model:
    fn = cuvil.jit(affine, dynamic=True)
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    calls = [[RNG.standard_normal((n, 3)).astype(np.float32), w] for n in (5, 1, 17)]
    return Model(fn, tuple(calls[0]), calls)


def _transformer() -> Model:
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    net = torch.nn.Sequential(layer, torch.nn.Linear(32, 8)).eval()
    x = torch.randn(2, 6, 32)
    return Model(cuvil.compile(net, (x,)), None, [[x.numpy()]])
