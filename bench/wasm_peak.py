"""The multiply-add peak of one thread: native (the host's widest vectors, `-march=native`) against wasm32 in Node.js
(SIMD128's 4 lanes, mul + add; relaxed-SIMD's f32x4.relaxed_madd), the bound on bench/wasm.py's compute-bound
ratios (W1, the CNN): a wasm GEMM can run no closer to native than the ratio of these peaks.

    python -m bench.wasm_peak --seconds 1

One C loop, 12 independent chains of `acc = acc * m + a` on the target's vector type (enough to cover an FMA's
latency on two ports), is compiled three ways: by the host compiler into a shared library (ctypes), and by zig's
clang into a freestanding wasm32 module with and without -mrelaxed-simd. Each runs for about `--seconds` per round,
rounds alternating; reported: the best round's GFLOP/s of CPU time (each process's own; the machine's load
disturbs wall time more), and the native / wasm ratios.

The read bandwidth of one thread, the roof of the memory-bound ones (W2's batch-1 GEMVs stream 7.5 MB of weights a
call): a second loop sums a buffer of `--stream-mb` (8: W2's weights, which stay in a large L3 between calls) with 8
vector accumulators, natively and in each wasm32 module, and its best round's GB/s of CPU time is reported.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cuvil.backends.cpu import toolchain

CHAINS = 12
SOURCE = r"""
#include <stdint.h>
#if defined(__wasm_simd128__)
#define VL 4
#elif defined(__AVX512F__)
#define VL 16
#elif defined(__AVX__)
#define VL 8
#else
#define VL 4
#endif
typedef float vf __attribute__((vector_size(VL * 4)));
int lanes(void) { return VL; }
/* n steps of CHAINS independent multiply-adds on VL lanes: 2 * CHAINS * VL * n flops. */
float peak(int64_t n, float m, float a)
{
    vf acc[CHAINS];
    for (int j = 0; j < CHAINS; j++) acc[j] = (vf){0} + (float)j;
    vf mv = (vf){0} + m, av = (vf){0} + a;
    for (int64_t i = 0; i < n; i++)
#pragma GCC unroll 16
        for (int j = 0; j < CHAINS; j++) acc[j] = acc[j] * mv + av;
    vf s = (vf){0};
    for (int j = 0; j < CHAINS; j++) s += acc[j];
    float t = 0;
    for (int l = 0; l < VL; l++) t += s[l];
    return t;
}
/* n passes over STREAM_FLOATS floats (written once first, so that no page is the shared zero page): m * sum + a. */
static float stream_buf[STREAM_FLOATS] __attribute__((aligned(64)));
float stream(int64_t n, float m, float a)
{
    static int filled;
    for (int64_t i = 0; !filled && i < STREAM_FLOATS; i++) stream_buf[i] = (float)(i & 255) * 1e-3f;
    filled = 1;
    vf acc[8] = {{0}};
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i + 8 * VL <= STREAM_FLOATS; i += 8 * VL)
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) acc[j] += *(const vf *)(stream_buf + i + j * VL);
    for (int j = 1; j < 8; j++) acc[0] += acc[j];
    float t = 0;
    for (int l = 0; l < VL; l++) t += acc[0][l];
    return m * t + a;
}
"""
NODE = r"""
import { readFileSync } from "node:fs";
const [path, name, steps, rounds] = process.argv.slice(2);
const { instance } = await WebAssembly.instantiate(readFileSync(path), {});
const { lanes } = instance.exports, run = instance.exports[name];
run(BigInt(Math.min(Number(steps), 10000)), 0.999, 0.001);
const best = [];
for (let r = 0; r < Number(rounds); r++) {
  const c0 = process.cpuUsage();
  run(BigInt(steps), 0.999, 0.001);
  const c = process.cpuUsage(c0);
  best.push((c.user + c.system) / 1e6);
}
console.log(JSON.stringify({ lanes: lanes(), cpu_s: Math.min(...best) }));
"""


def _defines(stream_mb: float) -> list:
    return [f"-DCHAINS={CHAINS}", f"-DSTREAM_FLOATS={int(stream_mb * 2**20) // 4}"]


def _native(folder: Path, stream_mb: float = 8.0):
    """The loop built by the host compiler (-O2 -march=native), as a ctypes function."""
    so = folder / "peak.so"
    cc = toolchain.compiler_path()
    subprocess.run([cc, "-O2", "-march=native", "-ffp-contract=fast", *_defines(stream_mb), "-shared", "-fPIC",
                    "-x", "c", "-", "-o", str(so)], input=SOURCE, text=True, check=True)
    lib = ctypes.CDLL(str(so))
    for fn in (lib.peak, lib.stream):
        fn.argtypes, fn.restype = (ctypes.c_int64, ctypes.c_float, ctypes.c_float), ctypes.c_float
    return lib


def _wasm(folder: Path, relaxed: bool, stream_mb: float = 8.0) -> Path:
    """The loop as a freestanding wasm32 module exporting `peak` and `lanes`."""
    out = folder / ("relaxed.wasm" if relaxed else "simd128.wasm")
    subprocess.run([sys.executable, "-m", "ziglang", "cc", "-target", "wasm32-freestanding", "-O2", "-msimd128",
                    *(["-mrelaxed-simd"] if relaxed else []), "-ffp-contract=fast", *_defines(stream_mb),
                    "-nostdlib", "-Wl,--no-entry", *(f"-Wl,--export={f}" for f in ("peak", "stream", "lanes")),
                    "-x", "c", "-",
                    "-o", str(out)], input=SOURCE, text=True, check=True)
    return out


def _node_round(folder: Path, module: Path, steps: int, rounds: int, name: str = "peak") -> dict:
    script = folder / "peak.mjs"
    script.write_text(NODE)
    done = subprocess.run(["node", "--experimental-wasm-relaxed-simd", str(script), str(module), name, str(steps),
                           str(rounds)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def measure(seconds: float, rounds: int) -> dict:
    """{name: GFLOP/s of CPU time, best of `rounds`}: native first, then wasm32 SIMD128 and relaxed-SIMD."""
    with tempfile.TemporaryDirectory(prefix="cuvil-bench-wasm-peak-") as tmp:
        folder = Path(tmp)
        lib = _native(folder)
        lanes = lib.lanes()
        steps = max(1, int(seconds * 3e9 / CHAINS))  # about `seconds` at one step per chain and cycle
        best = float("inf")
        for _ in range(rounds):
            c0 = time.process_time()
            lib.peak(steps, 0.999, 0.001)
            best = min(best, time.process_time() - c0)
        peaks = {f"native ({lanes} lanes)": 2 * CHAINS * lanes * steps / max(best, 1e-9) / 1e9}
        for relaxed in (False, True):
            r = _node_round(folder, _wasm(folder, relaxed), steps, rounds)
            peaks[f"wasm {'relaxed-SIMD' if relaxed else 'SIMD128'} ({r['lanes']} lanes)"] = (
                2 * CHAINS * r["lanes"] * steps / max(r["cpu_s"], 1e-9) / 1e9)
    return peaks


def measure_stream(seconds: float, rounds: int, stream_mb: float = 8.0) -> dict:
    """{name: GB/s of CPU time reading a `stream_mb` buffer, best of `rounds`}: native, wasm32 SIMD128, relaxed-SIMD."""
    nbytes = int(stream_mb * 2**20) // 4 * 4
    passes = max(1, int(seconds * 20e9 / nbytes))  # about `seconds` at 20 GB/s
    with tempfile.TemporaryDirectory(prefix="cuvil-bench-wasm-stream-") as tmp:
        folder = Path(tmp)
        lib = _native(folder, stream_mb)
        lib.stream(1, 1.0, 0.0)
        best = float("inf")
        for _ in range(rounds):
            c0 = time.process_time()
            lib.stream(passes, 1.0, 0.0)
            best = min(best, time.process_time() - c0)
        rates = {f"native ({lib.lanes()} lanes)": passes * nbytes / max(best, 1e-9) / 1e9}
        for relaxed in (False, True):
            r = _node_round(folder, _wasm(folder, relaxed, stream_mb), passes, rounds, "stream")
            rates[f"wasm {'relaxed-SIMD' if relaxed else 'SIMD128'} ({r['lanes']} lanes)"] = (
                passes * nbytes / max(r["cpu_s"], 1e-9) / 1e9)
    return rates


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="about this long per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stream-mb", type=float, default=8.0, help="the read-bandwidth loop's buffer, MiB")
    args = parser.parse_args(argv)
    print(f"load: {os.getloadavg()[0]:.2f} (1-minute average); one thread", flush=True)
    peaks = measure(args.seconds, args.rounds)
    native = next(iter(peaks.values()))
    for name, gflops in peaks.items():
        print(f"  {name:28s} {gflops:8.1f} GFLOP/s (CPU time)  native / this {native / gflops:5.2f}x", flush=True)
    rates = measure_stream(args.seconds, args.rounds, args.stream_mb)
    native = next(iter(rates.values()))
    print(f"reading {args.stream_mb:g} MiB:", flush=True)
    for name, gbs in rates.items():
        print(f"  {name:28s} {gbs:8.1f} GB/s (CPU time)      native / this {native / gbs:5.2f}x", flush=True)


if __name__ == "__main__":
    main()
