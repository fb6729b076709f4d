"""One peer on one workload in a fresh process: seconds to the first result, and peak resident memory.

    python -m bench.probe --suite standard --workload "W1 matmul 1024x512x256" --peer "cuvil jit"

The harness runs it with an empty or a warm `CUVIL_CACHE_DIR` for Cuvil's cold and warm compile times. Prints
one JSON line: first_s (preparation, compilation and the first call; for ONNX peers the model file is already
exported), rss_mb (the process's peak resident set from the moment the PyTorch model and its inputs are
built) and rss_delta_mb (that peak above the resident set at that moment: what the peer itself needs).
"""
from __future__ import annotations

import argparse
import json
import resource
import time

from . import harness
from . import peers as P
from . import peers_int8  # noqa: F401 (adds the int8/int4 peers)
from . import peers_bf16  # noqa: F401 (adds the bf16 / fp16 peers)
from .workloads import SUITES


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="standard")
    ap.add_argument("--workload", required=True)
    ap.add_argument("--peer", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--onnx-dir", required=True)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--compile", action="store_true", help="Cuvil routes: time import, compile and first call apart")
    args = ap.parse_args()
    harness.set_threads(args.threads)
    wl = next(w for w in SUITES[args.suite] if w.name == args.workload)
    peer = next(p for p in P.PEERS if p.name == args.peer)
    built = wl.build()
    ctx = P.Context(args.threads, lambda: harness.onnx_file(wl, built, args.onnx_dir))
    if args.compile:
        print(json.dumps(compile_split(peer.name, built, ctx)))
        return
    base = reset_peak_rss()
    t0 = time.perf_counter()
    try:
        run = peer.prepare(built, ctx)
        run()
    except P.NotApplicable:
        print(json.dumps({"n/a": True}))
        return
    first = time.perf_counter() - t0
    for _ in range(args.calls):
        run()
    peak = peak_rss_mb()
    print(json.dumps({"first_s": first, "rss_mb": peak, "rss_delta_mb": max(peak - base, 0.0)}))


def compile_split(route: str, built, ctx) -> dict:
    """Seconds of `import cuvil`, of the compile call (`cuvil.load_onnx(path).optimize()` or `cuvil.compile`),
    and of the first call, in this fresh process; whether the artifact cache hit; the passes' share."""
    path = ctx.onnx_path() if route == "cuvil onnx" else None
    t0 = time.perf_counter()
    import cuvil

    t1 = time.perf_counter()
    if route == "cuvil onnx":
        compiled, args = cuvil.load_onnx(path).optimize(), built.numpy_inputs
    elif route == "cuvil torch":
        compiled, args = cuvil.compile(built.exported, built.inputs), built.inputs
    else:
        raise SystemExit(f"--compile measures the routes 'cuvil onnx' and 'cuvil torch', not {route!r}")
    t2 = time.perf_counter()
    compiled(*args)
    t3 = time.perf_counter()
    exe = P.executable_of(compiled)
    return {"import_s": t1 - t0, "compile_s": t2 - t1, "first_call_s": t3 - t2, "cache": exe.cache,
            "passes_s": sum(exe.pass_timings.values()) if exe.cache != "hit" else 0.0}


def _status_mb(field: str) -> float | None:
    try:
        line = next(line for line in open("/proc/self/status") if line.startswith(field + ":"))
    except (OSError, StopIteration):
        return None
    return int(line.split()[1]) / 1024


def reset_peak_rss() -> float:
    """Forget the peak so far (Linux: clear_refs 5 resets VmHWM; imports and model building leave transient
    peaks that are not the peer's); returns the resident set now, MiB."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_mb("VmRSS") or peak_rss_mb()


def peak_rss_mb() -> float:
    """The peak resident set since the last reset, MiB (getrusage's lifetime peak where /proc is missing)."""
    return _status_mb("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    main()
