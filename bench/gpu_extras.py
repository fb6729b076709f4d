"""Stage "extras" of bench/gpu.py: what this session's CUDA work added, checked on the GPU (about a minute).

- masked attention: the fused kernel with an additive mask, torch SDPA's keep-mask and guard (a row with no key left)
  and several key tiles, against the reference interpreter;
- DLPack with torch CUDA: a torch CUDA tensor in through `__dlpack__`, the output out through `torch.from_dlpack`,
  zero-copy both ways, against torch's own result;
- `cuvil.runtime.Runtime(device="cuda", stream_priority=-1)`: the stream's priority within the device's range, and
  the call's result;
- the standalone C runtime: `cuvil-run` on a cuda `.cuv` (an elementwise chain and the MLP with its cuBLASLt GEMMs)
  through the real driver, against the interpreter; then libcuvilrt's C API running the chain at shapes that repeat
  and change (its CUDA Graph per shape captured once and replayed, pinned staging), against the interpreter;
- gather_elements and scatter_elements with an index outside the axis: the error word's atomics on real threads give
  the interpreter's IndexRangeError;
- cuDNN against the direct conv kernels (`cudnn_vs_direct`, when libcudnn loads: pip install 'cuvil[cudnn]'):
  ResNet-like convs with bias and relu, both results against the interpreter, and their graph replays timed
  interleaved in this one process: `direct_over_cudnn` > 1 is cuDNN faster.

In a dry run (the fake driver) only the attention and Runtime checks run; DLPack with torch and the C runtime need
the GPU.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import time

import numpy as np


def _attention(dry_run: bool) -> dict:
    from cuvil.compiler import compile_module
    from cuvil.interpreter import interpret
    from tests.passes.test_attention import attention_inputs, attention_module

    out = {}
    for mask, guard, keys, head in (("add", False, 128, 64), ("keep", True, 100, 64), ("keep", False, 70, 40)):
        m, inputs = attention_module(mask, guard, keys, head), attention_inputs(mask, keys, head)
        with np.errstate(invalid="ignore"):
            want = interpret(m, inputs)[0]
        got = compile_module(m, target="cuda")(*inputs)
        got = got[0] if isinstance(got, (list, tuple)) else got
        name = f"{mask}{'-guarded' if guard else ''}-k{keys}-d{head}"
        out[name] = True if dry_run else bool(np.allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True))
    return out


def _dlpack() -> dict:
    import torch

    from cuvil.compiler import compile_module
    from tests.passes.test_attention import attention_module

    exe = compile_module(attention_module("none"), target="cuda")
    q, k, v = (torch.randn(2, 4, 8, 16, device="cuda") for _ in range(3))
    class OnlyDLPack:  # torch's tensor offers __cuda_array_interface__ too: this one takes the DLPack path
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    y = exe._run.run_device([q, OnlyDLPack(k), v])[0]
    t = torch.from_dlpack(y)
    want = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1) @ v
    return {"zero_copy_out": t.data_ptr() == y.ptr, "device": str(t.device),
            "matches_torch": bool(torch.allclose(t, want, rtol=1e-4, atol=1e-5))}


def _runtime(dry_run: bool, folder: str) -> dict:
    import cuvil
    from cuvil.compiler import compile_module
    from cuvil.demo_models import mlp_module
    from cuvil.interpreter import interpret

    m, _ = mlp_module()
    path = os.path.join(folder, "mlp.cuv")
    cuvil.export({"main": compile_module(m, target="cuda")}, path, target="cuda")
    fn = cuvil.runtime.Runtime(device="cuda", stream_priority=-1).load_executable(path).get_function("main")
    x = np.random.default_rng(0).standard_normal((4, 784)).astype(np.float32)
    y = fn(x).numpy()
    ok = dry_run or bool(np.allclose(y, interpret(m, [x])[0], rtol=1e-3, atol=1e-4))
    return {"matches": ok, "stream_priority": fn.function.stream_priority, "path": path}


def _c_runtime(folder: str, mlp_path: str) -> dict:
    import cuvil
    from cuvil.backends.cuda.toolchain import wheel_libraries
    from cuvil.compiler import compile_module
    from cuvil.demo_models import mlp_module
    from cuvil.interpreter import interpret
    from cuvil.ir import Builder, Module, TensorType, sym
    from cuvil.runtime.build import build_runtime

    built = build_runtime(os.path.join(folder, "rt"))
    chain = Module()
    b = Builder.new_function(chain, "main", [TensorType("f32", (sym("n"), 3))])
    b.ret(b.add(b.mul(b.args[0], b.args[0]), b.exp(b.args[0])))
    chain_path = os.path.join(folder, "chain.cuv")
    cuvil.export({"main": compile_module(chain, target="cuda")}, chain_path, target="cuda")
    blas = next((p for p in wheel_libraries("libcublasLt") if os.path.isabs(p)), "")
    env = dict(os.environ, CUVIL_CUBLASLT=blas) if blas else dict(os.environ)
    out = {}
    rng = np.random.default_rng(1)
    for name, path, module, x in (("chain", chain_path, chain, rng.standard_normal((1000, 3))),
                                  ("mlp", mlp_path, mlp_module()[0], rng.standard_normal((4, 784)))):
        x = x.astype(np.float32)
        np.save(os.path.join(folder, f"{name}.npy"), x)
        run = subprocess.run([str(built.cli), path, os.path.join(folder, f"{name}.npy"), "-o",
                              os.path.join(folder, name)], capture_output=True, text=True, timeout=60, env=env)
        if run.returncode:
            out[name] = f"cuvil-run failed: {run.stderr.strip()[:300]}"
            continue
        got = np.load(os.path.join(folder, name, "output_0.npy"))
        out[name] = bool(np.allclose(got, interpret(module, [x])[0], rtol=1e-3, atol=1e-4))
    out["graph_replays"] = _c_api_graphs(built.shared, chain_path, chain)
    return out


def _c_api_graphs(shared, path: str, module) -> bool:
    """The chain through libcuvilrt's C API at rows 1000, 1000, 10, 1000, 5000: every result the interpreter's."""
    import ctypes

    from cuvil.interpreter import interpret

    class Tensor(ctypes.Structure):  # cuvil_runtime.h's cuvil_tensor
        _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                    ("shape", ctypes.c_int64 * 16), ("nbytes", ctypes.c_size_t)]

    lib = ctypes.CDLL(str(shared))
    model = ctypes.c_void_p()
    if lib.cuvil_open_file(path.encode(), ctypes.byref(model)):
        return False
    ok, rng = True, np.random.default_rng(2)
    try:
        for rows in (1000, 1000, 10, 1000, 5000):
            x = rng.standard_normal((rows, 3)).astype(np.float32)
            y = np.empty_like(x)
            ins, outs = (Tensor(a.ctypes.data, 2, 2, (ctypes.c_int64 * 16)(*a.shape), a.nbytes) for a in (x, y))
            ok &= lib.cuvil_run(model, None, 0, ctypes.byref(ins), 1, ctypes.byref(outs), 1) == 0 and \
                bool(np.allclose(y, interpret(module, [x])[0], rtol=1e-3, atol=1e-4))
    finally:
        lib.cuvil_close(model)
    return ok


def _element_index_errors() -> dict:
    """An index outside its axis: the interpreter's IndexRangeError from the device's error word."""
    from cuvil.compiler import compile_module
    from cuvil.errors import IndexRangeError
    from cuvil.interpreter import interpret
    from tests.ops.test_registry_sweep import CASES, build_case

    out = {}
    for name in ("gather_elements", "scatter_elements-add"):
        case = next(c for c in CASES if c.name() == name)
        inputs = [np.array(a) for a in case.inputs]
        inputs[1].flat[-1] = 9
        try:
            interpret(build_case(case), inputs)
            out[name] = "the interpreter did not raise"
            continue
        except IndexRangeError as e:
            want = str(e)
        try:
            compile_module(build_case(case), target="cuda")(*inputs)
            out[name] = False
        except IndexRangeError as e:
            out[name] = str(e) == want
    return out


CONVS = {  # name -> x shape, w shape, conv attrs: batch 8, ResNet-18's layers and a depthwise one
    "3x3-64-56": ((8, 64, 56, 56), (64, 64, 3, 3), {"pads": (1, 1, 1, 1)}),
    "3x3s2-128-28": ((8, 64, 56, 56), (128, 64, 3, 3), {"pads": (1, 1, 1, 1), "strides": (2, 2)}),
    "1x1-256-14": ((8, 128, 14, 14), (256, 128, 1, 1), {}),
    "dw3x3-128-28": ((8, 128, 28, 28), (128, 1, 3, 3), {"pads": (1, 1, 1, 1), "groups": 128}),
}


def _conv_relu(x_shape, w_shape, attrs):
    from cuvil.ir import Builder, Module, TensorType

    shapes = (x_shape, w_shape, w_shape[:1])
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", s) for s in shapes])
    b.ret(b.relu(b.conv(*b.args, **attrs)))
    rng = np.random.default_rng(4)
    return m, [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _replay_ms(fn, launches: int = 20) -> float:
    """Milliseconds a graph replay of `fn`'s only shape takes on the device (`launches` queued, then one wait)."""
    state = next(iter(fn.states.values()))
    t = time.perf_counter()
    for _ in range(launches):
        fn.driver.cuGraphLaunch(state.graph_exec, fn.stream)
    fn.driver.cuStreamSynchronize(fn.stream)
    return (time.perf_counter() - t) / launches * 1e3


