"""Every kernel the CUDA backend generates for the op suite (tests/ops cases) and for small models compiles, with
NVRTC or nvcc, for sm_80 and sm_90 (and to PTX for the models): no GPU needed. The op suite's kernels compile as one
translation unit per architecture (each case's kernels renamed apart), cached on disk like every CUDA build."""
import functools
import re

import pytest

from cuvil.backends.cuda import codegen, toolchain
from cuvil.errors import UnsupportedError
from cuvil.passes import default_pipeline, run_pipeline
from tests.backends.cuda.models import MODELS, cuda_program
from tests.ops.test_registry_sweep import CASES, build_case

# Ops the CUDA backend does not compile yet: each of their cases must be refused with an UnsupportedError naming the
# op (strict: a case that starts to compile fails here until the op leaves the list).
NOT_YET = {"nonzero", "unique", "non_max_suppression", "dynamic_slice",  # data-dependent sizes
           "det", "slogdet", "lu_factor", "lu_permutation", "inv", "solve", "cholesky",  # linear algebra (CPU only)
           "geqrf", "householder_product", "svd", "eigh", "ldl_factor", "matrix_exp",  # (CPU only)
           "fft", "rfft", "irfft"}  # FFTs (CPU only)


def _has_complex(case) -> bool:
    fn = build_case(case).main
    return any(v.type.dtype.is_complex for v in fn.args + [r for op in fn.walk() for r in op.results])


NOT_YET_CASES = {c.name() for c in CASES if c.op not in NOT_YET and _has_complex(c)}  # complex types (CPU only)


def _program(case):
    m = build_case(case)
    run_pipeline(m, default_pipeline("cuda"))
    return codegen.generate(m)


def compiled_cases() -> list:
    """(number, case) of every case the backend compiles; number i names its kernels c{i}_... in the merged source."""
    return [(i, c) for i, c in enumerate(CASES) if c.op not in NOT_YET and c.name() not in NOT_YET_CASES]


@functools.lru_cache(maxsize=None)
def merged_op_suite() -> str:
    """One translation unit of every case's kernels, each case's kernel names prefixed apart."""
    parts = []
    for i, case in compiled_cases():
        body = _program(case).source.replace(codegen.PRELUDE, "")
        for name in sorted(set(re.findall(r"__global__ void __launch_bounds__\(\d+\) (\w+)\(", body)), key=len,
                           reverse=True):
            body = re.sub(rf"\b{name}\b", f"c{i}_{name}", body)
        parts.append(f"/* case {case.name()} */\n{body}")
    return codegen.PRELUDE + "\n".join(parts)


@pytest.fixture(scope="module")
def op_suite_source():
    return merged_op_suite()


@pytest.mark.parametrize("case", CASES, ids=[c.name() for c in CASES])
def test_case_generates_or_is_listed(case):
    if case.op in NOT_YET or case.name() in NOT_YET_CASES:
        with pytest.raises(UnsupportedError, match="CUDA backend"):
            _program(case)
    else:
        program = _program(case)
        assert all(f" {kernel}(" in program.source for kernel in program.kernel_names)


@pytest.mark.parametrize("arch", toolchain.ARCHS)
def test_op_suite_kernels_compile(cuda_compiler, op_suite_source, arch):
    cubin = toolchain.compile_source(op_suite_source, arch, "cubin")
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_kernels_compile_to_ptx_and_cubins(cuda_compiler, name):
    program = cuda_program(name)
    images = toolchain.build_images(program.source)
    assert set(images) == {"ptx", *toolchain.ARCHS}
    ptx = images["ptx"].decode()
    for kernel in program.kernel_names:
        assert f".entry {kernel}(" in ptx


def test_compile_error_names_the_compiler_and_the_line(cuda_compiler):
    with pytest.raises(toolchain.CudaCompileError, match="error"):
        toolchain.compile_source('extern "C" __global__ void k(float *x) { x[0] = undefined_name; }', "sm_80", "ptx")


def test_cuda_archs_narrows_the_cubins_built(cuda_compiler, monkeypatch):
    from cuvil.backends.cuda import backend
    from cuvil.demo_models import mlp_module

    monkeypatch.setenv("CUVIL_CUDA_ARCHS", "sm_90")
    assert toolchain.default_archs() == ("sm_90",)
    m, _ = mlp_module()
    run_pipeline(m, default_pipeline("cuda"))
    assert set(backend.build_images(m).images) == {"ptx", "sm_90"}


def test_every_op_the_cpu_backend_lowers_has_a_cuda_kernel():
    """The ops the CPU backend computes and the CUDA one does not: only data-dependent control flow (a graph
    replays a fixed sequence), data-dependent sizes and linear algebra (NOT_YET) and the CPU's blocked conv layout
    (its pass runs on the CPU pipeline only)."""
    from cuvil.backends.cpu import backend as cpu
    from cuvil.backends.cuda import backend as cuda

    blocked = {"conv_nchwc", "dwconv_nchwc", "spatial_sum_nchwc"}  # decomposed for CUDA
    assert cpu.SUPPORTED - cuda.SUPPORTED == {"cond", "while"} | blocked | NOT_YET
    assert all(_has_complex(c) for c in CASES if c.name() in NOT_YET_CASES)


def test_data_dependent_control_flow_is_refused_at_compile_time():
    """compile_module(target="cuda") refuses `cond` before anything runs, naming the op and the target (the driver
    is never opened: no GPU is needed to learn it)."""
    import numpy as np

    import cuvil
    from cuvil.compiler import compile_module

    def branchy(x):
        if x.sum() > 0:
            return x * 2.0
        return x - 1.0

    module = cuvil.jit(branchy).lower(np.ones((2, 3), np.float32))
    with pytest.raises(UnsupportedError, match=r"target='cuda'\) cannot compile 'cond' \(data-dependent"):
        compile_module(module, target="cuda")
