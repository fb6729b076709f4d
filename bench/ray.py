"""Cuvil on Ray against one in-process loop and against ONNX Runtime on Ray: `python -m bench.ray
[cnn|bert|resnet18] [--rows N] [--rounds N] [--batch N] [--workers N] [--cpus-per-worker N] [--size N]`.

Models: `cnn` and `bert` are tests/ray/models.py's small CNN (3x16x16) and one-layer BERT-like encoder (16
tokens); `resnet18` is bench/workloads.py's ResNet-18 at --size (64: 3x64x64). Each is exported to a `.cuv`, and
its ONNX graph kept for ONNX Runtime. One block of --block rows is put in the object store once and the dataset is
that block repeated up to --rows rows (Ray Data takes the same reference several times; no N-row copy in memory).
Round by round, in rotated order, the same batches (--batch rows, sliced from that block) go through:
- `cuvil-inproc` and `ort-inproc`: one loop over the batches in a fresh process, with the whole thread budget
  (--workers x --cpus-per-worker threads), timed as a worker's share of a job: the engine's import, the model's
  load, the first call and the loop (NumPy and Ray imported and the batches read first, as a worker has them);
- `cuvil-ray` and `ort-ray`: `map_batches` with an actor pool of --workers workers of --cpus-per-worker CPUs
  each, one thread per CPU (what `cuvil.ray.Predictor` chooses; ONNX Runtime's intra-op threads set the same).
`ray.init`, building the dataset and a first job of each engine over one block (Ray starts its worker pool and
imports Ray Data lazily, at a session's first job) are outside every timing. A Ray job is timed from the
`map_batches` call to its last row in this process, so actor start-up and model load are in it, as a user pays
them. Each worker also stamps every batch with the start and end of its model call (one clock: one machine), which gives
- start-up: from the `map_batches` call to the first model call, in parts: Ray's actor start (to the worker's
  `__init__`: its process, `import ray`, Ray Data's imports), the engine's import and model load, the wait for the
  first batch, and the first call's time beyond a median call's;
- steady throughput: the rows over the span from the first model call's start to the last one's end;
- busy: the share of each worker's span spent inside the model call (the rest is Ray's per-batch cost: block to
  batch, result to block, scheduling).
Ratios are medians over rounds of per-round throughput ratios: `cuvil-ray / cuvil-inproc` (goal >= 0.9) and
`cuvil-ray / ort-ray` (goal >= 1.2), end to end and steady, and `cuvil-inproc / ort-inproc`, the ceiling of the
second: Ray-side work cannot lift it above what the two engines do in one process.
"""
from __future__ import annotations

import argparse
import io
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from typing import Optional

import numpy as np
import ray

ENGINES = ("cuvil", "ort")
NOOP = "noop"  # --noop's engine: Ray's own cost of the job, with no model
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class OrtPredictor:
    """The ONNX Runtime peer of cuvil.ray.Predictor: the same batches in, the same columns out."""

    def __init__(self, model: bytes, num_threads: int = 1):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = num_threads, 1
        self.session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def __call__(self, batch: dict) -> dict:
        return dict(zip(self.outputs, self.session.run(None, {k: batch[k] for k in self.inputs})))


class NoopPredictor:
    """No model: one float32 column of the batch's rows, at once. The same job with it is what Ray costs alone (its
    actor start, its per-batch work in the worker and the driver), the part of a job that no engine can remove."""

    def __init__(self, model=None, num_threads: int = 1):
        self.num_threads = num_threads

    def __call__(self, batch: dict) -> dict:
        return {"out": np.zeros(len(next(iter(batch.values()))), np.float32)}


def predictor(engine: str, model, num_threads: int):
    """The engine's predictor; each imports only its own engine (a worker's start-up is part of the figures)."""
    if engine == NOOP:
        return NoopPredictor(model, num_threads)
    if engine == "ort":
        return OrtPredictor(model, num_threads)
    import cuvil.ray

    return cuvil.ray.Predictor(model, num_threads=num_threads)


