"""Cuvil on Ray against one process and against ONNX Runtime on Ray: `python -m bench.ray [cnn|bert]
[--rows N] [--rounds N] [--batch N] [--workers N]`.

The model (tests/ray/models.py: a small CNN or the BERT-like encoder, random weights) is exported to a `.cuv`
and its ONNX graph kept for ONNX Runtime. A dataset of --rows rows is materialized in the object store once;
then, round by round and in rotated order, the same batches go through:
- `inproc`: one loop in this process over the batches (cuvil.ray.Predictor, --workers threads);
- `cuvil`: `map_batches(cuvil.ray.Predictor, concurrency=--workers)`, one CPU and one thread per worker;
- `ort`: the same job with an ONNX Runtime session per worker (one intra-op thread per worker).
Each Ray job is timed end to end (actor start-up and model load included), and again less its start-up: the time
of the same job over one batch per worker (a consumer's view of "steady state" would mislead: Ray computes
ahead of the consumer and buffers). The ratios `cuvil / inproc` (goal >= 0.9: the engine's overhead within 10%)
and `cuvil / ort` (goal >= 1.2) are throughput ratios, medians over rounds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import ray

# cuvil.export of an ONNX model that the artifact cache hands back fails (AttributeError _consts, on main too):
# compile afresh; the kernel library cache still applies
os.environ.setdefault("CUVIL_ARTIFACT_CACHE", "0")
import cuvil  # noqa: E402
import cuvil.ray  # noqa: E402
from tests.ray import models  # noqa: E402


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


def build(which: str, folder: str, rows: int) -> tuple:
    """(.cuv path, ONNX bytes, columns of `rows` rows)."""
    blob = models.cnn() if which == "cnn" else models.bert()
    path = os.path.join(folder, f"{which}.cuv")
    cuvil.export(cuvil.load_onnx(blob).optimize(), path)
    columns = {"image": models.images(rows)} if which == "cnn" else models.tokens(rows)
    return path, blob, columns


def dataset(columns: dict, blocks: int):
    """The columns as a dataset materialized in the object store (from NumPy blocks: no per-row objects)."""
    names = list(columns)
    stacked = np.stack([columns[n] for n in names], 1)  # both models' columns share one dtype and row shape
    split = lambda b: {n: b["data"][:, i] for i, n in enumerate(names)}  # noqa: E731
    return ray.data.from_numpy(np.array_split(stacked, blocks)).map_batches(split).materialize()


def in_process(path: str, batches: list, threads: int) -> float:
    """Rows per second of one loop over the batches in this process."""
    predictor = cuvil.ray.Predictor(path, num_threads=threads)
    predictor(batches[0])  # the first call builds the functions: a worker does this at start-up too
    start = time.perf_counter()
    for b in batches:
        predictor(b)
    return sum(len(next(iter(b.values()))) for b in batches) / (time.perf_counter() - start)


def ray_job(ds, fn, kwargs: dict, workers: int, batch: int) -> float:
    """Seconds of one map_batches job, from the call to its last output row in this process."""
    start = time.perf_counter()
    out = ds.map_batches(fn, fn_constructor_kwargs=kwargs, compute=ray.data.ActorPoolStrategy(size=workers),
                         num_cpus=1, batch_size=batch)
    for _ in out.iter_batches(batch_size=None, batch_format="numpy"):
        pass
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="cnn", choices=["cnn", "bert"])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ray.data.DataContext.get_current().enable_progress_bars = False
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as folder:
        path, blob, columns = build(args.model, folder, args.rows)
        batches = [{k: v[i:i + args.batch] for k, v in columns.items()} for i in range(0, args.rows, args.batch)]
        ds = dataset(columns, 4 * args.workers)
        tiny = dataset({k: v[:args.workers * args.batch] for k, v in columns.items()}, args.workers)
        model_ref = cuvil.ray.put(path)
        jobs = {"cuvil": (cuvil.ray.Predictor, {"model": model_ref}), "ort": (OrtPredictor, {"model": blob})}
        runs = {"inproc": lambda: args.rows / in_process(path, batches, args.workers)}
        for name, (fn, kw) in jobs.items():
            runs[name] = lambda fn=fn, kw=kw: ray_job(ds, fn, kw, args.workers, args.batch)
            runs[f"{name}-startup"] = lambda fn=fn, kw=kw: ray_job(tiny, fn, kw, args.workers, args.batch)
        seconds = {name: [] for name in runs}
        for r in range(args.rounds):
            names = list(runs)[r % len(runs):] + list(runs)[:r % len(runs)]  # rotated: no peer always first
            for name in names:
                seconds[name].append(runs[name]())
            print(f"round {r + 1}: " + ", ".join(f"{n} {seconds[n][-1]:.2f} s" for n in runs), flush=True)
    report(args, seconds)
    ray.shutdown()


def report(args, seconds: dict) -> None:
    """Throughput ratios, medians over rounds: end to end, and with each engine's start-up (the median time of
    its job over one batch per worker: starting the actors and loading the model) taken off."""
    startup = {n: statistics.median(seconds[f"{n}-startup"]) for n in ("cuvil", "ort")}
    net = {n: [max(t - startup[n], 1e-9) for t in seconds[n]] for n in startup}

    def ratio(a: list, b: list) -> float:  # throughput of a / throughput of b, round by round
        return statistics.median(tb / ta for ta, tb in zip(a, b))

    print(f"\n{args.model}, {args.rows} rows, batch {args.batch}, {args.workers} workers, {args.rounds} rounds; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"  in-process loop {args.rows / statistics.median(seconds['inproc']):.0f} rows/s; start-up of a job: "
          f"cuvil {startup['cuvil']:.2f} s, ort {startup['ort']:.2f} s")
    for what, c, o in (("end to end", seconds["cuvil"], seconds["ort"]), ("less start-up", net["cuvil"], net["ort"])):
        print(f"  {what:13}  cuvil/inproc {ratio(c, seconds['inproc']):.3f} (goal >= 0.9)   "
              f"cuvil/ort {ratio(c, o):.3f} (goal >= 1.2)")


if __name__ == "__main__":
    main()
