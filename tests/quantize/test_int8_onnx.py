"""Pre-quantized ONNX models on the int8/int4 kernels (not dequantised to fp32), against ONNX Runtime on the same
files: QDQ (quantize_static), QOperator (QLinearConv, QGemm; uint8 and int8 activations), quantize_dynamic's
MatMulInteger chains and MatMulNBits. Tolerances: quantized paths within one output quantization step of ONNX
Runtime on nearly every element (the requantisation rounds once in float on each side) and cosine >= 0.999;
MatMulNBits (exact 4-bit weights, f32 arithmetic) within 1e-4.

ONNX Runtime is the oracle for uint8 activations only where its kernels compute uint8 x int8 exactly, on VNNI: the
AVX2/AVX-512BW fallback (`vpmaddubsw`) saturates pairs of products at int16, which costs it 10-25% of the output on
the dynamic MLP below. Elsewhere the exact references are the interpreter (integer semantics of the ONNX spec) and,
for quantize_dynamic, the fp32 model."""
import numpy as np
import pytest

import cuvil
from tests.frontends.onnx.helpers import ort_uint8_gemm_exact, run_ort

torch = pytest.importorskip("torch")
quantization = pytest.importorskip("onnxruntime.quantization")


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.c3 = torch.nn.Conv2d(16, 24, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(24 * 4 * 4, 10)

    def forward(self, x):
        h = torch.relu(self.c1(x))
        h = torch.relu(self.c2(h) + h)
        return self.fc(torch.flatten(torch.relu(self.c3(h)), 1))


def _inputs(n, shape=(1, 3, 8, 8), name="x"):
    return [{name: np.random.default_rng(i).standard_normal(shape).astype(np.float32)} for i in range(n)]


class _Reader(quantization.CalibrationDataReader):
    def __init__(self, feeds):
        self.it = iter(feeds)

    def get_next(self):
        return next(self.it, None)


def _export(model, example, path):
    torch.onnx.export(model.eval(), example, str(path), input_names=["x"], output_names=["y"], opset_version=17,
                      dynamo=False)
    return path


@pytest.fixture(scope="module")
def cnn_file(tmp_path_factory):
    torch.manual_seed(0)
    return _export(_Net(), torch.randn(1, 3, 8, 8), tmp_path_factory.mktemp("int8") / "cnn.onnx")


def _ort_exact(activations: str) -> bool:
    """Whether ONNX Runtime's integer GEMMs are exact for these activations on this CPU (see the docstring)."""
    return activations == "QInt8" or ort_uint8_gemm_exact()


def _ops(loaded):
    return {op.name for op in loaded.module.main.walk()}


def _compare(path, feeds, activations):
    import onnx
    proto = onnx.load(str(path))
    loaded = cuvil.load_onnx(proto)
    compiled = loaded.optimize()
    for feed in feeds:
        want = run_ort(proto, feed)[0] if _ort_exact(activations) else loaded(**feed)[0]
        got = compiled(**feed)[0]
        a, b = got.ravel().astype(np.float64), want.ravel().astype(np.float64)
        assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) >= 0.999
        step = np.abs(np.diff(np.unique(want))).min() if np.unique(want).size > 1 else 1.0
        assert np.mean(np.abs(got - want) > step * 1.01) <= 0.02, np.abs(got - want).max()
    return loaded


@pytest.mark.parametrize("fmt,activations", [("QDQ", "QUInt8"), ("QOperator", "QUInt8"), ("QOperator", "QInt8")])
def test_static_quantized_cnn_runs_on_the_int8_kernels(cnn_file, tmp_path, fmt, activations):
    out = tmp_path / f"cnn_{fmt}.onnx"
    quantization.quantize_static(str(cnn_file), str(out), _Reader(_inputs(8)),
                                 quant_format=getattr(quantization.QuantFormat, fmt), per_channel=True,
                                 activation_type=getattr(quantization.QuantType, activations),
                                 weight_type=quantization.QuantType.QInt8)
    loaded = _compare(out, _inputs(4), activations)
    ops = _ops(loaded)
    assert "qconv_i8" in ops and "qlinear_i8" in ops and "conv" not in ops and "matmul" not in ops


