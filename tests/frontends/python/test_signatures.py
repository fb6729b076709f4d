"""Signature caching, dynamic dims, run-time scalars, outputs in the caller's kind, options, and both seed examples
verbatim on the default (CPU) target."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import cuvil
from cuvil.passes import Pass

from .helpers import TARGET, assert_same, f32, t32


def scale(x, k=2.0):
    if k > 1:
        return x * k
    return x / k


def test_one_compilation_per_signature():
    f = cuvil.jit(scale, target=TARGET)
    f(f32(3)), f(f32(3)), f(f32(3), k=2.0)
    assert f.compile_count == 1
    f(f32(4))                              # a new size
    f(f32(3).astype(np.float64))           # a new dtype
    f(f32(3, 1))                           # a new rank
    f(f32(3), 0.5)                         # a Python scalar decides control flow: its value is part of the key
    f(t32(3))                              # torch in, torch out: another signature
    assert f.compile_count == len(f.signatures) == 6
    f(f32(4)), f(f32(3), 0.5), f(t32(3))
    assert f.compile_count == 6


def test_dynamic_dims_compile_once_for_all_sizes():
    f = cuvil.jit(lambda_free_softmax, target=TARGET, dynamic_dims={"x": {0: "batch"}})
    for n in (1, 3, 17):
        x = f32(n, 8)
        assert_same(f(x), lambda_free_softmax(x))
    assert f.compile_count == 1
    assert "batch" in cuvil.inspect_ir(f)


def test_dynamic_true_keeps_every_size_but_0_and_1_symbolic():
    f = cuvil.jit(lambda_free_softmax, target=TARGET, dynamic=True)
    for shape in ((2, 8), (5, 3), (7, 9)):
        x = f32(*shape)
        assert_same(f(x), lambda_free_softmax(x))
    assert f.compile_count == 1
    f(f32(1, 8))
    assert f.compile_count == 2


def fixed_bounds(x):
    return x[2:6], x[-3:], x[4], x[:, ::-1][:, 1:]


@pytest.mark.parametrize("target", [TARGET, "cpu"])
def test_dynamic_sizes_too_small_for_fixed_bounds_compile_as_they_are(target):
    """x[2:6] on a symbolic size assumes it holds the bounds: a call with a smaller size gets a compilation of
    its own (NumPy's clamping, or its IndexError) instead of reading past the end."""
    f = cuvil.jit(fixed_bounds, target=target, dynamic=True)
    for n in (8, 9):
        x = f32(n, 3)
        assert_same(f(x), fixed_bounds(x))
    assert f.compile_count == 1
    x = f32(5, 3)
    assert_same(f(x), fixed_bounds(x))
    assert f.compile_count == 2
    with pytest.raises(cuvil.ShapeError, match="index 4 is out of bounds"):
        f(f32(4, 3))


def split_heads(q):
    B, T, C = q.shape
    h = q.reshape(B, T, 4, -1).transpose(0, 2, 1, 3)
    return h @ h.transpose(0, 1, 3, 2)


def test_dynamic_reshape_with_an_inferred_size_compiles_once():
    """-1 after a fixed count of heads is C // 4 of a symbolic C, with 4 * (C // 4) == C checked per call."""
    f = cuvil.jit(split_heads, target=TARGET, dynamic=True)
    for shape in ((2, 3, 8), (3, 5, 12)):
        x = f32(*shape)
        assert_same(f(x), split_heads(x), rtol=1e-4)
    assert f.compile_count == 1
    with pytest.raises(cuvil.ShapeError, match="cannot infer -1"):
        f(f32(2, 3, 6))


def gated(x):
    a, b = x.chunk(2, dim=-1)
    return a * torch.sigmoid(b)


def test_dynamic_chunk_into_equal_pieces_compiles_once():
    f = cuvil.jit(gated, target=TARGET, dynamic=True)
    for shape in ((3, 4), (5, 8)):
        x = t32(*shape)
        assert_same(f(x), gated(x))
    assert f.compile_count == 1
    x = t32(3, 5)  # unequal pieces: a compilation of its own, and torch's error
    with pytest.raises(cuvil.ShapeError, match="do not broadcast"):
        f(x)


def pairs(x):
    return torch.split(x, 2, dim=-1)[-1] * 2  # as many pieces as the size gives: no symbolic form


def test_dynamic_functions_without_a_symbolic_form_compile_each_size():
    f = cuvil.jit(pairs, target=TARGET, dynamic=True)
    for shape in ((3, 4), (3, 5), (3, 4)):
        x = t32(*shape)
        assert_same(f(x), pairs(x))
    assert f.compile_count == 2 and len(f.signatures) == 2


def lambda_free_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True) * x.shape[0]


