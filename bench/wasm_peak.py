"""The multiply-add peak of one thread: native (the host's widest vectors, `-march=native`) against wasm32 in Node.js
(SIMD128's 4 lanes, mul + add; relaxed-SIMD's f32x4.relaxed_madd), the bound on bench/wasm.py's compute-bound
ratios (W1, the CNN): a wasm GEMM can run no closer to native than the ratio of these peaks.

    python -m bench.wasm_peak --seconds 1

One C loop, 12 independent chains of `acc = acc * m + a` on the target's vector type (enough to cover an FMA's
latency on two ports), is compiled three ways: by the host compiler into a shared library (ctypes), and by zig's
clang into a freestanding wasm32 module with and without -mrelaxed-simd. Each runs for about `--seconds` per round,
rounds alternating; reported: the best round's GFLOP/s of CPU time (each process's own; the machine's load
disturbs wall time more), and the native / wasm ratios.
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
"""
NODE = r"""
import { readFileSync } from "node:fs";
const [path, steps, rounds] = process.argv.slice(2);
const { instance } = await WebAssembly.instantiate(readFileSync(path), {});
const { peak, lanes } = instance.exports;
peak(10000n, 0.999, 0.001);
const best = [];
for (let r = 0; r < Number(rounds); r++) {
  const c0 = process.cpuUsage();
  peak(BigInt(steps), 0.999, 0.001);
  const c = process.cpuUsage(c0);
  best.push((c.user + c.system) / 1e6);
}
console.log(JSON.stringify({ lanes: lanes(), cpu_s: Math.min(...best) }));
"""


def _native(folder: Path):
    """The loop built by the host compiler (-O2 -march=native), as a ctypes function."""
    so = folder / "peak.so"
    cc = toolchain.compiler_path()
    subprocess.run([cc, "-O2", "-march=native", "-ffp-contract=fast", f"-DCHAINS={CHAINS}", "-shared", "-fPIC",
                    "-x", "c", "-", "-o", str(so)], input=SOURCE, text=True, check=True)
    lib = ctypes.CDLL(str(so))
    lib.peak.argtypes, lib.peak.restype = (ctypes.c_int64, ctypes.c_float, ctypes.c_float), ctypes.c_float
    return lib


def _wasm(folder: Path, relaxed: bool) -> Path:
    """The loop as a freestanding wasm32 module exporting `peak` and `lanes`."""
    out = folder / ("relaxed.wasm" if relaxed else "simd128.wasm")
    subprocess.run([sys.executable, "-m", "ziglang", "cc", "-target", "wasm32-freestanding", "-O2", "-msimd128",
                    *(["-mrelaxed-simd"] if relaxed else []), "-ffp-contract=fast", f"-DCHAINS={CHAINS}",
                    "-nostdlib", "-Wl,--no-entry", "-Wl,--export=peak", "-Wl,--export=lanes", "-x", "c", "-",
                    "-o", str(out)], input=SOURCE, text=True, check=True)
    return out


def _node_round(folder: Path, module: Path, steps: int, rounds: int) -> dict:
    script = folder / "peak.mjs"
    script.write_text(NODE)
    done = subprocess.run(["node", "--experimental-wasm-relaxed-simd", str(script), str(module), str(steps),
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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="about this long per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"load: {os.getloadavg()[0]:.2f} (1-minute average); one thread", flush=True)
    peaks = measure(args.seconds, args.rounds)
    native = next(iter(peaks.values()))
    for name, gflops in peaks.items():
        print(f"  {name:28s} {gflops:8.1f} GFLOP/s (CPU time)  native / this {native / gflops:5.2f}x", flush=True)


if __name__ == "__main__":
    main()
