"""The cleanup passes: canonicalize, simplify (algebraic and shape rules), fold-constants, cse, dce.

Canonicalize and simplify are rule tables run by the rewrite engine; the others are short walks.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..interpreter import _Interpreter
from ..ir.builder import Builder
from ..ir.core import Function, Module, Op, Region, Value
from ..ir.dtypes import DType
from ..ops import registry
from ..ops.nn_resize import nearest_indices, resized
from .manager import Pass
from .rewrite import Pat, Rule, apply_rules, replace_op, splat_value


def _is_splat(v: Value, module: Module) -> bool:
    return splat_value(v, module) is not None


def _same_type_as_operand(name: str, **attrs_pred):
    """`name(x)` whose result type equals x's type is x (identity broadcast, reshape, cast...)."""
    return Rule(Pat(name, Pat.any("x"), where=lambda v, m: v.type == v.owner.operands[0].type),
                lambda b, m: m.x, f"identity-{name}")


def _swap_constant_second(b, m):
    op = m.root
    if _is_splat(op.operands[0], b.module) and not _is_splat(op.operands[1], b.module):
        return b.emit(op.name, op.operands[1], op.operands[0], **op.attrs)
    return None


def _identity_transpose(b, m):
    perm = m.root.attrs["perm"]
    return m.x if perm == tuple(range(len(perm))) else None


def _identity_slice(b, m):
    return m.x if m.root.results[0].type.shape == m.x.type.shape and all(s == 1 for s in m.root.attrs["steps"]) \
        else None


COMMUTATIVE = [name for name, d in registry.all_ops().items() if "commutative" in d.traits]

CANONICALIZE_RULES = [
    Rule(Pat(set(COMMUTATIVE), Pat.any(), Pat.any()), _swap_constant_second, "constant-second"),
    _same_type_as_operand("broadcast_to"),
    _same_type_as_operand("reshape"),
    _same_type_as_operand("cast"),
    Rule(Pat("transpose", Pat.any("x")), _identity_transpose, "identity-transpose"),
    Rule(Pat("slice", Pat.any("x")), _identity_slice, "identity-slice"),
    Rule(Pat("concat", Pat.any("x")), lambda b, m: m.x, "single-concat"),
]


def _compose_transpose(b, m):
    inner, outer = m.x.owner.attrs["perm"], m.root.attrs["perm"]
    return b.transpose(m.x.owner.operands[0], perm=tuple(inner[p] for p in outer))


def _pick_where(b, m):
    s = splat_value(m.c, b.module)
    return m.t if s else m.f


# A cast to a type that holds every value of the source, then onward, is one cast.
_WIDENS = {DType.f16: {DType.f32, DType.f64}, DType.bf16: {DType.f32, DType.f64}, DType.f32: {DType.f64},
           DType.i8: {DType.i16, DType.i32, DType.i64}, DType.i16: {DType.i32, DType.i64}, DType.i32: {DType.i64},
           DType.u8: {DType.i16, DType.i32, DType.i64}}


def _cast_chain(b, m):
    src, mid = m.x.type.dtype, m.mid.type.dtype
    if mid not in _WIDENS.get(src, set()):
        return None
    target = m.root.attrs["dtype"]
    return m.x if target == src else b.cast(m.x, dtype=target)


def _static_shape_of(b, m):
    shape = m.x.type.shape
    if not all(isinstance(d, int) for d in shape):
        return None
    return b.constant(np.array(shape, np.int64), "shape")


def _static_dim_size(b, m):
    (d,) = m.root.attrs["dim"]
    return b.full(d, (), m.root.attrs["dtype"]) if isinstance(d, int) else None


