"""bf16 / fp16 peers and routes (importing this module adds them to `peers.PEERS`); they run when `--peers` names them:

- OpenVINO bf16: the fp32 ONNX export with `INFERENCE_PRECISION_HINT` bf16 (OpenVINO picks its bf16 kernels where
  the CPU has them, AMX or AVX512_BF16).
- cuvil onnx bf16 / fp16: the same file through `cuvil.load_onnx(path).optimize(precision=...)`; cuvil torch bf16:
  `cuvil.compile(module, inputs, precision="bf16")` (docs/precision.md).
Outputs are checked against PyTorch fp32 with `FLOAT16_TOLERANCE`. The lead's run (quiet machine, 2 threads):

    python -m bench --only "W2 MLP b1,W3 ResNet-18,W4 BERT-base" --no-probes \\
        --peers "ONNX Runtime,OpenVINO,OpenVINO bf16,cuvil onnx,cuvil onnx bf16,cuvil onnx fp16"
"""
from __future__ import annotations

import contextlib
import io

from . import peers as P
from .workloads import Built

FLOAT16_TOLERANCE = 0.05  # max |peer - torch| / max |torch| for bf16 results (fp16 is well inside it)


def _openvino_bf16(b: Built, ctx: P.Context):
    import openvino as ov

    config = {"INFERENCE_NUM_THREADS": ctx.threads, "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "bf16"}
    request = ov.Core().compile_model(ctx.onnx_path(), "CPU", config).create_infer_request()
    feeds = dict(enumerate(b.numpy_inputs))

    def run():
        request.infer(feeds)
        return request.get_output_tensor(0).data
    return run


def _cuvil_onnx(precision: str):
    def prepare(b: Built, ctx: P.Context):
        import cuvil

        with contextlib.redirect_stdout(io.StringIO()):
            model = cuvil.load_onnx(ctx.onnx_path()).optimize(precision=precision)
        arrays = b.numpy_inputs
        return P._cuvil_runner(model, arrays, lambda: model(*arrays)[0])
    return prepare


def _cuvil_torch_bf16(b: Built, ctx: P.Context):
    import cuvil

    compiled = cuvil.compile(b.exported, b.inputs, precision="bf16")
    inputs = b.inputs
    return P._cuvil_runner(compiled, inputs, lambda: compiled(*inputs))


def _reduced(name: str, prepare, needs: str = "", **kw) -> P.Peer:
    return P.Peer(name, prepare, needs, tolerance=FLOAT16_TOLERANCE, opt_in=True, **kw)


FLOAT16_PEERS = [
    _reduced("OpenVINO bf16", _openvino_bf16, "openvino", spins=True, onnx=True),
    _reduced("cuvil onnx bf16", _cuvil_onnx("bf16"), "onnx", cuvil=True, onnx=True),
    _reduced("cuvil onnx fp16", _cuvil_onnx("fp16"), "onnx", cuvil=True, onnx=True),
    _reduced("cuvil torch bf16", _cuvil_torch_bf16, cuvil=True),
]
P.PEERS.extend(p for p in FLOAT16_PEERS if p.name not in {q.name for q in P.PEERS})
