"""ONNX Runtime's contrib ops (com.microsoft), each in a small model against ONNX Runtime, and a BERT and a GPT-2
run through its transformer optimiser (fp32, and with MatMulNBits weights)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import cuvil

from .helpers import ort_uint8_gemm_exact, run_ort

N = helper.make_node
F32 = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _model(node, inputs: dict, outputs: list, inits: dict = None, opset: int = 17):
    """A one-node model; `inputs` maps names to example arrays (fed), `inits` to constants."""
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                      for k, v in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9)


def _check(proto, feeds: dict, rtol=1e-4, atol=1e-5, compiled=True):
    want = run_ort(proto, feeds)
    loaded = cuvil.load_onnx(proto)
    for got in [loaded(**feeds)] + ([loaded.optimize()(**feeds)] if compiled else []):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _ms(op, ins, outs, **attrs):
    return N(op, ins, outs, domain="com.microsoft", **attrs)


X = _f(2, 5, 8)


@pytest.mark.parametrize("op,extra,attrs", [
    ("Gelu", {}, {}), ("FastGelu", {"b": _f(8)}, {}), ("BiasGelu", {"b": _f(8)}, {}), ("QuickGelu", {}, {"alpha": 1.3}),
])
def test_activations(op, extra, attrs):
    _check(_model(_ms(op, ["x", *extra], ["y"], **attrs), {"x": X}, ["y"], extra), {"x": X})


@pytest.mark.parametrize("op,inputs,outputs", [
    ("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"], ["y", "", "", "sum"]),
    ("SkipLayerNormalization", ["x", "skip", "gamma"], ["y"]),
    ("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma", "bias"], ["y", "", "", "sum"]),
])
def test_skip_layer_norms(op, inputs, outputs):
    consts = {k: _f(8) for k in ("gamma", "beta", "bias") if k in inputs}
    feeds = {"x": X, "skip": _f(2, 5, 8)}
    _check(_model(_ms(op, inputs, outputs, epsilon=1e-5), feeds, [o for o in outputs if o], consts), feeds)


def test_fused_matmul():
    feeds = {"a": _f(2, 3, 4), "b": _f(2, 5, 3)}
    _check(_model(_ms("FusedMatMul", ["a", "b"], ["y"], alpha=0.5, transA=1, transB=1), feeds, ["y"]), feeds)


@pytest.mark.parametrize("bits,zero_points", [(4, True), (4, False), (8, True)])
def test_matmul_nbits(bits, zero_points):
    k, n, block = 40, 6, 16
    blocks = -(-k // block)
    q = RNG.integers(0, 2 ** bits, (n, blocks, block)).astype(np.uint8)
    per = 8 // bits
    packed = sum(q.reshape(n, blocks, block // per, per)[..., j] << (bits * j) for j in range(per)).astype(np.uint8)
    inits = {"w": packed, "s": (RNG.random(n * blocks) * 0.1).astype(np.float32), "bias": _f(n)}
    inputs = ["a", "w", "s", "zp" if zero_points else "", "", "bias"]
    if zero_points:
        zq = RNG.integers(0, 2 ** bits, (n, -(-blocks // per) * per)).astype(np.uint8)
        inits["zp"] = sum(zq.reshape(n, -1, per)[..., j] << (bits * j) for j in range(per)).astype(np.uint8)
    feeds = {"a": _f(3, k)}
    node = _ms("MatMulNBits", inputs, ["y"], K=k, N=n, bits=bits, block_size=block)
    _check(_model(node, feeds, ["y"], inits), feeds, rtol=1e-4, atol=1e-4)


def test_dynamic_quantize_matmul():
    """Against ONNX Runtime where it multiplies uint8 by int8 exactly, else against the op's definition:
    `a` quantised as DynamicQuantizeLinear does (uint8, range including 0), exact integer products."""
    rng = np.random.default_rng(7)
    inits = {"b": rng.integers(-128, 127, (8, 6)).astype(np.int8), "bs": np.float32([0.02]),
             "bz": np.int8([3]), "bias": rng.standard_normal(6).astype(np.float32)}
    feeds = {"a": rng.standard_normal((4, 8)).astype(np.float32)}
    proto = _model(_ms("DynamicQuantizeMatMul", ["a", "b", "bs", "bz", "bias"], ["y"]), feeds, ["y"], inits)
    if ort_uint8_gemm_exact():
        _check(proto, feeds, rtol=1e-5, atol=1e-5)
        return
    a = feeds["a"]
    scale = np.float32((max(a.max(), 0) - min(a.min(), 0)) / 255)
    zero = np.clip(np.rint(-min(a.min(), 0) / scale), 0, 255)
    qa = np.clip(np.rint(a / scale) + zero, 0, 255) - zero
    products = qa.astype(np.int64) @ (inits["b"].astype(np.int64) - 3)
    want = (products.astype(np.float32) * (scale * np.float32(0.02)) + inits["bias"]).astype(np.float32)
    loaded = cuvil.load_onnx(proto)
    for got in (loaded(**feeds)[0], loaded.optimize()(**feeds)[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _quantized(*shape):
    return RNG.integers(0, 255, shape).astype(np.uint8)


@pytest.mark.parametrize("op,ins,attrs", [
    ("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], {}),
    ("QLinearMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], {}),
    ("QLinearSigmoid", ["a", "as", "az", "ys", "yz"], {}),
    ("QLinearLeakyRelu", ["a", "as", "az", "ys", "yz"], {"alpha": 0.1}),
    ("QLinearGlobalAveragePool", ["a", "as", "az", "ys", "yz"], {}),
    ("QLinearAveragePool", ["a", "as", "az", "ys", "yz"], {"kernel_shape": [2, 2], "strides": [1, 1]}),
    ("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz"], {"axis": 1}),
])
def test_qlinear(op, ins, attrs):
    """Within one step of the quantised grid (ONNX Runtime rounds some of these in fixed point)."""
    feeds = {"a": _quantized(1, 3, 4, 4), "b": _quantized(1, 3, 4, 4)}
    inits = {"as": np.float32(0.05), "az": np.uint8(120), "bs": np.float32(0.03), "bz": np.uint8(100),
             "ys": np.float32(0.07), "yz": np.uint8(128)}
    feeds = {k: v for k, v in feeds.items() if k in ins}
    proto = _model(_ms(op, ins, ["y"], **attrs), feeds, ["y"], {k: v for k, v in inits.items() if k in ins})
    want = run_ort(proto, feeds)[0]
    loaded = cuvil.load_onnx(proto)
    for got in (loaded(**feeds)[0], loaded.optimize()(**feeds)[0]):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


@pytest.mark.parametrize("mask", ["none", "raw", "lengths"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention(mask, unidirectional):
    feeds = {"x": _f(2, 5, 8)}
    inits = {"w": _f(8, 24) * 0.3, "bias": _f(24) * 0.1}
    ins = ["x", "w", "bias"]
    if mask == "raw":
        feeds["m"] = np.int32([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
        ins.append("m")
    elif mask == "lengths":
        feeds["m"] = np.int32([3, 5])
        ins.append("m")
    node = _ms("Attention", ins, ["y"], num_heads=2, unidirectional=unidirectional)
    _check(_model(node, feeds, ["y"], inits), feeds)


def test_multi_head_attention():
    feeds = {"q": _f(2, 4, 8), "k": _f(2, 6, 8), "v": _f(2, 6, 8), "m": np.int32([[1] * 6, [1, 1, 1, 1, 0, 0]])}
    node = _ms("MultiHeadAttention", ["q", "k", "v", "bias", "m"], ["y", "pk", "pv"], num_heads=2)
    _check(_model(node, feeds, ["y", "pk", "pv"], {"bias": _f(24)}), feeds)


@pytest.mark.parametrize("rotary", [0, 1])
def test_group_query_attention(rotary):
    b, s, heads, kv_heads, d = 2, 5, 4, 2, 16
    feeds = {"q": _f(b, s, heads * d), "k": _f(b, s, kv_heads * d), "v": _f(b, s, kv_heads * d)}
    inits = {"seqlens": np.int32([s - 1, s - 1]), "total": np.int32(s)}
    ins = ["q", "k", "v", "", "", "seqlens", "total"]
    if rotary:
        angles = np.arange(16)[:, None] * (1e-2 ** (np.arange(d // 2) / (d // 2)))[None]
        inits.update(cos=np.cos(angles).astype(np.float32), sin=np.sin(angles).astype(np.float32))
        ins += ["cos", "sin"]
    node = _ms("GroupQueryAttention", ins, ["y", "pk", "pv"], num_heads=heads, kv_num_heads=kv_heads,
               do_rotary=rotary)
    _check(_model(node, feeds, ["y", "pk", "pv"], inits), feeds)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding(interleaved):
    angles = np.arange(16)[:, None] * (1e-2 ** (np.arange(4) / 4))[None]
    inits = {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32),
             "pos": np.int64([[3, 4, 5, 6, 7], [0, 1, 2, 3, 4]])}
    feeds = {"x": _f(2, 5, 16)}
    node = _ms("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], num_heads=2, interleaved=interleaved)
    _check(_model(node, feeds, ["y"], inits), feeds)


def test_embed_layer_norm():
    feeds = {"ids": RNG.integers(0, 30, (2, 6)).astype(np.int32), "seg": RNG.integers(0, 2, (2, 6)).astype(np.int32),
             "mask": np.int32([[1] * 6, [1, 1, 1, 0, 0, 0]])}
    inits = {"word": _f(30, 8), "pos": _f(16, 8), "segw": _f(2, 8), "gamma": _f(8), "beta": _f(8)}
    node = _ms("EmbedLayerNormalization", ["ids", "seg", "word", "pos", "segw", "gamma", "beta", "mask"],
               ["y", "mask_index"], epsilon=1e-5)
    _check(_model(node, feeds, ["y", "mask_index"], inits), feeds)


def test_malformed_qlinear_concat_is_named():
    feeds = {"a": _quantized(1, 3)}
    node = _ms("QLinearConcat", ["a"], ["y"], axis=1, name="cat")
    with pytest.raises(cuvil.ShapeError, match=r"QLinearConcat node 'cat'.*Y_scale, Y_zero_point, then"):
        cuvil.load_onnx(_model(node, feeds, ["y"]))


def test_past_cache_is_refused_by_name():
    feeds = {"x": _f(2, 5, 8), "past": _f(2, 2, 2, 3, 4)}
    node = _ms("Attention", ["x", "w", "", "", "past"], ["y"], num_heads=2)
    with pytest.raises(cuvil.UnsupportedError, match=r"Attention node .* input 4 \(a past key/value cache\)"):
        cuvil.load_onnx(_model(node, feeds, ["y"], {"w": _f(8, 24)}))


def _export(model, path, inputs: dict):
    import torch

    class Wrapped(torch.nn.Module):  # keyword inputs, the last hidden state out
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            return self.model(**dict(zip(inputs, args))).last_hidden_state
    torch.onnx.export(Wrapped(), tuple(inputs.values()), str(path), input_names=list(inputs), output_names=["h"],
                      opset_version=17, dynamo=False)


@pytest.fixture(scope="module")
def transformer_models(tmp_path_factory):
    """A tiny BERT and GPT-2 (random weights) exported by torch.onnx and fused by ONNX Runtime's optimiser."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from onnxruntime.transformers import optimizer
    masking = getattr(transformers, "masking_utils", None)
    if masking is not None and hasattr(masking, "find_packed_sequence_indices"):  # torch.diff has no ONNX export
        masking.find_packed_sequence_indices = lambda position_ids: None
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 8))
    small = dict(vocab_size=100, attn_implementation="eager")
    bert = transformers.BertModel(transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                          intermediate_size=64, max_position_embeddings=32, **small))
    gpt2 = transformers.GPT2Model(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=32,
                                                          use_cache=False, **small))
    out = {}
    for name, model, inputs in [("bert", bert, {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                                                "token_type_ids": torch.zeros_like(ids)}),
                                ("gpt2", gpt2, {"input_ids": ids})]:
        path = tmp_path_factory.mktemp(name) / f"{name}.onnx"
        _export(model.eval(), path, inputs)
        fused = optimizer.optimize_model(str(path), model_type=name, num_heads=4, hidden_size=32).model
        out[name] = (fused, {k: v.numpy() for k, v in inputs.items()})
    return out


@pytest.mark.parametrize("name", ["bert", "gpt2"])
@pytest.mark.parametrize("weights", ["fp32", "MatMulNBits"])
def test_optimised_transformers(transformer_models, name, weights):
    proto, feeds = transformer_models[name]
    if weights == "MatMulNBits":
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
        quantizer = MatMulNBitsQuantizer(proto, block_size=16, is_symmetric=False)
        quantizer.process()
        proto = quantizer.model.model
    contrib = {n.op_type for n in proto.graph.node if n.domain == "com.microsoft"}
    assert "SkipLayerNormalization" in contrib and (weights == "fp32" or "MatMulNBits" in contrib), contrib
    _check(proto, feeds, rtol=1e-4, atol=1e-5)
