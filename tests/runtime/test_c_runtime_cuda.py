"""The standalone C runtime running a `.cuv` for CUDA (cuvil_cuda_rt.c) against a fake libcuda and cuBLASLt
(fake_libcuda.c: host memory, every call logged, kernels run from their host build): cuvil-run and the C API give
the interpreter's results, the calls come in the order the driver needs, the cubin of the device's architecture is
taken (else the PTX), and a machine without a driver or device gets CUVIL_ERR_DEVICE with a message."""
from __future__ import annotations

import ctypes
import functools
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

import cuvil
from cuvil.backends.cpu import toolchain as cpu_toolchain
from cuvil.backends.cuda import artifact
from cuvil.compiler import compile_module
from cuvil.demo_models import mlp_module
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from tests.backends.cuda.emulator import host_library

from . import c_build

FAKE = Path(__file__).with_name("fake_libcuda.c")
CUVIL_ERR_SHAPE, CUVIL_ERR_EXEC, CUVIL_ERR_DEVICE = 8, 10, 11


@functools.lru_cache(maxsize=None)
def fake_driver() -> Path:
    """fake_libcuda.c built as libcuda.so.1 in a folder of its own (found through LD_LIBRARY_PATH)."""
    folder = Path(tempfile.mkdtemp(prefix="cuvil-fake-libcuda-"))
    subprocess.run([cpu_toolchain.find_compiler().path, "-std=c99", "-O1", "-shared", "-fPIC", str(FAKE), "-o",
                    str(folder / "libcuda.so.1"), "-ldl"], check=True, capture_output=True)
    return folder / "libcuda.so.1"


def _module(body, *types):
    m = Module()
    b = Builder.new_function(m, "main", list(types))
    b.ret(*body(b, *b.args))
    return m


@pytest.fixture(scope="module")
def models(cuda_compiler, tmp_path_factory):
    """name -> (path, module, host build of its kernels): an elementwise chain over a symbolic size, the MLP (two
    GEMMs with bias and relu epilogues), a gather (checked index)."""
    folder = tmp_path_factory.mktemp("cuda-models")
    n = sym("n")
    mlp, _ = mlp_module()
    made = {"chain": _module(lambda b, x: (b.add(b.mul(x, x), b.exp(x)),), TensorType("f32", (n, 3))),
            "mlp": mlp,
            "gather": _module(lambda b, x, i: (b.gather(x, i, axis=0),), TensorType("f32", (4, 2)),
                              TensorType("i64", (3,)))}
    out = {}
    for name, m in made.items():
        exe = compile_module(m, target="cuda")
        path = folder / f"{name}.cuv"
        cuvil.export({"main": exe}, path, target="cuda")
        source = artifact.load(path)["main"].built.program.source
        out[name] = (path, exe.module, host_library(source)._name)
    return out


def _env(kernels: str, **extra) -> dict:
    env = dict(os.environ, LD_LIBRARY_PATH=str(fake_driver().parent), FAKE_CUDA_KERNELS=kernels,
               CUVIL_CUBLASLT=str(fake_driver()))
    env.update(extra)
    return env


