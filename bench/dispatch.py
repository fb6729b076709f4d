"""Dispatch overhead: microseconds per call of a trivial compiled function (`x + 1` on 4 floats) at each layer.

    python -m bench.dispatch [--calls 20000] [--rounds 5]

Layers, timed in alternation in one process (the least disturbed batch of each is reported, as timeit does):
the `@cuvil.jit` function with NumPy and torch arguments and with a symbolic size (`dynamic=True`: the size is
bound and checked on every call), the `Executable`, the C call path alone (`CpuFunction.call_exact`), the
ctypes path that calls take without the C extension, and NumPy's own `x + 1` for scale.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def add_one(x):
    return x + 1


def layers() -> dict:
    """Name -> a call of no arguments, every compilation done."""
    import torch

    import cuvil

    x, t = np.ones(4, np.float32), torch.ones(4)
    jit, dynamic = cuvil.jit(add_one), cuvil.jit(add_one, dynamic=True)
    jit(t), dynamic(x), jit(x)
    exe = jit._last.executable  # the NumPy signature's, compiled last
    run = exe._run
    out = {"cuvil.jit, NumPy in": lambda: jit(x), "cuvil.jit, torch in": lambda: jit(t),
           "cuvil.jit dynamic=True (size bound, checked)": lambda: dynamic(x), "Executable": lambda: exe(x)}
    if run.call_exact is not None:
        out["C path alone (call_exact)"] = lambda: run.call_exact(x)
    out["ctypes path (no C extension)"] = lambda: run.call_ctypes([x])
    out["numpy x + 1 (reference)"] = lambda: x + 1
    return out


def measure(calls: int, rounds: int) -> dict:
    """Microseconds per call of each layer: the best batch over `rounds` interleaved batches of `calls` calls."""
    return best_batch_us(layers(), calls, rounds)


def best_batch_us(todo: dict, calls: int, rounds: int) -> dict:
    """{name: microseconds per call of `todo[name]()`}: the best of `rounds` interleaved batches of `calls` calls."""
    best: dict = {}
    for _ in range(rounds):
        for name, call in todo.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                call()
            us = (time.perf_counter() - t0) / calls * 1e6
            best[name] = min(best.get(name, us), us)
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.dispatch", description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000, help="calls per batch")
    ap.add_argument("--rounds", type=int, default=5, help="batches per layer, interleaved")
    args = ap.parse_args(argv)
    for name, us in measure(args.calls, args.rounds).items():
        print(f"{name:46s} {us:7.2f} us")


if __name__ == "__main__":
    main()
