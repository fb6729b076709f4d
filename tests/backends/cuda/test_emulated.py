"""What the generated CUDA C computes, checked on the host (emulator.py: g++ builds the kernels, one thread each,
the fake driver launches them on host memory, NumPy does the GEMMs): every op case the backend compiles against the
reference interpreter (the CPU backend's tolerances), and small models against their framework."""
import numpy as np
import pytest

from cuvil.demo_models import mlp_module, mlp_numpy
from cuvil.interpreter import interpret
from cuvil.passes import default_pipeline, run_pipeline
from tests.backends.cpu.test_ops_compiled import assert_matches
from tests.backends.cuda.emulator import emulated, host_library
from tests.backends.cuda.models import cuda_module, tiny_cnn
from tests.backends.cuda.test_compile import compiled_cases, merged_op_suite
from tests.ops.test_registry_sweep import build_case

# Cases the emulation cannot run: their GEMM is f16/bf16 (the fake cuBLASLt computes f32 only).
NOT_EMULATED = {"matmul-f16", "matmul-bf16"}
CASES = [(i, c) for i, c in compiled_cases() if c.name() not in NOT_EMULATED]


@pytest.fixture(scope="module")
def op_suite_library(cuda_compiler):
    return host_library(merged_op_suite())


@pytest.mark.parametrize("number, case", CASES, ids=[c.name() for _, c in CASES])
def test_case_on_the_emulated_device_matches_the_interpreter(op_suite_library, number, case):
    m = build_case(case)
    want = interpret(m, case.inputs)
    run_pipeline(m, default_pipeline("cuda"))
    got = emulated(m, op_suite_library, f"c{number}_")(list(case.inputs))
    assert_matches(got, want, case.name())


def test_mlp_with_gemm_epilogues(cuda_compiler):
    m, w = mlp_module()
    run_pipeline(m, default_pipeline("cuda"))
    x = np.random.default_rng(0).standard_normal((3, 784)).astype(np.float32)
    np.testing.assert_allclose(emulated(m)([x])[0], mlp_numpy(x, w), rtol=1e-4, atol=1e-5)


