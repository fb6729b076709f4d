"""The memory a compiled model adds, in fresh processes: `python -m bench.rss [--workload NAME]
[--route torch|onnx|onnx-mmap] [--case cold|warm|uncached] [--diagnose]`

For each workload (default: BERT-base, GPT-2) and route, a child process per case builds the model (not counted),
collects garbage and reads its resident set; then compiles the model and calls it once, collects garbage again and
reads the resident set (steady: what the compiled model keeps) and the peak since the first reading (peak: what the
compile needed at its worst). Both are printed against the model's weight bytes (goal: steady and peak <= 1.1x),
with the bytes of weight copies mapped from the cache folder (an ONNX file's initializers by default: on disk and in
the page cache, resident only where read).
Cases: "cold" compiles into an empty artifact cache (and saves the entry), "warm" loads that entry in a new process,
"uncached" compiles with `CUVIL_ARTIFACT_CACHE=0`. `--diagnose` lists, in the cold child, the largest NumPy buffers
still alive after the compile and what holds them.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
DEFAULT = ("W4 BERT-base", "GPT-2 small s64")
CASES = ("cold", "warm", "uncached")
ROUTES = ("torch", "onnx", "onnx-mmap")  # onnx-mmap: `load_onnx(path, mmap=True)`, the file's weights mapped


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(field + ":"))


def _copies_mb() -> float:
    """The size of this process's mappings of weight copies (frontends/onnx/snapshot.py: unlinked files there)."""
    from cuvil.backends.cpu.toolchain import cache_dir

    folder = os.path.realpath(cache_dir() / "weights") + os.sep
    total = 0
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith(folder):
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                total += hi - lo
    return total / 2**20


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # Linux: VmHWM starts again from VmRSS
        f.write("5")


def child(workload: str, route: str, onnx_dir: str, diagnose: bool) -> dict:
    """Build, then compile and call once; resident set before, after (steady) and at its peak, MiB."""
    from . import harness
    from .workloads import SUITES

    wl = next(w for w in SUITES["standard"] if w.name == workload)
    built = wl.build()
    path = harness.onnx_file(wl, built, onnx_dir) if route.startswith("onnx") else None
    import cuvil

    weights = sum(t.numel() * t.element_size() for t in (*built.exported.parameters(), *built.exported.buffers()))
    gc.collect()
    base = _status_mb("VmRSS")
    _reset_peak()
    if route.startswith("onnx"):
        model, args = cuvil.load_onnx(path, mmap=route == "onnx-mmap").optimize(), built.numpy_inputs
    else:
        model, args = cuvil.compile(built.exported, built.inputs), built.inputs
    model(*args)
    gc.collect()
    steady, peak = _status_mb("VmRSS") - base, _status_mb("VmHWM") - base
    exe = getattr(model, "executable", model)
    report = {"steady_mb": steady, "peak_mb": peak, "weights_mb": weights / 2**20, "cache": getattr(exe, "cache", None),
              "file_mb": _status_mb("RssFile"), "anon_mb": _status_mb("RssAnon"), "copies_mb": _copies_mb()}
    if diagnose:
        report["held"] = held_buffers()
    return report


def held_buffers(top: int = 12) -> list:
    """The largest NumPy buffers alive and what holds them (the type of the object whose attribute, list or dict
    refers to an array on them): what a compiled model keeps besides its weights."""
    import numpy as np

    owners: dict = {}  # id of the buffer's owner -> (bytes, holder names)
    for obj in gc.get_objects():
        for r in gc.get_referents(obj):
            if isinstance(r, np.ndarray) and r.nbytes > 1 << 20:
                root = r
                while isinstance(root.base, np.ndarray):
                    root = root.base
                size, names = owners.setdefault(id(root), (root.nbytes, set()))
                names.add(_holder(obj))
    by_holder: dict = {}
    for size, names in owners.values():
        k = ", ".join(sorted(names))
        by_holder[k] = by_holder.get(k, 0) + size
    return sorted(([round(v / 2**20, 1), k] for k, v in by_holder.items()), reverse=True)[:top]


def _holder(obj) -> str:
    """The type of what holds `obj`: a dict or list names the objects that refer to it in turn."""
    if isinstance(obj, (dict, list, tuple)):
        outer = {type(o).__name__ for o in gc.get_referrers(obj)} - {"frame", "list", "dict"}
        return f"{type(obj).__name__} in {'/'.join(sorted(outer)) or '?'}"
    return type(obj).__name__


def run_child(workload: str, route: str, cache: str, onnx_dir: str, diagnose: bool, enabled: bool = True) -> dict:
    cmd = [sys.executable, "-m", "bench.rss", "--child", "--workload", workload, "--route", route,
           "--onnx-dir", onnx_dir] + (["--diagnose"] if diagnose else [])
    env = {**os.environ, "CUVIL_CACHE_DIR": cache, "CUVIL_ARTIFACT_CACHE": "1" if enabled else "0"}
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"child failed ({workload}, {route}): {out.stderr[-2000:]}")
    return json.loads(lines[-1])


def measure(workload: str, route: str, cases, onnx_dir: str, diagnose: bool) -> dict:
    cache = tempfile.mkdtemp(prefix="cuvil-bench-rss-")
    try:
        runs = {}
        for case in ("cold", "warm", "uncached"):
            if case in cases or (case == "cold" and "warm" in cases):  # a warm start needs the cold one's entry
                cached = case != "uncached"
                runs[case] = run_child(workload, route, cache, onnx_dir, diagnose and case == "cold", cached)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {"workload": workload, "route": route, **{c: r for c, r in runs.items() if c in cases}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", action="append", help="a workload name of bench/workloads.py (repeatable)")
    ap.add_argument("--route", action="append", choices=ROUTES)
    ap.add_argument("--case", action="append", choices=CASES)
    ap.add_argument("--diagnose", action="store_true")
    ap.add_argument("--onnx-dir", default=os.path.join(tempfile.gettempdir(), "cuvil-bench-onnx"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.workload[0], args.route[0], args.onnx_dir, args.diagnose)))
        return
    print(f"load: {os.getloadavg()}")
    for workload in args.workload or DEFAULT:
        for route in args.route or ROUTES:
            r = measure(workload, route, args.case or CASES, args.onnx_dir, args.diagnose)
            print(json.dumps(r))
            for case in CASES:
                if case in r:
                    c = r[case]
                    print(f"{workload} ({route}, {case}, cache {c['cache']}): steady {c['steady_mb']:.0f} MiB = "
                          f"{c['steady_mb'] / c['weights_mb']:.2f}x, peak {c['peak_mb']:.0f} MiB = "
                          f"{c['peak_mb'] / c['weights_mb']:.2f}x the weights' {c['weights_mb']:.0f} MiB "
                          f"(goal <= 1.1x); weight copies mapped {c['copies_mb']:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
