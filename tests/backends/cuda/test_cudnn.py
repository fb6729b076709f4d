"""2-D convolutions through cuDNN (cudnn.py) against a recording fake libcudnn (tests/runtime/fake_libcudnn.c: it
computes the f32 convolution on the fake driver's host memory with a naive loop, and checks descriptors, algorithm
and workspace), the rest of the program emulated (emulator.py); results against the reference interpreter. Without
the library, or with CUVIL_CUDA_CONV=direct, the direct conv kernel runs instead."""
import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cuvil.backends.cpu import toolchain as cpu_toolchain
from cuvil.backends.cuda import backend, cudnn
from cuvil.backends.cuda.driver import CudaDriverError
from cuvil.backends.cuda.program import Conv
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType
from cuvil.passes import default_pipeline, run_pipeline
from tests.backends.cuda.emulator import host_library
from tests.backends.cuda.fake_driver import FakeBlas, FakeDriver

FAKE = Path(__file__).parents[2] / "runtime" / "fake_libcudnn.c"
FORWARDS = {"cudnnConvolutionForward": 12, "cudnnConvolutionBiasActivationForward": 17}  # name -> y's argument


@pytest.fixture(scope="module")
def fake_cudnn(tmp_path_factory) -> Path:
    lib = tmp_path_factory.mktemp("fake-cudnn") / "libcudnn.so.9"
    subprocess.run([cpu_toolchain.find_compiler().path, "-std=c99", "-O1", "-shared", "-fPIC", str(FAKE), "-o",
                    str(lib)], check=True, capture_output=True)
    return lib


class OnStream:
    """The fake libcudnn with its forward calls put on the fake driver's stream (into the graph while capturing),
    their pointers checked to lie in device memory, as the fake cuBLASLt's are."""

    def __init__(self, lib, driver: FakeDriver):
        self.lib, self.driver, self.stream = lib, driver, 0

    def cudnnSetStream(self, handle, stream):
        self.stream = stream.value or 0
        return self.lib.cudnnSetStream(handle, stream)

    def __getattr__(self, name: str):
        fn = getattr(self.lib, name)
        if name not in FORWARDS:
            return fn

        def deferred(*args):
            for at, what in ((3, "x"), (5, "w"), (FORWARDS[name], "y")):
                self.driver._check_device(args[at].value, 4, f"{name} {what}")
            if args[9].value:
                self.driver._check_device(args[8].value, args[9].value, f"{name} workspace")
            self.driver._on_stream(self.stream, lambda: _checked(name, fn(*args)))
            return 0

        return deferred


def _checked(name: str, status: int) -> None:
    if status:
        raise CudaDriverError(f"{name} failed: cudnnStatus {status}")


def _log(lib) -> list:
    lib.fake_cudnn_log.restype = ctypes.c_char_p
    return lib.fake_cudnn_log().decode().splitlines()


def _conv_module(x_shape, w_shape, bias: bool, act: str | None, dtype="f32", **attrs):
    m = Module()
    types = [TensorType(dtype, x_shape), TensorType(dtype, w_shape)] + ([TensorType(dtype, (w_shape[0],))] if bias
                                                                        else [])
    b = Builder.new_function(m, "main", types)
    y = b.conv(*b.args, **attrs)
    if act == "clip":
        y = b.clip(y, min=0.0, max=6.0)
    elif act:
        y = getattr(b, act)(y)
    b.ret(y)
    rng = np.random.default_rng(3)
    return m, [rng.standard_normal(t.shape).astype(np.float32) for t in types]


def _run(module, inputs, lib, monkeypatch):
    """The module's CUDA build run on the fake driver with the fake cuDNN: (outputs, driver, function)."""
    run_pipeline(module, default_pipeline("cuda"))
    d = FakeDriver()
    if lib is not None:
        monkeypatch.setattr(cudnn, "load", lambda: cudnn.Cudnn(OnStream(lib, d)))
    run = backend.build(module, archs=(), driver=d, blas=lambda: FakeBlas(d, compute=True))
    d.library = host_library(run.built.program.source)
    return run.function(inputs), d, run.function


