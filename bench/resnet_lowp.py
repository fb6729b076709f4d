"""ResNet-18 at reduced precision against ONNX Runtime fp32, interleaved in one process (2 threads):
`python -m bench.resnet_lowp [rounds]`; `python -m bench.resnet_lowp stem [rounds]` times the int8 stem (3 -> 64
7x7 stride 2 on 224x224, uint8 out) unfolded on AMX against the direct VNNI kernel (path 3), and the uint8 pool.
A quick check of issue #15's ResNet-18 rows; the full table with the peers' own reduced precisions is
`python -m bench --only "W3 ResNet-18" --peers ...` (docs/precision.md).

Rows: ONNX Runtime fp32 and int8 (its quantize_static QDQ file, per-channel, 32 calibration inputs), Cuvil fp32,
bf16 (`optimize(precision="bf16")`) and int8 (`quantize_module`, static on the same 32 inputs: "cuvil int8" with the
kernels this CPU's int8 path picks, `kernels="auto"`; "cuvil int8 kernels" on the int8 kernels whatever the CPU);
each with its cosine similarity to ONNX Runtime fp32 on one fresh input and its median time as a ratio to ONNX
Runtime fp32 and to Cuvil fp32.
The order turns round every other round, and each ONNX Runtime call is followed by the harness's gap
(bench.harness.SPIN_GAP_S): its pool's threads spin after a call, and on 2 cores the runner straight after one ran
at half speed (Cuvil fp32 2.37x ORT fp32 in this script, 1.37x in the suite, which leaves the gap).
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time

import numpy as np

from bench.harness import SPIN_GAP_S

THREADS = 2


class _Context:
    """The part of bench.peers.Context the int8 file makers read."""

    def __init__(self, path: str):
        self.path, self.threads = path, THREADS

    def onnx_path(self) -> str:
        return self.path


def _ort(path: str):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = THREADS, 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return lambda x: sess.run(None, {name: x})[0]


def _runners(built, path: str) -> dict:
    import cuvil
    from bench import peers_int8
    from cuvil.compiler import compile_module
    from cuvil.quantize.int8 import quantize_module

    runners = {"ONNX Runtime fp32": _ort(path)}
    with contextlib.redirect_stdout(io.StringIO()):
        runners["ONNX Runtime int8"] = _ort(peers_int8._qdq_file(built, _Context(path)))
        for precision in ("fp32", "bf16"):
            model = cuvil.load_onnx(path).optimize(precision=precision)
            runners[f"cuvil {precision}"] = lambda x, m=model: _first(m(x))
        for name, kernels in (("cuvil int8", "auto"), ("cuvil int8 kernels", "int8")):
            exe = compile_module(quantize_module(cuvil.load_onnx(path).module, "int8",
                                                 peers_int8.calibration_inputs(built), kernels=kernels))
            runners[name] = lambda x, e=exe: _first(e(x))
    return runners


def _first(out) -> np.ndarray:
    return np.asarray(out[0] if isinstance(out, (list, tuple)) else out)


def _cosine(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main(rounds: int = 20) -> None:
    import torch

    from bench.workloads import ResNet18, vision_workload

    torch.set_num_threads(THREADS)
    os.environ.setdefault("CUVIL_NUM_THREADS", str(THREADS))
    built = vision_workload(ResNet18)
    path = os.path.join(tempfile.mkdtemp(prefix="cuvil-resnet-lowp-"), "resnet18.onnx")
    torch.onnx.export(built.module, tuple(built.inputs), path, dynamo=False)
    runners = _runners(built, path)
    x = np.random.default_rng(7).standard_normal(built.numpy_inputs[0].shape).astype(np.float32)
    ref = runners["ONNX Runtime fp32"](x)
    cosine = {k: _cosine(f(x), ref) for k, f in runners.items()}
    times = {k: [] for k in runners}
    for r in range(rounds):
        order = list(runners.items())
        for k, f in order if r % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            f(x)
            times[k].append(time.perf_counter() - t0)
            if k.startswith("ONNX Runtime"):
                time.sleep(SPIN_GAP_S)
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    print(f"ResNet-18 batch 1, {THREADS} threads, {rounds} rounds, load {os.getloadavg()[0]:.1f}")
    for k, v in med.items():
        print(f"  {k:18s} {v:8.2f} ms  ratio {v / med['ONNX Runtime fp32']:.2f}  to cuvil fp32 "
              f"{v / med['cuvil fp32']:.2f}  cosine {cosine[k]:.5f}")


def stem(rounds: int = 30) -> None:
    """The int8 stem on its two paths (unfolded on AMX: path 4; direct on VNNI: path 3) and the uint8 3x3 stride-2
    pool after it, interleaved, buffers allocated once, median CPU times (process time: on a loaded machine wall
    time mostly measures the wait for a core) and the ratio."""
    from cuvil.backends.cpu import kernels, kernels_int8 as k8

    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    w = rng.integers(-127, 128, (64, 3, 7, 7)).astype(np.int8)
    ws, bias = np.full(64, 0.01, np.float32), np.zeros(64, np.float32)
    lib, y = kernels.load(3), np.empty((1, 64, 112, 112), np.uint8)
    geom = k8.conv_geometry(x.shape, w.shape, y.shape, (2, 2), (1, 1), (3, 3, 3, 3))
    packed = k8.qconv_pack(w)
    scratch = kernels.aligned_empty(lib.cuvil_qconv_scratch_bytes(geom.ctypes.data), np.uint8)
    scratch[:] = 0
    pooled, pool_geom = np.empty((1, 64, 56, 56), np.uint8), np.array([112, 112, 56, 56, 3, 3, 2, 2, 1, 1, 1, 1])

    def conv():
        lib.cuvil_qconv(x.ctypes.data, 0, 0.02, 128, packed.ctypes.data, ws.ctypes.data, bias.ctypes.data, None,
                        0.0, 0, kernels.ACTIVATIONS["relu"], y.ctypes.data, 0.05, 0, geom.ctypes.data,
                        scratch.ctypes.data)

    def pool():
        lib.cuvil_max_pool_u8(y.ctypes.data, pooled.ctypes.data, 64, pool_geom.ctypes.data)

    paths = [p for p in (4, 3) if p <= k8.best_isa()]
    runs = [(p, conv) for p in paths] + [("pool", pool)]
    times = {k: [] for k, _ in runs}
    for r in range(rounds):
        for k, f in runs if r % 2 == 0 else runs[::-1]:
            with k8.isa(k if k != "pool" else 4):
                t0 = time.process_time()
                f()
                times[k].append(time.process_time() - t0)
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    print(f"int8 stem (CPU ms), {rounds} rounds, load {os.getloadavg()[0]:.1f}: " + ", ".join(
        f"path {p} {med[p]:.3f} ms" for p in paths) + f", uint8 pool {med['pool']:.3f} ms")
    if len(paths) == 2:
        print(f"  unfolded / direct: {med[4] / med[3]:.2f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["stem"]:
        stem(int(sys.argv[2]) if len(sys.argv) > 2 else 30)
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
