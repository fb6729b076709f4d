"""cuvil.profile: instrumented builds time every op, attribute it to source, and leave normal builds alone."""
import json
import os
import re

import numpy as np
import pytest

import cuvil
from cuvil.backends.cpu import codegen
from cuvil.ir import Builder, Module, TensorType, sym
from cuvil.ir.dtypes import DType

os.environ.setdefault("CUVIL_OPT_LEVEL", "1")
HERE = os.path.basename(__file__)


@cuvil.jit
def gated(x, w):
    h = np.tanh(x @ w)
    if h.mean() > 0.5:
        return h * 2.0
    return h - 1.0


def _inputs(shift=0.0):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((32, 64)).astype(np.float32) + shift,
            np.abs(rng.standard_normal((64, 16))).astype(np.float32) / 8)


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate(open(__file__).read().splitlines(), 1) if text in line)


def test_report_rows_map_kernels_to_source_lines():
    x, w = _inputs()
    report = cuvil.profile(gated, x, w, repeat=3)
    assert len(report.calls) == 3
    sources = {s for r in report.rows for s in r.sources}
    assert f"{HERE}:{_line_of('np.tanh(x @ w)')}" in sources
    assert any(r.kernel == "cuvil_sgemm" and "matmul" in r.ops for r in report.rows)
    assert sum(r.share for r in report.rows) == pytest.approx(1.0)
    assert [r.ms for r in report.rows] == sorted((r.ms for r in report.rows), reverse=True)
    gemm = next(r for r in report.rows if "matmul" in r.ops)
    assert gemm.gflops is not None and gemm.gflops > 0 and gemm.gbytes > 0
    text = str(report)
    for column in ("kernel", "ops", "source", "share", "GFLOP/s", "GB/s"):
        assert column in text


def test_both_branches_and_context_manager():
    x, w = _inputs()
    with cuvil.profile() as prof:
        lo = gated(x, w)
        hi = gated(x + 50.0, w)
    np.testing.assert_allclose(lo, gated.python_function(x, w), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hi, gated.python_function(x + 50.0, w), rtol=1e-5, atol=1e-5)
    report = prof.report()
    lines = {s for r in report.rows for s in r.sources}
    assert {f"{HERE}:{_line_of('return h * 2.0')}", f"{HERE}:{_line_of('return h - 1.0')}"} <= lines
    branch = [r for r in report.rows if any(s.endswith(f":{_line_of('return h - 1.0')}") for s in r.sources)]
    assert branch and all(r.runs == pytest.approx(0.5) for r in branch)  # one of the two calls took it


def test_trace_is_chrome_json_with_nested_spans(tmp_path):
    x, w = _inputs()
    report = cuvil.profile(gated, x, w, repeat=2)
    path = tmp_path / "trace.json"
    report.save_trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    calls = [e for e in events if e["cat"] == "call"]
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert len(calls) == 2 and len(kernels) >= 2 * 3
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
    first = calls[0]
    inside = [k for k in kernels if first["ts"] <= k["ts"] <= first["ts"] + first["dur"]]
    assert inside and all(k["ts"] + k["dur"] <= first["ts"] + first["dur"] + 1e-3 for k in inside)


