"""Fused attention A/B on the transformer workloads: ONNX Runtime, OpenVINO, Cuvil, and Cuvil with FuseAttention
off (the scores through memory, as before cuvil_attention), interleaved in one process; medians over ONNX Runtime's.

`python -m bench.attention_ab [--only VITT,WHSP,LLAMA] [--rounds 15] [--threads 2]`
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
import time

from bench import peers as P
from bench.workloads import STANDARD

DEFAULT = "VITT,WHSP,LLAMA,VITB,W4,GPT2"


@contextlib.contextmanager
def attention_fusion_off():
    """FuseAttention matching nothing: the A side of the A/B (compiled inside, outside any timing)."""
    from cuvil.passes.attention import FuseAttention

    run = FuseAttention.run_on_operation
    FuseAttention.run_on_operation = lambda self, fn: False
    try:
        yield
    finally:
        FuseAttention.run_on_operation = run


def _cuvil(path: str, built):
    import cuvil

    with contextlib.redirect_stdout(io.StringIO()):
        model = cuvil.load_onnx(path).optimize()
    arrays = built.numpy_inputs
    return lambda: model(*arrays)[0]


def runners(built, path: str, threads: int) -> dict:
    ctx = P.Context(threads, lambda: path)
    out = {"ONNX Runtime": P.ort_session(path, built, ctx), "OpenVINO": P.openvino_request(path, built, ctx),
           "cuvil": _cuvil(path, built)}
    with attention_fusion_off():
        out["cuvil, attention unfused"] = _cuvil(path, built)
    return out


def measure(run_by_name: dict, rounds: int) -> dict:
    """Medians (ms) of `rounds` rounds, each peer once a round in turn after one warm-up call each."""
    times = {name: [] for name in run_by_name}
    for run in run_by_name.values():
        run()
    for _ in range(rounds):
        for name, run in run_by_name.items():
            t0 = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("CUVIL_ARTIFACT_CACHE", "0")  # a cached artifact would hide the pass being off
    keys = set(args.only.split(","))
    folder = tempfile.mkdtemp(prefix="cuvil-attention-ab-")
    print(f"load before: {os.getloadavg()[0]:.2f}")
    for w in (w for w in STANDARD if w.key in keys or w.name in keys):
        built = w.build()
        path = P.export_onnx(built.exported, built.inputs, os.path.join(folder, f"{w.key}.onnx"))
        medians = measure(runners(built, path, args.threads), args.rounds)
        base = medians["ONNX Runtime"]
        print(f"{w.name}: " + ", ".join(f"{n} {ms:.2f} ms ({ms / base:.2f})" for n, ms in medians.items()), flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
