"""The op registry and every built-in op declaration (importing this package registers them all)."""
from . import bitwise, control, elementwise, ml, movement, nn, nn_blocked, reduce  # noqa: F401 (registration side effects)
from . import dynamic, fft, linalg, lowp, quantized, random, special, special_bessel, special_poly  # noqa: F401
from .common import broadcast_shapes, same_as_operand
from .registry import REQUIRED, Attr, OpDef, all_ops, get_op, has_op, register_op

__all__ = ["Attr", "OpDef", "REQUIRED", "all_ops", "broadcast_shapes", "get_op", "has_op", "register_op",
           "same_as_operand"]
