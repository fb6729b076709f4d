"""Fixed cost and latency tails of a compiled call: Cuvil (ONNX route) against ONNX Runtime, interleaved in one process.

    python -m bench.overhead [--threads 2] [--calls 2000] [--rounds 5] [--gap-ms 20] [--gapped 500] [--trace] [--single]

Two models, one ONNX graph each, built here: a chain of 8 (ReduceMax, Sub) pairs, 16 kernels in Cuvil.
- **fixed cost**: the chain on 8K floats (every kernel below the size worth a second thread): microseconds per call,
  the least disturbed of `rounds` interleaved batches of `calls` calls (as timeit reports); the same chain on 64
  floats, what a call costs beyond its kernels' work; and per call the CPU time of the process's other threads (a
  pool's workers, woken by the calls and spinning for loops that never need them).
- **tails**: the chain on 256K floats (each Sub threaded; each ReduceMax, one row, on the calling thread), one call
  every `gap_ms` milliseconds, `gapped` calls per peer alternately: median, p90, p99 and max, and p99 over the
  median. A thread pool whose workers have gone to sleep between calls shows here: a kernel that waits for a worker
  the scheduler has not woken.
- **trace** (`--trace`): where the tail calls' time went, against the middle calls'. Per call, from the kernel's
  per-thread `/proc/self/task/*/schedstat`: time on a CPU and time runnable but waiting for one (run queue: the
  host's other work, or a wake-up not yet served), of the calling thread and of the peer's workers (the threads
  that ran while that peer warmed up alone); the process's minor page faults; and for Cuvil the pool's counters
  (`cuvil_pool_waits`): the share of chunks its workers ran, the loops whose caller spun for a worker's chunk and
  the us it waited ("pool waits", "pool waited"), the threaded loops that no worker joined, the us from a loop's
  start to a worker's joining it ("join after", mean over the joins), the waits in which the caller stopped spinning
  and slept ("caller slept") and the us the workers spun between jobs ("workers spun", `cuvil_pool_idle`).
Thread counts: `--threads` for both (CUVIL_NUM_THREADS and ORT's intra-op threads). The report prints `uptime`'s
load first: figures from a loaded machine mean little.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import resource
import threading
import time

import numpy as np

from .dispatch import best_batch_us

PAIRS = 8  # (ReduceMax, Sub) pairs: 16 kernels


def chain_model(n: int) -> bytes:
    """x - max(x), eight times over, on [1, n] floats."""
    from onnx import TensorProto, helper

    nodes, prev = [], "x"
    for i in range(PAIRS):
        nodes.append(helper.make_node("ReduceMax", [prev], [f"m{i}"], keepdims=1, axes=[1]))
        nodes.append(helper.make_node("Sub", [prev, f"m{i}"], [f"y{i}"]))
        prev = f"y{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def peers(n: int, threads: int, single: bool = False) -> dict:
    """Peer name -> a call of no arguments on the chain of n floats, outputs checked against NumPy; with `single`,
    also Cuvil on the calling thread alone."""
    import onnxruntime as ort

    import cuvil

    model = chain_model(n)
    x = np.random.default_rng(0).standard_normal((1, n)).astype(np.float32)
    want = x.copy()
    for _ in range(PAIRS):
        want = want - want.max(axis=1, keepdims=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    compiled = cuvil.load_onnx(model).optimize()
    out = {"cuvil": lambda: compiled(x), "ONNX Runtime": lambda: session.run(None, {"x": x})}
    if single:
        alone = cuvil.load_onnx(model).optimize()
        alone.executable.set_num_threads(1)
        out["cuvil 1 thread"] = lambda: alone(x)
    for name, call in out.items():
        got = call()
        got = got[0] if isinstance(got, (list, tuple)) else got
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5, err_msg=name)
    return out


def fixed_cost(threads: int, calls: int, rounds: int) -> dict:
    """Per peer, on the 16-kernel chain of 8K floats and of 64 (the call and its kernels' entries, next to no data):
    (microseconds per call, the best of `rounds` interleaved batches of `calls` calls; the process's other threads'
    CPU microseconds per call, mean over the batches: a pool's workers kept spinning by loops too small for them)."""
    todo = peers(8192, threads)
    todo.update({f"{name}, 64 floats": call for name, call in peers(64, threads).items()})
    best: dict = {}
    others: dict = {name: [] for name in todo}
    me = threading.get_native_id()
    for _ in range(rounds):
        for name, call in todo.items():
            before = _schedstat()
            us = best_batch_us({name: call}, calls, 1)[name]
            after = _schedstat()
            best[name] = min(best.get(name, us), us)
            others[name].append(sum(run - before.get(t, (0, 0))[0] for t, (run, _) in after.items() if t != me))
    return {name: (best[name], np.mean(others[name]) / calls / 1e3) for name in todo}


def _schedstat() -> dict:
    """Thread id -> (ns on a CPU, ns runnable waiting for one) of this process's threads."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run, wait = f.read().split()[:2]
        except (OSError, ValueError):
            continue  # the thread ended
        out[int(tid)] = (int(run), int(wait))
    return out


def _pool_libraries() -> list:
    """The loaded libraries with a Cuvil thread pool: the kernel core, and artifacts that carry their own (a `.cuv`'s
    library is loaded from a memfd, /proc/self/fd/N, whose mapping reads "/memfd:... (deleted)")."""
    with open("/proc/self/maps") as f:
        paths = dict.fromkeys(line.split()[-1] for line in f if line.rstrip().endswith(".so"))
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:cuvil-"):
                paths[f"/proc/self/fd/{fd}"] = None
        except OSError:
            continue  # closed meanwhile
    libs = [ctypes.CDLL(path) for path in paths]  # loaded already: dlopen returns the same handle
    return [lib for lib in libs if hasattr(lib, "cuvil_pool_waits")]


def _pool_waits(libs: list) -> np.ndarray:
    """cuvil_pool_waits' counters summed over `libs`: loops, chunks, chunks run by workers, loops that waited for a
    worker, ns waited, workers' joins of a loop, ns from the loops' starts to the joins."""
    total, out = np.zeros(7, np.int64), np.zeros(7, np.int64)
    for lib in libs:
        lib.cuvil_pool_waits(ctypes.c_void_p(out.ctypes.data))
        total += out
    return total


def _pool_idle(libs: list) -> np.ndarray:
    """cuvil_pool_idle's counters summed over `libs`: the caller's sleeps for a worker's chunk, ns workers spun."""
    total, out = np.zeros(2, np.int64), np.zeros(2, np.int64)
    for lib in libs:
        if hasattr(lib, "cuvil_pool_idle"):  # a `.cuv` exported before it has none
            lib.cuvil_pool_idle(ctypes.c_void_p(out.ctypes.data))
            total += out
    return total


class Tracer:
    """One call's trace (see the module's docstring): `before()` just before it, `after(wall_us)` just after."""

    def __init__(self, workers: set, pool: bool):
        self.workers, self.me = workers, threading.get_native_id()
        self.pools = _pool_libraries() if pool else []
        self.rows: list = []

    def _sample(self):
        stat = _schedstat()
        mine = stat.get(self.me, (0, 0))
        theirs = [stat.get(t, (0, 0)) for t in self.workers]
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        pool, idle = _pool_waits(self.pools), _pool_idle(self.pools)
        return np.array([*mine, sum(r for r, _ in theirs), sum(w for _, w in theirs), faults, *pool, *idle],
                        np.float64)

    def before(self):
        self._start = self._sample()

    def after(self, wall_us: float):
        d = self._sample() - self._start
        self.rows.append([wall_us, *(d[:4] / 1e3), d[4], d[7] / max(d[6], 1), d[8], d[9] / 1e3, d[5] - d[10],
                          d[11] / max(d[10], 1) / 1e3, d[12], d[13] / 1e3])

    COLUMNS = ("wall us", "caller cpu", "caller rq wait", "workers cpu", "workers rq", "faults", "worker share",
               "pool waits", "pool waited", "not joined", "join after", "caller slept", "workers spun")

    def summary(self) -> dict:
        """Mean of each column over the middle calls (40th-60th percentile of wall time) and the top 2%."""
        rows = np.asarray(self.rows)
        lo, hi, top = np.percentile(rows[:, 0], [40, 60, 98])
        middle, tail = rows[(rows[:, 0] >= lo) & (rows[:, 0] <= hi)], rows[rows[:, 0] >= top]
        return {"middle": middle.mean(axis=0), "top 2%": tail.mean(axis=0)}


def _busy_threads(call, rounds: int = 20) -> set:
    """The threads other than this one that ran during `rounds` calls of `call` (a peer's workers)."""
    time.sleep(0.05)  # another peer's spinning workers fall asleep
    before = _schedstat()
    for _ in range(rounds):
        call()
    after, me = _schedstat(), threading.get_native_id()
    return {t for t, (run, _) in after.items() if t != me and run > before.get(t, (0, 0))[0]}


def tails(threads: int, gap_ms: float, calls: int, trace: bool = False, single: bool = False) -> tuple:
    """Per peer: latency percentiles (us) of calls `gap_ms` apart on the 256K-float chain, peers alternating; and
    with `trace`, each peer's Tracer summary."""
    todo = peers(1 << 18, threads, single)
    times: dict = {name: [] for name in todo}
    tracers = {name: Tracer(_busy_threads(call), name.startswith("cuvil")) for name, call in todo.items()}  # also warms
    for _ in range(calls):
        for name, call in todo.items():
            time.sleep(gap_ms / 1e3)
            if trace:
                tracers[name].before()
            t0 = time.perf_counter()
            call()
            wall = (time.perf_counter() - t0) * 1e6
            times[name].append(wall)
            if trace:
                tracers[name].after(wall)
    out = {}
    for name, ts in times.items():
        a = np.asarray(ts)
        med, p90, p99 = np.percentile(a, [50, 90, 99])
        out[name] = {"median": med, "p90": p90, "p99": p99, "max": a.max(), "p99/median": p99 / med}
    return out, ({name: t.summary() for name, t in tracers.items()} if trace else {})


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=2000, help="calls per batch of the fixed-cost test")
    ap.add_argument("--rounds", type=int, default=5, help="batches per peer, interleaved")
    ap.add_argument("--gap-ms", type=float, default=20.0, help="milliseconds between calls of the tail test")
    ap.add_argument("--gapped", type=int, default=500, help="calls per peer in the tail test")
    ap.add_argument("--trace", action="store_true", help="where the tail calls' time went (see above)")
    ap.add_argument("--single", action="store_true", help="also Cuvil on one thread in the tail test")
    args = ap.parse_args(argv)
    os.environ["CUVIL_NUM_THREADS"] = str(args.threads)
    print("load:", os.popen("uptime").read().strip())
    print(f"fixed cost, 16 kernels on 8K floats (and on 64), {args.threads} threads, us per call (best batch of "
          f"{args.calls}; the other threads' CPU us per call, mean):")
    cost = fixed_cost(args.threads, args.calls, args.rounds)
    for name, (us, others) in cost.items():
        print(f"  {name:24s} {us:8.1f}   other threads {others:8.1f}")
    print(f"  cuvil / ONNX Runtime: {cost['cuvil'][0] / cost['ONNX Runtime'][0]:.2f}x")
    print(f"tails, 16 kernels on 256K floats, calls {args.gap_ms:g} ms apart, {args.gapped} calls, us:")
    rows, traces = tails(args.threads, args.gap_ms, args.gapped, args.trace, args.single)
    for name, row in rows.items():
        print(f"  {name:14s} " + "  ".join(f"{k} {v:8.1f}" if k != "p99/median" else f"{k} {v:.2f}"
                                            for k, v in row.items()))
    if traces:
        print("trace, per call (us unless named; workers: the peer's other threads):")
        print(f"  {'':24s}" + "".join(f"{c:>15s}" for c in Tracer.COLUMNS))
        for name, summary in traces.items():
            for part, means in summary.items():
                print(f"  {name + ', ' + part:24s}" + "".join(f"{v:15.2f}" for v in means))


if __name__ == "__main__":
    main()