class Timed:
    """A Ray worker running one engine, stamping each batch's rows with its model call's start, end and process;
    with `trace`, also with the call's counters (`CallTrace`). `env` is set before the engine loads (an A/B switch
    such as CUVIL_WAIT_SPIN_US, read when the pool starts)."""

    def __init__(self, engine: str, model, num_threads: int, trace: bool = False, env: Optional[dict] = None):
        self.init = time.monotonic()  # Ray's part before it: the worker process, `import ray`, Ray Data's imports
        os.environ.update(env or {})
        self.predictor = predictor(engine, model, num_threads)
        self.ready = time.monotonic()  # the engine's part: its import and the model's load
        self.trace = CallTrace() if trace else None

    def __call__(self, batch: dict) -> dict:
        if self.trace:
            self.trace.start()
        start = time.monotonic()
        out = self.predictor(batch)
        end = time.monotonic()
        counters = self.trace.stop() if self.trace else np.zeros(len(CallTrace.COLUMNS))
        rows = len(next(iter(out.values())))
        # one tensor column, not five: Ray converts each result column to Arrow, a cost the in-process loop has not
        out["_stamps"] = np.tile(np.array([start, end, os.getpid(), self.init, self.ready, *counters]), (rows, 1))
        return out


class CallTrace:
    """What one model call cost beyond its wall time, inside a Ray worker (bench.overhead --trace's counters): per
    thread from /proc/self/task/*/schedstat, the time on a CPU and runnable waiting for one of the calling thread, of
    the pool's workers (threads named cuvil-pool) and of the process's other threads (Ray's); the caller's voluntary
    and involuntary context switches (getrusage); and the Cuvil pool's counters: loops, chunks, the workers' chunks,
    the caller's waits for a worker's chunk and their us, its sleeps in those waits, and the us the workers spun
    between jobs."""

    COLUMNS = ("caller cpu us", "caller rq us", "workers cpu us", "workers rq us", "others cpu us", "others rq us",
               "caller vol cs", "caller invol cs",
               "loops", "chunks", "worker chunks", "pool waits", "pool waited us", "caller slept", "workers spun us")

    def __init__(self):
        from bench import overhead

        self.overhead, self.pools = overhead, overhead._pool_libraries()

    def start(self) -> None:
        self._stat, self._counters = self.overhead._schedstat(), self._counters_now()

    def stop(self) -> np.ndarray:
        """The call's counters, from the calling thread (Ray may call from another thread than __init__'s); each
        thread's schedstat from `start` (0 for one started since; one that ended meanwhile is left out)."""
        stat, before = self.overhead._schedstat(), self._stat
        delta = {t: (run - before.get(t, (0, 0))[0], wait - before.get(t, (0, 0))[1])
                 for t, (run, wait) in stat.items()}
        mine = delta.pop(threading.get_native_id(), (0, 0))
        workers = [delta.pop(t) for t in [t for t in delta if _thread_name(t) == "cuvil-pool"]]
        return np.array([mine[0] / 1e3, mine[1] / 1e3, *_sums(workers), *_sums(delta.values()),
                         *(self._counters_now() - self._counters)], np.float64)

    def _counters_now(self) -> np.ndarray:
        usage = resource.getrusage(resource.RUSAGE_THREAD)
        waits, idle = self.overhead._pool_waits(self.pools), self.overhead._pool_idle(self.pools)
        return np.array([usage.ru_nvcsw, usage.ru_nivcsw, *waits[:4], waits[4] / 1e3, idle[0], idle[1] / 1e3],
                        np.float64)


def _thread_name(tid: int) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""  # the thread ended


def _sums(stats) -> tuple:
    """(us on a CPU, us runnable waiting for one) summed over (ns, ns) pairs."""
    stats = list(stats)
    return sum(r for r, _ in stats) / 1e3, sum(w for _, w in stats) / 1e3


def build(which: str, folder: str, size: int) -> tuple:
    """(.cuv path, ONNX bytes, columns of n rows as a function of n)."""
    import cuvil
    from tests.ray import models

    if which == "resnet18":
        blob = _resnet18_onnx(size)
        columns = lambda n: {"image": np.random.default_rng(2).standard_normal((n, 3, size, size), np.float32)}  # noqa
    else:
        blob = models.cnn() if which == "cnn" else models.bert()
        columns = (lambda n: {"image": models.images(n)}) if which == "cnn" else models.tokens
    path = os.path.join(folder, f"{which}.cuv")
    cuvil.export(cuvil.load_onnx(blob).optimize(), path)
    return path, blob, columns