def test_dynamic_quantized_mlp_runs_on_the_int8_kernels(tmp_path):
    torch.manual_seed(1)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    src = _export(mlp, torch.randn(5, 32), tmp_path / "mlp.onnx")
    out = tmp_path / "mlp_dyn.onnx"
    quantization.quantize_dynamic(str(src), str(out), weight_type=quantization.QuantType.QInt8)
    import onnx
    proto = onnx.load(str(out))
    assert "MatMulInteger" in {n.op_type for n in proto.graph.node}
    loaded = cuvil.load_onnx(proto)
    assert "qlinear_i8" in _ops(loaded) and "matmul" not in _ops(loaded)
    for feed in _inputs(3, (5, 32)):
        got, fp32 = loaded.optimize()(**feed)[0], run_ort(onnx.load(str(src)), feed)[0]
        # per-row ranges here, one range per tensor in ONNX Runtime: both within the quantization noise of fp32
        assert np.abs(got - fp32).max() <= 0.02 * np.abs(fp32).max()
        if _ort_exact("QUInt8"):
            assert np.abs(got - run_ort(proto, feed)[0]).max() <= 0.05 * np.abs(fp32).max()


@pytest.mark.parametrize("block,rows", [(32, 1), (64, 1), (128, 1), (32, 7)])
def test_matmul_nbits_runs_on_the_int4_kernel(tmp_path, block, rows):
    """Rows 1 (decode: weights unpacked inside the dot product) and 7 (blocks dequantised for the fp32 GEMM)."""
    torch.manual_seed(2)
    mlp = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    import onnx
    proto = onnx.load(str(_export(mlp, torch.randn(1, rows, 128), tmp_path / "m.onnx")))  # 3-D: MatMul, not Gemm
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    quantizer = MatMulNBitsQuantizer(proto, block_size=block, is_symmetric=False)
    quantizer.process()
    proto = quantizer.model.model
    assert "MatMulNBits" in {n.op_type for n in proto.graph.node}
    loaded = cuvil.load_onnx(proto)
    assert "linear_i4" in _ops(loaded) and "matmul" not in _ops(loaded)
    for feed in _inputs(2, (1, rows, 128)):
        want = run_ort(proto, feed)[0]
        np.testing.assert_allclose(loaded.optimize()(**feed)[0], want, rtol=1e-4, atol=1e-4)


def test_unsupported_forms_keep_the_exact_path(tmp_path):
    """A QLinearMatMul with a nonzero weight zero point is not the kernels' form: the exact converter runs it."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(v, n) for n, v in {
        "as": np.float32(0.02), "az": np.uint8(120), "b": rng.integers(-100, 100, (8, 6)).astype(np.int8),
        "bs": np.float32(0.01), "bz": np.int8(3), "ys": np.float32(0.05), "yz": np.uint8(128)}.items()]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", T.UINT8, [4, 8])],
                              [helper.make_tensor_value_info("y", T.UINT8, [4, 6])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    loaded = cuvil.load_onnx(proto)
    assert "qlinear_i8" not in _ops(loaded)
    feed = {"a": rng.integers(0, 255, (4, 8)).astype(np.uint8)}
    products = (feed["a"].astype(np.int64) - 120) @ (numpy_helper.to_array(inits[2]).astype(np.int64) - 3)
    multiplier = np.float32(0.02) * np.float32(0.01) / np.float32(0.05)  # in f32, as the spec's reference does
    exact = np.clip(np.rint(products.astype(np.float32) * multiplier) + 128, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(loaded.optimize()(**feed)[0], exact)
    if _ort_exact("QUInt8"):
        np.testing.assert_array_equal(exact, run_ort(proto, feed)[0])


@pytest.mark.parametrize("precision,bound", [("int8", 0.9999), ("int4", 0.999)])
def test_small_bert_quantized_from_its_fp32_export(tmp_path, precision, bound):
    """quantize_module on a 2-layer BERT's ONNX export: its 12 Linears quantized (int8 dynamic: per row), the 4
    attention matmuls left in fp32; cosine to PyTorch fp32 >= `bound`."""
    tf = pytest.importorskip("transformers")
    from cuvil.compiler import compile_module
    from cuvil.quantize.int8 import quantize_module

    class Hidden(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids).last_hidden_state
    torch.manual_seed(0)
    config = tf.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512)
    model = Hidden(tf.BertModel(config)).eval()
    ids = torch.randint(0, config.vocab_size, (1, 32))
    torch.onnx.export(model, (ids,), str(tmp_path / "bert.onnx"), input_names=["ids"], opset_version=17,
                      dynamo=False)
    q = quantize_module(cuvil.load_onnx(str(tmp_path / "bert.onnx")).module, precision, kernels="int8")
    names = [op.name for op in q.main.walk()]
    layer = "qlinear_i8" if precision == "int8" else "linear_i4"
    assert names.count(layer) == 12 and names.count("matmul") == 4
    got, want = compile_module(q)(ids.numpy())[0].ravel(), _torch_out(model, ids).ravel()
    assert got @ want / np.linalg.norm(got) / np.linalg.norm(want) >= bound


def _torch_out(model, ids):
    with torch.no_grad():
        return model(ids).numpy()
