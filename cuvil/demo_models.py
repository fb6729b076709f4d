"""Built-in models for `cuvil demo` and the quick start, built from code with fixed random weights."""
from __future__ import annotations

import numpy as np

from .ir import Builder, Location, Module, TensorType, sym


def mlp_weights(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"w1": (rng.standard_normal((784, 256)) / 28).astype(np.float32),
            "b1": (rng.standard_normal(256) * 0.1).astype(np.float32),
            "w2": (rng.standard_normal((256, 10)) / 16).astype(np.float32),
            "b2": (rng.standard_normal(10) * 0.1).astype(np.float32)}


def mlp_module(batch=None, seed: int = 0) -> tuple[Module, dict]:
    """relu(x @ w1 + b1) @ w2 + b2 with a symbolic batch unless `batch` fixes it."""
    weights = mlp_weights(seed)
    n = sym("batch") if batch is None else batch
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (n, 784))], ["x"])
    h = b.args[0]
    for i, (w, bias) in enumerate([("w1", "b1"), ("w2", "b2")]):
        b.loc = Location(node=f"demo:linear{i + 1}")
        y = b.matmul(h, b.constant(weights[w], w))
        h = b.add(y, b.broadcast_to(b.constant(weights[bias], bias), shape=y.type.shape))
        if i == 0:
            h = b.relu(h)
    b.ret(h)
    return m, weights


def mlp_numpy(x: np.ndarray, w: dict) -> np.ndarray:
    return np.maximum(x @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"]
