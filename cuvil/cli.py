"""The `cuvil` command: `cuvil demo` runs a small built-in model next to NumPy."""
from __future__ import annotations

import argparse
import sys
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
    """Build a 784-256-10 MLP with random weights, run it through Cuvil and through NumPy, compare."""
    from .demo_models import mlp_module, mlp_numpy
    from .interpreter import interpret

    module, weights = mlp_module(batch=args.batch)
    x = np.random.default_rng(0).standard_normal((args.batch, 784)).astype(np.float32)
    ours = interpret(module, [x])[0]
    ref = mlp_numpy(x, weights)
    err = float(np.max(np.abs(ours - ref)))
    print(f"model: MLP 784-256-10, batch {args.batch}, fp32 (random weights)")
    print(f"output[0, :5]: {np.array2string(ours[0, :5], precision=4)}")
    print(f"max |cuvil - numpy|: {err:.2e}")
    t_cuvil = _median_ms(lambda: interpret(module, [x]), args.repeat)
    t_numpy = _median_ms(lambda: mlp_numpy(x, weights), args.repeat)
    print(f"cuvil (reference interpreter): {t_cuvil:.3f} ms   numpy: {t_numpy:.3f} ms   "
          f"ratio {t_cuvil / t_numpy:.2f}x")
    return 0 if err < 1e-3 else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="cuvil", description="Cuvil: a compiler for AI inference")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="compile a small built-in model and compare it with NumPy")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeat", type=int, default=50)
    p.set_defaults(run=demo)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
