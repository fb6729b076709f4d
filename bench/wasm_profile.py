"""Where a wasm32 module's time goes, function by function: bench/wasm.py's workloads exported with their function
names kept (CUVIL_WASM_NAMES=1), called through cuvil.js in Node.js under V8's sampling profiler (the inspector's,
started after a second of warm-up calls), one thread, and the samples' self time summed by function (the kernels of
gemm.c, the conv and loop kernels, cuvil.js's JavaScript, V8's own work).

    python -m bench.wasm_profile --only W2 --seconds 5          # SIMD128 and relaxed-SIMD, the 12 busiest functions
    python -m bench.wasm_profile --only CNN --seconds 2 --top 20

A function inlined by clang (gemm.c's row kernel into its driver) counts as its caller.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from unittest import mock

import numpy as np

import cuvil
from bench.wasm import RELAXED_FLAG, WORKLOADS
from cuvil.backends.cpu import wasm

HERE = Path(__file__).resolve().parent
NODE = r"""
import { readFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { load } from "CUVIL_JS";
const [cuv, x, shape, features, seconds] = process.argv.slice(2);
const art = await load(readFileSync(cuv), { features: features.split(",") });
const raw = readFileSync(x);
const data = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
const fn = art.function("main"), input = [{ data, shape: JSON.parse(shape) }];
const callFor = (s) => {
  let n = 0;
  for (const end = performance.now() + 1000 * s; performance.now() < end; n++) fn.run(input);
  return n;
};
callFor(Math.min(1, Number(seconds))); // load, prepare and V8's tier-up to TurboFan stay out of the profile
const session = new Session();
session.connect();
await session.post("Profiler.enable");
await session.post("Profiler.start");
const calls = callFor(Number(seconds));
const { profile } = await session.post("Profiler.stop");
console.log(JSON.stringify({ calls, native: art.native, profile }));
"""
LEVELS = {"SIMD128": "simd128", "relaxed-SIMD": "simd128,relaxed_simd"}


def export_named(key: str, folder: Path) -> tuple:
    """The workload's wasm32 `.cuv` with function names, and its input file and shape."""
    built = WORKLOADS[key][1]()
    module, (x,) = built.exported, built.inputs
    with mock.patch.dict(os.environ, {wasm.NAMES_VARIABLE: "1"}):
        cuvil.export(cuvil.compile(module, (x,), target="wasm32"), folder / f"{key}.cuv", "wasm32")
    np.ascontiguousarray(x.numpy(), np.float32).tofile(folder / f"{key}.x.bin")
    return folder / f"{key}.cuv", folder / f"{key}.x.bin", list(x.shape)


def self_times(profile: dict) -> Counter:
    """{function name: seconds of samples in it, not in its callees} of a V8 .cpuprofile."""
    interval = {}
    for node_id, delta in zip(profile["samples"], profile["timeDeltas"][1:] + [0]):
        interval[node_id] = interval.get(node_id, 0) + delta
    times = Counter()
    for node in profile["nodes"]:
        frame = node["callFrame"]
        times[frame["functionName"] or f"({frame['url'] or 'anonymous'})"] += interval.get(node["id"], 0) / 1e6
    return times


def profile_level(cuv: Path, x: Path, shape: list, features: str, seconds: float, folder: Path) -> tuple:
    """(calls made, {function: self seconds}) of `seconds` of calls under V8's profiler."""
    script = folder / "profile.mjs"
    script.write_text(NODE.replace("CUVIL_JS", (HERE.parent / "cuvil" / "runtime" / "js" / "cuvil.js").as_uri()))
    done = subprocess.run(["node", RELAXED_FLAG, str(script), str(cuv), str(x), json.dumps(shape), features,
                           str(seconds)], capture_output=True, text=True, check=True)
    answer = json.loads(done.stdout)
    return answer["calls"], self_times(answer["profile"])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), default=["W2"])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of calls per level")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    print(f"load: {os.getloadavg()[0]:.2f} (1-minute average); one thread", flush=True)
    with tempfile.TemporaryDirectory(prefix="cuvil-bench-wasm-profile-") as tmp:
        folder = Path(tmp)
        for key in args.only:
            cuv, x, shape = export_named(key, folder)
            for level, features in LEVELS.items():
                calls, times = profile_level(cuv, x, shape, features, args.seconds, folder)
                total = sum(times.values())
                print(f"{WORKLOADS[key][0]}, {level}: {calls} calls, {1e3 * total / calls:.3f} ms sampled per call",
                      flush=True)
                for name, s in times.most_common(args.top):
                    print(f"  {100 * s / total:5.1f}%  {1e3 * s / calls:8.4f} ms  {name}", flush=True)


if __name__ == "__main__":
    main()
