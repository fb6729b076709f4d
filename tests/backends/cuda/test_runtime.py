"""The CUDA host runtime against the recording fake driver (fake_driver.py): memory plan, launch geometry and
parameters, graph capture once per shape and replay, stream priorities, pinned buffers, copies, cuBLASLt calls and
the error word. Kernels do not run here; copies do, so a function that only moves data gives real results."""
import ctypes

import numpy as np
import pytest

from cuvil.backends.cuda import backend, cublaslt
from cuvil.backends.cuda.kernels import BLOCK, MAX_GRID
from cuvil.compiler import compile_module
from cuvil.demo_models import mlp_module
from cuvil.errors import IndexRangeError, ShapeError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from cuvil.passes import default_pipeline, run_pipeline
from tests.backends.cuda.fake_driver import FakeBlas, FakeDriver
from tests.backends.cuda.models import cuda_module


def _build(module, driver=None, priority=0):
    run_pipeline(module, default_pipeline("cuda"))
    d = driver or FakeDriver()
    return backend.build(module, archs=(), driver=d, blas=lambda: FakeBlas(d), stream_priority=priority).function, d


def _module(fn_body, *types):
    m = Module()
    b = Builder.new_function(m, "main", list(types))
    b.ret(*fn_body(b, *b.args))
    return m


def test_mlp_gemms_carry_bias_and_relu_epilogues(cuda_compiler):
    m, _ = mlp_module()
    f, d = _build(m)
    f([np.ones((4, 784), np.float32)])
    blas = f.blas
    (s1, g1), (s2, g2) = blas.calls
    assert (g1.epilogue, g2.epilogue) == (cublaslt.EPILOGUE[("relu", True)], cublaslt.EPILOGUE[("none", True)])
    # row-major C[4, 256] = x[4, 784] @ w1[784, 256] as column-major D[256, 4] = w1' @ x'
    assert (g1.d.rows, g1.d.cols, g1.a.rows, g1.a.cols, g1.b.rows, g1.b.cols) == (256, 4, 256, 784, 784, 4)
    assert not g1.trans_a and not g1.trans_b and g1.batch == 1


def test_one_capture_per_shape_then_replays(cuda_compiler):
    m, _ = mlp_module()
    f, d = _build(m)
    for batch in (4, 4, 4, 7, 4):
        assert f([np.zeros((batch, 784), np.float32)])[0].shape == (batch, 10)
    assert d.count("cuStreamBeginCapture") == 2 and d.count("cuGraphInstantiate") == 2
    assert d.count("cuGraphLaunch") == 5
    assert len(f.blas.calls) == 4  # enqueued while capturing, twice a shape; replays re-run the graph's nodes


def test_nothing_allocates_or_syncs_during_capture(cuda_compiler):
    m, _ = mlp_module()
    f, d = _build(m)
    f([np.zeros((2, 784), np.float32)])
    names = [n for n, _ in d.calls]
    begin, end = names.index("cuStreamBeginCapture"), names.index("cuStreamEndCapture")
    assert not {"cuMemAlloc", "cuMemHostAlloc", "cuStreamSynchronize"} & set(names[begin:end])
    assert names[end + 1:end + 4] == ["cuGraphInstantiate", "cuGraphLaunch", "cuStreamSynchronize"]


def test_copies_through_pinned_buffers_give_the_data_back(cuda_compiler):
    """x -> (x, reshape(x)): copies only, so the fake's host-backed device memory returns real values."""
    m = _module(lambda b, x: (x, b.reshape(x, shape=(6,))), TensorType("f32", (2, 3)))
    f, d = _build(m)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a, r = f([x])
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(r, x.reshape(6))
    pinned = [details["nbytes"] for name, details in d.calls if name == "cuMemHostAlloc"]
    assert pinned == [24, 24, 24]


def test_stream_priority_is_clamped_to_the_device_range(cuda_compiler):
    m, _ = mlp_module()
    f, d = _build(m, FakeDriver(priority_range=(0, -5)), priority=-9)
    assert f.stream_priority == -5 and d.streams[f.stream] == -5
    f, d = _build(mlp_module()[0], FakeDriver(priority_range=(0, -5)), priority=3)
    assert f.stream_priority == 0


def test_launch_geometry_and_parameters_follow_the_domain(cuda_compiler):
    n = sym("n")
    m = _module(lambda b, x: (b.tanh(b.mul(x, x)),), TensorType("f32", (n,)))
    f, d = _build(m)
    for size in (10, 1 << 26):
        f([np.zeros(size, np.float32)])
    grids = [launch["grid"][0] for launch in d.launches]
    assert grids == [1, MAX_GRID]  # 10 elements: one block; 2^26: the grid-stride loop's cap
    assert all(launch["block"] == (BLOCK, 1, 1) for launch in d.launches)
    assert d.launches[1]["params"][-1] == 1 << 26  # the symbol n, as an int64