def _cudnn_vs_direct(rounds: int = 15) -> dict:
    from cuvil.backends.cuda import cudnn
    from cuvil.compiler import clone_module, compile_module
    from cuvil.interpreter import interpret

    if cudnn.load() is None:
        return {"skipped": "libcudnn did not load (pip install 'cuvil[cudnn]')"}
    out = {}
    for name, shapes in CONVS.items():
        m, inputs = _conv_relu(*shapes)
        want = interpret(m, inputs)[0]
        fns, row = {}, {}
        for mode in ("cudnn", "direct"):
            os.environ["CUVIL_CUDA_CONV"] = mode  # read when the function is loaded, at its first call
            exe = compile_module(clone_module(m), target="cuda")
            got = exe(*inputs)
            row[f"{mode}_matches"] = bool(np.allclose(got, want, rtol=1e-3, atol=1e-3))
            fns[mode] = exe._run.function
        os.environ.pop("CUVIL_CUDA_CONV")
        row["cudnn_used"] = bool(next(iter(fns["cudnn"].states.values())).conv_plans)
        times = {mode: [] for mode in fns}
        for _ in range(rounds):  # interleaved: both see the same clocks and neighbours
            for mode, fn in fns.items():
                times[mode].append(_replay_ms(fn))
        for mode in fns:
            row[f"{mode}_ms"] = round(float(np.median(times[mode])), 4)
        row["direct_over_cudnn"] = round(row["direct_ms"] / row["cudnn_ms"], 2)
        out[name] = row
    return out


