"""Measuring: every peer on one workload, interleaved round by round in one process, outputs checked first.

Per workload: build it, prepare each peer (timing preparation plus the first call), check its output against
eager PyTorch's, warm it up, then `rounds` rounds in which every peer runs a few calls (enough for about
`round_s` seconds), in alternating order, with a gap after peers whose thread pools spin. Fresh-process probes
(`bench/probe.py`) measure first-call compile times and peak memory.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field

import numpy as np

from . import peers as P
from .workloads import Workload

NOISY_PRESSURE = 10.0  # percent: above this other processes compete with the benchmark for the CPUs
TOLERANCE = 2e-3  # max |peer - torch| / max |torch|: fp32 results of different summation orders agree to ~1e-5
SPIN_GAP_S = 0.05
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Result:
    workload: str
    peer: str
    status: str = "ok"  # ok | n/a | failed | mismatch
    error: str = ""
    first_s: float | None = None  # preparation plus first call, in this process
    max_err: float | None = None
    samples_ms: list = field(default_factory=list)
    arena_bytes: int | None = None
    weights_bytes: int | None = None
    profile: dict | None = None
    cpu_pressure: float | None = None  # % of the timing rounds in which some task waited for a CPU

    @property
    def median(self) -> float | None:
        return float(np.median(self.samples_ms)) if self.samples_ms else None

    @property
    def p90(self) -> float | None:
        return float(np.percentile(self.samples_ms, 90)) if self.samples_ms else None

    def to_dict(self) -> dict:
        return {**asdict(self), "median_ms": self.median, "p90_ms": self.p90}


def describe(e: BaseException) -> str:
    """One line: the exception type and the first line of its message."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


# -- one workload, all peers, in this process ---------------------------------------------------------------------
def measure(wl: Workload, peers: list, threads: int, rounds: int, round_s: float, onnx_dir: str,
            profile: bool = True, log=print, retries: int = 0) -> list:
    """Results of every peer on `wl`; the timing rounds run again (up to `retries` times) when other processes
    competed for the CPUs while they ran."""
    built = wl.build()
    ref = P.to_numpy(P._torch_eager(built, None)()).astype(np.float64)
    ctx = P.Context(threads, lambda: onnx_file(wl, built, onnx_dir))
    results, runners = [], {}
    for peer in peers:
        res, run = prepare(wl, built, peer, ctx, ref)
        results.append(res)
        log(f"  {peer.name:14s} {res.status}{': ' + res.error if res.error else ''}"
            f"{f' (first call {res.first_s:.2f} s)' if res.first_s is not None else ''}")
        if run is not None:
            runners[peer.name] = (peer, run, warm_up(run, round_s))
    for attempt in range(retries + 1):
        pressure = timed_rounds(runners, results, rounds)
        if pressure <= NOISY_PRESSURE or attempt == retries:
            break
        log(f"  CPU pressure {pressure:.0f}% while timing: waiting for quiet, then timing again")
        wait_for_quiet(10)
    for res in results:
        res.cpu_pressure = pressure
    for res in results:
        if res.status == "ok" and profile and res.peer in runners and hasattr(runners[res.peer][1], "cuvil_call"):
            res.profile = profile_summary(runners[res.peer][1].cuvil_call, rounds)
    return results


def timed_rounds(runners: dict, results: list, rounds: int) -> float:
    """Run the rounds, recording each call's time; returns the CPU pressure (%) while they ran."""
    by_peer = {r.peer: r for r in results}
    for r in results:
        r.samples_ms.clear()
    stalled, start = cpu_stall_us(), time.perf_counter()
    for r in range(rounds):
        order = list(runners.values())
        for peer, run, reps in order if r % 2 == 0 else order[::-1]:
            samples = by_peer[peer.name].samples_ms
            for _ in range(reps):
                t0 = time.perf_counter()
                run()
                samples.append((time.perf_counter() - t0) * 1e3)
            if peer.spins:
                time.sleep(SPIN_GAP_S)
    return 100 * (cpu_stall_us() - stalled) / 1e6 / max(time.perf_counter() - start, 1e-9)