def gate(x, threshold):
    if x.mean() > threshold:
        return x - threshold
    return x * threshold


def test_runtime_args_pass_scalars_at_run_time():
    f = cuvil.jit(gate, target=TARGET, runtime_args=("threshold",))
    x = f32(6)
    for t in (-5.0, 0.25, 5.0):
        assert_same(f(x, t), gate(x, t))
    assert f.compile_count == 1
    assert f(x, 0.25).dtype == np.float32  # a run-time Python scalar stays weakly typed


def pair(x, y):
    return x + y, (x * y).sum(), None, 3


def test_outputs_in_the_callers_kind():
    a, b = f32(2, 3), f32(2, 3)
    got = cuvil.jit(pair, target=TARGET)(a, b)
    assert isinstance(got, tuple) and isinstance(got[0], np.ndarray) and got[2:] == (None, 3)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    tgot = cuvil.jit(pair, target=TARGET)(ta, tb)
    assert isinstance(tgot[0], torch.Tensor) and isinstance(tgot[1], torch.Tensor)
    assert_same(tgot, pair(ta, tb))


def identity(x):
    return x


def test_torch_tensors_cross_without_copies():
    x = t32(4, 4)
    assert cuvil.jit(identity, target=TARGET)(x).data_ptr() == x.data_ptr()
    y = torch.ones(3, dtype=torch.bfloat16, requires_grad=False)
    out = cuvil.jit(scale, target=TARGET)(y)
    assert out.dtype == torch.bfloat16 and torch.equal(out, y * 2.0)


PLAIN = """import sys
import numpy as np
import cuvil


@cuvil.jit(target="interpreter")
def f(x):
    return (x * 2).sum()


print(float(f(np.ones(3, np.float32))), "torch" in sys.modules)
"""


def test_torch_is_imported_only_when_a_tensor_needs_it(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text(PLAIN)
    env = {**os.environ, "PYTHONPATH": str(Path(cuvil.__file__).parents[1])}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True, env=env).stdout
    assert out.split() == ["6.0", "False"]


class CountOps(Pass):
    name = "count-ops"

    def __init__(self):
        self.seen = 0

    def run_on_operation(self, fn):
        self.seen += sum(1 for _ in fn.walk())
        return False


def test_options_reach_the_compiler_and_the_module_is_inspectable():
    counter = CountOps()
    f = cuvil.jit(scale, target=TARGET, passes=[counter], enable_fusion=False)
    assert f.module is None
    f(f32(3))
    assert counter.seen > 0
    assert f.module.metadata["enable_fusion"] == "false" and f.module.metadata["function"] == "scale"
    assert "mul" in cuvil.inspect_ir(f) and "mul" in f.inspect(f32(3))


# -- the seed examples, verbatim, on the default target ----------------------------------------------------------------
@cuvil.compile # 自动捕获输入签名并编译
def dynamic_inference(x: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    if x.mean() > threshold:
        return torch.nn.functional.relu(x)
    else:
        return torch.sigmoid(x)


@cuvil.jit(target="cpu", enable_fusion=True)
def matmul_inference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    # 编译器自动识别 GEMM 模式并启用 AVX2 向量化
    return A @ B


@pytest.mark.parametrize("shift", [0.0, 3.0])
def test_seed_dynamic_inference(shift):
    x = torch.randn(8, 16) + shift
    assert_same(dynamic_inference(x), dynamic_inference.python_function(x))
    assert "cond" in cuvil.inspect_ir(dynamic_inference)


def test_seed_matmul_inference():
    input_a = np.random.randn(1024, 512).astype(np.float32)
    input_b = np.random.randn(512, 256).astype(np.float32)
    result = matmul_inference(input_a, input_b)
    assert isinstance(result, np.ndarray) and result.dtype == np.float32
    np.testing.assert_allclose(result, input_a @ input_b, rtol=1e-4, atol=1e-3)
