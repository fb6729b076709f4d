"""`cuvil demo`: compile a small built-in model and run it next to NumPy."""
from __future__ import annotations

import time

import numpy as np


def _median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def demo(args) -> int:
    """Build a 784-256-10 MLP with random weights, compile it, run it next to NumPy and compare."""
    from ..compiler import compile_module
    from ..demo_models import mlp_module, mlp_numpy

    module, weights = mlp_module(batch=args.batch)
    x = np.random.default_rng(0).standard_normal((args.batch, 784)).astype(np.float32)
    t0 = time.perf_counter()
    exe = compile_module(module, target=args.target)
    compile_s = time.perf_counter() - t0
    ours = exe(x)[0]
    ref = mlp_numpy(x, weights)
    err = float(np.max(np.abs(ours - ref)))
    print(f"model: MLP 784-256-10, batch {args.batch}, fp32 (random weights); target {args.target}")
    print(f"compiled in {compile_s:.2f} s (cached builds load in milliseconds)")
    print(f"output[0, :5]: {np.array2string(ours[0, :5], precision=4)}")
    print(f"max |cuvil - numpy|: {err:.2e}")
    t_cuvil = _median_ms(lambda: exe(x), args.repeat)
    t_numpy = _median_ms(lambda: mlp_numpy(x, weights), args.repeat)
    print(f"cuvil: {t_cuvil:.4f} ms   numpy: {t_numpy:.4f} ms   (median of {args.repeat}; "
          f"cuvil/numpy = {t_cuvil / t_numpy:.2f})")
    return 0 if err < 1e-3 else 1

