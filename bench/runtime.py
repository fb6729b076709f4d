"""The standalone C runtime against in-process Cuvil: `python -m bench.runtime [resnet|mlp] [--rounds N]
[--calls N] [--threads N]`.

Exports the model (ResNet-18, batch 1, 224x224, random weights; or the demo MLP) to a `.cuv`, builds the runtime
(release), then measures:
- sizes of libcuvilrt.so, libcuvilrt.a and cuvil-run (stripped);
- start to first output: wall time of `cuvil-run model.cuv x.npy -o DIR` as a fresh process (median of --rounds);
- per-call latency: `cuvil-run --bench N` (p50 of N calls) against the same file's entry called in this process
  through `cuvil.load` (p50 of N calls), interleaved round by round with the same thread count; the ratio of
  their medians over rounds.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import cuvil
from cuvil.backends.cpu import toolchain
from cuvil.runtime.build import build_runtime


def export(which: str, folder: Path) -> tuple[Path, np.ndarray]:
    """The model written to `folder`/WHICH.cuv, and an input for it."""
    path = folder / f"{which}.cuv"
    if which == "mlp":
        from cuvil.compiler import compile_module
        from cuvil.demo_models import mlp_module

        module, _ = mlp_module()
        cuvil.export(compile_module(module), path)
        return path, np.random.default_rng(0).standard_normal((1, 784)).astype(np.float32)
    from bench.workloads import ResNet18, vision_workload

    built = vision_workload(ResNet18)
    cuvil.export(cuvil.compile(built.module, built.inputs), path)
    return path, built.numpy_inputs[0]


def start_to_first_output(cli: Path, model: Path, x_path: Path, folder: Path, rounds: int) -> list:
    """Seconds from spawning cuvil-run to its exit with the output written, per round."""
    times = []
    for k in range(rounds):
        t0 = time.perf_counter()
        subprocess.run([str(cli), str(model), str(x_path), "-o", str(folder / f"out{k}")], check=True)
        times.append(time.perf_counter() - t0)
    return times


def cli_p50(cli: Path, model: Path, x_path: Path, calls: int, threads: int) -> float:
    out = subprocess.run([str(cli), str(model), str(x_path), "--bench", str(calls), "--threads", str(threads)],
                         check=True, capture_output=True, text=True).stdout
    return float(re.search(r"p50 ([0-9.]+)", out).group(1)) / 1e3


def in_process_p50(fn, x: np.ndarray, calls: int) -> float:
    for _ in range(10):
        fn(x)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", nargs="?", choices=("resnet", "mlp"), default="resnet")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--threads", type=int, default=toolchain.physical_cores())
    args = parser.parse_args()
    os.environ["CUVIL_NUM_THREADS"] = str(args.threads)  # in-process Cuvil's count; cuvil-run gets --threads
    folder = Path(tempfile.mkdtemp(prefix="cuvil-bench-runtime-"))
    built = build_runtime(folder / "rt")
    for name, size in built.sizes.items():
        print(f"{name:14s} {size / 1024:7.1f} KB")
    model, x = export(args.model, folder)
    x_path = folder / "x.npy"
    np.save(x_path, x)
    print(f"{model.name}: {model.stat().st_size / 1e6:.1f} MB, {args.threads} thread(s)")
    starts = start_to_first_output(built.cli, model, x_path, folder, args.rounds)
    print(f"cuvil-run start to first output: median {np.median(starts) * 1e3:.1f} ms, min {min(starts) * 1e3:.1f} ms")
    fn = cuvil.load(model)
    fn(x)
    cli, inproc = [], []
    for _ in range(args.rounds):
        cli.append(cli_p50(built.cli, model, x_path, args.calls, args.threads))
        inproc.append(in_process_p50(fn, x, args.calls))
    c, p = float(np.median(cli)), float(np.median(inproc))
    print(f"per call (p50 of {args.calls}, median of {args.rounds} rounds): cuvil-run {c * 1e3:.3f} ms, "
          f"in-process {p * 1e3:.3f} ms, ratio {c / p:.3f}")


if __name__ == "__main__":
    main()
