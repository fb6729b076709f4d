"""Data movement: broadcasting, reshaping, permuting, joining, splitting, slicing, indexing, padding; and the
ops that turn shapes into tensors (`iota`, `dim_size`, `shape_of`).

Shape attributes are `dims`, so symbolic sizes flow through: reshaping `f32[n,4]` to `[-1]` gives `f32[4*n]`,
concatenating `f32[n,2]` and `f32[m,2]` gives `f32[m+n,2]`. Normal forms (non-negative axes, explicit
permutations, resolved -1s, clamped slice bounds) are applied at build time so equivalent programs print alike.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import DType
from ..ir.symbolic import SymExpr
from ..ir.types import TensorType
from .common import COMPLEX, norm_axis, require_dtype, unify_dtypes
from .registry import Attr, register_op

_BIG = 2 ** 31 - 1  # slice bounds at or beyond this mean "to the end" (ONNX exports INT_MAX, INT64_MAX)


def _axis_normalizer(name):
    def normalize(types, attrs):
        return {**attrs, "axis": norm_axis(attrs["axis"], types[0].rank, name)}
    return normalize


def _require_rank(ctx, t: TensorType, name: str, at_least: int = 1) -> None:
    if t.rank < at_least:
        raise ctx.error(f"'{name}' needs an operand of rank >= {at_least}, got {t}")


def _require_index(ctx, t: TensorType, name: str) -> None:
    require_dtype(ctx, t, lambda d: d in (DType.i32, DType.i64), name, "indices")


def _wrap(idx, size: int, axis: int, negative: bool = True):
    """ONNX indices: negative ones count from the end, once; outside [-size, size) NumPy's IndexError names the first
    (without the check, NumPy would wrap an index below -size a second time). Without `negative` (torch's embedding,
    index_select and gather) the indices must lie in [0, size)."""
    bad = (idx < (-size if negative else 0)) | (idx >= size)
    if bad.any():
        raise IndexError(f"index {idx[bad].flat[0]} is out of bounds for axis {axis} with size {size}")
    return np.where(idx < 0, idx + size, idx)


# -- broadcast_to ----------------------------------------------------------------------------------------
def _broadcast_shape(ctx, types, a):
    t, shape = types[0], a["shape"]
    if t.rank > len(shape):
        raise ctx.error(f"'broadcast_to' cannot lower the rank of {t} to {len(shape)}")
    lead = len(shape) - t.rank
    for i, d in enumerate(t.shape):
        if d != 1:
            ctx.require_equal(d, shape[lead + i], f"'broadcast_to' {t} to [{','.join(map(str, shape))}] dimension {i}")
    return [t.with_shape(shape)]


register_op("broadcast_to", shape=_broadcast_shape, attrs={"shape": Attr("dims")},
            reference=lambda xs, a: np.array(np.broadcast_to(xs[0], a["shape"])),
            doc="NumPy broadcasting to `shape` (leading axes added, size-1 axes stretched)", traits=COMPLEX)


# -- reshape ---------------------------------------------------------------------------------------------
def _dim_from_atom(atom):
    if isinstance(atom, str):
        return SymExpr.symbol(atom)
    return atom[1] // atom[2] if atom[0] == "//" else atom[1] % atom[2]


def _terms(d) -> tuple:
    return d.terms if isinstance(d, SymExpr) else (((), d),)


def _div_monomial(num, monomial, coef: int):
    """num / (coef * monomial) when every term of num holds that factor, else None."""
    out = 0
    for m, c in _terms(num):
        rest = list(m)
        for atom in monomial:
            if atom not in rest:
                return None
            rest.remove(atom)
        if c % coef:
            return None
        out = out + c // coef * math.prod((_dim_from_atom(x) for x in rest), start=1)
    return out


def _exact_div(num, den):
    """num / den as a dimension when it divides exactly, else None. A sum `den` divides when the quotient is one
    term: (4*b*h2*w2 + 4*b*h2 + ...) / (4*h2*w2 + 4*h2 + ...) = b, found by dividing one term by one term."""
    if isinstance(den, int):
        return _checked(num // den if den else None, num, den)
    if len(den.terms) == 1:
        return _checked(_div_monomial(num, *den.terms[0]), num, den)
    for m, c in _terms(num):
        q = _checked(_div_monomial(c * math.prod((_dim_from_atom(x) for x in m), start=1), *den.terms[0]), num, den)
        if q is not None:
            return q
    return None


def _checked(q, num, den):
    return q if q is not None and q * den == num else None


def _resolve_minus_one(dims: list, known: list, name: str):
    """The size -1 stands for: the input dims over the known ones, cancelling equal factors first."""
    dims = list(dims)
    rest = []
    for d in known:
        if d in dims:
            dims.remove(d)
        else:
            rest.append(d)
    num, den = math.prod(dims, start=1), math.prod(rest, start=1)
    q = _exact_div(num, den)
    if q is None and isinstance(num, SymExpr) and isinstance(den, int) and den > 0:
        q = num // den  # the shape rule then requires den * q == num of every call
    if q is None:
        raise ValueError(f"'{name}' cannot infer -1: {math.prod(dims, start=1)} elements do not split into "
                         f"parts of {math.prod(rest, start=1)}")
    return q


def _norm_reshape(types, a):
    """Infer the one -1. A 0 is a literal size: ONNX's "0 copies the input size" is the frontend's to resolve,
    since shapes computed in decompositions may be 0 for empty tensors."""
    t, shape = types[0], list(a["shape"])
    holes = [i for i, d in enumerate(shape) if d == -1]
    if len(holes) > 1:
        raise ValueError(f"'reshape' shape {list(a['shape'])} has more than one -1")
    if holes:
        shape[holes[0]] = _resolve_minus_one(t.shape, [d for d in shape if d != -1], "reshape")
    return {**a, "shape": tuple(shape)}


def _reshape_shape(ctx, types, a):
    t, shape = types[0], a["shape"]
    if any(isinstance(d, int) and d < 0 for d in shape):
        raise ctx.error(f"'reshape' shape {list(shape)} has a negative size")
    out = t.with_shape(shape)
    ctx.require_equal(t.numel, out.numel, f"'reshape' of {t} to {out}: element count")
    return [out]


register_op("reshape", shape=_reshape_shape, normalize=_norm_reshape,
            attrs={"shape": Attr("dims")},
            reference=lambda xs, a: xs[0].reshape(a["shape"]),
            doc="same elements in row-major order, new shape (also expands and squeezes dims); one -1 is inferred",
            traits=COMPLEX)


# -- transpose -------------------------------------------------------------------------------------------
def _norm_transpose(types, a):
    rank = types[0].rank
    perm = tuple(norm_axis(p, rank, "transpose") for p in a["perm"]) if a["perm"] else tuple(reversed(range(rank)))
    if sorted(perm) != list(range(rank)):
        raise ValueError(f"'transpose' perm {a['perm']} is not a permutation of the {rank} axes")
    return {**a, "perm": perm}


register_op("transpose", normalize=_norm_transpose, attrs={"perm": Attr("ints", ())},
            shape=lambda ctx, types, a: [types[0].with_shape(types[0].shape[p] for p in a["perm"])],
            reference=lambda xs, a: np.transpose(xs[0], a["perm"]),
            doc="permute axes: result axis i is operand axis perm[i]; no perm reverses them", traits=COMPLEX)


# -- concat, split ---------------------------------------------------------------------------------------
def _concat_shape(ctx, types, a):
    dtype = unify_dtypes(ctx, types, "concat")
    first, axis = types[0], a["axis"]
    _require_rank(ctx, first, "concat")
    shape, total = list(first.shape), 0
    for k, t in enumerate(types):
        if t.rank != first.rank:
            raise ctx.error(f"'concat' operands must have one rank, got {', '.join(map(str, types))}")
        for i, (x, y) in enumerate(zip(shape, t.shape)):
            if i != axis:
                shape[i] = ctx.require_equal(x, y, f"'concat' operand {k} dimension {i}")
        total = total + t.shape[axis]
    shape[axis] = total
    return [TensorType(dtype, tuple(shape))]


register_op("concat", operands=(1, None), shape=_concat_shape, normalize=_axis_normalizer("concat"),
            attrs={"axis": Attr("int")}, reference=lambda xs, a: np.concatenate(xs, axis=a["axis"]),
            doc="join operands along axis; the other dimensions must be equal", traits=COMPLEX)


def _split_shape(ctx, types, a):
    t, axis, sizes = types[0], a["axis"], a["sizes"]
    _require_rank(ctx, t, "split")
    if not sizes or any(isinstance(s, int) and s < 0 for s in sizes):
        raise ctx.error(f"'split' sizes {list(sizes)} must be one or more non-negative sizes")
    ctx.require_equal(sum(sizes, start=0), t.shape[axis], f"'split' of {t}: sum of sizes along axis {axis}")
    for k, s in enumerate(sizes):
        ctx.require_at_least(s, 0, f"'split' of {t}: piece {k} along axis {axis} has the negative size {{lhs}}")
    return [t.with_shape(t.shape[:axis] + (s,) + t.shape[axis + 1:]) for s in sizes]


def _ref_split(xs, a):
    return np.split(xs[0], np.cumsum(a["sizes"])[:-1], axis=a["axis"])


register_op("split", results=-1, shape=_split_shape, normalize=_axis_normalizer("split"), reference=_ref_split,
            attrs={"axis": Attr("int"), "sizes": Attr("dims")},
            doc="cut along axis into consecutive pieces of the given sizes, one result each", traits=COMPLEX)


# -- slice -----------------------------------------------------------------------------------------------
def _clamp_static(d: int, start: int, end: int, step: int) -> tuple:
    """ONNX (= Python) clamping. With a negative step, -1 ("before index 0") is kept as -d-1, since -1
    itself would mean d-1 when normalised again."""
    bounds = slice(start, end, step).indices(d)[:2]
    return tuple(-d - 1 if step < 0 and x == -1 else x for x in bounds)


def _resolve_symbolic(d, start, end, step: int) -> tuple:
    """Bounds against a symbolic size: negatives count from the end, huge ones mean "past the end". Nothing
    is clamped, so other bounds must lie inside the dimension."""
    def at(x, past_end, before_start):
        if isinstance(x, SymExpr) or 0 <= x < _BIG or x == before_start:
            return x
        if x >= _BIG:
            return past_end
        if x > -_BIG:
            return d + x
        if before_start is None:
            raise ValueError(f"'slice' start {x} with step {step} on the symbolic size {d} is not supported")
        return before_start
    if step > 0:
        return at(start, d, 0), at(end, d, 0)
    return at(start, d - 1, None), at(end, d - 1, -d - 1)


def _norm_slice(types, a):
    t, n = types[0], len(a["starts"])
    axes = a["axes"] or tuple(range(n))
    steps = a["steps"] or (1,) * n
    if not len(a["ends"]) == len(axes) == len(steps) == n:
        raise ValueError("'slice' starts, ends, axes and steps must have the same length")
    axes = [norm_axis(x, t.rank, "slice") for x in axes]
    if len(set(axes)) != n or 0 in steps:
        raise ValueError(f"'slice' axes {a['axes']} repeat an axis or steps {a['steps']} contain 0")
    out = []
    for axis, start, end, step in sorted(zip(axes, a["starts"], a["ends"], steps), key=lambda e: e[0]):
        d = t.shape[axis]
        static = all(isinstance(v, int) for v in (d, start, end))
        out.append((axis, *(_clamp_static if static else _resolve_symbolic)(d, start, end, step), step))
    return {**a, "axes": tuple(e[0] for e in out), "starts": tuple(e[1] for e in out),
            "ends": tuple(e[2] for e in out), "steps": tuple(e[3] for e in out)}


def _slice_length(d, start, end, step: int):
    if step < 0:  # count the mirrored slice; -d-1 stands for -1 ("before index 0")
        start, end, step = [-(-1 if x == -d - 1 else x) for x in (start, end)] + [-step]
    n = (end - start + step - 1) // step
    return max(n, 0) if isinstance(n, int) else n


def _require_in_range(ctx, d, start, end, step: int, what: str) -> None:
    """Bounds on a symbolic size are not clamped (_resolve_symbolic): a call must give sizes that hold them,
    0 <= bound <= d going forward, -1 <= bound <= d - 1 going backward (-d-1 standing for -1)."""
    low, high = (0, d) if step > 0 else (-1, d - 1)
    needs = [(big, small) for bound in (start, end) if not (step < 0 and bound == -d - 1)
             for small, big in ((low, bound), (bound, high)) if small != big]
    fixed = [small - high + d for big, small in needs if big == high and isinstance(small, int)]
    needs = [(big, small) for big, small in needs if not (big == high and isinstance(small, int))]
    for big, small in needs + ([(d, max(fixed))] if fixed and max(fixed) > 0 else []):
        ctx.require_at_least(big, small, what)


def _slice_shape(ctx, types, a):
    t = types[0]
    shape = list(t.shape)
    for axis, start, end, step in zip(a["axes"], a["starts"], a["ends"], a["steps"]):
        if isinstance(t.shape[axis], SymExpr):
            _require_in_range(ctx, t.shape[axis], start, end, step, f"'slice' of {t} along axis {axis}")
        shape[axis] = _slice_length(t.shape[axis], start, end, step)
    if any(isinstance(d, int) and d < 0 for d in shape):
        raise ctx.error(f"'slice' of {t} gives the negative shape {shape}")
    return [t.with_shape(shape)]


def _ref_slice(xs, a):
    index = [slice(None)] * xs[0].ndim
    for axis, start, end, step in zip(a["axes"], a["starts"], a["ends"], a["steps"]):
        index[axis] = slice(start, end, step)
    return xs[0][tuple(index)].copy()


register_op("slice", shape=_slice_shape, normalize=_norm_slice, reference=_ref_slice,
            attrs={"starts": Attr("dims"), "ends": Attr("dims"), "axes": Attr("ints", ()), "steps": Attr("ints", ())},
            doc="ONNX Slice: x[start:end:step] on each listed axis (negative bounds count from the end)",
            traits=COMPLEX)


# -- gather, gather_elements, scatter_elements ----------------------------------------------------------
def _gather_shape(ctx, types, a):
    data, idx = types
    _require_rank(ctx, data, "gather")
    _require_index(ctx, idx, "gather")
    axis = a["axis"]
    return [data.with_shape(data.shape[:axis] + idx.shape + data.shape[axis + 1:])]


# negative=False: torch's embedding, index_select and gather, where an index below 0 is an error
_GATHER_ATTRS = {"axis": Attr("int", 0), "negative": Attr("bool", True)}


def _ref_gather(xs, a):
    data, idx = xs
    return np.take(data, _wrap(idx, data.shape[a["axis"]], a["axis"], a["negative"]), axis=a["axis"])


register_op("gather", operands=2, shape=_gather_shape, normalize=_axis_normalizer("gather"), reference=_ref_gather,
            attrs=_GATHER_ATTRS, doc="ONNX Gather: pick slices along axis; the indices' shape replaces it",
            traits=COMPLEX)


def _elements_shape(name, operands):
    """gather_elements / scatter_elements: indices (and updates) have the data's rank and no larger sizes."""
    def shape(ctx, types, a):
        data, idx = types[:2]
        _require_rank(ctx, data, name)
        _require_index(ctx, idx, name)
        if idx.rank != data.rank:
            raise ctx.error(f"'{name}' indices {idx} must have the rank of data {data}")
        for i, (x, y) in enumerate(zip(idx.shape, data.shape)):
            if isinstance(x, int) and isinstance(y, int) and i != a["axis"] and x > y:
                raise ctx.error(f"'{name}' indices {idx} are larger than data {data} in dimension {i}")
        if operands == 3:
            unify_dtypes(ctx, [data, types[2]], name)
            if types[2].rank != idx.rank:
                raise ctx.error(f"'{name}' updates {types[2]} must have the shape of indices {idx}")
            for i, (x, y) in enumerate(zip(idx.shape, types[2].shape)):
                ctx.require_equal(x, y, f"'{name}' updates dimension {i}")
            return [data]
        return [data.with_shape(idx.shape)]
    return shape


