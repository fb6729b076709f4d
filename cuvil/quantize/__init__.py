"""Reduced precision: the one entry every compile path calls (`lower_precision`), and `compare` for its cost.

    >>> import numpy as np, cuvil
    >>> from cuvil.ir import Builder, Module, TensorType
    >>> m = Module()
    >>> b = Builder.new_function(m, "main", [TensorType("f32", (2, 64))], ["x"])
    >>> b.ret(b.matmul(b.args[0], b.constant(np.full((64, 32), 0.1, np.float32))))
    >>> fp32, bf16 = cuvil.compile_module(m), cuvil.compile_module(m, precision="bf16")
    >>> report = cuvil.quantize.compare(fp32, bf16, [np.ones((2, 64), np.float32)])
    >>> report[0].cosine > 0.999
    True

The policy (which ops keep fp32, where conversions happen) is written down in docs/precision.md and, as rules,
in cuvil/passes/precision.py. "int8" and "int4" are `cuvil.quantize.int8.quantize_module`'s (see INTEGER).
"""
from __future__ import annotations

from ..errors import UnsupportedError
from .compare import OutputError, compare

PRECISIONS = ("fp32", "bf16", "fp16", "int8", "int4")
FLOAT_PRECISIONS = {"bf16": "bf16", "fp16": "f16"}  # precision -> the IR element type its weights are stored in
INTEGER = ("int8", "int4")
CALIBRATIONS = ("minmax", "percentile", "entropy")


def lower_precision(module, precision: str = "fp32", calibrate_dataset=None, calibration: str = "minmax") -> list:
    """The passes that compile `module` at `precision` (none for fp32), after checking the arguments.

    An integer precision hands over to `cuvil.quantize.int8.quantize_module(module, precision,
    calibrate_dataset=..., method=...)`, which may rewrite `module` (the compiler's own copy) in place and returns
    the passes it needs, each placed in the pipeline by its `anchor`. `module.metadata["precision"]` records it.
    """
    check_precision(precision, calibration)
    if precision == "fp32":
        if calibrate_dataset is not None:
            raise UnsupportedError("calibrate_dataset is for precision='int8' or 'int4'; this compile is fp32")
        return []
    module.metadata["precision"] = precision
    if precision in FLOAT_PRECISIONS:
        from ..passes.precision import LowerFloatPrecision

        return [LowerFloatPrecision(FLOAT_PRECISIONS[precision])]
    return list(_integer_quantizer()(module, precision, calibrate_dataset=calibrate_dataset, method=calibration))


def check_precision(precision, calibration: str = "minmax") -> None:
    """A clear error for a precision or calibration method Cuvil does not know."""
    if precision not in PRECISIONS:
        raise UnsupportedError(f"precision {precision!r} is not one of {', '.join(map(repr, PRECISIONS))}")
    if calibration not in CALIBRATIONS:
        raise UnsupportedError(f"calibration {calibration!r} is not one of {', '.join(map(repr, CALIBRATIONS))}")


def _integer_quantizer():
    try:
        from .int8 import quantize_module
    except ModuleNotFoundError as e:  # the integer kernels are a separate piece of work (issue #15)
        if e.name != f"{__name__}.int8":
            raise
        raise UnsupportedError(f"precision 'int8'/'int4' needs cuvil.quantize.int8, which this build lacks ({e})") \
            from None
    return quantize_module


__all__ = ["CALIBRATIONS", "OutputError", "PRECISIONS", "check_precision", "compare", "lower_precision"]
