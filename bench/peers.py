"""The peers Cuvil is measured against, and Cuvil's own routes, as a table of small preparers.

A preparer takes a workload's `Built` and the run's `Context` and returns a runner: a function of no arguments
that performs one inference on prepared inputs and returns the output. It raises `NotApplicable` when the
workload has no form for that peer (JAX has no ResNet here), anything else when the peer fails.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .workloads import Built


class NotApplicable(Exception):
    """The peer has no form of this workload (shown as '-' in the table)."""


@dataclass
class Context:
    threads: int
    onnx_path: Callable[[], str]  # exports the workload on first use (cached per workload)


@dataclass(frozen=True)
class Peer:
    name: str
    prepare: Callable
    needs: str = ""  # the module that must be importable
    spins: bool = False  # its thread pool spins after a call: leave a gap before the next peer
    cuvil: bool = False
    onnx: bool = False  # reads the workload's ONNX export
    tolerance: float = 0.0  # max error relative to PyTorch's largest output (0: the harness's fp32 bound)
    opt_in: bool = False  # runs only when --peers names it (the reduced-precision peers: bench/peers_int8.py)

    def available(self) -> bool:
        return not self.needs or importlib.util.find_spec(self.needs) is not None


# -- the peers ----------------------------------------------------------------------------------------------------
def _numpy(b: Built, ctx: Context):
    if b.numpy_fn is None:
        raise NotApplicable
    arrays = b.numpy_inputs
    return lambda: b.numpy_fn(*arrays)


def _torch_runner(module, inputs):
    import torch

    def run():
        with torch.inference_mode():
            return module(*inputs)
    return run


def _torch_eager(b: Built, ctx: Context):
    return _torch_runner(b.module, b.inputs)


def _torch_compile(b: Built, ctx: Context):
    import torch

    return _torch_runner(torch.compile(b.module), b.inputs)


def _onnxruntime(b: Built, ctx: Context):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads, so.inter_op_num_threads = ctx.threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(ctx.onnx_path(), so, providers=["CPUExecutionProvider"])
    feeds = dict(zip((i.name for i in session.get_inputs()), b.numpy_inputs))
    return lambda: session.run(None, feeds)[0]


def _openvino(b: Built, ctx: Context):
    import openvino as ov

    config = {"INFERENCE_NUM_THREADS": ctx.threads, "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
    request = ov.Core().compile_model(ctx.onnx_path(), "CPU", config).create_infer_request()
    feeds = dict(enumerate(b.numpy_inputs))

    def run():
        request.infer(feeds)
        return request.get_output_tensor(0).data
    return run


def _jax(b: Built, ctx: Context):
    if b.jax_fn is None:
        raise NotApplicable
    fn, convert = b.jax_fn()
    args = convert(b.numpy_inputs)
    return lambda: fn(*args).block_until_ready()


# -- Cuvil's routes -------------------------------------------------------------------------------------------------
def _cuvil_jit(b: Built, ctx: Context):
    import cuvil

    if b.jit_fn is None:
        raise NotApplicable
    fn, inputs = cuvil.jit(b.jit_fn), b.jit_inputs
    return _cuvil_runner(fn, inputs, lambda: fn(*inputs))


def _cuvil_torch(b: Built, ctx: Context):
    import cuvil

    compiled = cuvil.compile(b.exported, b.inputs)
    inputs = b.inputs
    return _cuvil_runner(compiled, inputs, lambda: compiled(*inputs))


def _cuvil_onnx(b: Built, ctx: Context):
    import cuvil

    with contextlib.redirect_stdout(io.StringIO()):
        model = cuvil.load_onnx(ctx.onnx_path()).optimize()
    arrays = b.numpy_inputs
    run = _cuvil_runner(model, arrays, lambda: model(*arrays)[0])
    run()
    target = getattr(executable_of(model), "target", "unknown")
    if target != "cpu":
        raise RuntimeError(f".optimize() returned a model that runs on the {target} target, not compiled code")
    return run


def _cuvil_runner(obj, args, run):
    run.cuvil_call = (obj, args)  # the harness reads the memory plan and profiles through it
    return run


def executable_of(obj):
    """The `cuvil.Executable` inside what cuvil.jit, cuvil.compile or .optimize() returned (after a call)."""
    from cuvil import Executable

    if isinstance(obj, Executable):
        return obj
    last = getattr(obj, "_last", None)  # a JitFunction: its most recent signature
    if last is not None:
        return last.executable
    if isinstance(getattr(obj, "executable", None), Executable):  # a torch CompiledModule
        return obj.executable
    for cell in getattr(getattr(obj, "_run", None), "__closure__", None) or ():  # an optimized OnnxModel
        if isinstance(cell.cell_contents, Executable):
            return cell.cell_contents
    return None


PEERS = [
    Peer("numpy", _numpy, "numpy"),
    Peer("torch eager", _torch_eager, "torch"),
    Peer("torch.compile", _torch_compile, "torch"),
    Peer("ONNX Runtime", _onnxruntime, "onnxruntime", spins=True, onnx=True),
    Peer("OpenVINO", _openvino, "openvino", spins=True, onnx=True),
    Peer("JAX jit", _jax, "jax"),
    Peer("cuvil jit", _cuvil_jit, cuvil=True),
    Peer("cuvil torch", _cuvil_torch, cuvil=True),
    Peer("cuvil onnx", _cuvil_onnx, "onnx", cuvil=True, onnx=True),
]
BASELINE = "ONNX Runtime"


def select(names: str | None = None) -> list:
    """Installed peers, or those named in the comma-separated `names`."""
    wanted = {n.strip() for n in names.split(",")} if names else None
    return [p for p in PEERS if p.available() and (p.name in wanted if wanted is not None else not p.opt_in)]


def to_numpy(out) -> np.ndarray:
    """A peer's output as a float NumPy array (torch tensors, JAX arrays, lists of one output)."""
    if isinstance(out, (list, tuple)):
        out = out[0]
    if hasattr(out, "detach"):
        out = out.detach().numpy()
    return np.asarray(out)


def export_onnx(module, inputs, path: str) -> str:
    """torch.onnx.export with dynamo=True at opset 18 (shared/PEERS.md), weights inside the file."""
    import torch

    if not os.path.exists(path):
        with contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(module, tuple(inputs), path, dynamo=True, opset_version=18, external_data=False)
    return path
