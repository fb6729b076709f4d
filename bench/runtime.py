"""The standalone C runtime against in-process Cuvil: `python -m bench.runtime [resnet|bert|mlp] [--rounds N]
[--calls N] [--threads N]` (warm starts from the artifact cache: bench/runtime_warm.py).

Exports the model (ResNet-18, batch 1, 224x224, random weights; BERT-base, sequence 128; or the demo MLP) to a
`.cuv`, builds the runtime
(release), then measures:
- sizes of libcuvilrt.so, libcuvilrt.a and cuvil-run (stripped), and of the `.cuv` against its weights' bytes;
- start to first output: wall time of `cuvil-run model.cuv x.npy -o DIR` as a fresh process (median of --rounds;
  the file's sections are hashed on every CPU the process may use, so `taskset -c 0,1` gives a 2-core figure),
  interleaved with a fresh Python process timing `cuvil.load(path)["main"]` (to a callable; `import cuvil` apart)
  and its first call; where the model has Winograd convolutions, the same for a file that stores their
  transformed weights (as the artifact cache does) instead of making them at load;
- the start-up by stage (bench/runtime_stages.c, the runtime's steps timed one by one in a fresh process: map,
  check (the hashing), load (dlopen), prepare (weights made at load), the first call, a second call), medians;
  with `--base-runtime DIR` (another revision's cuvil/runtime/c, e.g. of `git worktree add /tmp/base main`), the
  same driver built from those sources as well, on the same file, interleaved: an A/B of the runtime's stages;
- per-call latency: `cuvil-run --bench N` (p50 of N calls) against the same file's entry called in this process
  through `cuvil.load` (p50 of N calls), interleaved round by round with the same thread count; the ratio of
  their medians over rounds.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import cuvil
from cuvil.backends.cpu import export as cpu_export
from cuvil.backends.cpu import toolchain
from cuvil.runtime.build import LIBRARY_SOURCES, SOURCE_DIR, build_runtime
from cuvil.runtime.container import Container, cpu_count

STAGES = Path(__file__).with_name("runtime_stages.c")


def export(which: str, folder: Path) -> tuple[Path, np.ndarray, int, Path | None]:
    """The model written to `folder`/WHICH.cuv, an input for it, its weights' bytes, and the model written with its
    Winograd transforms saved (`folder`/WHICH-saved.cuv; None for a model without them)."""
    path = folder / f"{which}.cuv"
    if which == "mlp":
        from cuvil.compiler import compile_module
        from cuvil.demo_models import mlp_module

        module, _ = mlp_module()
        cuvil.export(compile_module(module), path)
        weights = sum(a.nbytes for a in module.constants.values())
        return path, np.random.default_rng(0).standard_normal((1, 784)).astype(np.float32), weights, None
    from bench.workloads import ResNet18, transformer_workload, vision_workload

    built = vision_workload(ResNet18) if which == "resnet" else transformer_workload("bert", 128)
    compiled = cuvil.compile(built.module, built.inputs)
    cuvil.export(compiled, path)
    weights = sum(t.numel() * t.element_size() for t in (*built.module.parameters(), *built.module.buffers()))
    saved = folder / f"{which}-saved.cuv"
    cpu_export.write(saved, {"main": (compiled.executable, {"kind": "ir"})}, save_transforms=True)
    return path, built.numpy_inputs[0], weights, saved if saved.stat().st_size != path.stat().st_size else None


def start_to_first_output(cli: Path, model: Path, x_path: Path, folder: Path, rounds: int) -> list:
    """Seconds from spawning cuvil-run to its exit with the output written, per round."""
    times = []
    for k in range(rounds):
        t0 = time.perf_counter()
        subprocess.run([str(cli), str(model), str(x_path), "-o", str(folder / f"out{k}")], check=True)
        times.append(time.perf_counter() - t0)
    return times


FRESH_LOAD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np, cuvil
t1 = time.perf_counter()
fn = cuvil.load(sys.argv[1])["main"]
t2 = time.perf_counter()
fn(np.load(sys.argv[2]))
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_call_s": t3 - t2}))
"""


