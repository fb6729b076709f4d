"""The blocked convolution kernels of two revisions, layer by layer: `python -m bench.conv_ab [--base REV]`.

ResNet-18's convolutions (batch 1 at 224x224 and batch 32 at 64x64, pad k // 2, blocked input), MobileNetV2's
stem and 1x1 convs (with their relu6 epilogues) and EfficientNet-B0's (SiLU) through the kernel library's
`cuvil_conv_nchwc` / `cuvil_conv_winograd` as built from this worktree ("new") and from git revision `--base`
("old", default HEAD; with the headers of their epilogues), timed interleaved round by round in one process (2
threads unless CUVIL_NUM_THREADS says otherwise). Prints medians (or minima, --min), GFLOP/s, new/old ratios and the
largest difference between the two results relative to max |y|; a line per layer and the sum over each model's layers.
"""
import argparse
import ctypes
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from cuvil.backends.cpu import kernels, toolchain
from cuvil.ops.nn_blocked import block, pack_weight

# (channels in, channels out, kernel, stride, input size, batch, Winograd?) as the layout pass gives them (64x64:
# exported with a symbolic batch, as bench.ray does)
RESNET = {
    "224 b1": [(3, 64, 7, 2, 224, 1, 0), (64, 64, 3, 1, 56, 1, 1), (64, 128, 3, 2, 56, 1, 0),
               (128, 128, 3, 1, 28, 1, 1), (64, 128, 1, 2, 56, 1, 0), (128, 256, 3, 2, 28, 1, 0),
               (256, 256, 3, 1, 14, 1, 1), (128, 256, 1, 2, 28, 1, 0), (256, 512, 3, 2, 14, 1, 0),
               (512, 512, 3, 1, 7, 1, 0), (256, 512, 1, 2, 14, 1, 0)],
    "64 b32": [(3, 64, 7, 2, 64, 32, 0), (64, 64, 3, 1, 16, 32, 1), (64, 128, 3, 2, 16, 32, 0),
               (128, 128, 3, 1, 8, 32, 1), (64, 128, 1, 2, 16, 32, 0), (128, 256, 3, 2, 8, 32, 0),
               (256, 256, 3, 1, 4, 32, 0), (128, 256, 1, 2, 8, 32, 0), (256, 512, 3, 2, 4, 32, 0),
               (512, 512, 3, 1, 2, 32, 0), (256, 512, 1, 2, 4, 32, 0)],
    # MobileNetV2's stem and 1x1 convs (expand and project at each map size; 1x1 pads 0), an 8th field: the
    # CUVIL_ACT_* epilogue (6: relu6)
    "mnv2 224 b1": [(3, 32, 3, 2, 224, 1, 0, 6), (32, 16, 1, 1, 112, 1, 0), (16, 96, 1, 1, 112, 1, 0, 6),
                    (96, 24, 1, 1, 56, 1, 0), (24, 144, 1, 1, 56, 1, 0, 6), (144, 32, 1, 1, 28, 1, 0),
                    (192, 64, 1, 1, 14, 1, 0, 6), (384, 64, 1, 1, 14, 1, 0), (576, 160, 1, 1, 7, 1, 0),
                    (960, 320, 1, 1, 7, 1, 0), (320, 1280, 1, 1, 7, 1, 0, 6)],
    # EfficientNet-B0's stem and expand convs with their SiLU epilogues (7), and two projects
    "effb0 224 b1": [(3, 32, 3, 2, 224, 1, 0, 7), (16, 96, 1, 1, 112, 1, 0, 7), (96, 24, 1, 1, 56, 1, 0),
                     (24, 144, 1, 1, 56, 1, 0, 7), (40, 240, 1, 1, 28, 1, 0, 7), (80, 480, 1, 1, 14, 1, 0, 7),
                     (112, 672, 1, 1, 14, 1, 0, 7), (192, 1152, 1, 1, 7, 1, 0, 7), (320, 1280, 1, 1, 7, 1, 0, 7)],
}
# the units and the headers whose inline code they compile (the epilogues' activations)
SOURCES = ("conv_nchwc.c", "winograd.c", "cuvil_nchwc.h", "cuvil_simd.h", "cuvil_math.inc")
_SIG = [ctypes.c_void_p] * 6 + [ctypes.c_int]


def sources_at(rev: str, sources: tuple) -> tuple[Path, list]:
    """A folder holding the kernel headers of now and `sources` as of `rev`, and the names of those `rev` has (a
    source split off later is absent there)."""
    folder = Path(tempfile.mkdtemp(prefix="cuvil-ab-"))
    shutil.copytree(kernels.include_dir(), folder, dirs_exist_ok=True)
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True).stdout
    present = []
    for name in sources:
        path = (kernels.include_dir() / name).relative_to(top.strip())
        out = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True)
        (folder / name).unlink(missing_ok=True)
        if out.returncode == 0:
            (folder / name).write_text(out.stdout)
            present.append(name)
    return folder, present


