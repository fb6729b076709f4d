"""Op test cases: each op's inputs, attributes and an independent expected output (NumPy or ONNX).

`tests/ops/test_registry_sweep.py` runs every case through build -> verify -> print/parse -> save/load ->
interpret, and checks composite ops' decompositions against their references. Add cases for a new op in
the `cases_*.py` module of its family; each module exports `CASES: list[Case]`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

# Tolerances per dtype, used unless a case states its own: references compute floats in float64 and round
# once, so an independent NumPy oracle in the same dtype differs by a few ulps at most.
TOLERANCES = {"float64": (1e-12, 1e-12), "float32": (1e-5, 1e-6), "float16": (2e-3, 1e-3),
              "bfloat16": (1.6e-2, 1e-2), "complex64": (1e-5, 1e-6), "complex128": (1e-12, 1e-12)}


@dataclass
class Case:
    op: str
    inputs: list
    attrs: dict = field(default_factory=dict)
    expected: Optional[Callable] = None  # inputs -> list of arrays (an oracle independent of the reference)
    rtol: Optional[float] = None
    atol: Optional[float] = None
    dims: Optional[dict] = None  # operand index -> {axis: symbol name}: build with symbolic dimensions
    id: str = ""

    def name(self) -> str:
        return f"{self.op}-{self.id}" if self.id else self.op

    def tolerance(self, dtype) -> tuple:
        rtol, atol = TOLERANCES.get(np.dtype(dtype).name, (0, 0))
        return (self.rtol if self.rtol is not None else rtol, self.atol if self.atol is not None else atol)


def rand(*shape, dtype="float32", low=-2.0, high=2.0, seed=0):
    """Deterministic random data for a case."""
    rng = np.random.default_rng(seed + sum(shape) * 7 + len(shape))
    if np.dtype(dtype).kind in "iu":
        return rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) < 0.5
    return rng.uniform(low, high, size=shape).astype(dtype)


def onnx_node(op_type: str, inputs: list, attrs: Optional[dict] = None, n_outputs: int = 1, opset: int = 18):
    """Expected outputs from ONNX's own reference implementation for one node (an independent oracle)."""
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    in_names = [f"x{i}" for i in range(len(inputs))]
    out_names = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, in_names, out_names, **(attrs or {}))
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype), np.shape(x))
          for n, x in zip(in_names, inputs)]
    outs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in out_names]
    graph = helper.make_graph([node], "case", vi, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, dict(zip(in_names, inputs)))