def test_reduction_launches_a_block_per_row(cuda_compiler):
    m = _module(lambda b, x: (b.reduce_sum(x, axes=(1,), keepdims=False),), TensorType("f32", (3, 5000)))
    f, d = _build(m)
    f([np.zeros((3, 5000), np.float32)])
    (launch,) = d.launches
    assert launch["grid"] == (3, 1, 1)


def test_an_empty_domain_launches_nothing(cuda_compiler):
    n = sym("n")
    m = _module(lambda b, x: (b.exp(x),), TensorType("f32", (n,)))
    f, d = _build(m)
    assert f([np.zeros(0, np.float32)])[0].shape == (0,)
    assert d.count("cuLaunchKernel") == 0


def test_wrong_shapes_and_dtypes_are_refused_before_any_launch(cuda_compiler):
    m, _ = mlp_module()
    f, d = _build(m)
    with pytest.raises(ShapeError, match="must have shape"):
        f([np.zeros((2, 783), np.float32)])
    with pytest.raises(ShapeError, match="element type"):
        f([np.zeros((2, 784), np.float64)])
    assert d.count("cuLaunchKernel") == 0 and d.count("cuGraphLaunch") == 0


def test_a_recorded_index_error_raises_the_interpreters_message(cuda_compiler):
    """The gather kernel records code and index in the error word (here the fake stands in for the kernel)."""
    m = _module(lambda b, x, i: (b.gather(x, i, axis=0),), TensorType("f32", (4, 2)), TensorType("i64", (3,)))
    f, d = _build(m)
    (kernel,) = f.program.kernel_names

    def out_of_range(*params):
        err = f._err(next(iter(f.states.values())))
        assert err in params  # the kernel is given the error word
        ctypes.memmove(err, (ctypes.c_int64 * 2)(1, 7), 16)  # code 1 (the gather), index 7

    d.effects[kernel] = out_of_range
    x, idx = np.zeros((4, 2), np.float32), np.array([0, 7, 1])
    with pytest.raises(IndexRangeError) as got:
        f([x, idx])
    with pytest.raises(IndexRangeError) as want:
        interpret(m, [x, idx])
    assert str(got.value) == str(want.value)


def test_the_transformer_block_runs_its_steps_in_order(cuda_compiler):
    module, inputs = cuda_module("transformer")
    d = FakeDriver()
    f = backend.build(module, archs=(), driver=d, blas=lambda: FakeBlas(d)).function
    f(inputs)
    launched = [launch["kernel"] for launch in d.launches]
    assert launched == [s.kernel.name for s in f.program.steps if hasattr(s, "kernel")]
    assert len(f.blas.calls) == sum(type(s).__name__ == "Gemm" for s in f.program.steps)


def test_compile_module_target_cuda_runs_on_the_driver(cuda_compiler, monkeypatch):
    from cuvil.backends.cuda import driver

    d = FakeDriver()
    monkeypatch.setattr(driver.CudaDriver, "load", classmethod(lambda cls: d))
    monkeypatch.setattr(cublaslt, "CublasLt", lambda: FakeBlas(d))
    m = _module(lambda b, x: (b.reshape(x, shape=(4,)),), TensorType("f32", (2, 2)))
    exe = compile_module(m, target="cuda")
    assert exe.target == "cuda"
    np.testing.assert_array_equal(exe(np.ones((2, 2), np.float32))[0], np.ones(4, np.float32))


def test_target_cuda_builds_without_a_driver_and_says_so_when_called(cuda_compiler, monkeypatch):
    """A machine with no GPU compiles for CUDA (ahead of time); only running needs the driver."""
    from cuvil.backends.cuda import driver
    from cuvil.errors import UnsupportedError

    def missing(cls):
        raise UnsupportedError("target='cuda' needs an NVIDIA driver (libcuda.so.1), and this machine has none")

    monkeypatch.setattr(driver.CudaDriver, "load", classmethod(missing))
    exe = compile_module(mlp_module()[0], target="cuda")
    assert set(exe._run.built.images) == {"ptx", "sm_80", "sm_90"}
    with pytest.raises(UnsupportedError, match="libcuda"):
        exe(np.zeros((1, 784), np.float32))


class _FakeDeviceTensor:
    """A torch/CuPy stand-in: device memory of the fake driver behind a __cuda_array_interface__."""

    def __init__(self, driver, array: np.ndarray, strides=None):
        self.ptr = driver.cuMemAlloc(array.nbytes)
        ctypes.memmove(self.ptr, array.ctypes.data, array.nbytes)
        self.__cuda_array_interface__ = {"shape": array.shape, "typestr": array.dtype.str, "data": (self.ptr, False),
                                         "strides": strides, "version": 3}


