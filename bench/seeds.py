"""The README's two seed examples, verbatim, against the code they replace, run as a user runs them (none of
`python -m bench`'s environment: glibc's default malloc thresholds, default thread counts).

    python -m bench.seeds [--rounds 10] [--calls 50]

`dynamic_inference` (torch, 512x1024, on each branch) against eager PyTorch, `matmul_inference` (NumPy,
1024x512 @ 512x256) against NumPy's `A @ B`. The compiled and the original call alternate within each round;
the medians over every call are reported.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

import cuvil

from .__main__ import UNFAIR_ENV
from .harness import openblas_kernel


@cuvil.compile
def dynamic_inference(x: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    if x.mean() > threshold:
        return torch.nn.functional.relu(x)
    else:
        return torch.sigmoid(x)


@cuvil.jit(target="cpu", enable_fusion=True)
def matmul_inference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A @ B


def cases() -> dict:
    """Name -> (compiled call, original call), outputs checked against each other."""
    g = torch.Generator().manual_seed(5)
    relu_x, sigmoid_x = torch.rand(512, 1024, generator=g) + 0.25, torch.rand(512, 1024, generator=g) - 0.25
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((1024, 512), np.float32), rng.standard_normal((512, 256), np.float32)
    plain = dynamic_inference.python_function
    out = {"dynamic_inference, relu branch": (lambda: dynamic_inference(relu_x), lambda: plain(relu_x)),
           "dynamic_inference, sigmoid branch": (lambda: dynamic_inference(sigmoid_x), lambda: plain(sigmoid_x)),
           "matmul_inference": (lambda: matmul_inference(a, b), lambda: a @ b)}
    for name, (compiled, original) in out.items():
        got, want = np.asarray(compiled()), np.asarray(original())
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
            raise AssertionError(f"{name}: the compiled result differs from the original's")
    return out


def _times(call, calls: int) -> list:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


def measure(rounds: int, calls: int) -> dict:
    """Name -> (compiled median ms, original median ms)."""
    result = {}
    for name, (compiled, original) in cases().items():
        times: tuple = ([], [])
        for r in range(rounds):
            for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                times[k].extend(_times((compiled, original)[k], calls))
        result[name] = tuple(float(np.median(t)) * 1e3 for t in times)
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.seeds", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=50, help="calls of each per round")
    args = ap.parse_args(argv)
    print(f"torch threads {torch.get_num_threads()}; NumPy's BLAS: {openblas_kernel()}")
    for name, (compiled, original) in measure(args.rounds, args.calls).items():
        print(f"{name:36s} cuvil {compiled:7.3f} ms   original {original:7.3f} ms   ({original / compiled:.2f}x)")


def without_unfair_blas_env() -> None:
    """NumPy's OpenBLAS reads OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE when it loads: re-execute without them, so
    that the original runs on its best kernel."""
    if any(k in os.environ for k in UNFAIR_ENV):
        env = {k: v for k, v in os.environ.items() if k not in UNFAIR_ENV}
        os.execve(sys.executable, [sys.executable, "-m", "bench.seeds", *sys.argv[1:]], env)


if __name__ == "__main__":
    without_unfair_blas_env()
    main()