def prepare(wl: Workload, built, peer, ctx, ref: np.ndarray):
    """(Result, runner or None): prepares the peer, runs it once, checks the output against PyTorch's."""
    res = Result(wl.name, peer.name)
    try:
        if peer.onnx:
            ctx.onnx_path()  # exported once per workload, outside the timing
        t0 = time.perf_counter()
        run = peer.prepare(built, ctx)
        out = P.to_numpy(run()).astype(np.float64)
        res.first_s = time.perf_counter() - t0
    except P.NotApplicable:
        res.status = "n/a"
        return res, None
    except Exception as e:  # noqa: BLE001 (a failing peer or route is reported, not fatal)
        res.status, res.error = "failed", describe(e)
        if os.environ.get("CUVIL_BENCH_TRACEBACKS"):
            traceback.print_exc()
        return res, None
    if out.shape != ref.shape:
        res.status, res.error = "mismatch", f"output shape {out.shape}, PyTorch's {ref.shape}"
        return res, None
    res.max_err = float(np.max(np.abs(out - ref)) / max(float(np.max(np.abs(ref))), 1e-12)) if ref.size else 0.0
    if not res.max_err <= (peer.tolerance or TOLERANCE):
        res.status, res.error = "mismatch", f"max error {res.max_err:.2e} relative to PyTorch's largest output"
        return res, None
    if hasattr(run, "cuvil_call"):
        res.arena_bytes, res.weights_bytes = memory_plan(run.cuvil_call)
    return res, run


def warm_up(run, round_s: float) -> int:
    """Run until warm (3 calls and 0.1 s at least); returns the calls per round that fill about `round_s`."""
    times, start = [], time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < 0.1:
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > 5:
            break
    return max(1, min(200, math.ceil(round_s / max(min(times), 1e-7))))


def memory_plan(call) -> tuple:
    """(arena bytes of the memory plan, bytes of the module's constants) of a Cuvil route's executable."""
    exe = P.executable_of(call[0])
    if exe is None or not hasattr(exe._run, "arena_bytes"):
        return None, None
    arrays = [np.asarray(a) for a in call[1]]
    weights = sum(int(np.asarray(c).nbytes) for c in exe.module.constants.values())
    try:
        return int(exe._run.arena_bytes(*arrays)), weights
    except Exception:  # noqa: BLE001 (torch inputs flattened differently: a static plan needs no sizes)
        plan = getattr(getattr(exe._run, "program", None), "plan", None)  # None: loaded from the artifact cache
        return (None if plan is None else int(plan.arena_bytes({}))), weights


def profile_summary(call, rounds: int) -> dict:
    """The profiler's view of a Cuvil route: instrumentation overhead and the slowest kernels."""
    import cuvil

    try:
        report = cuvil.profile(call[0], *call[1], repeat=max(3, min(rounds, 10)), baseline=True)
    except Exception as e:  # noqa: BLE001
        return {"error": describe(e)}
    top = [{"kernel": r.kernel, "ops": ",".join(r.ops)[:60], "source": ", ".join(r.sources[:2]), "ms": r.ms,
            "share": r.share, "gflops": r.gflops} for r in report.rows[:5]]
    return {"overhead": report.overhead, "wall_ms": report.wall_ms, "kernel_ms": report.kernel_ms,
            "kernels": len(report.rows), "top": top}


def onnx_file(wl: Workload, built, onnx_dir: str) -> str:
    os.makedirs(onnx_dir, exist_ok=True)
    name = "".join(c if c.isalnum() else "_" for c in wl.name) + ".onnx"
    return P.export_onnx(built.exported, built.inputs, os.path.join(onnx_dir, name))


# -- fresh processes: compile times and peak memory ---------------------------------------------------------------
def kernel_library_cache(threads: int) -> tuple:
    """A cache folder holding only what is built once per machine, whatever the model: the kernel library, the
    call-path extension (fastcall.c) and the objects every `.cuv` links; and the seconds they took."""
    folder = tempfile.mkdtemp(prefix="cuvil-bench-kernels-")
    code = ("from cuvil.backends.cpu import fastcall, kernels, standalone; kernels.load(3); fastcall.extension(); "
            "standalone.library_objects(3)")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env={**os.environ, "CUVIL_CACHE_DIR": folder})
    return folder, time.perf_counter() - t0