def _read(view) -> np.ndarray:
    cai = view.__cuda_array_interface__
    out = np.empty(cai["shape"], np.dtype(cai["typestr"]))
    ctypes.memmove(out.ctypes.data, cai["data"][0], out.nbytes)
    return out


def test_run_device_exchanges_device_arrays_without_host_copies(cuda_compiler):
    m = _module(lambda b, x: (b.reshape(x, shape=(6,)),), TensorType("f32", (2, 3)))
    f, d = _build(m)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = f.run_device([_FakeDeviceTensor(d, x)])
    np.testing.assert_array_equal(_read(y), x.reshape(6))
    assert y.__cuda_array_interface__["shape"] == (6,) and y.__cuda_array_interface__["typestr"] == "<f4"
    assert d.count("cuMemcpyHtoDAsync") == 0 and d.count("cuMemcpyDtoHAsync") == 0
    f.run_device([_FakeDeviceTensor(d, x)])
    assert d.count("cuStreamBeginCapture") == 1  # one device graph for the shape, replayed


def test_run_device_refuses_host_and_strided_arrays(cuda_compiler):
    m = _module(lambda b, x: (b.neg(x),), TensorType("f32", (2, 3)))
    f, d = _build(m)
    with pytest.raises(ShapeError, match="device arrays"):
        f.run_device([np.zeros((2, 3), np.float32)])
    with pytest.raises(ShapeError, match="non-contiguous"):
        f.run_device([_FakeDeviceTensor(d, np.zeros((2, 3), np.float32), strides=(4, 8))])


def test_export_target_cuda_writes_a_cuv_that_loads_and_runs(cuda_compiler, tmp_path, monkeypatch):
    """Ahead of time with no GPU: the .cuv carries PTX and sm_80/sm_90 cubins, its IR and constants; loading it
    regenerates the host program from the IR and runs it on the driver (here the fake)."""
    import cuvil
    from cuvil.backends.cuda import artifact, driver
    from cuvil.runtime import container

    monkeypatch.setattr(driver.CudaDriver, "load", classmethod(lambda cls: (_ for _ in ()).throw(
        AssertionError("export must not open the driver"))))
    m = _module(lambda b, x: (b.reshape(x, shape=(4,)),), TensorType("f32", (2, 2)))
    path = tmp_path / "m.cuv"
    mlp, weights = mlp_module()
    cuvil.export({"main": compile_module(m, target="cuda"), "mlp": compile_module(mlp, target="cuda")}, path,
                 target="cuda")
    rows = container.Container.open(str(path)).rows
    assert {"meta", "entries", "native", "sm_80", "sm_90", "consts", "ir"} <= set(rows)
    d = FakeDriver()
    runs = artifact.load(path, driver=d, blas=lambda: FakeBlas(d))
    np.testing.assert_array_equal(runs["main"]([np.arange(4, dtype=np.float32).reshape(2, 2)])[0], np.arange(4.0))
    f = runs["mlp"].function
    for name, ptr in zip(f.program.constants, f.constants):  # the weights, uploaded from the file's consts
        w = weights[name]
        got = np.empty_like(w)
        ctypes.memmove(got.ctypes.data, ptr, w.nbytes)
        np.testing.assert_array_equal(got, w)


def test_export_target_cuda_refuses_a_cpu_executable(tmp_path):
    import cuvil
    from cuvil.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="target='cuda'"):
        cuvil.export(compile_module(mlp_module()[0], target="cpu"), tmp_path / "m.cuv", target="cuda")


def test_jit_and_onnx_optimize_take_target_cuda(cuda_compiler, monkeypatch, tmp_path):
    """The same entry points as the CPU: @cuvil.jit(target="cuda") and load_onnx(...).optimize(target="cuda")."""
    import onnx
    from onnx import TensorProto, helper

    import cuvil
    from cuvil.backends.cuda import driver

    d = FakeDriver()
    monkeypatch.setattr(driver.CudaDriver, "load", classmethod(lambda cls: d))

    @cuvil.jit(target="cuda")
    def flat(x):
        return x.reshape(6)

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(flat(x), x.reshape(6))
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
                              [helper.make_tensor("s", TensorProto.INT64, [1], [6])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    model = cuvil.load_onnx(str(path)).optimize(target="cuda")
    out = model(x=x)
    np.testing.assert_array_equal(out[0] if isinstance(out, (list, tuple)) else out, x.reshape(6))
    assert d.count("cuGraphLaunch") == 2
