"""`cuvil.runtime.Runtime(device="cuda", stream_priority=...)` over a cuda `.cuv` (loaded.py), against the recording
fake driver whose kernels run from their host build (emulator.py) and whose cuBLASLt computes in NumPy: host arrays
and NDArrays in and out (outputs from the Runtime's pool), device arrays in and out, bind/run, priorities."""
import numpy as np
import pytest

import cuvil
from cuvil.backends.cuda import artifact, cublaslt, driver
from cuvil.compiler import compile_module
from cuvil.demo_models import mlp_module
from cuvil.errors import ShapeError, UnsupportedError
from cuvil.interpreter import interpret
from cuvil.ir import TensorType, sym
from tests.backends.cuda.emulator import host_library
from tests.backends.cuda.fake_driver import FakeBlas, FakeDriver
from tests.backends.cuda.test_dlpack import _DLPackOnly, _read
from tests.backends.cuda.test_runtime import _module


@pytest.fixture
def exported(cuda_compiler, tmp_path, monkeypatch):
    """A .cuv with `main` (an elementwise chain over a symbolic size) and `mlp`, and the fake driver the Runtime
    opens (the kernels of both entries in one host build each: the fake runs the library of the loaded module)."""
    n = sym("n")
    chain = _module(lambda b, x: (b.add(b.mul(x, x), b.exp(x)),), TensorType("f32", (n, 3)))
    mlp, _ = mlp_module()
    path = tmp_path / "m.cuv"
    cuvil.export({"main": compile_module(chain, target="cuda"), "mlp": compile_module(mlp, target="cuda")}, path,
                 target="cuda")
    runs = artifact.load(path)
    d = FakeDriver(priority_range=(0, -5))
    d.library = host_library(runs["main"].built.program.source)
    monkeypatch.setattr(driver.CudaDriver, "load", classmethod(lambda cls: d))
    monkeypatch.setattr(cublaslt, "CublasLt", lambda: FakeBlas(d, compute=True))
    return path, {"main": chain, "mlp": mlp}, d


def test_host_arrays_and_ndarrays_in_and_out(exported):
    path, modules, d = exported
    rt = cuvil.runtime.Runtime(device="cuda")
    exe = rt.load_executable(path)
    assert exe.entries == ["main", "mlp"]
    fn = exe.get_function("main")
    for rows in (4, 9):
        x = np.random.default_rng(rows).standard_normal((rows, 3)).astype(np.float32)
        y = fn(cuvil.nd.array(x))
        assert isinstance(y, cuvil.nd.NDArray) and y.shape == (rows, 3)
        np.testing.assert_allclose(y.numpy(), interpret(modules["main"], [x])[0], rtol=1e-5, atol=1e-6)
    out = np.empty((4, 3), np.float32)
    fn.run([x[:4]], [out])  # into the caller's buffer
    np.testing.assert_allclose(out, interpret(modules["main"], [x[:4]])[0], rtol=1e-5, atol=1e-6)
    rt.close()


def test_bind_run_get_output(exported):
    path, modules, _ = exported
    rt = cuvil.runtime.Runtime(device="cuda")
    rt.load_executable(path)
    x = np.ones((2, 3), np.float32)
    rt.bind_input("input_0", x)
    out = np.empty((2, 3), np.float32)
    rt.bind_output("output_0", out)
    rt.run()
    np.testing.assert_allclose(out, interpret(modules["main"], [x])[0], rtol=1e-6)
    np.testing.assert_array_equal(rt.get_output(0).numpy(), out)


def test_device_arrays_give_device_outputs(exported):
    path, modules, d = exported
    fn = cuvil.runtime.Runtime(device="cuda").load_executable(path).get_function("main")
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    y = fn(_DLPackOnly(d, x))
    assert y.__dlpack_device__() == (2, 0)
    np.testing.assert_allclose(_read(cuvil.backends.cuda.dlpack.from_capsule(y.__dlpack__())),
                               interpret(modules["main"], [x])[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(UnsupportedError, match="bind_output takes host arrays"):
        fn._call([_DLPackOnly(d, x)], [np.empty((5, 3), np.float32)])


def test_stream_priority_reaches_the_stream_clamped(exported):
    path, _, d = exported
    fn = cuvil.runtime.Runtime(device="cuda", stream_priority=-3).load_executable(path).get_function("mlp")
    x = np.random.default_rng(1).standard_normal((2, 784)).astype(np.float32)
    np.testing.assert_allclose(fn(x).numpy(), interpret(mlp_module()[0], [x])[0], rtol=1e-4, atol=1e-5)
    assert fn.function.stream_priority == -3 and -3 in d.streams.values()
    fn = cuvil.runtime.Runtime(device="cuda", stream_priority=-99).load_executable(path).get_function("main")
    fn(np.ones((1, 3), np.float32))
    assert fn.function.stream_priority == -5  # the device's greatest priority


def test_wrong_inputs_and_devices_are_clear(exported, tmp_path):
    path, _, _ = exported
    fn = cuvil.runtime.Runtime(device="cuda").load_executable(path).get_function("main")
    with pytest.raises(ShapeError, match="input 0 must have shape"):
        fn(np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="stream_priority is for device='cuda'"):
        cuvil.runtime.Runtime(device="cpu", stream_priority=-1)
    with pytest.raises(UnsupportedError, match="device 'rocm' is not supported yet"):
        cuvil.runtime.Runtime(device="rocm")
    cpu = tmp_path / "cpu.cuv"
    cuvil.export(compile_module(mlp_module()[0]), cpu)
    with pytest.raises(cuvil.errors.ArtifactError, match="not 'cuda'"):
        cuvil.runtime.Runtime(device="cuda").load_executable(cpu)
