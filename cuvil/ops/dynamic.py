"""Ops whose result size depends on the data: each defines a size symbol (its `size` attribute, like torch's
unbacked `u0`) whose value the op computes at run time, with an upper bound from its operands' sizes that the
memory plan allocates for; later ops read the run-time value (see cuvil/ir/dynamic.py)."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from ..ir.symbolic import sym
from ..ir.types import TensorType
from .registry import Attr, register_op


def _nonzero_shape(ctx, types, a):
    (x,) = types
    if x.rank == 0:
        raise ctx.error("'nonzero' needs an operand of rank 1 or more, got a scalar (reshape it to [1])")
    if not a["size"]:
        raise ctx.error("'nonzero' needs a 'size' attribute naming the size symbol it defines")
    return [TensorType(DType.i64, (x.rank, sym(a["size"])))]


register_op("nonzero", shape=_nonzero_shape, attrs={"size": Attr("str", "")},
            sizes=lambda types, a: {a["size"]: types[0].numel},
            reference=lambda xs, a: np.array(np.nonzero(xs[0]), dtype=np.int64).reshape(xs[0].ndim, -1),
            doc="the indices of the nonzero elements, i64[rank, size] in row-major order (ONNX NonZero); "
                "size is at most the element count")
