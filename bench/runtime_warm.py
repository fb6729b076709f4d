"""Warm starts from the artifact cache in fresh processes: time to the first output, what the cache check costs, and
the memory a compiled model adds.
`python -m bench.runtime_warm [--workload NAME | --suite standard] [--route torch|onnx] [--rounds N]`

For each workload (default: ResNet-18, BERT-base, GPT-2; routes torch and onnx), one child compiles it into an
empty cache (cold), then `--rounds` rounds each run three fresh children, interleaved: "full" (the entry's
verified record deleted first, so every section is hashed, as at the first warm start after a save), "recorded"
(as shipped: the record lets the weights' hash be skipped) and "unchecked" (every section's SHA-256 skipped,
patched in the child only: the library has no such switch). A child builds the model (not timed), then times the
compile call (a cache hit) and the first call, and reports the resident set it added (peak above the moment
before the compile call) against the model's weight bytes. Printed: medians, the ratios recorded / unchecked and
full / unchecked, the breakdown of the recorded warm start (key, entry load, first call), the entry's size.
The warm-start goal (100 ms) is the cache hit, the compile call: the first call that follows is the model's own
run (GPT-2 at 64 tokens is about 16 GFLOP, over 100 ms on 2 cores by itself), printed apart.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = str(Path(__file__).resolve().parent.parent)
DEFAULT = ("W3 ResNet-18", "W4 BERT-base", "GPT-2 small s64")


def child(workload: str, route: str, onnx_dir: str, mode: str) -> dict:
    """One fresh process's warm (or cold) start: seconds, added RSS, weight bytes, cache outcome."""
    from . import harness, probe
    from .workloads import SUITES

    wl = next(w for suite in SUITES.values() for w in suite if w.name == workload)
    built = wl.build()
    path = harness.onnx_file(wl, built, onnx_dir) if route == "onnx" else None
    import cuvil
    from cuvil.cache import store
    from cuvil.runtime import container

    if mode == "unchecked":
        container.Container.check_all = lambda self, names, threads=1: None
    if mode == "full":  # as the first warm start after a save: no record, every section hashed
        for entry in store.entries():
            store._record_path(entry).unlink(missing_ok=True)
    timings = _timed(store)
    weights = sum(t.numel() * t.element_size() for t in (*built.exported.parameters(), *built.exported.buffers()))
    base = probe.reset_peak_rss()
    c0 = time.process_time()
    t0 = time.perf_counter()
    if route == "onnx":
        model, args = cuvil.load_onnx(path).optimize(), built.numpy_inputs
    else:
        model, args = cuvil.compile(built.exported, built.inputs), built.inputs
    t1 = time.perf_counter()
    c1 = time.process_time()
    model(*args)
    t2 = time.perf_counter()
    exe = getattr(model, "executable", model)
    entries = store.entries()
    return {"compile_s": t1 - t0, "compile_cpu_s": c1 - c0, "first_call_s": t2 - t1,
            "warm_s": t2 - t0, "cache": getattr(exe, "cache", None),
            "rss_added_mb": probe.peak_rss_mb() - base, "weights_mb": weights / 2**20,
            "entry_mb": sum(e.stat().st_size for e in entries) / 2**20, **timings}


def _timed(store) -> dict:
    """Seconds spent in the cache lookup (`store.load`) and in the key, filled in as the compile call runs."""
    spent = {"entry_load_s": 0.0}
    load = store.load

    def timed_load(*a, **k):
        t0 = time.perf_counter()
        try:
            return load(*a, **k)
        finally:
            spent["entry_load_s"] += time.perf_counter() - t0

    store.load = timed_load
    for module in ("cuvil.frontends.torch.compile", "cuvil.frontends.onnx_cache"):
        _time_key(module, spent)
    return spent


def _time_key(module: str, spent: dict) -> None:
    import importlib

    mod = importlib.import_module(module)
    if module.endswith("torch.compile"):
        original = mod._cache_key

        def key(*a, **k):
            t0 = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                spent["key_s"] = spent.get("key_s", 0.0) + time.perf_counter() - t0

        mod._cache_key = key
    else:  # the ONNX route's key is a digest of the file, remembered by its stat
        original = mod.file_digest

        def digest(*a, **k):
            t0 = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                spent["key_s"] = spent.get("key_s", 0.0) + time.perf_counter() - t0

        mod.file_digest = digest


MODES = ("full", "recorded", "unchecked")


def run_child(workload: str, route: str, cache: str, onnx_dir: str, mode: str = "full") -> dict:
    cmd = [sys.executable, "-m", "bench.runtime_warm", "--child", "--workload", workload, "--route", route,
           "--onnx-dir", onnx_dir, "--mode", mode]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=_child_env(cache))
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"child failed ({workload}, {route}): {out.stderr[-2000:]}")
    return json.loads(lines[-1])


