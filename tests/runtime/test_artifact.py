"""cuvil.export -> cuvil.load round trips (in a fresh process that imports no frontend, runs no pass and no C
compiler), the loaded signature, torch in -> torch out, several entries in one file, caller-provided outputs,
8 threads, weights stored once, the shared object's dependencies."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import cuvil
from cuvil.runtime import Param, container
from tests.runtime import models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RNG = np.random.default_rng(1)

# A fresh process: load and call, then prove that nothing but the runtime ran.
CHILD = r"""
import subprocess, sys, json
import numpy as np
def no_compiler(*a, **k):
    raise AssertionError(f"a process was started: {a}")
subprocess.Popen = no_compiler
import cuvil
data = np.load(sys.argv[2])
art = cuvil.load(sys.argv[1])
report = {}
for name in art.entries:
    fn = art[name]
    k = 0
    while f"{name}.{k}.in0" in data:
        ins = [data[f"{name}.{k}.in{i}"] for i in range(len(fn.inputs))]
        outs = fn(*ins)
        outs = outs if isinstance(outs, tuple) else (outs,)
        for j, o in enumerate(outs):
            want = data[f"{name}.{k}.out{j}"]
            assert o.dtype == want.dtype and o.shape == want.shape, (name, k, j, o.shape, want.shape)
            np.testing.assert_allclose(o, want, rtol=1e-5, atol=1e-5)
        k += 1
    report[name] = k
bad = [m for m in ("torch", "onnx", "jax", "sympy", "cuvil.frontends", "cuvil.passes", "cuvil.backends.cpu.codegen",
                   "cuvil.backends.cpu.standalone") if m in sys.modules]
assert not bad, bad
print(json.dumps(report))
"""


def _round_trip(path, cases: dict, tmp_path) -> dict:
    """Load `path` in a fresh process and check each entry's outputs for its cases {name: [(inputs, outputs)]}."""
    arrays = {f"{name}.{k}.{kind}{i}": np.asarray(a) for name, runs in cases.items() for k, run in enumerate(runs)
              for kind, group in zip(("in", "out"), run) for i, a in enumerate(group)}
    np.savez(tmp_path / "cases.npz", **arrays)
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(tmp_path / "cases.npz")], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _outs(y):
    return [np.asarray(o) for o in (y if isinstance(y, tuple) else (y,))]


def test_an_mlp_round_trips_in_a_fresh_process_and_stores_its_weights_once(tmp_path):
    mlp = cuvil.jit(models.mlp)
    x = RNG.standard_normal((4, 256)).astype(np.float32)
    want = mlp(x)
    path = tmp_path / "mlp.cuv"
    cuvil.export(mlp, path)
    assert _round_trip(path, {"main": [([x], [want])]}, tmp_path) == {"main": 1}
    weights = models.W1.nbytes + models.B1.nbytes + models.W2.nbytes
    rows = container.Container.open(path).rows
    stored = rows["consts"].size + rows["prepared"].size  # W1 only as its GEMM panels, which replace it
    assert weights <= stored < weights + 3 * 64 and rows["prepared"].size == models.W1.nbytes  # each weight once
    assert os.path.getsize(path) - weights < 512 << 10  # the rest: code (kernels linked in), metadata, IR
    art = cuvil.load(path)
    assert art.entries == ["main"] and art.metadata["entries"]["main"]["route"]["kind"] == "jit"
    assert art["main"].inputs == [Param("x", "f32", (4, 256))] and art["main"].outputs[0].shape == (4, 10)


def test_a_winograd_convolution_stores_its_weight_and_transforms_it_at_load(tmp_path):
    """The Winograd-transformed weight (36/9 of its bytes) is not stored: the file holds the weight, each weight
    once, and the loader makes the transform after its checks; the outputs are the in-process ones."""
    pytest.importorskip("onnx")
    model, weights = models.winograd_conv_onnx(np.random.default_rng(7), 64)
    optimized = cuvil.load_onnx(model.SerializeToString()).optimize()
    assert 'algorithm = "winograd"' in cuvil.inspect_ir(optimized)
    x = RNG.standard_normal((1, 16, 20, 20)).astype(np.float32)
    path = tmp_path / "winograd.cuv"
    cuvil.export(optimized, path)
    assert _round_trip(path, {"main": [([x], list(optimized(x)))]}, tmp_path) == {"main": 1}
    meta = cuvil.load(path).metadata["entries"]["main"]
    assert [c["name"] for c in meta["constants"] if c.get("derived")] == ["fc"]  # as its panels; "w" is stored
    rows = container.Container.open(path).rows
    assert weights <= rows["consts"].size + rows["prepared"].size <= weights * 1.02


