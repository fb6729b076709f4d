"""Functions the runtime tests export: an MLP with its weights as closure constants, a tensor `if`, a dynamic size."""
import numpy as np

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((256, 512)).astype(np.float32) * 0.05
B1 = RNG.standard_normal(512).astype(np.float32)
W2 = RNG.standard_normal((512, 10)).astype(np.float32) * 0.05


def mlp(x):
    return np.maximum(x @ W1 + B1, 0) @ W2


def branchy(x):
    if x.sum() > 0:
        y = x * 2.0 + 1.0
    else:
        y = -x
    return y


def scaled_rows(x, w):
    return np.tanh(x @ w) * 0.5


def two_outputs(x):
    return x + 1.0, x * x
