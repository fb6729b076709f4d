"""The models the C runtime's tests export and run with `cuvil-run`: an MLP (constants, a symbolic batch), a CNN
from PyTorch (convolutions, prepared weights), an ONNX Winograd convolution (weights transformed at load), a
function with a data-dependent loop and one with dynamic dimensions. Each comes with its inputs, the in-process
compiled result and the original's."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import cuvil

MODELS = ("mlp", "cnn", "winograd", "control_flow", "dynamic")


@dataclass
class Exported:
    path: Path
    inputs: list
    expected: list  # what the compiled function gives in this process
    reference: list  # what the original (NumPy, PyTorch) gives


def grow(x):
    while x.sum() < 100.0:
        x = x * 2.0 + 1.0
    return x


def grow_numpy(x):
    while x.sum() < 100.0:
        x = x * np.float32(2.0) + np.float32(1.0)
    return x


def affine(x, w):
    return x @ w + 1.0


def _mlp(path: Path) -> Exported:
    from cuvil.compiler import compile_module
    from cuvil.demo_models import mlp_module, mlp_numpy

    module, weights = mlp_module()
    exe = compile_module(module)
    x = np.random.default_rng(1).standard_normal((5, 784)).astype(np.float32)
    cuvil.export(exe, path)
    return Exported(path, [x], list(exe(x)), [mlp_numpy(x, weights)])


def _cnn(path: Path) -> Exported:
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Conv2d(8, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(8 * 6 * 6, 10)).eval()
    x = torch.randn(2, 3, 16, 16)
    compiled = cuvil.compile(net, (x,))
    cuvil.export(compiled, path)
    with torch.no_grad():
        return Exported(path, [x.numpy()], [compiled(x).numpy()], [net(x).numpy()])


def _winograd(path: Path) -> Exported:
    """An ONNX convolution run by Winograd: the file stores its weight, which both loaders transform at load."""
    import onnxruntime

    from .models import winograd_conv_onnx

    model, _ = winograd_conv_onnx(np.random.default_rng(5), 64)
    optimized = cuvil.load_onnx(model.SerializeToString()).optimize()
    x = np.random.default_rng(6).standard_normal((1, 16, 20, 20)).astype(np.float32)
    cuvil.export(optimized, path)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return Exported(path, [x], list(optimized(x)), session.run(None, {"x": x}))


def _control_flow(path: Path) -> Exported:
    fn = cuvil.jit(grow)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    y = fn(x)
    cuvil.export(fn, path, example_inputs=(x,))
    return Exported(path, [x], [np.asarray(y)], [grow_numpy(x)])


def _dynamic(path: Path) -> Exported:
    fn = cuvil.jit(affine, dynamic=True)
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    y = fn(x, w)
    cuvil.export(fn, path, example_inputs=(x, w))
    return Exported(path, [x, w], [np.asarray(y)], [x @ w + 1.0])


def export_model(name: str, folder: Path) -> Exported:
    return {"mlp": _mlp, "cnn": _cnn, "winograd": _winograd, "control_flow": _control_flow,
            "dynamic": _dynamic}[name](folder / f"{name}.cuv")
