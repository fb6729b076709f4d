"""Shared pieces of the ONNX frontend tests: building small models and comparing with ONNX Runtime."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import cuvil

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(nodes, inputs, outputs, initializers=(), opset: int = 17, name: str = "g"):
    """A ModelProto from nodes and (name, elem type, shape) triples for the inputs and outputs."""
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def run_ort(proto, feeds: dict) -> list:
    import onnxruntime

    sess = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def ort_uint8_gemm_exact() -> bool:
    """Whether ONNX Runtime multiplies uint8 by int8 exactly on this CPU: with VNNI. Its AVX2/AVX-512BW fallback
    (`vpmaddubsw`) saturates each pair of products at int16, so there it is no oracle for uint8 activations."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return bool({"avx512_vnni", "avx_vnni"} & set(flags.split()))


def check_against_ort(proto, feeds: dict, rtol: float = 1e-5, atol: float = 1e-6):
    """Cuvil's interpreter and ONNX Runtime give the same outputs (values, dtypes, shapes)."""
    got = cuvil.load_onnx(proto)(**feeds)
    want = run_ort(proto, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def rand(*shape, seed: int = 0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


__all__ = ["F32", "I64", "check_against_ort", "helper", "model", "onnx", "rand", "run_ort"]
