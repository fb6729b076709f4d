"""Fixed cost and latency tails of a compiled call: Cuvil (ONNX route) against ONNX Runtime, interleaved in one process.

    python -m bench.overhead [--threads 2] [--calls 2000] [--rounds 5] [--gap-ms 20] [--gapped 500]

Two models, one ONNX graph each, built here: a chain of 8 (ReduceMax, Sub) pairs, 16 kernels in Cuvil.
- **fixed cost**: the chain on 8K floats (every kernel below the size worth a second thread): microseconds per call,
  the least disturbed of `rounds` interleaved batches of `calls` calls (as timeit reports).
- **tails**: the chain on 256K floats (every kernel threaded), one call every `gap_ms` milliseconds, `gapped`
  calls per peer alternately: median, p90, p99 and max, and p99 over the median. A thread pool whose workers have
  gone to sleep between calls shows here: a kernel that waits for a worker the scheduler has not woken.
Thread counts: `--threads` for both (CUVIL_NUM_THREADS and ORT's intra-op threads). The report prints `uptime`'s
load first: figures from a loaded machine mean little.
"""
from __future__ import annotations

import argparse
import os
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


def peers(n: int, threads: int) -> dict:
    """Peer name -> a call of no arguments on the chain of n floats, outputs checked against NumPy."""
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
    for name, call in out.items():
        got = call()
        got = got[0] if isinstance(got, (list, tuple)) else got
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5, err_msg=name)
    return out


def fixed_cost(threads: int, calls: int, rounds: int) -> dict:
    """Microseconds per call of the 16-kernel chain on 8K floats: the best of `rounds` interleaved batches."""
    return best_batch_us(peers(8192, threads), calls, rounds)


def tails(threads: int, gap_ms: float, calls: int) -> dict:
    """Per peer: latency percentiles (us) of calls `gap_ms` apart on the 256K-float chain, peers alternating."""
    todo = peers(1 << 18, threads)
    times: dict = {name: [] for name in todo}
    for call in todo.values():  # warm
        for _ in range(20):
            call()
    for _ in range(calls):
        for name, call in todo.items():
            time.sleep(gap_ms / 1e3)
            t0 = time.perf_counter()
            call()
            times[name].append((time.perf_counter() - t0) * 1e6)
    out = {}
    for name, ts in times.items():
        a = np.asarray(ts)
        med, p90, p99 = np.percentile(a, [50, 90, 99])
        out[name] = {"median": med, "p90": p90, "p99": p99, "max": a.max(), "p99/median": p99 / med}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=2000, help="calls per batch of the fixed-cost test")
    ap.add_argument("--rounds", type=int, default=5, help="batches per peer, interleaved")
    ap.add_argument("--gap-ms", type=float, default=20.0, help="milliseconds between calls of the tail test")
    ap.add_argument("--gapped", type=int, default=500, help="calls per peer in the tail test")
    args = ap.parse_args(argv)
    os.environ["CUVIL_NUM_THREADS"] = str(args.threads)
    print("load:", os.popen("uptime").read().strip())
    print(f"fixed cost, 16 kernels on 8K floats, {args.threads} threads, us per call (best batch of {args.calls}):")
    cost = fixed_cost(args.threads, args.calls, args.rounds)
    for name, us in cost.items():
        print(f"  {name:14s} {us:8.1f}")
    print(f"  cuvil / ONNX Runtime: {cost['cuvil'] / cost['ONNX Runtime']:.2f}x")
    print(f"tails, 16 kernels on 256K floats, calls {args.gap_ms:g} ms apart, {args.gapped} calls, us:")
    for name, row in tails(args.threads, args.gap_ms, args.gapped).items():
        print(f"  {name:14s} " + "  ".join(f"{k} {v:8.1f}" if k != "p99/median" else f"{k} {v:.2f}"
                                            for k, v in row.items()))


if __name__ == "__main__":
    main()
