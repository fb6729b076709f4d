"""The pool's caller policy A/B on bench.overhead's gapped calls: `python -m bench.pool_ab [--pairs 3] [--gapped 500]
[--gap-ms 20] [--threads 2] [--wait-spin-us 1000000000]`.

The pool reads CUVIL_WAIT_SPIN_US once, when it starts, so each variant runs in a fresh process, the variants
alternating (rotated order, `--pairs` times): `new`, the default (the caller spins for a worker's chunk about twice
its own chunks' time, then sleeps), and `spin`, CUVIL_WAIT_SPIN_US=`--wait-spin-us` (it spins, as the pool did before
it slept). Each child runs bench.overhead's tail test (Cuvil and ONNX Runtime interleaved, calls `--gap-ms` apart).
Reported: per variant the medians over its runs of Cuvil's median, p99, p99/median (goal <= 1.5) and p99 over ONNX
Runtime's p99 in the same run (goal <= 1.0), and new/spin ratios of those medians. `uptime`'s load is printed first.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = ("import json, sys; from bench.overhead import tails; "
         "print(json.dumps(tails(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]))[0]))")


def run(variant: str, args) -> dict:
    """One child's tails: {peer: {median, p90, p99, max, p99/median}}."""
    env = {**os.environ, "CUVIL_NUM_THREADS": str(args.threads), "PYTHONPATH": ROOT}
    env.pop("CUVIL_WAIT_SPIN_US", None)
    if variant == "spin":
        env["CUVIL_WAIT_SPIN_US"] = str(args.wait_spin_us)
    argv = [sys.executable, "-c", CHILD, str(args.threads), str(args.gap_ms), str(args.gapped)]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode:
        raise RuntimeError(f"bench.pool_ab's child ({variant}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def figures(row: dict) -> dict:
    cuvil, ort = row["cuvil"], row["ONNX Runtime"]
    return {"median": cuvil["median"], "p99": cuvil["p99"], "p99/median": cuvil["p99/median"],
            "p99/ORT p99": cuvil["p99"] / ort["p99"]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.pool_ab", description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--gapped", type=int, default=500, help="calls per peer in each child")
    ap.add_argument("--gap-ms", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--wait-spin-us", type=int, default=1_000_000_000, help="the `spin` variant's CUVIL_WAIT_SPIN_US")
    args = ap.parse_args(argv)
    print("load:", os.popen("uptime").read().strip())
    got: dict = {"new": [], "spin": []}
    for i in range(args.pairs):
        for variant in (("new", "spin") if i % 2 == 0 else ("spin", "new")):
            got[variant].append(figures(run(variant, args)))
            print(f"pair {i + 1} {variant:4s} " + "  ".join(f"{k} {v:.2f}" for k, v in got[variant][-1].items()),
                  flush=True)
    med = {v: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for v, rows in got.items()}
    for variant, row in med.items():
        print(f"median {variant:4s} " + "  ".join(f"{k} {v:.2f}" for k, v in row.items()))
    print("new / spin: " + "  ".join(f"{k} {med['new'][k] / med['spin'][k]:.3f}" for k in med["new"]))
    print("load:", os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
