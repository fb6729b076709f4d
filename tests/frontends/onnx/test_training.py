"""The training domain's optimizer steps (Adagrad, Momentum, Adam) against ONNX's reference, at T = 0 (no bias
correction, beta' = 1) and T > 0, one and two optimized tensors, interpreted and compiled."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx.reference import ReferenceEvaluator

import cuvil

from .helpers import helper

TRAINING = "ai.onnx.preview.training"
ATTRS = {"Adagrad": {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.001},
         "Momentum": {"alpha": 0.95, "beta": 0.85, "mode": "standard", "norm_coefficient": 0.01},
         "Nesterov": {"alpha": 0.9, "beta": 0.7, "mode": "nesterov", "norm_coefficient": 0.02},
         "Adam": {"alpha": 0.9, "beta": 0.8, "epsilon": 1e-3, "norm_coefficient": 0.001, "norm_coefficient_post": 0.01}}
STATES = {"Adagrad": ("G", "H"), "Momentum": ("G", "V"), "Nesterov": ("G", "V"), "Adam": ("G", "V", "H")}
OUTS = {"Adagrad": ("X", "H"), "Momentum": ("X", "V"), "Nesterov": ("X", "V"), "Adam": ("X", "V", "H")}


def _optimizer(kind: str, tensors: int, shape=(3, 4)):
    names = [f"{p}{i}" for p in ("X",) + STATES[kind] for i in range(tensors)]
    outs = [f"{p}{i}_new" for p in OUTS[kind] for i in range(tensors)]
    op = "Momentum" if kind == "Nesterov" else kind
    node = helper.make_node(op, ["R", "T"] + names, outs, domain=TRAINING, **ATTRS[kind])
    inputs = [helper.make_tensor_value_info("R", T.FLOAT, []), helper.make_tensor_value_info("T", T.INT64, [])]
    inputs += [helper.make_tensor_value_info(n, T.FLOAT, shape) for n in names]
    graph = helper.make_graph([node], "step", inputs, [helper.make_tensor_value_info(n, T.FLOAT, shape) for n in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(TRAINING, 1)], ir_version=8)


@pytest.mark.parametrize("step", [0, 3])
@pytest.mark.parametrize("tensors", [1, 2])
@pytest.mark.parametrize("kind", sorted(ATTRS))
def test_matches_onnx_reference(kind, tensors, step):
    proto = _optimizer(kind, tensors)
    rng = np.random.default_rng(tensors + step)
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(step, np.int64)}
    for v in proto.graph.input[2:]:
        a = rng.standard_normal((3, 4)).astype(np.float32)
        feeds[v.name] = np.abs(a) if v.name.startswith("H") else a  # squared-gradient sums are >= 0
    want = ReferenceEvaluator(proto).run(None, feeds)
    loaded = cuvil.load_onnx(proto)
    for got in (loaded(**feeds), loaded.optimize()(**feeds)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == np.float32 and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_wrong_number_of_inputs_is_named():
    proto = _optimizer("Adam", 1)
    proto.graph.node[0].input.pop()
    proto.graph.input.pop()
    proto.graph.output.pop()
    with pytest.raises(cuvil.errors.CuvilError, match="4 inputs per optimized tensor"):
        cuvil.load_onnx(onnx.load_from_string(proto.SerializeToString()))