def _cuvil_run(tmp_path, model, inputs, **env):
    path, _, kernels = model
    files = []
    for k, x in enumerate(inputs):
        files.append(tmp_path / f"in{k}.npy")
        np.save(files[-1], x)
    log = tmp_path / "calls.log"
    log.unlink(missing_ok=True)
    built = c_build.runtime()
    out = subprocess.run([str(built.cli), str(path), *map(str, files), "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120,
                         env=_env(kernels, FAKE_CUDA_LOG=str(log), **env))
    calls = log.read_text().splitlines() if log.exists() else []
    return out, calls


def _outputs(tmp_path, n):
    return [np.load(tmp_path / "out" / f"output_{k}.npy") for k in range(n)]


def test_cuvil_run_runs_the_kernels_through_the_driver_in_order(models, tmp_path):
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    out, calls = _cuvil_run(tmp_path, models["chain"], [x])
    assert out.returncode == 0, out.stderr
    (got,) = _outputs(tmp_path, 1)
    np.testing.assert_allclose(got, interpret(models["chain"][1], [x])[0], rtol=1e-5, atol=1e-6)
    names = [c.split()[0] for c in calls]
    assert names[:4] == ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent"]
    assert "cuModuleLoadData ptx" in calls  # compute capability 7.5: no cubin matches, the driver compiles the PTX
    launches = [c for c in calls if c.startswith("cuLaunchKernel")]
    assert launches and all(c.endswith(" run captured") for c in launches)  # into the shape's graph
    first = names.index("cuLaunchKernel")
    assert names.index("cuStreamBeginCapture") < names.index("cuMemsetD32Async") < names.index("cuMemcpyHtoDAsync") \
        < first  # error word, then inputs
    assert names[first + 1:first + 6] == ["cuMemcpyDtoHAsync", "cuStreamEndCapture", "cuGraphInstantiateWithFlags",
                                          "cuGraphLaunch", "cuStreamSynchronize"]
    assert names[-3:] == ["cuModuleUnload", "cuStreamDestroy", "cuDevicePrimaryCtxRelease"]
    assert not any(n.startswith("cublasLt") for n in names)


def test_gemms_go_through_cublaslt_with_their_epilogues(models, tmp_path):
    x = np.random.default_rng(1).standard_normal((3, 784)).astype(np.float32)
    out, calls = _cuvil_run(tmp_path, models["mlp"], [x])
    assert out.returncode == 0, out.stderr
    np.testing.assert_allclose(_outputs(tmp_path, 1)[0], interpret(models["mlp"][1], [x])[0], rtol=1e-4, atol=1e-5)
    matmuls = [c for c in calls if c.startswith("cublasLtMatmul ")]
    assert matmuls == ["cublasLtMatmul type 0 D 256x3 batch 1 trans 0 0 epilogue 6 bias 1 captured",  # relu + bias
                       "cublasLtMatmul type 0 D 10x3 batch 1 trans 0 0 epilogue 4 bias 1 captured"]
    uploads = [int(c.split()[1]) for c in calls if c.startswith("cuMemcpyHtoDAsync")]
    assert uploads[:4] == [784 * 256 * 4, 256 * 4, 256 * 10 * 4, 10 * 4]  # the weights, once, before the input


@pytest.mark.parametrize("cc, image", [("80", "cubin"), ("90", "cubin"), ("86", "ptx")])
def test_the_cubin_of_the_devices_architecture_else_the_ptx(models, tmp_path, cc, image):
    out, calls = _cuvil_run(tmp_path, models["chain"], [np.ones((2, 3), np.float32)], FAKE_CUDA_CC=cc)
    assert out.returncode == 0, out.stderr
    assert f"cuModuleLoadData {image}" in calls


def test_stream_priority_is_clamped_to_the_device_range(models, tmp_path):
    out, calls = _cuvil_run(tmp_path, models["chain"], [np.ones((2, 3), np.float32)],
                            CUVIL_CUDA_STREAM_PRIORITY="-9")
    assert out.returncode == 0, out.stderr
    assert "cuStreamCreateWithPriority 1 -5" in calls  # the fake's range is [-5, 0]


def test_an_index_out_of_range_fails_with_the_interpreters_words(models, tmp_path):
    x, idx = np.zeros((4, 2), np.float32), np.array([0, 7, 1])
    out, _ = _cuvil_run(tmp_path, models["gather"], [x, idx])
    assert out.returncode != 0
    assert "'gather': index 7 is out of bounds for axis 0 with size 4" in out.stderr


def test_no_driver_or_no_device_is_a_clear_error(models, tmp_path):
    x = np.ones((2, 3), np.float32)
    out, calls = _cuvil_run(tmp_path, models["chain"], [x], LD_LIBRARY_PATH="", CUVIL_LIBCUDA="/nonexistent/lib.so")
    assert out.returncode != 0 and "needs an NVIDIA driver (libcuda.so.1)" in out.stderr and not calls
    out, _ = _cuvil_run(tmp_path, models["chain"], [x], FAKE_CUDA_NO_DEVICE="1")
    assert out.returncode != 0 and "CUDA_ERROR_NO_DEVICE" in out.stderr
    info = subprocess.run([str(c_build.runtime().cli), str(models["chain"][0]), "--info"], capture_output=True,
                          text=True, env=dict(os.environ, CUVIL_LIBCUDA="/nonexistent/lib.so"))
    assert info.returncode == 0 and "input  input_0: f32[n, 3]" in info.stdout  # no device needed to read it


def test_an_open_that_fails_partway_releases_its_stream_and_context(models, tmp_path):
    out, calls = _cuvil_run(tmp_path, models["chain"], [np.ones((2, 3), np.float32)], FAKE_CUDA_BAD_IMAGE="1")
    assert out.returncode != 0 and "cuModuleLoadData failed" in out.stderr, out.stderr
    names = [c.split()[0] for c in calls]
    assert names[-3:] == ["cuModuleLoadData", "cuStreamDestroy", "cuDevicePrimaryCtxRelease"], names


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("shape", ctypes.c_int64 * 16), ("nbytes", ctypes.c_size_t)]