def test_control_flow_and_dynamic_sizes_round_trip_with_their_relations(tmp_path):
    branchy = cuvil.jit(models.branchy)
    rows = cuvil.jit(models.scaled_rows, dynamic=True)
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    w = RNG.standard_normal((5, 7)).astype(np.float32)
    cases = {"branchy": [([x], [branchy(x)]), ([-np.abs(x)], [branchy(-np.abs(x))])], "rows": []}
    for n in (2, 9):
        xn = RNG.standard_normal((n, 5)).astype(np.float32)
        cases["rows"].append(([xn, w], [rows(xn, w)]))
    path = tmp_path / "two.cuv"
    cuvil.export({"branchy": branchy, "rows": rows}, path)
    assert _round_trip(path, cases, tmp_path) == {"branchy": 2, "rows": 2}
    fn = cuvil.load(path)["rows"]
    assert [p.shape for p in fn.inputs] == [("x_0", "x_1"), ("w_0", "w_1")]
    with pytest.raises(cuvil.ShapeError, match="w_0 == x_1"):
        fn(x, np.ones((4, 7), np.float32))  # the same message as the in-process executable
    with pytest.raises(cuvil.ShapeError, match="w_0 == x_1"):
        rows._cache[rows.signatures[0]].executable(x, np.ones((4, 7), np.float32))


def test_every_compiled_signature_is_exported_and_tried_in_turn(tmp_path):
    branchy = cuvil.jit(models.branchy)
    a, b = np.ones(3, np.float32), np.ones((2, 2), np.float64)
    branchy(a), branchy(b)
    path = tmp_path / "sigs.cuv"
    cuvil.export(branchy, path)
    art = cuvil.load(path)
    assert art.entries == ["main"] and len(art.metadata["entries"]) == 2
    np.testing.assert_array_equal(art(a), branchy(a))
    np.testing.assert_array_equal(art(b), branchy(b))
    with pytest.raises(cuvil.ShapeError):
        art(np.ones(4, np.float32))


def test_named_inputs_several_outputs_and_caller_buffers(tmp_path):
    two = cuvil.jit(models.two_outputs)
    x = RNG.standard_normal((6,)).astype(np.float32)
    path = tmp_path / "two_outputs.cuv"
    cuvil.export(two, path, example_inputs=(x,))
    fn = cuvil.load(path).function()
    got = fn(x=x)
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, two(x)):
        np.testing.assert_array_equal(g, w)
    outs = [np.empty(6, np.float32), np.empty(6, np.float32)]
    assert all(o is p for o, p in zip(fn.run([x], outs), outs))
    np.testing.assert_array_equal(outs[1], x * x)
    with pytest.raises(cuvil.ShapeError, match="output buffer 0"):
        fn.run([x], [np.empty(5, np.float32), outs[1]])
    with pytest.raises(cuvil.ShapeError, match="overlaps"):
        fn.run([x], [x, outs[1]])
    with pytest.raises(cuvil.ShapeError, match="no input 'y'"):
        fn(y=x)


