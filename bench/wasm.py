"""Cuvil's wasm32 module in Node.js against native Cuvil and against onnxruntime-web's wasm backend, one thread,
same model and inputs (issue 19's goals: wasm / native <= 2x, wasm / onnxruntime-web <= 0.5x).

    npm install --prefix bench            # onnxruntime-web, once (bench/package.json; node_modules stays untracked)
    python -m bench.wasm --rounds 15      # W1, W2 (MLP b1), a small CNN
    python -m bench.wasm --rounds 2 --calls 2 --only W2   # a smoke run
    python -m bench.wasm --only W1 --gemm-blocks 4x2 6x2 4x3 --rounds 7   # the GEMM's register block, measured
    python -m bench.wasm --only CNN --gemm-blocks 4x2w4 4x2w6 --rounds 7   # ... and the convolution's strip

The model is compiled for wasm32 (4-lane convolution blocks) and exported with both levels; Node.js runs with
relaxed-SIMD on (Node.js 20's flag), and cuvil.js runs each level as its own peer: `wasm` (SIMD128, what an engine
without relaxed-SIMD gets) and `wasm relaxed` (its FMA). onnxruntime-web's one build is SIMD128 (it validates without
relaxed-SIMD). Native Cuvil runs in this process (`cuvil.load` of the x86-64 `.cuv`, one thread: the CPU time it
takes per wall second is reported, 1.0 for one thread); cuvil.js and onnxruntime-web run in one Node.js process
(bench/wasm_node.mjs). Rounds alternate: native, then the Node peers (their order rotating). Every peer's output
is checked against eager PyTorch's first. Reported: the median seconds per call of each peer over all rounds, and
the ratios; and the same ratios of CPU time per call (each process's own, which a loaded machine disturbs less than
wall time; on a quiet one they agree). `--gemm-blocks` exports one file per GEMM register block (MR x NV, both
levels) and times those.

The roofline (issue 19: is a workload compute-, memory- or overhead-bound?): each workload's FLOPs per call (2 per
multiply-add of its matmuls and convolutions, torch's FlopCounterMode) and compulsory bytes (weights, inputs,
outputs: what a call must read or write at least), each peer's GFLOP/s and GB/s of CPU time, and with `--peak` the
shares of its level's multiply-add peak and read bandwidth (bench/wasm_peak.py; onnxruntime-web's are SIMD128's).
`in entry` is the share of a cuvil.js call spent inside the module's entry; the rest is cuvil.js's (checks, copies,
allocations).

    python -m bench.wasm --rounds 7 --peak   # the ratios and the roofline
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import cuvil
from cuvil.backends.cpu import targets
from bench import wasm_peak
from bench.workloads import Built, matmul_workload, mlp_workload

HERE = Path(__file__).resolve().parent
WARM_UP_CALLS = 30
TOLERANCE = 2e-3  # max |peer - torch| / max |torch|, as bench/harness.py
RELAXED_FLAG = "--experimental-wasm-relaxed-simd"  # Node.js 20 (V8 11.3); on by default from Node.js 22


def small_cnn_workload(size: int = 64) -> Built:
    """A small image classifier: three 3x3 convolutions (32, 64, 64 channels) with ReLU and pooling, then a linear."""
    torch.manual_seed(5)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(64, 10))
    return Built(net, (torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(50)),))


WORKLOADS = {"W1": ("W1 matmul 1024x512x256", matmul_workload), "W2": ("W2 MLP b1", lambda: mlp_workload(1)),
             "CNN": ("small CNN 1x3x64x64", small_cnn_workload)}


def cost(built: Built) -> dict:
    """FLOPs (2 per multiply-add of matmuls and convolutions) and compulsory bytes (weights, inputs, output) a call."""
    from torch.utils.flop_counter import FlopCounterMode

    module = built.exported
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        y = module(*built.inputs)
    tensors = [*module.parameters(), *module.buffers(), *built.inputs, y]
    return {"flops": int(counter.get_total_flops()), "bytes": int(sum(t.numel() * t.element_size() for t in tensors))}


def peak_of(peer: str, peaks: dict) -> float | None:
    """The multiply-add peak (bench/wasm_peak.py's names) of the level `peer` runs at (onnxruntime-web: SIMD128)."""
    level = "native" if peer == "native" else "wasm relaxed-SIMD" if peer.startswith("wasm relaxed") else "wasm SIMD128"
    return next((g for name, g in peaks.items() if name.split(" (")[0] == level), None)


def roofline(r: dict, peaks: dict, rates: dict | None = None) -> dict:
    """{peer: {gflops, gbs, of_peak, of_rate}} from the CPU time per call: the shares of the level's multiply-add peak
    and of its read bandwidth (None without `peaks`, `rates`)."""
    rows = {}
    for peer, s in r["cpu_s"].items():
        gflops, gbs = r["cost"]["flops"] / s / 1e9, r["cost"]["bytes"] / s / 1e9
        peak, rate = peak_of(peer, peaks), peak_of(peer, rates or {})
        rows[peer] = {"gflops": gflops, "gbs": gbs, "of_peak": gflops / peak if peak else None,
                      "of_rate": gbs / rate if rate else None}
    return rows


def prepare(built: Built, folder: Path, blocks: list) -> dict:
    """The workload's x86-64 `.cuv`, its wasm32 ones (one per GEMM block, None: the table's), its ONNX file, input
    and eager PyTorch reference."""
    module, (x,) = built.exported, built.inputs
    cuvil.export(cuvil.compile(module, (x,)), folder / "cpu.cuv")
    for block in blocks:
        with gemm_block(block):
            cuvil.export(cuvil.compile(module, (x,), target="wasm32"), folder / f"wasm-{block}.cuv", "wasm32")
    torch.onnx.export(module, (x,), str(folder / "model.onnx"), dynamo=False, opset_version=17)
    xn = np.ascontiguousarray(x.numpy(), np.float32)
    xn.tofile(folder / "x.bin")
    with torch.no_grad():
        ref = module(x).numpy()
    return {"x": xn, "ref": ref}


@contextlib.contextmanager
def gemm_block(block: str | None):
    """The wasm32 rows with register block `block` ("MRxNV", or "MRxNVwW" with the convolution's strip of W pixels;
    None: as they are) inside the block."""
    if block is None:
        yield
        return
    saved = {n: targets.TABLE[n] for n in targets.FAMILIES["wasm32"]}
    gemm, _, strip = block.partition("w")
    mr, nv = map(int, gemm.split("x"))
    targets.TABLE.update({n: dataclasses.replace(r, gemm_block=(mr, nv), conv_strip=int(strip or r.conv_strip))
                          for n, r in saved.items()})
    try:
        yield
    finally:
        targets.TABLE.update(saved)


def level_peers(files: dict) -> dict:
    """wasm_node.mjs's cuvil peers: each `.cuv` of {label: path} at both levels (SIMD128, and the engine's best)."""
    peers = {}
    for label, cuv in files.items():
        peers[f"wasm{label}"] = {"cuv": str(cuv), "features": ["simd128"]}
        peers[f"wasm relaxed{label}"] = {"cuv": str(cuv), "features": None}
    return peers


class NodePeers:
    """The Node.js process running cuvil.js (each wasm file at each level) and onnxruntime-web (bench/wasm_node.mjs)."""

    def __init__(self, folder: Path, shape: tuple, cuvil_peers: dict, onnx: bool = True):
        spec = {"cuvil": cuvil_peers, "onnx": str(folder / "model.onnx") if onnx else None, "out": str(folder / "out"),
                "input": {"file": str(folder / "x.bin"), "shape": list(shape)}}
        (folder / "spec.json").write_text(json.dumps(spec))
        self.proc = subprocess.Popen(["node", RELAXED_FLAG, str(HERE / "wasm_node.mjs"), str(folder / "spec.json")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, line: str) -> dict:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"bench/wasm_node.mjs exited ({self.proc.wait()}) on {line!r}")
        return json.loads(answer)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def error(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(y.reshape(ref.shape) - ref).max() / max(np.abs(ref).max(), 1e-30))


def native_round(fn, x: np.ndarray, calls: int, cpu: list) -> list:
    """Seconds per call; appends (CPU seconds, wall seconds) of the round to `cpu` (their ratio: threads used)."""
    times, cpu0, wall0 = [], time.process_time(), time.perf_counter()
    for _ in range(calls):
        t = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t)
    cpu.append((time.process_time() - cpu0, time.perf_counter() - wall0))
    return times


