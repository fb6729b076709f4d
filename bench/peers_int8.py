"""int8 and int4 peers and routes (importing this module adds them to `peers.PEERS`):

- ONNX Runtime int8: `quantize_static` (QDQ, per-channel int8 weights, uint8 activations, calibrated on 32 inputs)
  or, for transformers (integer inputs), `quantize_dynamic`; ONNX Runtime int4: `MatMulNBitsQuantizer` (block 32).
- OpenVINO int8: the same static QDQ file.
- cuvil int8 / int4: the fp32 ONNX export through `cuvil.quantize.int8.quantize_module` (static on the same 32
  calibration inputs, dynamic for transformers; int4 weight-only, groups of 32), compiled for the CPU; int8 with
  `kernels="auto"` (without VNNI, convolutions and GEMMs of 16 rows or more on the fp32 kernels, weights rounded to
  int8). cuvil int8 kernels: every layer on the int8 kernels whatever the CPU (`kernels="int8"`).
- cuvil QDQ: Cuvil on ONNX Runtime's QDQ file (the pre-quantized route).
Their outputs are checked against PyTorch fp32 with `REDUCED_TOLERANCE`. They run when `--peers` names them.
"""
from __future__ import annotations

import contextlib
import io
import os

import numpy as np

from . import peers as P
from .workloads import Built

CALIBRATION_SAMPLES = 32
REDUCED_TOLERANCE = 0.15  # max |peer - torch| / max |torch| for int8/int4 results (cosine is what they keep)


def _integer_inputs(b: Built) -> bool:
    """Token ids in: a transformer, quantized dynamically."""
    return any(t.dtype.is_floating_point is False for t in b.inputs)


def calibration_inputs(b: Built, n: int = CALIBRATION_SAMPLES) -> list:
    """`n` input tuples like the workload's: normal floats, or ids below the largest given."""
    rng = np.random.default_rng(123)
    out = []
    for _ in range(n):
        out.append(tuple(rng.integers(0, int(a.max()) + 1, a.shape).astype(a.dtype) if a.dtype.kind in "iu" else
                         rng.standard_normal(a.shape).astype(a.dtype) for a in b.numpy_inputs))
    return out


def _derived(ctx: P.Context, suffix: str, make) -> str:
    base = ctx.onnx_path()
    path = base[:-len(".onnx")] + suffix + ".onnx"
    if not os.path.exists(path):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            make(base, path)
    return path


class _Reader:
    def __init__(self, names, samples):
        self.it = iter([dict(zip(names, s)) for s in samples])

    def get_next(self):
        return next(self.it, None)


def _qdq_file(b: Built, ctx: P.Context) -> str:
    def make(src, dst):
        import onnx
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

        names = [i.name for i in onnx.load(src, load_external_data=False).graph.input]
        reader = type("Reader", (_Reader, CalibrationDataReader), {})(names, calibration_inputs(b))
        quantize_static(src, dst, reader, quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return _derived(ctx, "_qdq", make)


def _dynamic_file(ctx: P.Context) -> str:
    def make(src, dst):
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
    return _derived(ctx, "_dynamic", make)


def _nbits_file(ctx: P.Context) -> str:
    def make(src, dst):
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        quantizer = MatMulNBitsQuantizer(onnx.load(src), block_size=32, is_symmetric=False)
        quantizer.process()
        onnx.save(quantizer.model.model, dst)
    return _derived(ctx, "_nbits", make)


def _ort_int8(b: Built, ctx: P.Context):
    return P.ort_session(_dynamic_file(ctx) if _integer_inputs(b) else _qdq_file(b, ctx), b, ctx)


def _ort_int4(b: Built, ctx: P.Context):
    return P.ort_session(_nbits_file(ctx), b, ctx)


def _openvino_int8(b: Built, ctx: P.Context):
    return P.openvino_request(_qdq_file(b, ctx), b, ctx)


def _cuvil_quantized(precision: str, kernels: str = "auto"):
    def prepare(b: Built, ctx: P.Context):
        import cuvil
        from cuvil.compiler import compile_module
        from cuvil.quantize.int8 import quantize_module

        with contextlib.redirect_stdout(io.StringIO()):
            model = cuvil.load_onnx(ctx.onnx_path())
        dataset = calibration_inputs(b) if precision == "int8" and not _integer_inputs(b) else None
        exe = compile_module(quantize_module(model.module, precision, dataset, kernels=kernels))
        arrays = b.numpy_inputs
        return P._cuvil_runner(exe, arrays, lambda: exe(*arrays)[0])
    return prepare


def _cuvil_qdq(b: Built, ctx: P.Context):
    import cuvil

    if _integer_inputs(b):
        raise P.NotApplicable
    with contextlib.redirect_stdout(io.StringIO()):
        model = cuvil.load_onnx(_qdq_file(b, ctx)).optimize()
    arrays = b.numpy_inputs
    return P._cuvil_runner(model, arrays, lambda: model(*arrays)[0])


def _reduced(name: str, prepare, needs: str, **kw) -> P.Peer:
    return P.Peer(name, prepare, needs, onnx=True, tolerance=REDUCED_TOLERANCE, opt_in=True, **kw)


INT8_PEERS = [
    _reduced("ONNX Runtime int8", _ort_int8, "onnxruntime", spins=True),
    _reduced("ONNX Runtime int4", _ort_int4, "onnxruntime", spins=True),
    _reduced("OpenVINO int8", _openvino_int8, "openvino", spins=True),
    _reduced("cuvil int8", _cuvil_quantized("int8"), "onnx", cuvil=True),
    _reduced("cuvil int8 kernels", _cuvil_quantized("int8", "int8"), "onnx", cuvil=True),
    _reduced("cuvil int4", _cuvil_quantized("int4"), "onnx", cuvil=True),
    _reduced("cuvil QDQ", _cuvil_qdq, "onnx", cuvil=True),
]
P.PEERS.extend(p for p in INT8_PEERS if p.name not in {q.name for q in P.PEERS})