def stage_extras(dry_run: bool, results: dict) -> None:
    start, out = time.time(), {}
    folder = tempfile.mkdtemp(prefix="cuvil-gpu-extras-")
    checks = [("attention", lambda: _attention(dry_run)), ("runtime", lambda: _runtime(dry_run, folder))]
    if not dry_run:
        checks += [("dlpack_torch", _dlpack), ("element_index_errors", _element_index_errors),
                   ("c_runtime", lambda: _c_runtime(folder, out.get("runtime", {}).get("path", ""))),
                   ("cudnn_vs_direct", _cudnn_vs_direct)]
    for name, check in checks:
        try:
            out[name] = check()
        except Exception as e:  # noqa: BLE001
            out[name] = f"{type(e).__name__}: {str(e)[:300]}"
        print(f"extras {name}: {out[name]}", flush=True)
    out["seconds"] = round(time.time() - start)
    results["extras"] = out


def failed(extras: dict) -> bool:
    """Whether any extra check failed (a False anywhere, or an error text)."""
    def bad(v):
        if isinstance(v, dict):
            return any(bad(x) for k, x in v.items() if k not in ("path", "device", "stream_priority", "skipped"))
        return v is False or isinstance(v, str)
    return any(bad(v) for k, v in extras.items() if k != "seconds")