def measure(key: str, rounds: int, calls: int, blocks: list, warm_s: float = 3.0) -> dict:
    name, build = WORKLOADS[key]
    with tempfile.TemporaryDirectory(prefix="cuvil-bench-wasm-") as tmp:
        folder = Path(tmp)
        built = build()
        data, work = prepare(built, folder, blocks), cost(built)
        art = cuvil.load(folder / "cpu.cuv")
        art.set_num_threads(1)
        native = art.function("main")
        files = {"" if b is None else f" {b}": folder / f"wasm-{b}.cuv" for b in blocks}
        node = NodePeers(folder, data["x"].shape, level_peers(files))
        try:
            outs = node.ask("check")
            levels = node.ask("levels")
            errors = {"native": error(np.asarray(native(data["x"])), data["ref"])}
            errors.update({p: error(np.fromfile(f, np.float32), data["ref"]) for p, f in outs.items()})
            bad = {p: e for p, e in errors.items() if not e <= TOLERANCE}
            if bad:
                raise AssertionError(f"{name}: outputs differ from PyTorch's: {bad}")
            times, cpu, cpu_per_call = {"native": [], **{p: [] for p in outs}}, [], {p: [] for p in outs}
            inside = {p: [] for p in outs if p != "ort"}
            # warm-up: V8 runs a module's functions in its baseline compiler first and moves the hot ones to
            # TurboFan in background threads, which for the large unrolled kernels takes a few hundred calls' time
            # (seconds on a loaded machine, whose CPU time would otherwise be charged to the first rounds' peers)
            native_round(native, data["x"], max(calls, WARM_UP_CALLS), [])
            node.ask(f"warm {warm_s}")
            for _ in range(rounds):
                times["native"] += native_round(native, data["x"], calls, cpu)
                answer = node.ask(f"round {calls}")
                for p, c in answer.pop("cpu").items():
                    cpu_per_call[p].append(c)
                for p, s in answer.pop("inside").items():
                    inside[p].append(s)
                for p, t in answer.items():
                    times[p] += t
        finally:
            node.close()
            art.close()
    median = {p: float(np.median(t)) for p, t in times.items()}
    cpu_s = {"native": float(np.median([c / calls for c, _ in cpu])), **{p: float(np.median(c))
                                                                         for p, c in cpu_per_call.items()}}
    in_entry = {p: float(np.mean(s)) / float(np.mean(times[p])) for p, s in inside.items()}  # the same calls' means
    return {"workload": name, "median_s": median, "cpu_s": cpu_s, "errors": errors, "levels": levels, "cost": work,
            "in_entry": in_entry,
            "cpu_over_native": {p: cpu_s[p] / cpu_s["native"] for p in cpu_s if p not in ("native", "ort")},
            "cpu_over_ort_web": {p: cpu_s[p] / cpu_s["ort"] for p in cpu_s if p not in ("native", "ort")},
            "native_threads": sum(c for c, _ in cpu) / sum(w for _, w in cpu),
            "over_native": {p: median[p] / median["native"] for p in median if p not in ("native", "ort")},
            "over_ort_web": {p: median[p] / median["ort"] for p in median if p not in ("native", "ort")}}