def _resnet18_onnx(size: int) -> bytes:
    import torch

    from bench.workloads import ResNet18, vision_workload

    built, f = vision_workload(ResNet18, size), io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(built.module, built.inputs, f, dynamo=False, opset_version=17, input_names=["image"],
                          output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    return f.getvalue()


def dataset(block: dict, repeats: int):
    """`block` (a dict of columns) as one Ray block in the object store, and a dataset of it `repeats` times."""
    from ray.data.block import BlockAccessor

    ref = ray.put(BlockAccessor.batch_to_block(block))
    return ray.data.from_arrow_refs([ref] * repeats)


def in_process(engine: str, model_file: str, block_file: str, batch: int, repeats: int, threads: int) -> dict:
    """One loop over the batches, `repeats` times, in a fresh process (`child`), timed as a worker's share of a job
    is: the engine's import, the model's load, the first call and the loop."""
    argv = [sys.executable, "-m", "bench.ray", "--child", engine, model_file, block_file, str(batch), str(repeats),
            str(threads)]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise RuntimeError(f"bench.ray's in-process loop ({engine}) failed:\n{out.stderr}")
    return json.loads(out.stdout.splitlines()[-1])


def child(engine: str, model_file: str, block_file: str, batch: str, repeats: str, threads: str) -> None:
    """The in-process loop's process: NumPy and Ray imported and the batches read before the clock starts, as a
    Ray worker has them before its actor's `__init__`; then what a worker does (`Timed`), without Ray."""
    block = dict(np.load(block_file))
    rows, size = len(next(iter(block.values()))), int(batch)
    batches = [{k: v[i:i + size] for k, v in block.items()} for i in range(0, rows, size)]
    model = model_file if engine == "cuvil" else open(model_file, "rb").read()  # a worker gets ORT's as bytes
    start, cpu = time.monotonic(), process_cpu()
    worker = predictor(engine, model, int(threads))
    for _ in range(int(repeats)):
        for b in batches:
            worker(b)
    print(json.dumps({"seconds": time.monotonic() - start, "cpu": process_cpu() - cpu}))


def idle_cpu(seconds: float) -> np.ndarray:
    """The machine's CPUs kept busy (and stolen) while no job runs, over `seconds`: Ray's daemons and actors idling
    (the raylet, the dashboard's agent, Ray Data's stats actors), a floor under every job's CPU."""
    before = machine_cpu()
    time.sleep(seconds)
    return (machine_cpu() - before) / seconds


def process_cpu() -> float:
    """This process's CPU seconds (user and system, every thread)."""
    t = os.times()
    return t.user + t.system


def machine_cpu() -> np.ndarray:
    """The machine's CPU seconds since boot from /proc/stat: (busy, stolen by the hypervisor); busy is user, nice,
    system, irq and softirq, every process's."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    return np.array([sum(fields[i] for i in (0, 1, 2, 5, 6)), fields[7]], np.float64) / tick


def ray_job(ds, engine: str, model, args, env: Optional[dict] = None, batch_format: Optional[str] = None) -> dict:
    """One map_batches job, from the call to its last row in this process, and what its workers stamped; Cuvil's
    batches in `batch_format` (default --format), the others' always NumPy."""
    cpus, start, driver, machine = args.cpus_per_worker, time.monotonic(), process_cpu(), machine_cpu()
    kwargs = {"engine": engine, "model": model, "num_threads": cpus, "trace": args.trace, "env": env}
    batch_format = (batch_format or args.format) if engine == "cuvil" else "numpy"
    out = ds.map_batches(Timed, fn_constructor_kwargs=kwargs,
                         compute=ray.data.ActorPoolStrategy(size=args.workers), num_cpus=cpus,
                         batch_size=args.batch, batch_format=batch_format,
                         zero_copy_batch=True)
    stamps = np.concatenate([b["_stamps"] for b in out.iter_batches(batch_size=None, batch_format="numpy")])
    seconds, (busy, stolen), driver = time.monotonic() - start, machine_cpu() - machine, process_cpu() - driver
    starts, ends = stamps[:, 0], stamps[:, 1]
    calls = np.unique(stamps, axis=0)  # a row per model call (start, end, pid, init, ready, counters), by start
    per_worker = [calls[calls[:, 2] == p] for p in np.unique(calls[:, 2])]
    first = [c[np.argmin(c[:, 0])] for c in per_worker]
    return {"seconds": seconds, "trace": calls[:, 5:].mean(axis=0), "startup": starts.min() - start,
            # CPU seconds of the job: the machine's, the driver's, and the worker threads' inside the model calls
            "cpu": {"machine": busy, "stolen": stolen, "driver": driver,
                    "calls": calls[:, [5, 7, 9]].sum() / 1e6 if args.trace else float("nan")},
            "steady": len(starts) / (ends.max() - starts.min()),
            "busy": statistics.mean((c[:, 1] - c[:, 0]).sum() / (c[:, 1].max() - c[:, 0].min()) for c in per_worker),
            "gap": statistics.median(np.concatenate([c[1:, 0] - c[:-1, 1] for c in per_worker])),
            # the start-up's parts, the median over workers: Ray's (the call to the worker's __init__), the
            # engine's (import and load), waiting for the first batch, and the first call beyond a median one
            "ray_start": statistics.median(f[3] - start for f in first),
            "engine_load": statistics.median(f[4] - f[3] for f in first),
            "first_wait": statistics.median(f[0] - f[4] for f in first),
            "first_extra": statistics.median((f[1] - f[0]) - np.median(c[:, 1] - c[:, 0])
                                             for f, c in zip(first, per_worker))}


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # in_process's fresh process
        child(*sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="cnn", choices=["cnn", "bert", "resnet18"])
    parser.add_argument("--rows", type=int, default=200_000, help="rows per job (rounded up to whole blocks)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--block", type=int, default=None, help="rows per block (default: 16 batches)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cpus-per-worker", type=int, default=1)
    parser.add_argument("--size", type=int, default=64, help="resnet18's image size")
    parser.add_argument("--format", default="numpy", choices=["numpy", "pyarrow"], help="Cuvil's batch_format")
    parser.add_argument("--trace", action="store_true", help="per-call counters in the workers (Timed's CallTrace), "
                        "mean per call for each Ray job")
    parser.add_argument("--ab-wait-spin-us", type=int, default=None, help="also a Cuvil Ray job (cuvil-ray-ab) with "
                        "CUVIL_WAIT_SPIN_US set to this (e.g. 1000000000: the caller spins for a worker's chunk, as "
                        "before the pool slept), in the same rotation")
    parser.add_argument("--ab-format", default=None, choices=["numpy", "pyarrow"], help="also a Cuvil Ray job "
                        "(cuvil-ray-FORMAT) with its batches in this format, in the same rotation")
    parser.add_argument("--noop", action="store_true", help="also the same Ray job with no model (noop-ray, in the "
                        "same rotation): what Ray costs alone, start-up and per batch")
    parser.add_argument("--worker-niceness", type=int, default=0, help="the nice value of Ray's workers "
                        "(RAY_worker_niceness; Ray's own default is 15)")
    args = parser.parse_args()
    start_ray(args.workers * args.cpus_per_worker, args.worker_niceness)
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as folder:
        runs = prepare(args, folder)
        results = {name: [] for name in runs}
        for r in range(args.rounds):
            for name in list(runs)[r % len(runs):] + list(runs)[:r % len(runs)]:  # rotated: no peer always first
                results[name].append(runs[name]())
            print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]['seconds']:.2f} s" for n, v in results.items()),
                  flush=True)
    report(args, results)
    ray.shutdown()


