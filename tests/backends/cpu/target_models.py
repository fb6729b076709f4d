"""The models every target is tested on (issue 19): an MLP, a CNN, a function with control flow, one with a dynamic
dimension and a small transformer, each compiled for a given target and exported; with their inputs and the
outputs of the host's build (the x86-64 reference the other targets must equal within fp32 tolerances)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import cuvil

RTOL, ATOL = 1e-4, 1e-5  # fp32: different vector widths sum in different orders, and exp/tanh differ in the last bits
QEMU_SYSROOT = "/usr/aarch64-linux-gnu"  # Debian's libc6-arm64-cross: the dynamic loader and libc for qemu-aarch64


def require(tool: str, what: str) -> str:
    """The path of `tool`; a skip where it is missing, except in CI (`CI=true`), where the test fails instead."""
    path = shutil.which(tool) if not os.path.isabs(tool) else (tool if os.path.exists(tool) else None)
    if path:
        return path
    message = f"{tool} is not installed ({what}; .ci/run installs it)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def _rng(seed: int):
    return np.random.default_rng(seed)


def _torch_mlp():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 10)).eval()
    return model, [_rng(1).standard_normal((3, 24), dtype=np.float32)]


def _torch_cnn():
    import torch

    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                          nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.ReLU(),  # depthwise
                          nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),  # blocked (conv_nchwc) at every width
                          nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(32 * 4 * 4, 10)).eval()
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model, [_rng(2).standard_normal((1, 3, 16, 16), dtype=np.float32)]


def _torch_transformer():
    import torch

    class Block(torch.nn.Module):
        def __init__(self, d=32, heads=4):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    torch.manual_seed(0)
    return Block().eval(), [_rng(3).standard_normal((1, 8, 32), dtype=np.float32)]


def branchy(x):
    if x.mean() > 0.0:
        return np.maximum(x, 0.0) * 2.0
    return 1.0 / (1.0 + np.exp(-x))


def rows_softmax(x, w):
    y = x @ w
    e = np.exp(y - y.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _control_flow():
    x = _rng(4).standard_normal((4, 37), dtype=np.float32)
    return [[x + 1.0], [x - 1.0]]  # one call per branch


def _dynamic():
    rng = _rng(5)
    w = rng.standard_normal((19, 7), dtype=np.float32)
    return [[rng.standard_normal((n, 19), dtype=np.float32), w] for n in (4, 1, 9)]


TORCH = {"mlp": _torch_mlp, "cnn": _torch_cnn, "transformer": _torch_transformer}
JIT = {"control_flow": (branchy, _control_flow, {}),
       "dynamic": (rows_softmax, _dynamic, {"dynamic_dims": {"x": {0: "n"}}})}
NAMES = (*TORCH, *JIT)


def export(name: str, target, path) -> list:
    """Compile model `name` for `target`, write it to `path`; returns the calls to test it with (lists of
    arrays) and the host build's outputs for each call."""
    import torch

    if name in TORCH:
        model, inputs = TORCH[name]()
        compiled = cuvil.compile(model, tuple(torch.from_numpy(a) for a in inputs), target=target)
        cuvil.export(compiled, path, target=target)
        host = cuvil.compile(model, tuple(torch.from_numpy(a) for a in inputs))
        with torch.no_grad():
            expected = [np.asarray(host(*[torch.from_numpy(a) for a in inputs]))]
            reference = model(*[torch.from_numpy(a) for a in inputs]).numpy()
        np.testing.assert_allclose(expected[0], reference, RTOL, ATOL)  # the host build is right, to begin with
        return [inputs], expected
    fn, make_calls, options = JIT[name]
    calls = make_calls()
    jitted = cuvil.jit(fn, **options)
    cuvil.export(jitted, path, target=target, example_inputs=tuple(calls[0]))
    expected = [np.asarray(jitted(*c)) for c in calls]
    for call, out in zip(calls, expected):
        np.testing.assert_allclose(out, fn(*call), RTOL, ATOL)
    return calls, expected


def run_cli(command: list, cuv: Path, inputs: list, folder: Path, env=None) -> list:
    """`cuvil-run MODEL in0.npy ... -o OUT` (under `command`'s emulator, if any); the outputs it wrote, in order."""
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for k, a in enumerate(inputs):
        files.append(folder / f"in{k}.npy")
        np.save(files[-1], a)
    out = folder / "out"
    shutil.rmtree(out, ignore_errors=True)
    done = subprocess.run([*command, str(cuv), *map(str, files), "-o", str(out)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, f"cuvil-run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return [np.load(out / f"output_{k}.npy") for k in range(len(list(out.glob("output_*.npy"))))]