def print_roofline(r: dict, peaks: dict, rates: dict) -> None:
    r["roofline"] = roofline(r, peaks, rates)
    c = r["cost"]
    print(f"  roofline: {c['flops'] / 1e6:.2f} MFLOP and {c['bytes'] / 1e6:.2f} MB per call "
          f"({c['flops'] / c['bytes']:.1f} FLOP/byte); in CPU time:", flush=True)
    for p, row in r["roofline"].items():
        share = "" if row["of_peak"] is None else (f" ({100 * row['of_peak']:5.1f}% of its peak, "
                                                    f"{100 * row['of_rate']:5.1f}% of its read bandwidth)")
        entry = f", {100 * r['in_entry'][p]:5.1f}% of the call in the entry" if p in r["in_entry"] else ""
        print(f"    {p:22s} {row['gflops']:7.2f} GFLOP/s {row['gbs']:7.2f} GB/s{share}{entry}", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=10, help="calls of each peer per round")
    parser.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--gemm-blocks", nargs="*", default=[None], metavar="MRxNV",
                        help="the wasm32 GEMM's register blocks to compare, MRxNV[wW] with W the blocked "
                             "convolution's strip (default: the targets table's)")
    parser.add_argument("--warm-s", type=float, default=3.0, help="seconds each Node.js peer runs before timing")
    parser.add_argument("--peak", nargs="?", type=float, const=1.0, metavar="SECONDS",
                        help="also measure the multiply-add peaks (bench/wasm_peak.py, SECONDS a round, default 1) "
                             "and give each peer's share of its level's")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if not (HERE / "node_modules" / "onnxruntime-web").exists():
        sys.exit("onnxruntime-web is missing: npm install --prefix bench")
    print(f"load: {os.getloadavg()[0]:.2f} (1-minute average); one thread everywhere", flush=True)
    peaks = wasm_peak.measure(args.peak, rounds=3) if args.peak else {}
    rates = wasm_peak.measure_stream(args.peak, rounds=3) if args.peak else {}
    if peaks:
        print("peaks (CPU time): " + ", ".join(f"{n} {g:.1f} GFLOP/s" for n, g in peaks.items()), flush=True)
        print("reading 8 MiB (CPU time): " + ", ".join(f"{n} {g:.1f} GB/s" for n, g in rates.items()), flush=True)
    results = []
    for key in args.only:
        r = measure(key, args.rounds, args.calls, args.gemm_blocks, args.warm_s)
        results.append(r)
        m = r["median_s"]
        print(f"{r['workload']}: native {m['native'] * 1e3:.3f} ms ({r['native_threads']:.2f} CPU s per s), "
              f"onnxruntime-web {m['ort'] * 1e3:.3f} ms", flush=True)
        for p in r["over_native"]:
            print(f"  cuvil {p:20s} {m[p] * 1e3:8.3f} ms  ({r['levels'][p]:8s})  /native {r['over_native'][p]:5.2f}x "
                  f"(goal <= 2)  /onnxruntime-web {r['over_ort_web'][p]:5.2f}x (goal <= 0.5);  in CPU time "
                  f"{r['cpu_over_native'][p]:5.2f}x and {r['cpu_over_ort_web'][p]:5.2f}x", flush=True)
        print_roofline(r, peaks, rates)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