def _element_index(data, idx, axis: int, negative: bool = True) -> tuple:
    """The full NumPy index that addresses data[..., idx[...], ...] for every element of idx."""
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = _wrap(idx, data.shape[axis], axis, negative)
    return tuple(grid)


def _ref_gather_elements(xs, a):
    data, idx = xs
    return data[_element_index(data, idx, a["axis"], a["negative"])]


_SCATTER = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _ref_scatter_elements(xs, a):
    """Duplicate indices combine with `reduction` (with none, the last update wins)."""
    data, idx, updates = xs
    where = _element_index(data, idx, a["axis"])
    if a["reduction"] == "none":
        out = data.copy()
        out[where] = updates
        return out
    out = data.astype(np.float64) if DType.from_numpy(data.dtype).is_float else data.copy()
    _SCATTER[a["reduction"]].at(out, where, updates.astype(out.dtype))
    return out.astype(data.dtype)


register_op("gather_elements", operands=2, shape=_elements_shape("gather_elements", 2),
            normalize=_axis_normalizer("gather_elements"), reference=_ref_gather_elements,
            attrs=_GATHER_ATTRS, doc="ONNX GatherElements: out[i][j] = data[idx[i][j]][j] (axis 0)")
register_op("scatter_elements", operands=3, shape=_elements_shape("scatter_elements", 3),
            normalize=_axis_normalizer("scatter_elements"), reference=_ref_scatter_elements,
            attrs={"axis": Attr("int", 0), "reduction": Attr("str", "none", ("none", "add", "mul", "max", "min"))},
            doc="ONNX ScatterElements: a copy of data with data[idx[i][j]][j] = updates[i][j] (axis 0)")