def _kernels(d: FakeDriver) -> list:
    return [launch["kernel"] for launch in d.launches]


def test_conv_bias_relu_is_one_fused_cudnn_call(fake_cudnn, monkeypatch):
    m, inputs = _conv_module((2, 3, 7, 6), (4, 3, 3, 3), True, "relu", pads=(1, 1, 1, 1))
    want = interpret(m, inputs)
    lib = ctypes.CDLL(str(fake_cudnn))
    lib.fake_cudnn_reset()
    got, d, f = _run(m, inputs, lib, monkeypatch)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    assert _log(lib) == ["cudnnConvolutionBiasActivationForward type 0 x 2x3x7x6 w 4x3x3x3 y 2x4x7x6 pad 1 1 "
                         "stride 1 1 dil 1 1 groups 1 math 0 algo 2 workspace 65536 act relu stream set"]
    assert _kernels(d) == []  # neither the direct kernel nor an epilogue kernel ran
    f(inputs)  # a replay runs the captured call again: no new plan, no new capture
    assert _log(lib) == 2 * _log(lib)[:1] and len(f.dnn._plans) == 1 and d.count("cuStreamBeginCapture") == 1


def test_a_bias_alone_takes_the_identity_algorithm(fake_cudnn, monkeypatch):
    """cuDNN fuses an IDENTITY activation only with IMPLICIT_PRECOMP_GEMM: chosen over the better-ranked GEMM."""
    m, inputs = _conv_module((1, 4, 5, 5), (6, 2, 3, 3), True, None, strides=(2, 2), groups=2)
    want = interpret(m, inputs)
    lib = ctypes.CDLL(str(fake_cudnn))
    lib.fake_cudnn_reset()
    got, d, _ = _run(m, inputs, lib, monkeypatch)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    (line,) = _log(lib)
    assert "groups 2" in line and "stride 2 2" in line and "algo 1 workspace 4096 act identity" in line


@pytest.mark.parametrize("act", ["sigmoid", "clip", "relu"])
def test_an_epilogue_cudnn_does_not_fuse_runs_as_a_kernel_after_it(fake_cudnn, monkeypatch, act):
    """Without a bias (cuDNN's fused form needs one) and for activations it lacks: cudnnConvolutionForward, then an
    in-place kernel on y."""
    m, inputs = _conv_module((1, 2, 6, 5), (3, 2, 2, 3), False, act, dilations=(2, 1), pads=(1, 0, 1, 0))
    want = interpret(m, inputs)
    lib = ctypes.CDLL(str(fake_cudnn))
    lib.fake_cudnn_reset()
    got, d, _ = _run(m, inputs, lib, monkeypatch)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    (line,) = _log(lib)
    assert line.startswith("cudnnConvolutionForward ") and "dil 2 1" in line and "pad 1 0" in line
    assert len(_kernels(d)) == 1 and _kernels(d)[0].endswith("_inplace")


def test_the_direct_kernel_runs_when_cudnn_is_missing(monkeypatch):
    monkeypatch.setattr(cudnn, "candidates", lambda: ["/nonexistent/libcudnn.so.9"])
    assert cudnn.load() is None
    m, inputs = _conv_module((1, 3, 6, 6), (4, 3, 3, 3), True, "relu", pads=(1, 1, 1, 1))
    want = interpret(m, inputs)
    got, d, f = _run(m, inputs, None, monkeypatch)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    assert f.dnn is None and [k.rsplit("_", 1)[1] for k in _kernels(d)] == ["conv"]
    assert any(isinstance(s, Conv) for s in f.program.steps)