def test_tiny_cnn_matches_torch(cuda_compiler):
    module, inputs = cuda_module("cnn")
    net, torch_inputs = tiny_cnn()
    np.testing.assert_allclose(emulated(module)(inputs)[0], net(*torch_inputs).detach().numpy(), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("mask, guard, keys, head", [("none", False, 8, 16), ("add", False, 8, 16),
                                                     ("keep", True, 8, 16), ("keep", False, 40, 40),
                                                     ("add", False, 70, 8)])
def test_fused_attention_matches_the_interpreter(cuda_compiler, mask, guard, keys, head):
    """The flash-style kernel (one lane a warp here: the same online softmax over tiles of one key), unmasked, with
    an additive mask, and with torch SDPA's keep-mask and guard, including a row with no key left."""
    from tests.passes.test_attention import attention_inputs, attention_module

    m, inputs = attention_module(mask, guard, keys, head), attention_inputs(mask, keys, head)
    with np.errstate(invalid="ignore"):  # the unguarded row with no key left: NaN, as its softmax
        want = interpret(m, inputs)
    run_pipeline(m, default_pipeline("cuda"))
    assert any(op.name == "fused" and op.attrs.get("name") == "attention" for op in m.main.body.ops)
    got = emulated(m)(inputs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_tiny_transformer_with_its_fused_attention_matches_torch(cuda_compiler):
    from tests.backends.cuda.models import tiny_transformer

    module, inputs = cuda_module("transformer")
    net, torch_inputs = tiny_transformer()
    np.testing.assert_allclose(emulated(module)(inputs)[0], net(*torch_inputs).detach().numpy(), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_bert_and_gpt2_attention_take_the_fused_kernel(cuda_compiler, family):
    """Tiny BERT (its padding mask) and GPT-2 (its causal mask) from transformers: every layer's attention is one
    fused kernel after the CUDA pipeline, and the emulated model matches PyTorch."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    from cuvil.compiler import clone_module
    from cuvil.frontends.torch.compile import convert

    torch.manual_seed(0)
    if family == "bert":
        model = tf.BertModel(tf.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                                           intermediate_size=64, vocab_size=100))
    else:
        model = tf.GPT2Model(tf.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, use_cache=False))

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model.eval()

        def forward(self, ids):
            return self.model(input_ids=ids).last_hidden_state

    net, ids = Hidden().eval(), torch.randint(0, 100, (1, 12), generator=torch.Generator().manual_seed(1))
    module = clone_module(convert(net, (ids,))[0])
    run_pipeline(module, default_pipeline("cuda"))
    fused = [op for op in module.main.body.ops if op.name == "fused" and op.attrs.get("name") == "attention"]
    names = [op.attrs.get("name") for op in module.main.body.ops if op.name == "fused"]
    assert len(fused) == 2 and all(len(op.operands) == 4 for op in fused), names  # Q, K, V and the mask
    assert not any(o.name == "softmax" for op in module.main.body.ops if op not in fused for o in op.walk())
    with torch.no_grad():
        want = net(ids).numpy()
    np.testing.assert_allclose(emulated(module)([ids.numpy()])[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["gather_elements", "scatter_elements-add"])
def test_an_element_index_outside_its_axis_raises_the_interpreters_error(cuda_compiler, name):
    """gather_elements and scatter_elements record an index outside the axis in the run's error word; the host
    raises the interpreter's IndexRangeError (and a negative index counts from the end, as in the interpreter)."""
    from cuvil.errors import IndexRangeError
    from tests.ops.test_registry_sweep import CASES as ALL

    case = next(c for c in ALL if c.name() == name)
    m = build_case(case)
    run_pipeline(m, default_pipeline("cuda"))
    f = emulated(m)
    inputs = [np.array(a) for a in case.inputs]
    inputs[1] = np.full_like(inputs[1], -1)
    assert_matches(f(inputs), interpret(build_case(case), inputs), name)
    inputs[1].flat[-1] = 9
    with pytest.raises(IndexRangeError) as got:
        f(inputs)
    with pytest.raises(IndexRangeError) as want:
        interpret(build_case(case), inputs)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("act", ["relu", "clip", "sigmoid", "tanh", "gelu", "silu", "hardswish"])
def test_a_conv_with_its_fused_epilogue_matches_the_interpreter(cuda_compiler, act):
    """Every epilogue FuseLibraryEpilogue gives a conv (a clamp, or one of the GEMM activations) runs on the way out
    of the conv kernel (conv -> sigmoid used to stop the CUDA code generator with a StopIteration)."""
    from cuvil.ir import Builder, Module, TensorType

    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 3, 6, 5)), TensorType("f32", (4, 3, 3, 3))])
    y = b.conv(*b.args)
    b.ret(b.clip(y, min=0.0, max=6.0) if act == "clip" else getattr(b, act)(y))
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(shape).astype(np.float32) for shape in ((1, 3, 6, 5), (4, 3, 3, 3))]
    want = interpret(m, inputs)
    run_pipeline(m, default_pipeline("cuda"))
    assert [o.name for o in m.main.body.ops if o.name != "return"] == ["fused"]
    np.testing.assert_allclose(emulated(m)(inputs)[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("in_epilogue", [True, False])
def test_a_tanh_gelu_after_a_gemm_keeps_its_form_in_or_after_the_epilogue(cuda_compiler, monkeypatch, in_epilogue):
    """GPT-2's MLP (x @ W + b viewed as [1, rows, N], then the tanh gelu): cuBLASLt's gelu epilogue, or the in-place
    kernel after the GEMM where the epilogue table lacks it; either way the tanh form, not the exact gelu."""
    from cuvil.backends.cuda import library
    from cuvil.ir import Builder, Module, TensorType

    if not in_epilogue:
        monkeypatch.setattr(library, "CUBLASLT_EPILOGUES", {"relu": "relu"})
    rng = np.random.default_rng(3)
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (7, 37))], ["x"])
    w, bias = b.constant(rng.standard_normal((37, 65)).astype(np.float32), "w"), \
        b.constant(rng.standard_normal(65).astype(np.float32), "b")
    y = b.add(b.matmul(b.args[0], w), b.broadcast_to(bias, shape=(7, 65)))
    b.ret(b.gelu(b.reshape(y, shape=(1, 7, 65)), approximate="tanh"))
    x = rng.standard_normal((7, 37)).astype(np.float32)
    want = interpret(m, [x])[0]
    run_pipeline(m, default_pipeline("cuda"))
    np.testing.assert_allclose(emulated(m)([x])[0], want, rtol=1e-4, atol=1e-5)