def _tensor(a: np.ndarray) -> Tensor:
    return Tensor(a.ctypes.data, 2, a.ndim, (ctypes.c_int64 * 16)(*a.shape), a.nbytes)


def test_the_c_api_runs_with_caller_buffers_and_gives_status_codes(models, monkeypatch):
    path, module, kernels = models["chain"]
    for key, value in _env(kernels, CUVIL_LIBCUDA=str(fake_driver())).items():  # (LD_LIBRARY_PATH is read at start)
        monkeypatch.setenv(key, value)
    lib = ctypes.CDLL(str(c_build.runtime().shared))
    lib.cuvil_last_message.restype = ctypes.c_char_p
    model = ctypes.c_void_p()
    assert lib.cuvil_open_file(str(path).encode(), ctypes.byref(model)) == 0, lib.cuvil_last_message()
    try:
        x = np.random.default_rng(2).standard_normal((7, 3)).astype(np.float32)
        y = np.empty_like(x)
        ins, outs = _tensor(x), _tensor(y)
        assert lib.cuvil_run(model, None, 0, ctypes.byref(ins), 1, ctypes.byref(outs), 1) == 0, lib.cuvil_last_message()
        np.testing.assert_allclose(y, interpret(module, [x])[0], rtol=1e-5, atol=1e-6)
        bad = _tensor(np.ones((7, 4), np.float32))
        assert lib.cuvil_run(model, None, 0, ctypes.byref(bad), 1, ctypes.byref(outs), 1) == CUVIL_ERR_SHAPE
    finally:
        lib.cuvil_close(model)
    monkeypatch.setenv("FAKE_CUDA_NO_DEVICE", "1")
    assert lib.cuvil_open_file(str(path).encode(), ctypes.byref(model)) == 0
    try:
        ins, outs = _tensor(x), _tensor(y)
        assert lib.cuvil_run(model, None, 0, ctypes.byref(ins), 1, ctypes.byref(outs), 1) == CUVIL_ERR_DEVICE
        assert b"CUDA_ERROR_NO_DEVICE" in lib.cuvil_last_message()
        assert lib.cuvil_run(model, None, 0, ctypes.byref(ins), 1, ctypes.byref(outs), 1) == CUVIL_ERR_DEVICE
    finally:
        lib.cuvil_close(model)