# -- pad, tile -------------------------------------------------------------------------------------------
def _pad_shape(ctx, types, a):
    t, pads = types[0], a["pads"]
    if len(pads) != 2 * t.rank:
        raise ctx.error(f"'pad' needs 2*rank = {2 * t.rank} pads for {t}, got {len(pads)}")
    shape = tuple(d + b + e for d, b, e in zip(t.shape, pads[:t.rank], pads[t.rank:]))
    for axis, d in enumerate(shape):
        ctx.require_at_least(d, 0, f"'pad' pads {list(pads)} crop dim {axis} of {t} to {{lhs}}, below zero size")
    return [t.with_shape(shape)]


def _ref_pad(xs, a):
    """Negative pads crop first; the positive ones then pad what is left."""
    x, rank = xs[0], xs[0].ndim
    begin, end = a["pads"][:rank], a["pads"][rank:]
    x = x[tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(begin, end)))]
    width = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
    if a["mode"] == "constant":
        return np.pad(x, width, constant_values=np.asarray(a["value"]).astype(x.dtype))
    return np.pad(x, width, mode=a["mode"])


register_op("pad", shape=_pad_shape, reference=_ref_pad,
            attrs={"pads": Attr("dims"), "mode": Attr("str", "constant", ("constant", "reflect", "edge")),
                   "value": Attr("float", 0.0)},
            doc="ONNX Pad: pads = begins then ends, one per axis; negative pads crop", traits=COMPLEX)


