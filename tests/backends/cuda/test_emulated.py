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
