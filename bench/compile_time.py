"""Cold and warm compile times of Cuvil's ONNX and torch routes, each in a fresh process:

    flock /tmp/cuvil_bench.lock python -m bench.compile_time --only W3,W4 --repeat 3

cold: a new process whose `CUVIL_CACHE_DIR` holds only what is built once per machine for any model (the kernel
library and the call-path extension, timed apart); warm: a new process on that same cache, which now holds the
model (the artifact cache's hit). Each run prints `import cuvil`, the compile call (`cuvil.load_onnx(path)
.optimize()` or `cuvil.compile(module, inputs)`) and the first call apart; the table gives medians over
`--repeat` cold/warm pairs. Python's bytecode is cached for these processes (in a temporary PYTHONPYCACHEPREFIX,
warmed first) as in an installed package, even where the environment sets PYTHONDONTWRITEBYTECODE. ONNX files
are exported once into --onnx-dir.

`--first-call` measures instead what a new user's first compile waits for (`cuvil demo` on a new machine): the demo's
"compiled in" on an empty cache against the same on a cache that already holds the kernel library and the call
extension; the difference is the wait for them. It lists what the empty-cache run compiled and how long each took
(they compile at once: the wait is at least the largest build's CPU time, and at least the sum over the CPUs).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from . import harness
from .workloads import select

ROUTES = ("cuvil onnx", "cuvil torch")
DEFAULT_NAMES = ("W3 ResNet-18", "W4 BERT-base")
FIELDS = ("import_s", "compile_s", "first_call_s")


def run_probe(wl, route: str, cache: str, onnx_dir: str, threads: int, env: dict) -> dict:
    cmd = [sys.executable, "-m", "bench.probe", "--suite", "standard", "--workload", wl.name, "--peer", route,
           "--threads", str(threads), "--onnx-dir", onnx_dir, "--compile"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=harness.ROOT, env={**env, "CUVIL_CACHE_DIR": cache})
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {out.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])


def measure(wl, route: str, kernels: str, onnx_dir: str, threads: int, env: dict, repeat: int) -> dict:
    """{"cold": [runs], "warm": [runs]}: `repeat` pairs, each on a cache that starts with the kernels only."""
    runs: dict = {"cold": [], "warm": []}
    for _ in range(repeat):
        cache = tempfile.mkdtemp(prefix="cuvil-compile-time-")
        shutil.copytree(kernels, cache, dirs_exist_ok=True)
        for phase in ("cold", "warm"):
            runs[phase].append(run_probe(wl, route, cache, onnx_dir, threads, env))
            print(f"  {wl.name:14s} {route:12s} {phase}: {json.dumps(runs[phase][-1])}", flush=True)
        shutil.rmtree(cache, ignore_errors=True)
    return runs


def median(runs: list, field: str):
    values = [r[field] for r in runs if field in r]
    return statistics.median(values) if values else None


def table(results: dict) -> str:
    head = ("| workload | route | import cuvil | cold compile | warm compile | warm first call | cold passes | "
            "warm hits |\n|---|---|---|---|---|---|---|---|")
    rows = [head]
    for (name, route), runs in results.items():
        cold, warm = runs["cold"], runs["warm"]
        cells = [median(warm, "import_s"), median(cold, "compile_s"), median(warm, "compile_s"),
                 median(warm, "first_call_s"), median(cold, "passes_s")]
        text = ["-" if c is None else f"{c * 1e3:.0f} ms" if c < 1 else f"{c:.2f} s" for c in cells]
        hits = f"{sum(r.get('cache') == 'hit' for r in warm)}/{len(warm)}"
        rows.append(f"| {name} | {route} | " + " | ".join(text) + f" | {hits} |")
    return "\n".join(rows)


def bytecode_env() -> dict:
    """The environment with Python's bytecode cached in a temporary folder (warmed by one import)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "cuvil-bench-pycache")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [harness.ROOT, env.get("PYTHONPATH")]))
    code = ("import cuvil, cuvil.frontends.onnx_cache, cuvil.frontends.torch.compile, cuvil.backends.cpu.backend, "
            "bench.probe")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=harness.ROOT, env=env)
    return env


def demo_compile(cache: str, env: dict) -> float:
    """The seconds `cuvil demo` reports for its compile, in a fresh process on `cache`."""
    out = subprocess.run([sys.executable, "-m", "cuvil", "demo", "--repeat", "1"], capture_output=True, text=True,
                         cwd=harness.ROOT, env={**env, "CUVIL_CACHE_DIR": cache}, check=True)
    return float(re.search(r"compiled in ([\d.]+) s", out.stdout).group(1))


def builds(cache: str) -> dict:
    """name -> (wall, CPU) seconds of every C build in `cache` (each entry's meta.json)."""
    found = {}
    for meta in glob.glob(os.path.join(cache, "cpu", "*", "meta.json")):
        with open(meta) as f:
            m = json.load(f)
        found[os.path.basename(os.path.dirname(meta)).rsplit("-", 1)[0]] = (m["seconds"], m.get("cpu_seconds") or 0.0)
    return found


def first_call(env: dict, threads: int, repeat: int) -> None:
    """The first compile of a new user (`cuvil demo`): empty cache against a cache with the per-machine builds."""
    runs = []
    for _ in range(repeat):
        empty = tempfile.mkdtemp(prefix="cuvil-first-call-")
        kernels, _ = harness.kernel_library_cache(threads)
        cold, warm = demo_compile(empty, env), demo_compile(kernels, env)
        runs.append((cold, warm))
        built = builds(empty)
        print(f"  empty cache {cold:.2f} s, kernels cached {warm:.2f} s; compiled (wall / CPU): "
              + ", ".join(f"{k} {w:.2f} / {c:.2f} s" for k, (w, c) in sorted(built.items(), key=lambda kv: -kv[1][0]))
              + f"; CPU {sum(c for _, c in built.values()):.2f} s in all, the largest "
              f"{max((c for _, c in built.values()), default=0):.2f} s ({os.cpu_count()} CPUs)", flush=True)
        shutil.rmtree(empty, ignore_errors=True)
        shutil.rmtree(kernels, ignore_errors=True)
    cold, warm = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
    print(f"cuvil demo compile: empty cache {cold:.2f} s, kernel library and call extension cached {warm:.2f} s; "
          f"the first call waits {cold - warm:.2f} s for them (median of {repeat}; goal 1 s)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.compile_time", description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="workload keys or names (default: ResNet-18 and BERT-base)")
    ap.add_argument("--routes", default=",".join(ROUTES))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--onnx-dir", default=os.path.join(tempfile.gettempdir(), "cuvil-bench", "onnx"))
    ap.add_argument("--first-call", action="store_true", help="time what `cuvil demo` waits for on a new machine")
    args = ap.parse_args(argv)
    if args.first_call:
        return first_call(bytecode_env(), args.threads, args.repeat)
    workloads = select("standard", args.only) if args.only else [w for w in select("standard", "W3,W4")
                                                                  if w.name in DEFAULT_NAMES]
    env = bytecode_env()
    kernels, seconds = harness.kernel_library_cache(args.threads)
    print(f"kernel library and call extension: {seconds:.2f} s (once per machine, not in the figures)", flush=True)
    results = {}
    for wl in workloads:
        for route in args.routes.split(","):
            results[(wl.name, route.strip())] = measure(wl, route.strip(), kernels, args.onnx_dir, args.threads,
                                                        env, args.repeat)
    shutil.rmtree(kernels, ignore_errors=True)
    print(table(results))


if __name__ == "__main__":
    main()
