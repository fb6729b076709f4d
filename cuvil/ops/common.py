"""Shape-rule helpers shared by op declarations (and by frontends that must broadcast explicitly)."""
from __future__ import annotations

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.types import TensorType

COMPLEX = frozenset({"complex"})  # the trait of ops that accept complex operands (see OpDef.complex_refusal)


def same_as_operand(ctx, types, attrs):
    """Result type equals the first operand's."""
    return [types[0]]


def require_dtype(ctx, t: TensorType, ok, name: str, what: str = "operand") -> None:
    if not ok(t.dtype):
        raise ctx.error(f"'{name}' does not accept {what} of element type {t.dtype}")


def unify_shapes(ctx, types, name: str) -> tuple:
    """Elementwise operands must have equal shapes (no implicit broadcasting); symbolic sizes are related."""
    shape = list(types[0].shape)
    for t in types[1:]:
        if t.rank != len(shape):
            raise ctx.error(f"'{name}' operands must have the same shape, got "
                            f"{', '.join(str(u) for u in types)} (insert broadcast_to)")
        shape = [ctx.require_equal(a, b, f"'{name}' operand dimension {i}") for i, (a, b) in
                 enumerate(zip(shape, t.shape))]
    return tuple(shape)


def unify_dtypes(ctx, types, name: str) -> DType:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise ctx.error(f"'{name}' operands must have one element type, got "
                        f"{', '.join(str(t) for t in types)} (insert cast)")
    return types[0].dtype


def norm_axis(axis: int, rank: int, name: str) -> int:
    """A non-negative axis; a scalar (rank 0) accepts axis 0 or -1."""
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise ValueError(f"'{name}' axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def norm_axes(axes, rank: int, name: str) -> tuple:
    """Axes made non-negative and sorted: the normal form that makes equivalent programs print alike."""
    out = set()
    for a in axes:
        if not -rank <= a < rank:
            raise ValueError(f"'{name}' axis {a} is out of range for rank {rank}")
        out.add(a % rank)
    return tuple(sorted(out))


def broadcast_shapes(*shapes) -> tuple:
    """NumPy broadcasting, for frontends that insert `broadcast_to`. Two different symbolic sizes (or a
    symbolic and a static one) are taken to be equal: the `broadcast_to` or op that meets them records the
    relation, which a call checks once sizes are bound. Static sizes that differ raise ShapeError."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for dims in zip(*[(1,) * (rank - len(s)) + tuple(s) for s in shapes]):
        big = [d for d in dims if d != 1]
        static = {d for d in big if isinstance(d, int)}
        if len(static) > 1:
            raise ShapeError(f"shapes {', '.join('[' + ','.join(map(str, s)) + ']' for s in shapes)} do not broadcast")
        out.append(static.pop() if static else big[0] if big else 1)
    return tuple(out)