def _tile_shape(ctx, types, a):
    t, reps = types[0], a["repeats"]
    if len(reps) != t.rank or any(r < 0 for r in reps):
        raise ctx.error(f"'tile' needs {t.rank} non-negative repeats for {t}, got {list(reps)}")
    return [t.with_shape(r * d for r, d in zip(reps, t.shape))]


def _dec_tile(b, ops, a):
    """[d0,d1] -> [1,d0,1,d1] -> broadcast to [r0,d0,r1,d1] -> [r0*d0,r1*d1]."""
    x = ops[0]
    pairs = list(zip(a["repeats"], x.type.shape))
    spread = b.reshape(x, shape=[v for _, d in pairs for v in (1, d)])
    wide = b.broadcast_to(spread, shape=[v for r, d in pairs for v in (r, d)])
    return b.reshape(wide, shape=[r * d for r, d in pairs])


register_op("tile", shape=_tile_shape, decompose=_dec_tile, attrs={"repeats": Attr("ints")},
            reference=lambda xs, a: np.tile(xs[0], a["repeats"]), doc="repeat the whole tensor along each axis",
            traits=COMPLEX)


# -- shapes as tensors -----------------------------------------------------------------------------------
def _iota_shape(ctx, types, a):
    if a["dtype"] is DType.bool:
        raise ctx.error("'iota' needs a numeric dtype, got bool")
    return [TensorType(a["dtype"], a["shape"])]


