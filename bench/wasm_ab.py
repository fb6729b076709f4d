"""Two trees' wasm32 modules of one bench.wasm workload, interleaved in one Node.js process: this tree's (`new`) against
another checkout's (`old`, e.g. /work/main or a `git worktree` of a revision), both levels, one thread. Everything a
module holds counts (generated C, kernel library, layout choices): each tree exports the workload's `.cuv` with its
own cuvil (a child Python started in that tree). Rounds rotate the peers' order; reported are each peer's median
seconds per call and CPU seconds per call, and new/old at each level.

    python -m bench.wasm_ab --old /work/main --only CNN --rounds 7
    python -m bench.wasm_ab --old /work/main --only CNN --rounds 2 --calls 2 --warm-s 0.2   # a smoke run
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench.wasm import WORKLOADS, NodePeers, level_peers

HERE = Path(__file__).resolve().parent
# Run in the tree being measured (its cuvil and bench first on sys.path): the workload's input and wasm32 `.cuv`.
EXPORT = """import sys, numpy as np, cuvil
from bench.wasm import WORKLOADS
built = WORKLOADS[sys.argv[1]][1]()
cuvil.export(cuvil.compile(built.exported, built.inputs, target="wasm32"), sys.argv[2], "wasm32")
np.ascontiguousarray(built.inputs[0].numpy(), np.float32).tofile(sys.argv[3])
"""


def export_in(tree: Path, key: str, cuv: Path, x: Path, cache: Path) -> None:
    """`key`'s wasm32 `.cuv` and input exported by the cuvil of `tree` (its own compiled-kernel cache)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "CUVIL_CACHE_DIR": str(cache)}
    subprocess.run([sys.executable, "-c", EXPORT, key, str(cuv), str(x)], cwd=tree, env=env, check=True)


def measure(key: str, old: Path, rounds: int, calls: int, warm_s: float) -> dict:
    """{peer: (median seconds per call, median CPU seconds per call)} and the largest old/new output difference."""
    with tempfile.TemporaryDirectory(prefix="cuvil-wasm-ab-") as tmp:
        folder = Path(tmp)
        cache = Path(os.environ.get("CUVIL_CACHE_DIR", folder / "cache"))
        export_in(old, key, folder / "old.cuv", folder / "x.bin", cache / "ab-old")
        export_in(HERE.parent, key, folder / "new.cuv", folder / "x-new.bin", cache / "ab-new")
        x = np.fromfile(folder / "x.bin", np.float32)
        if not np.array_equal(x, np.fromfile(folder / "x-new.bin", np.float32)):
            raise AssertionError(f"{key}: the two trees build different inputs")
        shape = tuple(WORKLOADS[key][1]().inputs[0].shape)
        node = NodePeers(folder, shape, level_peers({" old": folder / "old.cuv", " new": folder / "new.cuv"}),
                         onnx=False)
        try:
            outs = {p: np.fromfile(f, np.float32) for p, f in node.ask("check").items()}
            node.ask(f"warm {warm_s}")
            times, cpu = {p: [] for p in outs}, {p: [] for p in outs}
            for _ in range(rounds):
                answer = node.ask(f"round {calls}")
                for p, c in answer.pop("cpu").items():
                    cpu[p].append(c)
                answer.pop("inside")
                for p, t in answer.items():
                    times[p] += t
        finally:
            node.close()
    ref = outs["wasm old"]
    diff = max(float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30)) for y in outs.values())
    return {"peers": {p: (float(np.median(times[p])), float(np.median(cpu[p]))) for p in times}, "diff": diff}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), default=["CNN"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10, help="calls of each peer per round")
    parser.add_argument("--warm-s", type=float, default=3.0, help="seconds each peer runs before timing")
    args = parser.parse_args(argv)
    print(f"load: {os.getloadavg()[0]:.2f} (1-minute average); one thread; old = {args.old}", flush=True)
    for key in args.only:
        r = measure(key, args.old.resolve(), args.rounds, args.calls, args.warm_s)
        p = r["peers"]
        print(f"{WORKLOADS[key][0]} (outputs differ by {r['diff']:.1e} of their largest):", flush=True)
        for level in ("wasm", "wasm relaxed"):
            (old, old_cpu), (new, new_cpu) = p[f"{level} old"], p[f"{level} new"]
            print(f"  {level:13s} old {old * 1e3:8.3f} ms  new {new * 1e3:8.3f} ms  new/old {new / old:5.2f} "
                  f"(CPU time {new_cpu / old_cpu:5.2f})", flush=True)


if __name__ == "__main__":
    main()
