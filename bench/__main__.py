"""Cuvil against its peers: `python -m bench [--suite standard|quick] [--only W1,W3] [--rounds N] [--threads 2]`.

Every workload runs on every installed peer and on each of Cuvil's routes, interleaved round by round in one
process (see bench/harness.py), then fresh processes measure first-call compile times and peak memory. Writes
report.md, results.json and ratios.png to --out; `--docs` also puts the report and chart in docs/.

Fairness (shared/PEERS.md): the process re-executes itself with OPENBLAS_THREAD_TIMEOUT=20 (OpenBLAS workers
otherwise spin after each call), without OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE, with glibc's mmap and trim
thresholds at 1 GiB (no page-fault churn for large temporaries) and with every thread count equal
(CUVIL_NUM_THREADS, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS; torch.set_num_threads and ONNX
Runtime's and OpenVINO's options in code). Peers alternate order between rounds, and a 50 ms gap follows the
peers whose thread pools spin. It waits while another benchmark (bench/gemm.py, python -m bench) runs.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import sys
import tempfile

UNFAIR_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
THREAD_ENV = ("CUVIL_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fair_env(threads: int) -> dict:
    env = {"OPENBLAS_THREAD_TIMEOUT": "20", "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
           "MALLOC_TRIM_THRESHOLD_": str(1 << 30), **{k: str(threads) for k in THREAD_ENV}}
    if threads == 1:
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
    return env


def ensure_env(threads: int) -> None:
    """Re-execute with the fair environment (glibc and OpenBLAS read it at startup)."""
    want = fair_env(threads)
    if all(os.environ.get(k) == v for k, v in want.items()) and not any(k in os.environ for k in UNFAIR_ENV):
        return
    env = {k: v for k, v in os.environ.items() if k not in UNFAIR_ENV} | want
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    os.execve(sys.executable, [sys.executable, "-m", "bench", *sys.argv[1:]], env)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=("standard", "quick"), default="standard")
    ap.add_argument("--only", help="comma-separated workload keys or names (W1,W3,MNV2,GPT2)")
    ap.add_argument("--peers", help="comma-separated peer names (default: every installed one)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 12 standard, 3 quick)")
    ap.add_argument("--round-ms", type=float, default=40.0, help="each peer's share of a round, about")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "cuvil-bench"))
    ap.add_argument("--no-probes", action="store_true", help="skip the fresh-process compile and memory probes")
    ap.add_argument("--no-profile", action="store_true", help="skip cuvil.profile on Cuvil's routes")
    ap.add_argument("--retries", type=int, default=2, help="times a workload's rounds rerun after CPU contention")
    ap.add_argument("--render", metavar="RESULTS_JSON", help="measure nothing: write the report of a saved run")
    ap.add_argument("--docs", action="store_true", help="write the report and chart into docs/benchmarks.*")
    ap.add_argument("--wait-max", type=float, default=3.0,
                    help="minutes to wait, before each workload, for another benchmark or CPU contention to end")
    return ap.parse_args(argv)


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 platform.processor())
    mem = next((int(line.split()[1]) // 2**20 for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    return f"{model}, {os.cpu_count()} CPUs, {mem} GiB, {platform.system()} {platform.release()}, Python " \
           f"{platform.python_version()}"


def versions() -> str:
    import importlib.metadata as md

    out = []
    for name in ("numpy", "torch", "onnxruntime", "openvino", "jax", "transformers", "onnx"):
        try:
            out.append(f"{name} {md.version(name)}")
        except md.PackageNotFoundError:
            pass
    return ", ".join(out)


def load() -> float:
    return float(open("/proc/loadavg").read().split()[0])


def main() -> None:
    args = parse_args()
    if args.render:
        return render(args)
    ensure_env(args.threads)
    from . import harness, report
    from . import peers as P
    from . import peers_int8  # noqa: F401 (adds the int8/int4 peers)
    from . import peers_bf16  # noqa: F401 (adds the bf16 / fp16 peers)
    from .workloads import select

    rounds = args.rounds or (12 if args.suite == "standard" else 3)
    workloads, peers = select(args.suite, args.only), P.select(args.peers)
    os.makedirs(args.out, exist_ok=True)
    harness.set_threads(args.threads)
    meta = {"command": "python -m bench " + " ".join(sys.argv[1:]), "machine": machine(), "versions": versions(),
            "openblas": harness.openblas_kernel(), "threads": args.threads, "rounds": rounds,
            "date": datetime.datetime.now().isoformat(timespec="seconds"), "load_before": load()}
    print(f"{meta['machine']}\n{meta['versions']}\npeers: {', '.join(p.name for p in peers)}", flush=True)
    kernels_cache = None
    if not args.no_probes:
        kernels_cache, meta["kernels_s"] = harness.kernel_library_cache(args.threads)
    results, probes, pressures = [], {}, []
    onnx_dir = os.path.join(args.out, "onnx")
    for wl in workloads:
        harness.wait_for_quiet(args.wait_max)
        print(f"== {wl.name}", flush=True)
        res = harness.measure(wl, peers, args.threads, rounds, args.round_ms / 1e3, onnx_dir, not args.no_profile,
                              retries=args.retries)
        results += res
        gc.collect()  # the workload's models and compiled code go before the next one is built
        pressures.append(max(r.cpu_pressure or 0.0 for r in res))
        meta.setdefault("pressure", {})[wl.name] = pressures[-1]
        if kernels_cache:
            ok = {r.peer for r in res if r.status == "ok"}
            probes[wl.name] = harness.probe_workload(args.suite, wl, [p for p in peers if p.name in ok],
                                                     args.threads, onnx_dir, kernels_cache)
        report.save_json(os.path.join(args.out, "results.json"), meta, results, probes)
    for key, measure in (("dispatch_us", harness.dispatch_overhead), ("import_time", harness.import_time)):
        try:
            meta[key] = measure()
        except Exception as e:  # noqa: BLE001 (the report matters more than one extra figure)
            meta[key + "_error"] = harness.describe(e)
    worst = max(pressures, default=0.0)
    meta["load_after"], meta["cpu_pressure_max"] = load(), worst
    meta["noise"] = (f"NOISY: other processes competed for the CPUs (pressure up to {worst:.0f}% of the time); "
                     "rerun before trusting" if worst > harness.NOISY_PRESSURE
                     else f"quiet: CPU pressure at most {worst:.0f}% while timing")
    write_outputs(args, meta, results, probes, [p.name for p in peers])


def write_outputs(args, meta: dict, results: list, probes: dict, names: list) -> None:
    from . import report

    text = report.markdown(meta, results, probes, names)
    os.makedirs(args.out, exist_ok=True)
    report.save_json(os.path.join(args.out, "results.json"), meta, results, probes)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text)
    report.chart(os.path.join(args.out, "ratios.png"), results, names)
    if args.docs:
        report.update_docs(os.path.join(ROOT, "docs", "benchmarks.md"),
                           text + "\n![ratios to ONNX Runtime](benchmarks.png)\n")
        report.chart(os.path.join(ROOT, "docs", "benchmarks.png"), results, names)
    print(json.dumps({"out": args.out, "noise": meta["noise"]}))


def render(args) -> None:
    from . import report

    meta, results, probes = report.load_json(args.render)
    names = list(dict.fromkeys(r.peer for r in results))
    write_outputs(args, meta, results, probes, names)
    print(open(os.path.join(args.out, "report.md")).read())


if __name__ == "__main__":
    main()
