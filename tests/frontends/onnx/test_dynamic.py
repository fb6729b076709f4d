"""Symbolic dims: dim_param inputs, shape arithmetic folded at conversion time (Shape -> Gather -> Concat ->
Reshape, Range over a size, ConstantOfShape, Expand), checked at two sizes against ONNX Runtime and against
PyTorch for a model its ONNX exporter wrote with dynamic batch and sequence axes."""
from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest

import cuvil

from .helpers import F32, check_against_ort, helper, model, rand

N = helper.make_node


def _const(name, values, dtype=np.int64):
    return N("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(values, dtype), name))


def _shape_arithmetic_model():
    """y = reshape(x, [b, s * 2, 2]) + the positions 0..s-1 expanded, and a mask of ones of shape [b, s]."""
    nodes = [
        N("Shape", ["x"], ["shp"]), _const("i0", 0), _const("i1", 1), _const("ax0", [0]), _const("two", [2]),
        N("Gather", ["shp", "i0"], ["b"], axis=0), N("Gather", ["shp", "i1"], ["s"], axis=0),
        N("Mul", ["s", "two_s"], ["s2"]), _const("two_s", 2),
        N("Unsqueeze", ["b", "ax0"], ["b1"]), N("Unsqueeze", ["s2", "ax0"], ["s21"]),
        N("Concat", ["b1", "s21", "two"], ["target"], axis=0),
        N("Reshape", ["x", "target"], ["r"]),
        _const("zero", 0), _const("one", 1),
        N("Range", ["zero", "s", "one"], ["pos"]),
        N("Cast", ["pos"], ["posf"], to=onnx.TensorProto.FLOAT),
        N("Concat", ["b1", "s1"], ["bs"], axis=0), N("Unsqueeze", ["s", "ax0"], ["s1"]),
        N("Expand", ["posf", "bs"], ["pos2"]),
        N("ConstantOfShape", ["bs"], ["ones"], value=onnx.numpy_helper.from_array(np.float32([1]))),
        N("Add", ["pos2", "ones"], ["mask"]),
        N("Slice", ["x", "zero1", "s1", "one1"], ["head"]), _const("zero1", [0]), _const("one1", [1]),
    ]
    nodes = _topological(nodes)
    return model(nodes, [("x", F32, ["batch", "seq", 4])],
                 [("r", F32, None), ("mask", F32, None), ("head", F32, None)], opset=17)


def _topological(nodes):
    """The nodes ordered so that each comes after the nodes it reads (the list above is written by meaning)."""
    done, out, pending = {"x"}, [], list(nodes)
    while pending:
        for n in pending:
            if all(i in done for i in n.input):
                out.append(n)
                done.update(n.output)
                pending.remove(n)
                break
    return out


def test_shape_arithmetic_folds_to_symbolic_dims():
    proto = _shape_arithmetic_model()
    m = cuvil.load_onnx(proto)
    text = cuvil.inspect_ir(m)
    assert "shape_of" not in text and "f32[batch,2*seq,2]" in text
    assert str(m.outputs[0]) == "r: f32[batch,2*seq,2]" and str(m.outputs[1]) == "mask: f32[batch,seq]"
    for batch, seq in [(1, 3), (3, 5)]:
        check_against_ort(proto, {"x": rand(batch, seq, 4, seed=batch)})


def test_unnamed_dims_get_fresh_symbols():
    proto = model([N("Relu", ["x"], ["y"])], [("x", F32, [None, 3, None])], [("y", F32, None)])
    m = cuvil.load_onnx(proto)
    assert str(m.inputs[0]) == "x: f32[x_0,3,x_2]"
    for shape in [(1, 3, 2), (4, 3, 7)]:
        assert m(rand(*shape))[0].shape == shape


def test_unrelated_dims_that_must_match_are_checked_at_call_time():
    proto = model([N("Add", ["a", "b"], ["y"])], [("a", F32, ["n"]), ("b", F32, ["m"])], [("y", F32, None)])
    m = cuvil.load_onnx(proto)
    np.testing.assert_array_equal(m(np.float32([1, 2]), np.float32([3, 4]))[0], [4, 6])
    with pytest.raises(cuvil.ShapeError):
        m(np.float32([1, 2]), np.float32([3, 4, 5]))


def test_mod_by_a_size_above_the_constant_folds():
    """torch.roll(x.reshape(b, -1), 3, 1) as the dynamo exporter writes it: Slice bounds (-3) mod (4*seq), which
    is 4*seq - 3 for every seq >= 1, and 2 mod (4*seq) = 2."""
    nodes = [
        _const("flat", [0, -1]), N("Reshape", ["x", "flat"], ["v"]), N("Shape", ["v"], ["n"], start=1, end=2),
        _const("neg3", [-3]), N("Mod", ["neg3", "n"], ["k"], fmod=0), _const("two", [2]), N("Mod", ["two", "n"], ["j"]),
        _const("zero", [0]), _const("axis", [1]),
        N("Slice", ["v", "k", "n", "axis"], ["tail"]), N("Slice", ["v", "zero", "k", "axis"], ["head"]),
        N("Concat", ["tail", "head"], ["rolled"], axis=1), N("Slice", ["v", "j", "n", "axis"], ["rest"]),
    ]
    proto = model(nodes, [("x", F32, ["batch", "seq", 4])], [("rolled", F32, None), ("rest", F32, None)])
    m = cuvil.load_onnx(proto)
    assert str(m.outputs[0]) == "rolled: f32[batch,4*seq]" and str(m.outputs[1]) == "rest: f32[batch,4*seq-2]"
    for batch, seq in [(1, 1), (2, 3)]:
        check_against_ort(proto, {"x": rand(batch, seq, 4, seed=seq)})


def test_torch_exported_block_with_dynamic_batch_and_sequence():
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj, self.norm, self.emb = torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Embedding(10, 8)

        def forward(self, x, ids):
            b, t, c = x.shape
            h = self.norm(self.proj(x)) + self.emb(ids)
            h = h.reshape(b, t, 2, 4).transpose(1, 2)
            causal = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
            scores = (h @ h.transpose(-1, -2) / 2.0).masked_fill(causal, float("-inf"))
            out = (torch.softmax(scores, -1) @ h).transpose(1, 2).reshape(b, t, c)
            return out + x, torch.arange(t).unsqueeze(0).expand(b, t), torch.nn.functional.gelu(x).mean(-1)

    torch.manual_seed(0)
    block = Block().eval()
    f = io.BytesIO()
    axes = {0: "batch", 1: "seq"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(block, (torch.randn(2, 5, 8), torch.zeros(2, 5, dtype=torch.long)), f, dynamo=False,
                          input_names=["x", "ids"], output_names=["y", "pos", "g"], opset_version=17,
                          dynamic_axes={"x": axes, "ids": axes})
    m = cuvil.load_onnx(f.getvalue())
    assert [str(s) for s in m.inputs] == ["x: f32[batch,seq,8]", "ids: i64[batch,seq]"]
    for b, t in [(1, 3), (3, 7)]:
        x, ids = torch.randn(b, t, 8), torch.randint(0, 10, (b, t))
        with torch.no_grad():
            want = [w.numpy() for w in block(x, ids)]
        for got, w in zip(m(x.numpy(), ids.numpy()), want, strict=True):
            assert got.dtype == w.dtype and got.shape == w.shape
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)


def _truncate_to(n: int):
    """x[:, :n] on a dynamic T, the way torch exports a truncation to a maximum length."""
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])]
    inits = [("s", np.int64([0])), ("e", np.int64([n])), ("a", np.int64([1]))]
    return model(nodes, [("x", F32, ["B", "T"])], [("y", F32, None)], inits)


def test_a_slice_bound_past_a_dynamic_size_clamps_as_in_onnx():
    """The symbolic conversion needs T >= 512; a shorter input is served by a conversion for its own sizes."""
    proto = _truncate_to(512)
    for m in (cuvil.load_onnx(proto), cuvil.load_onnx(proto).optimize()):
        for shape in ((2, 600), (2, 5), (3, 5), (1, 512)):
            x = rand(*shape)
            np.testing.assert_array_equal(m(x)[0], x[:, :512])