def ab_line(med: dict, flops: float, old_out: np.ndarray, new_out: np.ndarray) -> str:
    """The columns every A/B script prints: each side's time and GFLOP/s, new/old, and the largest difference
    between the two results relative to the old result's largest magnitude."""
    err = float(np.abs(new_out - old_out).max() / max(np.abs(old_out).max(), 1e-30))
    return (f"old {med['old'] * 1e3:8.3f} ms ({flops / med['old'] / 1e9:5.0f} GFLOP/s)  new {med['new'] * 1e3:8.3f} ms"
            f" ({flops / med['new'] / 1e9:5.0f})  new/old {med['new'] / med['old']:5.2f}  diff {err:.1e}")


def old_units(rev: str, sources: tuple = SOURCES, units: tuple = ("conv_nchwc", "winograd")) -> dict:
    """{unit: ctypes library} of kernel `units` with their `sources` as of `rev`, compiled as the library compiles its
    own (the blocked conv units by default)."""
    folder, _ = sources_at(rev, sources)
    kernels.load()  # the core, RTLD_GLOBAL: the old units resolve their pool and helpers into it
    libs = {}
    for unit in units:
        level = min(3, kernels.UNIT_LEVELS.get(unit, 3))
        obj = toolchain.build_library(kernels.unit_source(unit), name=f"obj-ab-{unit}", include_dirs=[folder],
                                      flags=toolchain.object_flags(level), depends=[folder / n for n in sources])
        lib = ctypes.CDLL(str(toolchain.link_library([obj.path], name=f"ab-{unit}").path))
        libs[unit] = lib
    return libs


def _layer(lib, spec, rng) -> dict:
    cin, cout, k, stride, size, n, wino = spec[:7]
    b, pad = lib.cuvil_conv_nchwc_block(), k // 2
    out = (size + 2 * pad - k) // stride + 1
    lanes = min(b, cin)  # a first layer's narrow input: one block of its cin channels
    x = kernels.aligned_array(block(rng.standard_normal((n, cin, size, size)).astype(np.float32), lanes))
    w = kernels.aligned_array(pack_weight((rng.standard_normal((cout, cin, k, k)) / np.sqrt(k * k * cin))
                                          .astype(np.float32), lanes, b))
    ob, cb = w.shape[:2]
    if wino:
        u = kernels.aligned_empty(lib.cuvil_winograd_weight_size(ob, cb))
        lib.cuvil_winograd_weight(w.ctypes.data, ob, cb, u.ctypes.data)
        w = u
    bias = kernels.aligned_array(rng.standard_normal(ob * b))
    geom = np.array([n, cb, size, size, x.shape[-1], ob, out, out, k, k, stride, stride, pad, pad, 1, 1, 0], np.int64)
    return {"x": x, "w": w, "bias": bias, "geom": geom, "flops": 2 * k * k * cin * cout * out * out * n,
            "fn": "cuvil_conv_winograd" if wino else "cuvil_conv_nchwc", "shape": (n, ob, out, out, b),
            "act": spec[7] if len(spec) > 7 else 0}


def main(base: str, rounds: int, models: list, stat) -> None:
    new, old = kernels.load(), old_units(base)
    rng = np.random.default_rng(0)
    for model in models:
        specs = RESNET[model]
        total = {"old": 0.0, "new": 0.0}
        for spec in specs:
            layer = _layer(new, spec, rng)
            unit = "winograd" if layer["fn"] == "cuvil_conv_winograd" else "conv_nchwc"
            fns = {"new": getattr(new, layer["fn"]), "old": getattr(old[unit], layer["fn"])}
            fns["old"].argtypes, fns["old"].restype = _SIG, None
            ys = {k: kernels.aligned_empty(layer["shape"]) for k in fns}
            args = [layer[k].ctypes.data for k in ("x", "w", "bias")]
            times = {k: [] for k in fns}
            for r in range(rounds + 1):
                for kind in (("new", "old") if r % 2 else ("old", "new")):
                    t0 = time.perf_counter()
                    fns[kind](*args, None, ys[kind].ctypes.data, layer["geom"].ctypes.data, layer["act"])
                    if r:  # the first round warms caches and scratch buffers
                        times[kind].append(time.perf_counter() - t0)
            med = {k: float(stat(v)) for k, v in times.items()}
            total = {k: total[k] + med[k] for k in total}
            cin, cout, k, stride, size, n, wino = spec[:7]
            print(f"{model} {cin:3d}->{cout:3d} k{k} s{stride} {size:3d}x{size:<3d} {'wino' if wino else 'direct'}: "
                  + ab_line(med, layer["flops"], ys["old"], ys["new"]))
        print(f"{model} all layers once: old {total['old'] * 1e3:.2f} ms, new {total['new'] * 1e3:.2f} ms, "
              f"new/old {total['new'] / total['old']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="HEAD", help="the git revision of the old kernels")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--model", action="append", choices=list(RESNET), help="one of the layer sets (default all)")
    parser.add_argument("--min", action="store_true", help="the fastest round instead of the median (a loaded machine)")
    args = parser.parse_args()
    main(args.base, args.rounds, args.model or list(RESNET), np.min if args.min else np.median)