def fresh_load(model: Path, x_path: Path) -> dict:
    """`cuvil.load` in a fresh Python process: seconds of the imports, of the load to a callable, of the first call."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as deployed: bytecode cached
    env.setdefault("PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(), "cuvil-bench-pycache"))
    out = subprocess.run([sys.executable, "-c", FRESH_LOAD, str(model), str(x_path)], check=True, capture_output=True,
                         text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def build_stages(folder: Path, source: Path = SOURCE_DIR) -> Path:
    """bench/runtime_stages.c with the runtime's sources in `source`, as the release library is built (-Os, the
    hash -O2), into `folder`."""
    cc = toolchain.find_compiler(None).command
    folder.mkdir(parents=True, exist_ok=True)
    objects = []
    for name in LIBRARY_SOURCES:
        objects.append(folder / name.replace(".c", ".o"))
        level = "-O2" if name == "cuvil_hash.c" else "-Os"
        subprocess.run([*cc, "-std=c99", level, "-DNDEBUG", "-c", str(source / name), "-o", str(objects[-1])],
                       check=True)
    out = folder / "runtime_stages"
    subprocess.run([*cc, "-std=c99", "-Os", "-DNDEBUG", f"-I{source}", str(STAGES),
                    *[str(o) for o in objects if o.name != "cuvil_runtime.o"], "-o", str(out), "-ldl", "-lpthread"],
                   check=True)
    return out


def stages(driver: Path, model: Path, x: np.ndarray, x_bin: Path) -> dict:
    """Milliseconds of each start-up stage of `model` in a fresh process (runtime_stages.c)."""
    out = subprocess.run([str(driver), str(model), str(x_bin), *map(str, x.shape)], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def by_stage(runs: list) -> str:
    """Each stage's median over runs of `stages`."""
    return ", ".join(f"{k} {np.median([r[k] for r in runs]):.1f}" for k in runs[0])


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
    parser.add_argument("model", nargs="?", choices=("resnet", "bert", "mlp"), default="resnet")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--threads", type=int, default=toolchain.physical_cores())
    parser.add_argument("--base-runtime", type=Path, help="another revision's cuvil/runtime/c, for an A/B of stages")
    args = parser.parse_args()
    os.environ["CUVIL_NUM_THREADS"] = str(args.threads)  # in-process Cuvil's count; cuvil-run gets --threads
    folder = Path(tempfile.mkdtemp(prefix="cuvil-bench-runtime-"))
    built = build_runtime(folder / "rt")
    for name, size in built.sizes.items():
        print(f"{name:14s} {size / 1024:7.1f} KB")
    os.environ["CUVIL_ARTIFACT_CACHE"] = "0"  # a cache hit holds no Winograd weight, only its transform
    model, x, weights, saved = export(args.model, folder)
    x_path, x_bin = folder / "x.npy", folder / "x.bin"
    np.save(x_path, x)
    np.ascontiguousarray(x, np.float32).tofile(x_bin)
    driver = build_stages(folder)
    base = build_stages(folder / "base", args.base_runtime) if args.base_runtime else None
    files = {"file": model, **({"transforms saved": saved} if saved else {})}
    for label, path in files.items():
        size = path.stat().st_size
        print(f"{label}: {path.name} {size / 1e6:.1f} MB = {size / weights:.4f}x its weights' {weights / 1e6:.1f} MB "
              f"(goal <= 1.02x), format {Container.open(path).version}")
    print(f"{args.threads} thread(s) per call, {cpu_count()} CPUs to hash on; load {os.getloadavg()}")
    starts, loads, parts = {k: [] for k in files}, [], {k: [] for k in (*files, *(["base runtime"] if base else []))}
    for _ in range(args.rounds):  # interleaved: the fresh-process measures see the same machine
        for label, path in files.items():
            starts[label] += start_to_first_output(built.cli, path, x_path, folder, 1)
            parts[label].append(stages(driver, path, x, x_bin))
        if base:
            parts["base runtime"].append(stages(base, model, x, x_bin))
        loads.append(fresh_load(model, x_path))
    for label in files:
        ms = np.array(starts[label]) * 1e3
        print(f"cuvil-run start to first output ({label}): median {np.median(ms):.1f} ms, min {ms.min():.1f} ms "
              f"(goal <= 50); by stage (ms, medians): {by_stage(parts[label])}")
    if base:
        print(f"the exported file's stages with {args.base_runtime}'s runtime (ms, medians): "
              f"{by_stage(parts['base runtime'])}")
    med = {k: float(np.median([r[k] for r in loads])) * 1e3 for k in loads[0]}
    print(f"cuvil.load in a fresh process: to a callable {med['load_s']:.1f} ms (goal <= 30), first call "
          f"{med['first_call_s']:.1f} ms after it; imports (numpy, cuvil) {med['import_s']:.1f} ms before it")
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