def test_eight_threads_call_one_function_at_once(tmp_path):
    rows = cuvil.jit(models.scaled_rows, dynamic=True)
    w = RNG.standard_normal((5, 7)).astype(np.float32)
    rows(np.ones((2, 5), np.float32), w)
    path = tmp_path / "rows.cuv"
    cuvil.export(rows, path)
    fn = cuvil.load(path)["main"]
    fn.set_num_threads(1)
    inputs = [RNG.standard_normal((n + 2, 5)).astype(np.float32) for n in range(8)]
    wants = [np.tanh(x @ w) * 0.5 for x in inputs]
    errors = []

    def work(k):
        try:
            for _ in range(50):
                np.testing.assert_allclose(fn(inputs[k], w), wants[k], rtol=1e-5, atol=1e-6)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_the_shared_object_needs_only_libc_libm_libdl_and_the_threading_runtime(tmp_path):
    mlp = cuvil.jit(models.mlp)
    mlp(np.ones((1, 256), np.float32))
    path = tmp_path / "mlp.cuv"
    cuvil.export(mlp, path, include_c=True)
    c = container.Container.open(path)
    (tmp_path / "native.so").write_bytes(bytes(c.data("native")))
    dynamic = subprocess.run(["readelf", "-d", "-W", str(tmp_path / "native.so")], capture_output=True, text=True)
    needed = {line.split("[")[1].split("]")[0] for line in dynamic.stdout.splitlines() if "(NEEDED)" in line}
    # the dynamic loader itself provides __tls_get_addr, which the error channel's thread-local message needs
    allowed = {"libc.so.6", "libm.so.6", "libdl.so.2", "libgomp.so.1", "libpthread.so.0", "ld-linux-x86-64.so.2"}
    assert needed and needed <= allowed
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(tmp_path / "native.so")], capture_output=True,
                             text=True).stdout.split()
    # entry 0 keeps the generated names (its object is the one in-process code loaded); entry k > 0 is cuvil_eK_
    for name in ("cuvil_abi_version", "cuvil_last_error", "cuvil_set_num_threads", "cuvil_main", "cuvil_arena_bytes",
                 "cuvil_packed_count", "cuvil_packed_bytes", "cuvil_packed_source", "cuvil_prepare"):
        assert name in symbols
    assert "cuvil_sgemm" not in symbols  # the kernels are linked in, not exported
    c_text = cuvil.load(path).c_text()
    assert "int cuvil_main(" in c_text and c_text == json.loads(c.inflated("csrc"))["main"]
    assert "func" in cuvil.load(path).ir_text("main")


def test_an_executable_and_what_cannot_be_exported(tmp_path):
    exe = cuvil.compile_module(cuvil.jit(models.branchy).lower(np.ones(3, np.float32)))
    cuvil.export(exe, tmp_path / "exe.cuv")
    assert cuvil.load(tmp_path / "exe.cuv").metadata["entries"]["main"]["route"] == {"kind": "ir"}
    with pytest.raises(cuvil.UnsupportedError, match="no compiled signature"):
        cuvil.export(cuvil.jit(models.branchy), tmp_path / "none.cuv")
    with pytest.raises(cuvil.UnsupportedError, match="cannot export"):
        cuvil.export(object(), tmp_path / "none.cuv")
    art = cuvil.load(tmp_path / "exe.cuv")
    art.close()
    with pytest.raises(cuvil.CuvilError, match="closed"):
        art(np.ones(3, np.float32))


def test_a_torch_cnn_round_trips_torch_in_torch_out(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 5)).eval()
    x = torch.randn(2, 3, 8, 8)
    compiled = cuvil.compile(cnn, (x,))
    path = tmp_path / "cnn.cuv"
    cuvil.export(compiled, path)
    art = cuvil.load(path)
    got = art(x)
    assert isinstance(got, torch.Tensor)
    torch.testing.assert_close(got, compiled(x), rtol=1e-5, atol=1e-5)
    assert isinstance(art(x.numpy()), np.ndarray)
    assert _round_trip(path, {"main": [([x.numpy()], [compiled(x).numpy()])]}, tmp_path) == {"main": 1}


def test_an_optimised_onnx_model_keeps_its_input_names(tmp_path):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = RNG.standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["input.1", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
                              [numpy_helper.from_array(w, "w")])
    model = cuvil.load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])).optimize()
    cuvil.export(model, tmp_path / "m.cuv")
    fn = cuvil.load(tmp_path / "m.cuv").function()
    assert [p.name for p in fn.inputs] == ["input.1"] and fn.outputs[0].name == "y"
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(fn(**{"input.1": x}), x @ w, rtol=1e-5)
    assert "input input_0 f32 2" in bytes(container.Container.open(tmp_path / "m.cuv").data("entries")).decode()


def test_the_ir_text_parses_back_with_its_0d_constants(tmp_path):
    """A 0-d constant (an attention scale) is stored as one element; the IR text keeps its 0-d type, so the text
    parses back (a cache hit's `cuvil.inspect_ir` parses it)."""
    from cuvil.ir import Builder, Module, TensorType
    from cuvil.ir.parser import parse_module

    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 3))], ["x"])
    scale = b.broadcast_to(b.constant(np.array(0.125, np.float32), "scale"), shape=(2, 3))
    b.ret(b.mul(b.args[0], scale))
    cuvil.export(cuvil.compile_module(m), tmp_path / "scale.cuv")
    text = cuvil.load(tmp_path / "scale.cuv").ir_text("main")
    assert "f32[] = dense" in text, text
    assert parse_module(text).constants["scale"].shape == ()
