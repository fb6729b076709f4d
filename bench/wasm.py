"""Cuvil's wasm32 module in Node.js against native Cuvil and against onnxruntime-web's wasm backend, one thread,
same model and inputs (issue 19's goals: wasm / native <= 2x, wasm / onnxruntime-web <= 0.5x).

    npm install --prefix bench            # onnxruntime-web, once (bench/package.json; node_modules stays untracked)
    python -m bench.wasm --rounds 15      # W1, W2 (MLP b1), a small CNN
    python -m bench.wasm --rounds 2 --calls 2 --only W2   # a smoke run

Native Cuvil runs in this process (`cuvil.load` of the x86-64 `.cuv`, one thread); cuvil.js and onnxruntime-web
run in one Node.js process (bench/wasm_node.mjs). Rounds alternate: native, then both Node peers (their order
alternating too). Every peer's output is checked against eager PyTorch's first. Reported: the median seconds per
call of each peer over all rounds, and the two ratios.
"""
from __future__ import annotations

import argparse
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
from bench.workloads import Built, matmul_workload, mlp_workload

HERE = Path(__file__).resolve().parent
WARM_UP_CALLS = 30
TOLERANCE = 2e-3  # max |peer - torch| / max |torch|, as bench/harness.py


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


def prepare(built: Built, folder: Path) -> dict:
    """The workload's x86-64 and wasm32 `.cuv`, its ONNX file, input and eager PyTorch reference."""
    module, (x,) = built.exported, built.inputs
    compiled = cuvil.compile(module, (x,))
    cuvil.export(compiled, folder / "cpu.cuv")
    cuvil.export(compiled, folder / "wasm.cuv", "wasm32")
    torch.onnx.export(module, (x,), str(folder / "model.onnx"), dynamo=False, opset_version=17)
    xn = np.ascontiguousarray(x.numpy(), np.float32)
    xn.tofile(folder / "x.bin")
    with torch.no_grad():
        ref = module(x).numpy()
    return {"x": xn, "ref": ref}


class NodePeers:
    """The Node.js process running cuvil.js and onnxruntime-web (bench/wasm_node.mjs)."""

    def __init__(self, folder: Path, shape: tuple):
        spec = {"cuv": str(folder / "wasm.cuv"), "onnx": str(folder / "model.onnx"), "out": str(folder / "out"),
                "input": {"file": str(folder / "x.bin"), "shape": list(shape)}}
        (folder / "spec.json").write_text(json.dumps(spec))
        self.proc = subprocess.Popen(["node", str(HERE / "wasm_node.mjs"), str(folder / "spec.json")],
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


def native_round(fn, x: np.ndarray, calls: int) -> list:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t)
    return times


def measure(key: str, rounds: int, calls: int) -> dict:
    name, build = WORKLOADS[key]
    with tempfile.TemporaryDirectory(prefix="cuvil-bench-wasm-") as tmp:
        folder = Path(tmp)
        data = prepare(build(), folder)
        art = cuvil.load(folder / "cpu.cuv")
        art.set_num_threads(1)
        native = art.function("main")
        node = NodePeers(folder, data["x"].shape)
        try:
            outs = node.ask("check")
            errors = {"native": error(np.asarray(native(data["x"])), data["ref"])}
            errors.update({p: error(np.fromfile(f, np.float32), data["ref"]) for p, f in outs.items()})
            bad = {p: e for p, e in errors.items() if not e <= TOLERANCE}
            if bad:
                raise AssertionError(f"{name}: outputs differ from PyTorch's: {bad}")
            times = {"native": [], "cuvil_wasm": [], "ort_web": []}
            # warm-up: V8 runs a module's functions in its baseline compiler first and moves the hot ones to
            # TurboFan in the background, which for the large unrolled kernels takes a few hundred calls' time
            native_round(native, data["x"], max(calls, WARM_UP_CALLS))
            node.ask(f"round {max(calls, WARM_UP_CALLS)}")
            for _ in range(rounds):
                times["native"] += native_round(native, data["x"], calls)
                answer = node.ask(f"round {calls}")
                times["cuvil_wasm"] += answer["cuvil"]
                times["ort_web"] += answer["ort"]
        finally:
            node.close()
            art.close()
    median = {p: float(np.median(t)) for p, t in times.items()}
    return {"workload": name, "median_s": median, "errors": errors,
            "wasm_over_native": median["cuvil_wasm"] / median["native"],
            "wasm_over_ort_web": median["cuvil_wasm"] / median["ort_web"]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=10, help="calls of each peer per round")
    parser.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if not (HERE / "node_modules" / "onnxruntime-web").exists():
        sys.exit("onnxruntime-web is missing: npm install --prefix bench")
    print(f"load: {os.getloadavg()[0]:.2f} (1-minute average); one thread everywhere", flush=True)
    results = []
    for key in args.only:
        r = measure(key, args.rounds, args.calls)
        results.append(r)
        m = r["median_s"]
        print(f"{r['workload']:24s} native {m['native'] * 1e3:8.3f} ms  cuvil wasm {m['cuvil_wasm'] * 1e3:8.3f} ms  "
              f"onnxruntime-web {m['ort_web'] * 1e3:8.3f} ms  wasm/native {r['wasm_over_native']:5.2f}x (goal <= 2)  "
              f"wasm/ort-web {r['wasm_over_ort_web']:5.2f}x (goal <= 0.5)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