def _nearest_repeat(b, m):
    """A nearest resize whose every resampled axis repeats each element r times (o // r: integer upscaling in the
    usual modes) is a broadcast between two reshapes, which the loop fusion reads through its consumer's index."""
    x, a = m.x, m.root.attrs
    if a["mode"] != "nearest" or not all(isinstance(d, int) for d in (*x.type.shape, *a["sizes"])):
        return None
    split, wide = [], []
    for axis, (n_in, n_out) in enumerate(zip(x.type.shape, a["sizes"])):
        scale = a["scales"][axis] if a["scales"] else None
        if not resized(n_in, n_out, scale):
            split.append(n_in)
            wide.append(n_in)
            continue
        r = n_out // n_in if n_in else 0
        if r < 1 or n_out != r * n_in or not np.array_equal(nearest_indices(n_in, n_out, scale or n_out / n_in, a),
                                                            np.arange(n_out) // r):
            return None
        split += [n_in, 1]
        wide += [n_in, r]
    return b.reshape(b.broadcast_to(b.reshape(x, shape=tuple(split)), shape=tuple(wide)), shape=tuple(a["sizes"]))


SIMPLIFY_RULES = [
    Rule(Pat("mul", Pat.any("x"), Pat.splat(1.0)), lambda b, m: m.x, "mul-one"),
    Rule(Pat("div", Pat.any("x"), Pat.splat(1.0)), lambda b, m: m.x, "div-one"),
    Rule(Pat("add", Pat.any("x"), Pat.splat(0.0)), lambda b, m: m.x, "add-zero"),
    Rule(Pat("sub", Pat.any("x"), Pat.splat(0.0)), lambda b, m: m.x, "sub-zero"),
    Rule(Pat("pow", Pat.any("x"), Pat.splat(1.0)), lambda b, m: m.x, "pow-one"),
    Rule(Pat("pow", Pat.any("x"), Pat.splat(2.0)), lambda b, m: b.mul(m.x, m.x), "pow-two"),
    Rule(Pat("pow", Pat.any("x"), Pat.splat(3.0)), lambda b, m: b.mul(b.mul(m.x, m.x), m.x), "pow-three"),
    Rule(Pat("max", Pat.any("x"), Pat.splat(0.0)), lambda b, m: b.relu(m.x), "max-zero-is-relu"),
    Rule(Pat("neg", Pat("neg", Pat.any("x"))), lambda b, m: m.x, "neg-neg"),
    Rule(Pat("transpose", Pat("transpose", Pat.any(), bind="x")), _compose_transpose, "transpose-transpose"),
    Rule(Pat("reshape", Pat("reshape", Pat.any("x"))), lambda b, m: b.reshape(m.x, shape=m.root.attrs["shape"]),
         "reshape-reshape"),
    Rule(Pat("broadcast_to", Pat("broadcast_to", Pat.any("x"))),
         lambda b, m: b.broadcast_to(m.x, shape=m.root.attrs["shape"]), "broadcast-broadcast"),
    Rule(Pat("cast", Pat("cast", Pat.any("x"), bind="mid")), _cast_chain, "cast-chain"),
    Rule(Pat("where", Pat.splat(bind="c"), Pat.any("t"), Pat.any("f")), _pick_where, "where-constant"),
    Rule(Pat("shape_of", Pat.any("x")), _static_shape_of, "static-shape-of"),
    Rule(Pat("dim_size"), _static_dim_size, "static-dim-size"),
    Rule(Pat("resize", Pat.any("x")), _nearest_repeat, "nearest-resize-repeat"),
]


class Canonicalize(Pass):
    """Normal forms that make equivalent programs look alike: constants second, identity ops removed."""

    name = "canonicalize"

    def run_on_operation(self, fn: Function) -> bool:
        return apply_rules(fn, [r for r in CANONICALIZE_RULES if registry.has_op(next(iter(r.pattern.ops)))])


class Simplify(Pass):
    """Algebraic identities (x*1, x+0, neg neg, transpose/reshape/broadcast/cast chains) and static shapes."""

    name = "simplify"

    def run_on_operation(self, fn: Function) -> bool:
        return apply_rules(fn, [r for r in SIMPLIFY_RULES if registry.has_op(next(iter(r.pattern.ops)))])


VIEW_OPS = frozenset({"transpose", "reshape"})


class FoldConstants(Pass):
    """Evaluate ops whose operands are all constants with their reference implementations.

    A result is folded only when it is no bigger than its inputs (a broadcast bias stays a broadcast, which
    kernels read in place), unless it is a splat, which becomes a `full`.
    """

    name = "fold-constants"

    def run_on_operation(self, fn: Function) -> bool:
        changed = False
        for op in list(fn.walk()):
            if op.parent is not None and self._foldable(op):
                changed |= self._fold(fn, op)
        return changed

    def _foldable(self, op: Op) -> bool:
        opdef = registry.get_op(op.name)
        if op.name == "broadcast_to":
            return False  # never smaller than its input; kernels (and GEMM bias epilogues) read it in place
        if op.name in VIEW_OPS and op.operands[0].type.is_static and op.operands[0].type.numel > 4096:
            return False  # a copy of a weight in another layout: kernels read the original through strides
        return (bool(op.operands) and not op.regions and opdef.reference is not None
                and all(r.type.is_static for r in op.results)
                and all(isinstance(v.owner, Op) and v.owner.name in ("constant", "full") and v.type.is_static
                        for v in op.operands))

    def _fold(self, fn: Function, op: Op) -> bool:
        module = fn.module
        inputs = [_constant_array(v, module) for v in op.operands]
        outputs = _Interpreter(module, {}).reference(op, inputs)
        in_size = sum(x.size for x in inputs)
        new = []
        b = Builder(module, fn, Region(), op.loc)
        for out, r in zip(outputs, op.results):
            out = np.asarray(out, dtype=r.type.dtype.numpy).reshape(tuple(r.type.shape))
            splat = _splat(out)
            if splat is not None and r.type.dtype is not DType.bf16:
                new.append(b.full(splat, r.type.shape, r.type.dtype))
            elif out.size <= in_size:
                new.append(b.constant(out, "folded"))
            else:
                return False
        replace_op(fn, op, b.region.ops, new)
        return True


def _constant_array(v: Value, module: Module) -> np.ndarray:
    op = v.owner
    if op.name == "constant":
        return module.constants[op.attrs["name"]]
    return np.full(op.attrs["shape"], op.attrs["value"]).astype(op.attrs["dtype"].numpy)


def _splat(arr: np.ndarray) -> Optional[float]:
    """The one value all elements hold, if a `full` can represent it exactly."""
    if arr.size == 0 or arr.dtype.kind not in "fiub":
        return None
    first = arr.flat[0]
    if arr.dtype.kind == "f" and np.isnan(first):
        return float(first) if bool(np.all(np.isnan(arr))) else None
    if not bool(np.all(arr == first)):
        return None
    value = float(first)
    return value if np.asarray(value).astype(arr.dtype) == first else None


class CSE(Pass):
    """Common subexpression elimination: an op equal to one that dominates it (same name, operands,
    attributes and types; no regions) is replaced by it. Module constants with equal bytes are merged."""

    name = "cse"

    def run_on_operation(self, fn: Function) -> bool:
        return self._region(fn, fn.body, [{}])

    def _region(self, fn: Function, region: Region, scopes: list) -> bool:
        changed = False
        scopes.append({})
        for op in list(region.ops):
            for r in op.regions:
                changed |= self._region(fn, r, scopes)
            if op.regions or not op.results:
                continue
            key = self._key(fn, op)
            seen = next((s[key] for s in reversed(scopes) if key in s), None)
            if seen is not None:
                replace_op(fn, op, [], seen.results)
                changed = True
            else:
                scopes[-1][key] = op
        scopes.pop()
        return changed

    def _key(self, fn: Function, op: Op) -> tuple:
        attrs = dict(op.attrs)
        if op.name == "constant":
            arr = fn.module.constants[attrs["name"]]
            attrs["name"] = (arr.dtype.str, arr.shape, arr.tobytes() if arr.nbytes <= 1 << 16 else id(arr))
        return (op.name, tuple(id(v) for v in op.operands), tuple(sorted(attrs.items(), key=lambda kv: kv[0])),
                tuple(r.type for r in op.results))


class DCE(Pass):
    """Dead code elimination: ops whose results nobody uses go (every op is pure), then unused constants."""

    name = "dce"
    scope = "module"

    def run_on_operation(self, module: Module) -> bool:
        changed = False
        for fn in module.functions.values():
            changed |= self._region(fn.body, set())
        used = {op.attrs["name"] for fn in module.functions.values() for op in fn.walk() if op.name == "constant"}
        for name in [n for n in module.constants if n not in used]:
            del module.constants[name]
            changed = True
        return changed

    def _region(self, region: Region, used: set) -> bool:
        changed = False
        kept = []
        for op in reversed(region.ops):
            is_terminator = "terminator" in registry.get_op(op.name).traits
            if not is_terminator and not any(id(r) in used for r in op.results):
                op.parent = None
                changed = True
                continue
            for r in op.regions:
                changed |= self._region(r, used)
            used.update(id(v) for v in op.operands)
            kept.append(op)
        region.ops = kept[::-1]
        return changed


class Decompose(Pass):
    """Expand composite ops into primitives: all of them, or those a backend does not implement.

    `keep` is a set of op names, or a predicate on the op (a backend may keep `softmax` only in f32)."""

    name = "decompose"

    def __init__(self, keep=frozenset()):
        self.keep = keep if callable(keep) else (lambda op, names=frozenset(keep): op.name in names)

    def run_on_operation(self, fn: Function) -> bool:
        from .decompose import decompose_function

        return decompose_function(fn, lambda op: not self.keep(op))