def start_ray(num_cpus: int, worker_niceness: int) -> None:
    """A local Ray cluster whose workers run at `worker_niceness`. Ray's default, 15, lets every process at 0 (the
    driver, the raylet, Ray's daemons) preempt the model's threads whenever it wakes, while the in-process loop
    competes with them as an equal: at 0 the Ray job runs as a user's own process would (docs/scale-out.md). The
    raylet that ray.init starts reads it from the environment."""
    os.environ["RAY_worker_niceness"] = str(worker_niceness)
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")


def prepare(args, folder: str) -> dict:
    """{run name: a function timing it once}, after the untimed first job of each engine; sets args.rows to the
    rows of whole blocks."""
    import cuvil.ray

    path, blob, columns = build(args.model, folder, args.size)
    block = columns(min(args.block or 16 * args.batch, args.rows))
    rows_in_block = len(next(iter(block.values())))
    repeats = -(-args.rows // rows_in_block)
    args.rows = repeats * rows_in_block
    block_file, onnx_file = os.path.join(folder, "block.npz"), os.path.join(folder, "model.onnx")
    np.savez(block_file, **block)
    with open(onnx_file, "wb") as f:
        f.write(blob)
    ds, model_of = dataset(block, repeats), {"cuvil": cuvil.ray.put(path), "ort": blob}
    for e in ENGINES:  # untimed: Ray starts its worker pool and imports Ray Data lazily, at a session's first job
        ray_job(dataset(block, 1), e, model_of[e], args)
    threads, file_of = args.workers * args.cpus_per_worker, {"cuvil": path, "ort": onnx_file}
    runs = {f"{e}-inproc": (lambda e=e: in_process(e, file_of[e], block_file, args.batch, repeats, threads))
            for e in ENGINES}
    runs.update({f"{e}-ray": (lambda e=e: ray_job(ds, e, model_of[e], args)) for e in ENGINES})
    idle = idle_cpu(3.0)
    print(f"Ray idle, after the first jobs: {idle[0]:.3f} CPUs busy, {idle[1]:.3f} stolen (of {os.cpu_count()})")
    if args.noop:
        ray_job(dataset(block, 1), NOOP, None, args)
        runs[f"{NOOP}-ray"] = lambda: ray_job(ds, NOOP, None, args)
    if args.ab_format is not None:  # the same Cuvil job with its batches in the other format
        runs[f"cuvil-ray-{args.ab_format}"] = lambda: ray_job(ds, "cuvil", model_of["cuvil"], args,
                                                              batch_format=args.ab_format)
    if args.ab_wait_spin_us is not None:  # the pool's caller spinning for a worker's chunk this long before it sleeps
        env = {"CUVIL_WAIT_SPIN_US": str(args.ab_wait_spin_us)}
        runs["cuvil-ray-ab"] = lambda: ray_job(ds, "cuvil", model_of["cuvil"], args, env)
    return runs


def report(args, results: dict) -> None:
    """Throughputs (medians over rounds) and their ratios (medians of per-round ratios)."""
    def rate(name: str, key: str = "seconds") -> list:
        return [args.rows / r[key] if key == "seconds" else r[key] for r in results[name]]

    def ratio(a: list, b: list) -> str:
        return f"{statistics.median(x / y for x, y in zip(a, b)):.3f}"

    med = lambda values: statistics.median(values)  # noqa: E731
    print(f"\n{args.model}, {args.rows} rows, batch {args.batch}, {args.workers} workers x {args.cpus_per_worker} "
          f"CPU at nice {args.worker_niceness}, {args.rounds} rounds; load average {os.getloadavg()[0]:.2f}")
    for e in ENGINES:
        ray_runs = results[f"{e}-ray"]
        print(f"  {e:5}  in-process {med(rate(f'{e}-inproc')):9.1f} rows/s   on Ray: end to end "
              f"{med(rate(f'{e}-ray')):9.1f} rows/s, steady {med(rate(f'{e}-ray', 'steady')):9.1f} rows/s, start-up "
              f"{med(r['startup'] for r in ray_runs):.2f} s, busy {100 * med(r['busy'] for r in ray_runs):.0f}% "
              f"(median gap between calls {1e3 * med(r['gap'] for r in ray_runs):.2f} ms)\n"
              f"         start-up: Ray's actor start {med(r['ray_start'] for r in ray_runs):.3f} s, engine import and "
              f"load {med(r['engine_load'] for r in ray_runs):.3f} s, wait for the first batch "
              f"{med(r['first_wait'] for r in ray_runs):.3f} s, first call beyond a median one "
              f"{med(r['first_extra'] for r in ray_runs):.3f} s")
    if "cuvil-ray-ab" in results:
        print(f"  cuvil-ray / cuvil-ray-ab (CUVIL_WAIT_SPIN_US={args.ab_wait_spin_us}): end to end "
              f"{ratio(rate('cuvil-ray'), rate('cuvil-ray-ab'))}, steady "
              f"{ratio(rate('cuvil-ray', 'steady'), rate('cuvil-ray-ab', 'steady'))}; its rounds "
              + ", ".join(f"{r['seconds']:.1f}" for r in results["cuvil-ray-ab"]) + " s")
    if args.ab_format is not None:
        other = f"cuvil-ray-{args.ab_format}"
        print(f"  {other} / cuvil-ray ({args.format}): end to end {ratio(rate(other), rate('cuvil-ray'))}, steady "
              f"{ratio(rate(other, 'steady'), rate('cuvil-ray', 'steady'))}, median gap between calls "
              f"{1e3 * med(r['gap'] for r in results[other]):.2f} ms")
    if f"{NOOP}-ray" in results:
        report_noop(args, results[f"{NOOP}-ray"], results["cuvil-ray"])
    report_cpu(results)
    if args.trace:
        report_trace(results)
    inproc = rate("cuvil-inproc")
    print(f"  cuvil on Ray / in-process (goal >= 0.9): end to end {ratio(rate('cuvil-ray'), inproc)}, steady "
          f"{ratio(rate('cuvil-ray', 'steady'), inproc)}")
    print(f"  cuvil / ort on Ray (goal >= 1.2): end to end {ratio(rate('cuvil-ray'), rate('ort-ray'))}, steady "
          f"{ratio(rate('cuvil-ray', 'steady'), rate('ort-ray', 'steady'))}; in-process (its ceiling) "
          f"{ratio(inproc, rate('ort-inproc'))}")


def report_noop(args, noop: list, cuvil_ray: list) -> None:
    """Ray's own cost, from the job with no model: its start-up, and its per-batch time (the span over batches)."""
    med = statistics.median
    per_batch = med(1e3 * args.batch / r["steady"] for r in noop)
    print(f"  noop on Ray (Ray alone): {med(r['seconds'] for r in noop):.2f} s a job, start-up "
          f"{med(r['startup'] for r in noop):.2f} s (Ray's actor start {med(r['ray_start'] for r in noop):.3f} s), "
          f"{per_batch:.2f} ms a batch; Cuvil's Ray job {med(r['seconds'] for r in cuvil_ray):.2f} s")


def report_cpu(results: dict) -> None:
    """Each run's CPU seconds, round by round: an in-process loop's own; a Ray job's machine-wide busy and stolen
    time, the driver's, the worker's model calls' (with --trace) and the rest (Ray's daemons, the worker outside its
    calls, other users of the machine)."""
    print("  CPU seconds per run (in process: the loop's; on Ray: machine busy = driver + calls + rest; stolen):")
    for name, runs in results.items():
        for i, r in enumerate(runs):
            cpu = r.get("cpu")
            if isinstance(cpu, dict):
                rest = cpu["machine"] - cpu["driver"] - cpu["calls"]
                print(f"    {name + f' r{i + 1}':18s} {r['seconds']:7.2f} s wall, machine {cpu['machine']:7.2f}, "
                      f"driver {cpu['driver']:6.2f}, calls {cpu['calls']:7.2f}, rest {rest:6.2f}, "
                      f"stolen {cpu['stolen']:5.2f}")
            elif cpu is not None:
                print(f"    {name + f' r{i + 1}':18s} {r['seconds']:7.2f} s wall, {cpu:7.2f} s CPU")


def report_trace(results: dict) -> None:
    """Each Ray job's counters, mean per model call, round by round: a slow round against a fast one."""
    print("  trace, mean per model call (CallTrace; 'others': the worker process's other threads):")
    print(f"  {'':18s}{'seconds':>9s}" + "".join(f"{c:>16s}" for c in CallTrace.COLUMNS))
    for name, runs in results.items():
        for i, r in enumerate(runs):
            if "trace" in r:
                print(f"  {name + f' r{i + 1}':18s}{r['seconds']:9.2f}" + "".join(f"{v:16.1f}" for v in r["trace"]))


if __name__ == "__main__":
    main()
