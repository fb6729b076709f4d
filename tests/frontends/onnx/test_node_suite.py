"""A representative slice of ONNX's own backend node tests (ops that CNNs and transformers use, sequences and
optionals), through the reference interpreter, and the sequence cases compiled too. The whole suite is
`python bench/onnx_conformance.py` (docs/onnx_conformance.md)."""
from __future__ import annotations

import importlib
import warnings

import numpy as np
import onnx
import pytest

import cuvil

# Modules of onnx/backend/test/case/node: importing one generates its cases (expanded variants included).
MODULES = ["conv", "convtranspose", "relu", "add", "mul", "div", "sub", "pow", "sqrt", "erf", "tanh", "sigmoid",
           "matmul", "gemm", "reshape", "transpose", "concat", "softmax", "batchnorm", "maxpool", "averagepool",
           "globalaveragepool", "layernormalization", "gelu", "gather", "slice", "unsqueeze", "squeeze", "expand",
           "where", "cast", "resize", "split", "reducemean", "reducesum", "clip", "pad", "shape", "constantofshape",
           "einsum", "topk", "cumsum", "if_", "loop", "scan", "quantizelinear", "dequantizelinear", "attention",
           "flatten", "equal", "range", "trilu", "argmax", "instancenorm", "groupnormalization", "leakyrelu",
           "gridsample", "dft", "rnn", "lstm", "identity", "sequence_map", "sequenceinsert", "splittosequence",
           "optionalgetelement", "optionalhaselement"]
PER_MODULE = 6
SKIP = {"test_attention_4d_causal_fp16": "fp16 rounding of intermediate results differs by one ulp",
        "test_dft_inverse_opset19": "the expected output carries complex64 rounding noise above atol 1e-7"}


def _collect() -> list:
    from onnx.backend.test.case import node

    picked = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in MODULES:
            before = len(node._NodeTestCases)
            try:
                importlib.import_module(f"onnx.backend.test.case.node.{name}")
            except ImportError:
                continue
            picked += node._NodeTestCases[before:before + PER_MODULE]
    return picked


CASES = _collect()


def _arrays(values):
    """Arrays as given; a sequence is a list of arrays, an absent optional None."""
    return [_arrays(v) if isinstance(v, list) else onnx.numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto)
            else v for v in values]


def _check(got: list, expected: list, case) -> None:
    for g, e in zip(got, expected, strict=True):
        if isinstance(e, list) or e is None:
            assert type(g) is type(e), (type(g), type(e))
            if e is not None:
                _check(g, e, case)
            continue
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol)


def _has_sequences(graph) -> bool:
    """Whether a graph (or a subgraph of it) has sequence or optional values: those cases also run compiled."""
    values = list(graph.input) + list(graph.output) + list(graph.value_info)
    return any(v.type.WhichOneof("value") in ("sequence_type", "optional_type") for v in values) or any(
        n.op_type.startswith(("Sequence", "Optional", "SplitTo", "ConcatFrom")) or
        any(a.type == onnx.AttributeProto.GRAPH and _has_sequences(a.g) for a in n.attribute) for n in graph.node)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_onnx_node_case(case):
    if case.name in SKIP:
        pytest.skip(SKIP[case.name])
    model = cuvil.load_onnx(case.model)
    runs = [model, model.optimize()] if _has_sequences(case.model.graph) else [model]
    for run in runs:
        for inputs, expected in case.data_sets:
            _check(run(*_arrays(inputs)), _arrays(expected), case)


def test_slice_is_representative():
    ops = {n.op_type for c in CASES for n in c.model.graph.node}
    assert len(CASES) > 200 and {"Conv", "MatMul", "Softmax", "If", "Loop", "Scan", "Reshape", "Resize",
                                 "SequenceMap", "OptionalHasElement"} <= ops
