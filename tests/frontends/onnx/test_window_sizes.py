"""Windowed ONNX ops on symbolic sizes called with inputs smaller than their window: a ShapeError naming the node
and the sizes, like ONNX Runtime's refusal, on the interpreter and on compiled code; never zeros, NumPy's
ValueError or a write past a buffer (the reliability issue's depthwise model runs in a child process)."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cuvil

from .helpers import F32, helper, model, onnx, rand, run_ort

ROOT = Path(__file__).parents[3]


def dilated_depthwise_model():
    """A stride-2 depthwise conv, then a 5x5 depthwise conv dilated by 4 along the width, then a global pool."""
    w1, w2 = rand(6, 1, 3, 3, seed=1), rand(6, 1, 5, 5, seed=2)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["y"], name="Conv_1", group=6, strides=[2, 2], pads=[1] * 4),
             helper.make_node("Conv", ["y", "w2"], ["z"], name="Conv_3", group=6, dilations=[1, 4], pads=[2] * 4),
             helper.make_node("GlobalAveragePool", ["z"], ["p"], name="Pool_4")]
    return model(nodes, [("x", F32, [1, 6, "H", "W"])], [("p", F32, None)], [("w1", w1), ("w2", w2)])


_CALL_NARROW_THEN_WIDE = """
import sys, numpy as np, onnxruntime, cuvil
path = sys.argv[1]
compiled = cuvil.load_onnx(path).optimize()
try:
    compiled(np.ones((1, 6, 15, 13), np.float32))
    print("no error")
except cuvil.ShapeError as e:
    print("ShapeError:", e)
x = np.random.default_rng(3).standard_normal((1, 6, 32, 40)).astype(np.float32)
want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
np.testing.assert_allclose(compiled(x)[0], want, rtol=1e-4, atol=1e-5)
print("matches onnxruntime")
"""


def test_the_issue_model_refuses_a_narrow_input_without_crashing(tmp_path):
    pytest.importorskip("onnxruntime")
    path = tmp_path / "model.onnx"
    onnx.save(dilated_depthwise_model(), path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _CALL_NARROW_THEN_WIDE, str(path)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("ShapeError:") and "node 'Conv_3'" in lines[0], lines
    assert "the dilated 5x5 window spans 17 columns but the padded input has 11" in lines[0]
    assert lines[1] == "matches onnxruntime"


def test_the_issue_model_refuses_it_in_the_interpreter_too():
    with pytest.raises(cuvil.ShapeError, match=r"node 'Conv_3'.*dilated 5x5 window spans 17 columns but the padded "
                                               r"input has 11"):
        cuvil.load_onnx(dilated_depthwise_model())(np.ones((1, 6, 15, 13), np.float32))


def _single(op: str, **attrs):
    inits = {"Conv": [("w", rand(4, 3, 3, 3, seed=1))], "DepthwiseConv": [("w", rand(3, 1, 3, 3, seed=1))]}
    name = "Conv" if op == "DepthwiseConv" else op
    if op == "DepthwiseConv":
        attrs["group"] = 3
    inputs = ["x", "w"] if name == "Conv" else ["x"]
    node = helper.make_node(name, inputs, ["y"], name="small_window", **attrs)
    return model([node], [("x", F32, [1, 3, "H", "W"])], [("y", F32, None)], inits.get(op, []))


def _torch_pool(name: str, **attrs):
    def refuse(x):
        torch = pytest.importorskip("torch")
        getattr(torch.nn.functional, name)(torch.from_numpy(x), 3, **attrs)
    return refuse


def _ort(proto):
    def refuse(x):
        pytest.importorskip("onnxruntime")
        run_ort(proto, {"x": x})
    return refuse


# name: (model, the error's words, the oracle's refusal). ONNX Runtime refuses the convs; for the pools it returns
# an empty tensor (MaxPool) or one window of padding (AveragePool's truncating division), so PyTorch is the oracle.
CASES = {
    "conv": (_single("Conv"), "'conv': the 3x3 window spans 3 rows but the padded input has 2", None),
    "depthwise-conv": (_single("DepthwiseConv", dilations=[2, 2], pads=[1, 1, 1, 1]),
                       "'conv': the dilated 3x3 window spans 5 rows but the padded input has 4", None),
    "max-pool": (_single("MaxPool", kernel_shape=[3, 3]), "'max_pool': the 3x3 window spans 3 rows",
                 _torch_pool("max_pool2d")),
    "average-pool": (_single("AveragePool", kernel_shape=[3, 3], strides=[2, 2]),
                     "'avg_pool': the 3x3 window spans 3 rows but the padded input has 2",
                     _torch_pool("avg_pool2d", stride=2)),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["interpreter", "compiled"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_inputs_smaller_than_the_window_are_refused_like_the_frameworks(case, compiled):
    proto, message, oracle = CASES[case]
    loaded = cuvil.load_onnx(proto)
    run = loaded.optimize() if compiled else loaded
    big = rand(1, 3, 9, 8)
    np.testing.assert_allclose(run(big)[0], cuvil.load_onnx(proto)(big)[0], rtol=1e-4, atol=1e-5)
    small = rand(1, 3, 2, 8)
    with pytest.raises(cuvil.ShapeError, match=f"node 'small_window'.*{message}"):
        run(small)
    with pytest.raises(Exception, match="Invalid input shape|Output size is too small"):  # and so do they
        (oracle or _ort(proto))(small)