def test_a_graph_per_shape_is_captured_once_and_replayed_through_pinned_staging(models, monkeypatch, tmp_path):
    """Each input shape's run is captured into a CUDA Graph once and replayed after (a buffer that must grow drops
    the graphs: they hold its address); every copy between host and device goes through pinned staging."""
    path, module, kernels = models["chain"]
    log = tmp_path / "calls.log"
    for key, value in _env(kernels, CUVIL_LIBCUDA=str(fake_driver()), FAKE_CUDA_LOG=str(log)).items():
        monkeypatch.setenv(key, value)
    lib = ctypes.CDLL(str(c_build.runtime().shared))
    lib.cuvil_last_message.restype = ctypes.c_char_p
    model = ctypes.c_void_p()
    assert lib.cuvil_open_file(str(path).encode(), ctypes.byref(model)) == 0, lib.cuvil_last_message()
    rng = np.random.default_rng(4)
    try:
        for rows in (7, 7, 3, 7, 9, 9):
            x = rng.standard_normal((rows, 3)).astype(np.float32)
            y = np.empty_like(x)
            ins, outs = _tensor(x), _tensor(y)
            assert lib.cuvil_run(model, None, 0, ctypes.byref(ins), 1, ctypes.byref(outs), 1) == 0
            np.testing.assert_allclose(y, interpret(module, [x])[0], rtol=1e-5, atol=1e-6)
    finally:
        lib.cuvil_close(model)
    calls = log.read_text().splitlines()
    names = [c.split()[0] for c in calls]
    # 7: captured; 7: replayed; 3: captured (the buffers fit); 7: replayed; 9: buffers grow, graphs dropped, captured
    assert names.count("cuStreamBeginCapture") == 3 and names.count("cuGraphLaunch") == 6
    assert names.count("cuGraphExecDestroy") == names.count("cuGraphDestroy") == 3  # two at the growth, one at close
    copies = [c for c in calls if c.startswith(("cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync"))]
    assert copies and not any("pageable" in c for c in copies)
    assert names.count("cuMemAllocHost") == names.count("cuMemFreeHost")


def test_eight_threads_share_one_device_model(models, tmp_path):
    """runtime_driver's api mode: open from memory, 8 threads calling at once; the model's lock serialises them."""
    path, module, kernels = models["chain"]
    x = np.random.default_rng(3).standard_normal((6, 3)).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    built = c_build.runtime()
    out = subprocess.run([str(built.driver), "api", str(path), str(tmp_path / "x.bin"), "6", "3",
                          str(tmp_path / "y.bin")], capture_output=True, text=True, timeout=120, env=_env(kernels))
    assert out.returncode == 0, out.stderr
    got = np.fromfile(tmp_path / "y.bin", np.float32).reshape(6, 3)
    np.testing.assert_allclose(got, interpret(module, [x])[0], rtol=1e-5, atol=1e-6)


def test_the_cuda_path_is_its_own_library_so_the_cpu_runtime_stays_small(models, tmp_path):
    """libcuvilrt.so (stripped) stays within its 64 KB and holds none of the driver path; libcuvilcuda.so beside it
    is opened at the first CUDA file (CUVIL_CUDA_RT names another), and without it opening one is a clear
    CUVIL_ERR_DEVICE naming the library."""
    built = c_build.runtime()
    core, cuda = built.shared.read_bytes(), (built.folder / "libcuvilcuda.so").read_bytes()
    assert len(core) <= 64 * 1024
    assert b"cuLaunchKernel" not in core and b"cuLaunchKernel" in cuda
    x = np.ones((2, 3), np.float32)
    out, calls = _cuvil_run(tmp_path, models["chain"], [x], CUVIL_CUDA_RT="/nonexistent/libcuvilcuda.so")
    assert out.returncode != 0 and "needs /nonexistent/libcuvilcuda.so (CUVIL_CUDA_RT)" in out.stderr
    assert not calls
    alone = tmp_path / "cuvil-run"
    alone.write_bytes(built.cli.read_bytes())
    alone.chmod(0o755)
    info = subprocess.run([str(alone), str(models["chain"][0]), "--info"], capture_output=True, text=True,
                          env=_env(models["chain"][2]))
    assert info.returncode != 0 and "needs libcuvilcuda.so" in info.stderr
