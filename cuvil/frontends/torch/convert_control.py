"""Higher-order control flow: `torch.cond` becomes a `cond` op and `torch._higher_order_ops.while_loop` a
`while` op; their subgraphs are converted into the regions by the same walker.

Regions may read values of the enclosing function, so loop-invariant inputs need no region arguments.
"""
from __future__ import annotations

from ...ir.core import Value
from ...ir.dtypes import DType
from .context import aten


def _predicate(cx, b, pred) -> Value:
    """A bool scalar from a one-element tensor of any dtype."""
    pred = pred if pred.type.dtype is DType.bool else b.cast(pred, dtype=DType.bool)
    return pred if pred.type.rank == 0 else b.reshape(pred, shape=())


@aten("cond")
def cond(cx, pred, true_graph, false_graph, operands):
    operands = list(operands)
    if not isinstance(pred, Value):  # decided while exporting: only the taken branch is converted
        return tuple(cx.walker.run_graph(true_graph if pred else false_graph, cx.b, operands))
    return cx.b.cond(_predicate(cx, cx.b, pred),
                     lambda nb: cx.walker.run_graph(true_graph, nb, operands),
                     lambda nb: cx.walker.run_graph(false_graph, nb, operands))


@aten("while_loop")
def while_loop(cx, cond_graph, body_graph, carried, additional=()):
    carried, extra = list(carried), list(additional)
    for v in carried:
        if not isinstance(v, Value):
            raise cx.error("while_loop carries only tensors here (make loop counters 0-d tensors)")
    return cx.b.while_loop(
        carried,
        lambda nb, *vals: _predicate(cx, nb, cx.walker.run_graph(cond_graph, nb, list(vals) + extra)[0]),
        lambda nb, *vals: cx.walker.run_graph(body_graph, nb, list(vals) + extra))