def probe(suite: str, wl: Workload, peer, threads: int, onnx_dir: str, cache: str | None = None,
          timeout: int = 900) -> dict:
    """Run one peer on one workload in a fresh process: time to the first result and peak RSS."""
    cmd = [sys.executable, "-m", "bench.probe", "--suite", suite, "--workload", wl.name, "--peer", peer.name,
           "--threads", str(threads), "--onnx-dir", onnx_dir]
    env = {**os.environ, **({"CUVIL_CACHE_DIR": cache} if cache else {})}
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        errors = [line for line in out.stderr.splitlines() if re.match(r"[\w.]+(Error|Exception)\b", line)]
        tail = (errors or out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"probe exited {out.returncode}: {tail[:300]}"}
    return json.loads(lines[-1])


def probe_workload(suite: str, wl: Workload, peers: list, threads: int, onnx_dir: str, kernels_cache: str,
                   log=print) -> dict:
    """Per peer: {first_s, rss_mb, rss_delta_mb}; Cuvil routes get `cold` (empty cache but the kernel library)
    and `warm` (the same cache again) runs."""
    out = {}
    for peer in peers:
        if peer.cuvil:
            cache = tempfile.mkdtemp(prefix="cuvil-bench-cache-")
            shutil.copytree(kernels_cache, cache, dirs_exist_ok=True)
            cold = probe(suite, wl, peer, threads, onnx_dir, cache)
            warm = probe(suite, wl, peer, threads, onnx_dir, cache) if "error" not in cold else cold
            shutil.rmtree(cache, ignore_errors=True)
            out[peer.name] = {"cold": cold, "warm": warm}
        else:
            out[peer.name] = probe(suite, wl, peer, threads, onnx_dir)
        log(f"  probe {peer.name:14s} {json.dumps(out[peer.name])[:200]}")
    return out


# -- a shared machine: other processes ------------------------------------------------------------------------------
def _psi() -> str:
    try:
        return open("/proc/pressure/cpu").readline()
    except OSError:  # no PSI (not Linux, or an old kernel): every figure reads as quiet
        return "avg10=0 avg60=0 total=0"


def cpu_pressure(window: str = "avg60") -> float:
    """Percent of the window in which some runnable task waited for a CPU (Linux PSI): other jobs on a shared
    machine show here; a benchmark alone on the machine stays near 0."""
    return float(re.search(window + r"=([\d.]+)", _psi()).group(1))


def cpu_stall_us() -> int:
    return int(re.search(r"total=(\d+)", _psi()).group(1))


def other_benchmarks() -> list:
    """Command lines of other benchmark processes (bench/gemm.py, python -m bench) running now."""
    mine = {os.getpid(), os.getppid()}
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(pid) not in mine and re.search(r"python\S* .*(bench/gemm\.py|-m bench\b)", cmd):
            found.append(cmd.strip())
    return found


def wait_for_quiet(minutes: float, log=print) -> None:
    """Wait (at most `minutes`) while another benchmark runs or the CPUs are contended."""
    deadline = time.time() + 60 * minutes
    while time.time() < deadline:
        others, pressure = other_benchmarks(), cpu_pressure("avg10")
        if not others and pressure <= NOISY_PRESSURE:
            return
        log(f"waiting: {others[0][:100] if others else f'CPU pressure {pressure:.0f}%'}")
        time.sleep(15)


# -- small measurements ---------------------------------------------------------------------------------------------
def add_one(x):
    return x + 1


def dispatch_overhead(calls: int = 20000) -> dict:
    """Microseconds per call of a trivial compiled function (x + 1 on 4 floats), at each layer of the call."""
    import cuvil

    x = np.ones(4, np.float32)
    fn = cuvil.jit(add_one)
    fn(x)
    exe = P.executable_of(fn)
    layers = {"cuvil.jit function": lambda: fn(x), "Executable": lambda: exe(x), "CpuFunction": lambda: exe._run([x]),
              "numpy x + 1 (reference)": lambda: x + 1}
    out = {}
    for name, call in layers.items():
        best = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls // 5):
                call()
            best.append((time.perf_counter() - t0) / (calls // 5) * 1e6)
        out[name] = min(best)  # the least disturbed batch, as timeit reports
    return out


def import_time(runs: int = 10) -> str:
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "import_time.py"), "--runs", str(runs)],
                         capture_output=True, text=True, cwd=ROOT)
    return out.stdout.strip() or out.stderr.strip().splitlines()[-1]


def set_threads(n: int) -> None:
    """The thread count every peer gets (the environment variables are set by `python -m bench`)."""
    import torch

    torch.set_num_threads(n)


def openblas_kernel() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    info = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} ({i.get('num_threads')} threads)"
            for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(info) or "none loaded"
