"""How long `import cuvil` takes in a fresh interpreter, and that it loads no framework.

    python bench/import_time.py [--runs 15]

Reports the median and p90 wall time of `python -c "import cuvil"` minus `python -c "pass"`, and the
`-X importtime` cumulative figure for cuvil itself. Goal: under 150 ms.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time

import numpy as np

HEAVY = ("torch", "jax", "onnx", "onnxruntime", "tensorflow")


def wall(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    runs = ap.parse_args().runs
    base, full = [], []
    for _ in range(runs):  # interleaved so noise hits both alike
        base.append(wall("pass"))
        full.append(wall("import cuvil"))
    delta = np.array(full) - np.median(base)
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import cuvil"], capture_output=True, text=True)
    cumulative = [int(m.group(1)) for m in re.finditer(r"\|\s+(\d+) \| cuvil$", out.stderr, re.M)]
    loaded = subprocess.run([sys.executable, "-c", "import cuvil, sys; print(' '.join(sorted(sys.modules)))"],
                            capture_output=True, text=True, check=True).stdout.split()
    heavy = [m for m in HEAVY if m in loaded]
    print(f"import cuvil: median {np.median(delta):.1f} ms, p90 {np.percentile(delta, 90):.1f} ms over {runs} runs "
          f"(interpreter start subtracted); -X importtime cumulative {cumulative[0] / 1e3 if cumulative else 0:.1f} ms")
    print(f"frameworks loaded by import cuvil: {heavy or 'none'}")


if __name__ == "__main__":
    main()