def _child_env(cache: str) -> dict:
    """The children's environment: bytecode written (to a folder of its own) and read, as an installed package has
    it; with PYTHONDONTWRITEBYTECODE set, each warm child compiled every module the hit imports (1.3 s under load)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "CUVIL_CACHE_DIR": cache, "PYTHONPYCACHEPREFIX": os.path.join(tempfile.gettempdir(),
                                                                                  "cuvil-bench-pycache")}


def measure(workload: str, route: str, rounds: int, onnx_dir: str) -> dict:
    cache = tempfile.mkdtemp(prefix="cuvil-bench-warm-")
    try:
        cold = run_child(workload, route, cache, onnx_dir)
        time.sleep(1.1)  # an entry younger than a second is never recorded as verified (store.RACY_S)
        run_child(workload, route, cache, onnx_dir, "recorded")  # verifies in full and records it
        runs = {mode: [] for mode in MODES}
        for _ in range(rounds):
            for mode in MODES:
                runs[mode].append(run_child(workload, route, cache, onnx_dir, mode))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    med = lambda rs, k: float(np.median([r[k] for r in rs]))  # noqa: E731
    on, rec, off = runs["full"], runs["recorded"], runs["unchecked"]
    return {"workload": workload, "route": route, "cold_s": cold["warm_s"], "cold_rss_added_mb": cold["rss_added_mb"],
            "hits": sum(r["cache"] == "hit" for r in on + rec + off), "runs": len(on + rec + off),
            "warm_ms": med(rec, "warm_s") * 1e3, "full_check_ms": med(on, "warm_s") * 1e3,
            "unchecked_ms": med(off, "warm_s") * 1e3, "hit_ms": med(rec, "compile_s") * 1e3,
            "hit_cpu_ms": med(rec, "compile_cpu_s") * 1e3,
            "check_ratio": med(rec, "warm_s") / med(off, "warm_s"),
            "full_check_ratio": med(on, "warm_s") / med(off, "warm_s"),
            "key_ms": med(rec, "key_s") * 1e3 if all("key_s" in r for r in rec) else None,
            "entry_load_ms": med(rec, "entry_load_s") * 1e3, "first_call_ms": med(rec, "first_call_s") * 1e3,
            "rss_added_mb": med(rec, "rss_added_mb"), "weights_mb": on[0]["weights_mb"],
            "rss_over_weights": _over(med(rec, "rss_added_mb"), on[0]["weights_mb"]),
            "entry_mb": cold["entry_mb"], "entry_over_weights": _over(cold["entry_mb"], on[0]["weights_mb"])}


def _over(mb: float, weights_mb: float) -> float:
    """A size over the weights' (NaN for a model without weights: the ratio goal does not apply)."""
    return mb / weights_mb if weights_mb else float("nan")


def _suite(name) -> list:
    from .workloads import SUITES

    return [w.name for w in SUITES[name]] if name else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", action="append", help="a workload name of bench/workloads.py (repeatable)")
    ap.add_argument("--route", action="append", choices=("torch", "onnx"))
    ap.add_argument("--suite", help="every workload of this suite of bench/workloads.py (standard, quick)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--skip", action="append", default=[], help="a workload name to leave out (repeatable)")
    ap.add_argument("--onnx-dir", default=os.path.join(tempfile.gettempdir(), "cuvil-bench-onnx"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=MODES, default="full", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.workload[0], args.route[0], args.onnx_dir, args.mode)))
        return
    print(f"load: {os.getloadavg()}")
    for workload in [w for w in args.workload or _suite(args.suite) or DEFAULT if w not in args.skip]:
        for route in args.route or ("torch", "onnx"):
            r = measure(workload, route, args.rounds, args.onnx_dir)
            print(json.dumps(r))
            print(f"{workload} ({route}): cache hit {r['hit_ms']:.0f} ms (goal <= 100; CPU time of all "
                  f"threads {r['hit_cpu_ms']:.0f} ms; key {r['key_ms'] or 0:.0f} ms, "
                  f"entry load {r['entry_load_ms']:.0f} ms), then the model's first call {r['first_call_ms']:.0f} "
                  f"ms: first output at {r['warm_ms']:.0f} ms; check costs "
                  f"{(r['check_ratio'] - 1) * 100:+.1f}% with its verified record, "
                  f"{(r['full_check_ratio'] - 1) * 100:+.1f}% hashing everything (goal <= 5%; unchecked "
                  f"{r['unchecked_ms']:.0f} ms, full {r['full_check_ms']:.0f} ms); "
                  f"RSS added {r['rss_added_mb']:.0f} MiB = {r['rss_over_weights']:.2f}x "
                  f"the weights' {r['weights_mb']:.0f} MiB (goal <= 1.1x); entry {r['entry_over_weights']:.3f}x the "
                  f"weights (goal <= 1.02x); cold {r['cold_s']:.1f} s; {r['hits']}/{r['runs']} hits", flush=True)


if __name__ == "__main__":
    main()
