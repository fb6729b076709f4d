"""The example's model: a two-layer classifier compiled with `@cuvil.jit` for every batch size and exported to a
`.cuv` (random weights: the point is the plumbing)."""
import numpy as np

import cuvil

FEATURES, HIDDEN, CLASSES = 64, 128, 10
RNG = np.random.default_rng(0)
W1 = (RNG.standard_normal((FEATURES, HIDDEN)) * 0.1).astype(np.float32)
B1 = (RNG.standard_normal(HIDDEN) * 0.1).astype(np.float32)
W2 = (RNG.standard_normal((HIDDEN, CLASSES)) * 0.1).astype(np.float32)


@cuvil.jit(dynamic_dims={"x": {0: "batch"}})
def classify(x):
    return np.maximum(x @ W1 + B1, 0.0) @ W2


def export(path: str) -> str:
    """Compile `classify` and write it to `path`; its input is `x`, its output `output_0`."""
    cuvil.export(classify, path, example_inputs=(np.zeros((4, FEATURES), np.float32),))
    return path


def rows(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, FEATURES)).astype(np.float32)
