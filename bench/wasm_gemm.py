"""The wasm32 GEMM alone, by variant: this tree's gemm.c built for both wasm32 rows with `-D` overrides (register
block, block sizes), called on W1's shape (1024x512 @ 512x256, B pre-packed) from one Node.js process, variants
interleaved round by round. What bench/wasm.py's W1 holds besides the GEMM (cuvil.js, copies) stays out, so the
kernel's GFLOP/s compare with bench/wasm_peak.py's multiply-add peak directly.

    python -m bench.wasm_gemm --variants "" CUVIL_MR=3,CUVIL_NV=3 CUVIL_MR=6,CUVIL_NV=2 --rounds 7

Each variant's largest error against a float64 product of sampled entries is printed first; reported: the median
CPU seconds per call (Node.js's own process.cpuUsage) and GFLOP/s of CPU time.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

from bench.wasm import RELAXED_FLAG
from cuvil.backends.cpu import backend, kernels, targets, wasm

SHAPE = (1024, 256, 512)  # M, N, K
DRIVER = r"""
#include <stdint.h>
#include <stdlib.h>
#include "cuvil_kernels.h"
static float *A, *B, *P, *C;
static int64_t gM, gN, gK;
__attribute__((export_name("setup"))) void setup(int M, int N, int K)
{
    gM = M, gN = N, gK = K;
    A = aligned_alloc(64, 4 * M * K), B = aligned_alloc(64, 4 * K * N), C = aligned_alloc(64, 4 * M * N);
    P = aligned_alloc(64, 4 * cuvil_sgemm_packed_size(K, N));
    uint32_t s = 1;
    for (int64_t i = 0; i < M * K; i++) s = s * 1664525u + 1013904223u, A[i] = (int)(s >> 20) / 4096.0f - 0.5f;
    for (int64_t i = 0; i < K * N; i++) s = s * 1664525u + 1013904223u, B[i] = (int)(s >> 20) / 4096.0f - 0.5f;
    cuvil_sgemm_pack_b_serial(K, N, B, N, 1, P);
}
__attribute__((export_name("run"))) void run(int calls)
{
    for (int i = 0; i < calls; i++) cuvil_sgemm_packed_serial(gM, gN, gK, 1.0f, A, gK, 1, P, 0.0f, C, gN, 0, 0);
}
__attribute__((export_name("error"))) double error(void)
{
    double worst = 0;
    for (int64_t i = 0; i < gM; i += 37)
        for (int64_t j = 0; j < gN; j += 7) {
            double s = 0;
            for (int64_t k = 0; k < gK; k++) s += (double)A[i * gK + k] * B[k * gN + j];
            const double d = s > C[i * gN + j] ? s - C[i * gN + j] : C[i * gN + j] - s;
            worst = d > worst ? d : worst;
        }
    return worst;
}
"""
NODE = r"""
import { readFileSync } from "node:fs";
const [M, N, K] = JSON.parse(process.argv[2]), [rounds, calls, warmS] = process.argv.slice(3, 6).map(Number);
const peers = [];
for (const f of process.argv.slice(6)) {
  const { instance } = await WebAssembly.instantiate(readFileSync(f),
    { wasi_snapshot_preview1: new Proxy({}, { get: () => () => 0 }) });
  instance.exports._initialize();
  instance.exports.setup(M, N, K);
  const end = performance.now() + 1000 * warmS; // V8's tier-up to TurboFan stays out of the timing
  while (performance.now() < end) instance.exports.run(1);
  peers.push({ f, e: instance.exports, t: [], error: instance.exports.error() });
}
for (let r = 0; r < rounds; r++)
  for (let q = 0; q < peers.length; q++) {
    const p = peers[(q + r) % peers.length], c0 = process.cpuUsage();
    p.e.run(calls);
    const c = process.cpuUsage(c0);
    p.t.push((c.user + c.system) / 1e6 / calls);
  }
const median = (t) => t.sort((a, b) => a - b)[t.length >> 1];
console.log(JSON.stringify(peers.map((p) => ({ f: p.f, error: p.error, cpu: median(p.t) }))));
"""


def build(folder: Path, row, defines: list, name: str) -> Path:
    """A WASI reactor of gemm.c's units and the driver for `row`, with `-D` overrides `defines`."""
    lib = folder / f"{name}.c"
    lib.write_text('#include "cuvil_internal.h"\n' + "".join(
        f'#include "{s}"\n' for s in ("cuvil_pool.c", "gemm.c", "gemm_kernel.c", "gemm_epilogue.c")))
    (folder / "driver.c").write_text(DRIVER)
    out = folder / f"{name}.wasm"
    includes = (wasm.include_dir(), kernels.include_dir(), backend.runtime_dir())
    subprocess.run([*wasm.COMPILER, "-target", wasm.TRIPLE, "-mexec-model=reactor", "-O3", *wasm.COMPILE_FLAGS[2:],
                    *wasm.machine_flags(row), *(f"-D{d}" for d in defines), *(f"-I{d}" for d in includes),
                    str(lib), str(folder / "driver.c"), "-o", str(out), "-lm", "-Wl,-z,stack-size=1048576"],
                   check=True, capture_output=True)
    return out


def measure(variants: list, rounds: int, calls: int, shape: tuple = SHAPE, warm_s: float = 1.0) -> list:
    """[(variant, level, median CPU seconds per call, largest error)] of each variant at both wasm32 levels."""
    with tempfile.TemporaryDirectory(prefix="cuvil-wasm-gemm-") as tmp:
        folder, modules = Path(tmp), {}
        for k, variant in enumerate(variants):
            defines = [d for d in variant.split(",") if d]
            for level in ("wasm32", "wasm32-relaxed"):
                module = build(folder, targets.get(level), defines, f"v{k}-{level}")
                modules[str(module)] = (variant or "default", level)
        done = subprocess.run(["node", RELAXED_FLAG, "--input-type=module", "-", json.dumps(shape), str(rounds),
                               str(calls), str(warm_s), *modules], input=NODE, capture_output=True, text=True,
                              check=True)
    return [(*modules[p["f"]], p["cpu"], p["error"]) for p in json.loads(done.stdout)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="*", default=[""], help="comma-separated NAME=VALUE defines, one a variant")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args(argv)
    print(f"load: {os.getloadavg()[0]:.2f} (1-minute average); one thread; M, N, K = {SHAPE}", flush=True)
    flops = 2 * SHAPE[0] * SHAPE[1] * SHAPE[2]
    for variant, level, cpu, error in measure(args.variants, args.rounds, args.calls):
        print(f"  {variant:28s} {level:15s} {cpu * 1e3:7.3f} ms CPU  {flops / cpu / 1e9:5.1f} GFLOP/s"
              f"  (error {error:.1e})", flush=True)


if __name__ == "__main__":
    main()
