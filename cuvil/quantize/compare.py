"""`compare(model_a, model_b, inputs)`: what a reduced precision costs, output by output."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError


@dataclass(frozen=True)
class OutputError:
    """How far one output of model_b is from model_a's (the reference, usually fp32)."""

    index: int
    max_abs: float
    max_rel: float  # max |b - a| / max |a|: relative to the output's scale, so near-zero elements do not blow up
    cosine: float  # of the flattened outputs; 1.0 when both are zero

    def __str__(self) -> str:
        return (f"output {self.index}: max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}, "
                f"cosine {self.cosine:.6f}")


def compare(model_a, model_b, inputs) -> list:
    """Run both compiled models (anything Cuvil compiles or loads) on `inputs` (a tuple of arguments or a dict of
    named ones) and return an `OutputError` per output of `model_b` against `model_a`."""
    outs_a, outs_b = _outputs(model_a, inputs), _outputs(model_b, inputs)
    if len(outs_a) != len(outs_b):
        raise ShapeError(f"compare: the models give {len(outs_a)} and {len(outs_b)} outputs")
    return [_error(i, a, b) for i, (a, b) in enumerate(zip(outs_a, outs_b))]


def _outputs(model, inputs) -> list:
    result = model(**inputs) if isinstance(inputs, dict) else model(*_as_tuple(inputs))
    return [_array(x) for x in _leaves(result)]


def _as_tuple(inputs) -> tuple:
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def _leaves(result) -> list:
    if isinstance(result, dict):
        return [x for v in result.values() for x in _leaves(v)]
    if isinstance(result, (tuple, list)):
        return [x for v in result for x in _leaves(v)]
    return [result]


def _array(x) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor (torch is not imported here)
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def _error(index: int, a: np.ndarray, b: np.ndarray) -> OutputError:
    if a.shape != b.shape:
        raise ShapeError(f"compare: output {index} has shape {a.shape} in model_a, {b.shape} in model_b")
    diff = np.abs(a - b)
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(a).max()) if a.size else 0.0
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    cosine = float(np.clip(np.dot(a.ravel(), b.ravel()) / norms, -1.0, 1.0)) if norms > 0 else float(max_abs == 0.0)
    return OutputError(index, max_abs, max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else np.inf), cosine)