def _ref_iota(xs, a):
    shape, axis = a["shape"], a["axis"]
    line = np.arange(shape[axis] if shape else 1).reshape([-1 if i == axis else 1 for i in range(len(shape))])
    return np.array(np.broadcast_to(line, shape)).astype(a["dtype"].numpy)


register_op("iota", operands=0, shape=_iota_shape, reference=_ref_iota,
            normalize=lambda types, a: {**a, "axis": norm_axis(a["axis"], len(a["shape"]), "iota")},
            attrs={"shape": Attr("dims"), "axis": Attr("int", 0), "dtype": Attr("dtype", DType.i64)},
            doc="each element's index along axis (ONNX Range is start + iota * delta)")


def _dim_size_shape(ctx, types, a):
    if len(a["dim"]) != 1:
        raise ctx.error(f"'dim_size' takes exactly one dimension, got {list(a['dim'])}")
    if a["dtype"] is DType.bool:
        raise ctx.error("'dim_size' needs a numeric dtype, got bool")
    return [TensorType(a["dtype"], ())]


register_op("dim_size", operands=0, shape=_dim_size_shape,
            attrs={"dim": Attr("dims"), "dtype": Attr("dtype", DType.i64)},
            reference=lambda xs, a: np.asarray(a["dim"][0]).astype(a["dtype"].numpy),
            doc="a (possibly symbolic) size as a scalar tensor, e.g. the element count of a mean")
register_op("shape_of", shape=lambda ctx, types, a: [TensorType(DType.i64, (types[0].rank,))],
            reference=lambda xs, a: np.asarray(xs[0].shape, np.int64).reshape(-1),
            doc="the operand's run-time shape as i64[rank]")