def _while_module() -> Module:
    """x doubled while its sum is below 1000: a loop whose body runs several times per call."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"),))], ["x"])
    (x,) = b.args

    def cond(cb, v):
        return cb.lt(cb.reduce_sum(v, axes=(0,), keepdims=False), cb.full(1000.0, (), "f32"))

    def body(bb, v):
        return [bb.mul(v, bb.full(2.0, v.type.shape, "f32"))]

    b.ret(*b.while_loop([x], cond, body))
    return m


def test_loop_bodies_are_timed_each_iteration():
    exe = cuvil.compile_module(_while_module())
    report = cuvil.profile(exe, np.ones(4, np.float32), repeat=2)
    assert max(r.runs for r in report.rows) >= 8  # 4 * 2**8 = 1024


def test_torch_module_rows_name_fx_nodes_or_lines():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
    x = torch.randn(8, 16)
    compiled = cuvil.compile(model, (x,))
    report = cuvil.profile(compiled, x, repeat=2)
    assert report.rows and all(r.sources for r in report.rows)
    assert any(s.startswith("fx:") or ".py:" in s for r in report.rows for s in r.sources)


def test_onnx_optimized_models_are_profiled():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper

    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                           helper.make_node("Relu", ["h"], ["y"], name="act")], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [4, 8]),
                           helper.make_tensor_value_info("w", T.FLOAT, [8, 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [4, 8])])
    loaded = cuvil.load_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    assert onnx is not None
    x, w = np.ones((4, 8), np.float32), np.eye(8, dtype=np.float32)
    for target in ("cpu", "interpreter"):
        report = cuvil.profile(loaded.optimize(target=target), x, w, repeat=2)
        assert {s for r in report.rows for s in r.sources} & {"onnx:mm", "onnx:act"}
        assert bool(report.notes) == (target == "interpreter")  # an interpreted model is profiled on its CPU build


def test_instrumented_build_computes_the_same_and_default_has_no_timers():
    x, w = _inputs()
    gated(x, w)
    module = gated.module
    plain, timed = codegen.generate(module), codegen.generate(module, instrument=True)
    assert "cuvil_prof" not in plain.source and not plain.timed
    assert len(re.findall(r"cuvil_prof_record\(\d+", timed.source)) == len(timed.timed) >= 4
    report = cuvil.profile(gated, x, w, repeat=1, baseline=True)
    assert report.overhead is not None and report.overhead > 0


def test_profiling_plain_python_is_an_error():
    with pytest.raises(TypeError, match="ran no compiled cuvil code"):
        cuvil.profile(lambda a: a + 1, np.ones(3), repeat=1)


def test_blocked_conv_counts_the_plain_convs_flops_when_channels_fill_the_blocks():
    from cuvil.ops.nn_blocked import to_blocked
    from cuvil.profiler import op_flops

    b = Builder.new_function(Module(), "main", [TensorType("f32", (sym("n"), 32, 9, 9))], ["x"])
    (x,) = b.args
    w = b.constant(np.ones((16, 32, 3, 3), np.float32), "w")
    bias = b.constant(np.zeros(16, np.float32), "b")
    plain = b.conv(x, w, bias, pads=(1, 1, 1, 1))
    blocked = b.conv_nchwc(to_blocked(b, x, 16), b.constant(np.ones((1, 2, 3, 3, 16, 16), np.float32), "wb"),
                           b.constant(np.zeros((1, 16), np.float32), "bb"), pads=(1, 1, 1, 1), channels=16)
    assert op_flops(blocked.owner, {"n": 2}) == op_flops(plain.owner, {"n": 2}) == 2 * 2 * 16 * 81 * 32 * 9


def test_reduced_precision_ops_count_the_flops_of_their_fp32_forms():
    """Int8 and bf16 kernels were reported at ~0 GFLOP/s: the profiler counted one operation per output."""
    from cuvil.profiler import op_flops

    b = Builder.new_function(Module(), "main", [TensorType("f32", (sym("n"), 32, 9, 9)),
                                                TensorType("f32", (sym("n"), 64))], ["x", "v"])
    x, v = b.args
    w = b.constant(np.ones((16, 32, 3, 3), np.float32), "w")
    plain = b.conv(x, w, b.constant(np.zeros(16, np.float32), "b"), pads=(1, 1, 1, 1))
    qconv = b.emit("qconv_i8", x, b.constant(np.ones((16, 32, 3, 3), np.int8), "wq"),
                   b.constant(np.ones(16, np.float32), "ws"), pads=(1, 1, 1, 1))
    bf16 = b.emit("conv_bf16", x, b.constant(np.ones((16, 32, 3, 3), DType.bf16.numpy), "wh"), pads=(1, 1, 1, 1))
    qlinear = b.emit("qlinear_i8", v, b.constant(np.ones((8, 64), np.int8), "lq"), b.constant(np.ones(8, np.float32),
                                                                                                "ls"))
    env = {"n": 2}
    assert op_flops(qconv.owner, env) == op_flops(plain.owner, env) == 2 * 2 * 16 * 81 * 32 * 9
    assert op_flops(bf16.owner, env) == op_flops(plain.owner, env)
    assert op_flops(qlinear.owner, env) == 2 * 2 * 8 * 64
