"""Reduced precision: the one entry every compile path calls (`lower_precision`), and `compare` for its cost.

    >>> import numpy as np, cuvil
    >>> from cuvil.ir import Builder, Module, TensorType
    >>> m = Module()
    >>> b = Builder.new_function(m, "main", [TensorType("f32", (2, 64))], ["x"])
    >>> b.ret(b.matmul(b.args[0], b.constant(np.full((64, 32), 0.1, np.float32))))
    >>> fp32, bf16 = cuvil.compile_module(m), cuvil.quantize.compile_module(m, precision="bf16")
    >>> report = cuvil.quantize.compare(fp32, bf16, [np.ones((2, 64), np.float32)])
    >>> report[0].cosine > 0.999
    True

The policy (which ops keep fp32, where conversions happen) is written down in docs/precision.md and, as rules,
in cuvil/passes/precision.py. "int8" and "int4" are `cuvil.quantize.int8.quantize_module`'s. This package sits above
the compiler (it calls `cuvil.compiler.compile_module`), so the compiler never imports it.
"""
from __future__ import annotations

from ..errors import UnsupportedError
from .compare import OutputError, compare

PRECISIONS = ("fp32", "bf16", "fp16", "int8", "int4")
FLOAT_PRECISIONS = {"bf16": "bf16", "fp16": "f16"}  # precision -> the IR element type its weights are stored in
INTEGER = ("int8", "int4")
CALIBRATIONS = ("minmax", "percentile", "entropy")


def compile_module(module, target: str = "cpu", passes=(), precision: str = "fp32", calibrate_dataset=None,
                   calibration: str = "minmax", **options):
    """`cuvil.compile_module` at `precision`: what every frontend calls. The caller's module stays as it was.

    >>> import numpy as np
    >>> from cuvil.ir import Builder, Module, TensorType
    >>> m = Module()
    >>> b = Builder.new_function(m, "main", [TensorType("f32", (1, 4))], ["x"])
    >>> b.ret(b.matmul(b.args[0], b.constant(np.full((4, 2), 0.5, np.float32))))
    >>> compile_module(m, precision="fp16")(np.ones((1, 4), np.float32))[0].tolist()
    [[2.0, 2.0]]
    """
    from ..compiler import clone_module
    from ..compiler import compile_module as compile_lowered

    lowered, extra = lower_precision(clone_module(module), precision, calibrate_dataset, calibration)
    return compile_lowered(lowered, target, [*passes, *extra], copy_module=False, **options)


def lower_precision(module, precision: str = "fp32", calibrate_dataset=None, calibration: str = "minmax") -> tuple:
    """(the module to compile, the passes it needs) at `precision`, after checking the arguments. `module` is the
    compiler's own copy: it may be rewritten. `module.metadata["precision"]` records the precision.

    bf16 / fp16 add the `lower-float-precision` pass (placed by its anchor). An integer precision hands over to
    `cuvil.quantize.int8.quantize_module(module, precision, calibrate_dataset=..., method=...)`, which returns the
    quantized Module that the default pipeline then compiles.
    """
    check_precision(precision, calibration)
    if precision == "fp32":
        if calibrate_dataset is not None:
            raise UnsupportedError("calibrate_dataset is for precision='int8' or 'int4'; this compile is fp32")
        return module, []
    if precision in FLOAT_PRECISIONS:
        from ..passes.precision import LowerConvPrecision, LowerFloatPrecision

        module.metadata["precision"] = precision
        convs = [LowerConvPrecision()] if precision == "bf16" and _bf16_dot_product() else []
        return module, [LowerFloatPrecision(FLOAT_PRECISIONS[precision]), *convs]
    quantized = _integer_quantizer()(module, precision, calibrate_dataset=calibrate_dataset, method=calibration)
    quantized.metadata["precision"] = precision
    return quantized, []


def _bf16_dot_product() -> bool:
    """Whether this CPU runs the bf16 kernels on AMX or AVX512_BF16 (less CUVIL_DISABLE_CPU_FEATURES), where bf16
    convolutions beat fp32 ones."""
    from ..backends.cpu import kernels
    from ..backends.cpu.flags import opt_level

    # at the level the model links: a library of another level loaded first would serve the model's kernel calls
    return kernels.lowp_path(opt_level()) != "generic"


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


__all__ = ["CALIBRATIONS", "OutputError", "PRECISIONS", "check_precision", "compare", "compile_module",
           "lower_precision"]