def test_cuvil_cuda_conv_direct_keeps_the_direct_kernel(fake_cudnn, monkeypatch):
    monkeypatch.setenv("CUVIL_CUDNN", str(fake_cudnn))
    assert isinstance(cudnn.load(), cudnn.Cudnn)  # the fake opens through CUVIL_CUDNN
    monkeypatch.setenv("CUVIL_CUDA_CONV", "direct")
    assert cudnn.load() is None
    m, inputs = _conv_module((1, 3, 6, 6), (4, 3, 3, 3), False, "tanh")
    want = interpret(m, inputs)
    got, d, _ = _run(m, inputs, None, monkeypatch)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    assert [k.rsplit("_", 1)[1] for k in _kernels(d)] == ["conv"]  # the tanh on the direct kernel's way out


@pytest.mark.parametrize("x_shape, w_shape, dtype, bias, attrs", [
    ((1, 2, 5), (3, 2, 3), "f32", False, {}),  # 1-D
    ((1, 2, 5, 5), (3, 2, 3, 3), "f32", False, {"pads": (1, 1, 0, 0)}),  # asymmetric padding
    ((1, 2, 5, 5), (3, 2, 3, 3), "f16", True, {}),  # a 16-bit conv with a bias
])
def test_convs_cudnn_does_not_take_stay_direct(x_shape, w_shape, dtype, bias, attrs):
    from cuvil.backends.cuda import codegen

    m, _ = _conv_module(x_shape, w_shape, bias, None, dtype, **attrs)
    run_pipeline(m, default_pipeline("cuda"))
    steps = codegen.generate(m).steps
    assert not any(isinstance(s, Conv) for s in steps) and len(steps) == 1


def test_a_16_bit_conv_without_bias_is_a_cudnn_step():
    from cuvil.backends.cuda import codegen

    m, _ = _conv_module((1, 2, 5, 5), (4, 2, 3, 3), False, None, "f16", pads=(1, 1, 1, 1))
    run_pipeline(m, default_pipeline("cuda"))
    (step,) = codegen.generate(m).steps
    assert isinstance(step, Conv) and (step.dtype, step.act, step.pads, step.after) == ("f16", "none", (1, 1), [])


def test_a_symbolic_batch_gets_a_plan_per_shape(fake_cudnn, monkeypatch):
    from cuvil.ir import sym

    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"), 2, 5, 5)), TensorType("f32", (3, 2, 3, 3)),
                                         TensorType("f32", (3,))])
    b.ret(b.relu(b.conv(*b.args, pads=(1, 1, 1, 1))))
    rng = np.random.default_rng(6)
    w, bias = rng.standard_normal((3, 2, 3, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    lib = ctypes.CDLL(str(fake_cudnn))
    lib.fake_cudnn_reset()
    x1 = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    want = interpret(m, [x1, w, bias])
    got, d, f = _run(m, [x1, w, bias], lib, monkeypatch)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    x3 = rng.standard_normal((3, 2, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(f([x3, w, bias])[0], interpret(m, [x3, w, bias])[0], rtol=1e-5, atol=1e-5)
    assert [line.split(" y ")[0].split(" x ")[1] for line in _log(lib)] == ["1x2x5x5 w 3x2x3x3", "3x2x5x5 w 3x2x3x3"]
    assert len(f.dnn._plans) == 2 and _kernels(d) == []


def test_the_c_runtimes_steps_carry_the_direct_conv_kernel():
    """The standalone C runtime has no cuDNN: a Conv step is written to cuda_steps as its direct kernel's launch."""
    from cuvil.backends.cuda import codegen, host_steps

    m, _ = _conv_module((1, 3, 6, 6), (4, 3, 3, 3), True, "relu", pads=(1, 1, 1, 1))
    run_pipeline(m, default_pipeline("cuda"))
    program = codegen.generate(m)
    (step,) = program.steps
    launches = [line for line in host_steps.format_steps("main", program) if line.startswith("launch ")]
    assert isinstance(step, Conv) and program.kernel_names == [step.direct.kernel.name]
    assert len(launches) == 1 and launches[0].startswith("launch 0 ")
