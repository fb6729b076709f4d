"""FuseAttention: softmax(Q @ K^T * scale) @ V as one `fused` op of kind "library" (name "attention"), for a backend
with a fused attention kernel (the CUDA backend's flash-style one: scores never reach memory; the C backend's
cuvil_attention: a block of query rows' scores stays in L2).

Matched (f32): matmul(Q, transpose(K) of the last two axes (also with the batch axes regrouped by reshapes around
it, as the ONNX exporter writes it), or K^T made by any other op, read as it is stored), optionally divided or
multiplied by a broadcast scalar (a `full`, or a rank-0 constant), optionally masked (`add` of an f32 tensor of the
scores' shape: an additive mask; or `where(bool mask, scores, -inf)`: torch SDPA's padding and causal masks),
softmax over the last axis, optionally guarded (`where(reduce_max(scores) == -inf, 0, softmax)`: a row with no key
left gives 0; or the ONNX exporter's `where(isnan(p), 0, p)`: a NaN row gives 0), matmul with V; Q, K, V of one rank
and equal batch axes, head sizes static and at most MAX_HEAD; every intermediate used only inside the pattern.
Anything else is left as it is.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Function, Op, Region
from .fuse import _Group, _outline_all, _users
from .rewrite import splat_value
from .manager import Pass

MAX_HEAD = 128


def _only_user(users: dict, v):
    us = users.get(id(v), [])
    return us[0] if len(us) == 1 else None


def _next(users: dict, v):
    """The op after `v` in the pattern: its only user, or of two users (a guard's reduce_max beside it) the softmax."""
    us = users.get(id(v), [])
    if len(us) == 1:
        return us[0]
    return next((u for u in us if u is not None and u.name == "softmax"), None) if len(us) == 2 else None


def _scale_of(op: Op, at: int = 1):
    """The constant a `div`/`mul` scales by (its right operand: broadcast_to of a `full`), or None."""
    b = op.operands[at].owner
    if not (isinstance(b, Op) and b.name == "broadcast_to" and isinstance(b.operands[0].owner, Op)
            and b.operands[0].owner.name == "full"):
        return None
    return b, b.operands[0].owner


def _filled(op: Op, at: int, value: float, users: dict):
    """[full, broadcast_to] when operand `at` of `op` is a broadcast scalar `value` used only there, else None."""
    pair = _scale_of(op, at)
    if pair is None or float(pair[1].attrs["value"]) != value or _only_user(users, pair[0].results[0]) is not op \
            or _only_user(users, pair[1].results[0]) is not pair[0]:
        return None
    return [pair[1], pair[0]]


def _mask(op: Op, v, users: dict):
    """The ops of a mask applied to scores `v` by `op` (an additive f32 tensor or a bool keep-mask), or None."""
    if op.name == "add" and v in op.operands:
        other = op.operands[1] if op.operands[0] is v else op.operands[0]
        return [op] if other is not v and other.type == v.type else None
    if op.name == "where" and op.operands[1] is v and op.operands[0].type.dtype.value == "bool" and \
            tuple(op.operands[0].type.shape) == tuple(v.type.shape):
        fill = _filled(op, 2, float("-inf"), users)
        return fill + [op] if fill else None
    return None


def _guard(sm: Op, v, users: dict):
    """The ops of `where(reduce_max(v) == -inf, 0, softmax(v))` around softmax `sm` of scores `v`, ending with the
    guard's where, or None."""
    us = users.get(id(v), [])
    rm = next((u for u in us if u is not None and u.name == "reduce_max"), None)
    if len(us) != 2 or rm is None or sm not in us or list(rm.attrs["axes"]) != [v.type.rank - 1] or \
            not rm.attrs["keepdims"]:
        return None
    eq = _only_user(users, rm.results[0])
    if eq is None or eq.name != "eq" or eq.operands[0] is not rm.results[0]:
        return None
    inf = _filled(eq, 1, float("-inf"), users)
    cond = _only_user(users, eq.results[0])
    if inf is None or cond is None or cond.name != "broadcast_to":
        return None
    w = _only_user(users, cond.results[0])
    if w is None or w.name != "where" or w.operands[0] is not cond.results[0] or w.operands[2] is not sm.results[0] \
            or _only_user(users, sm.results[0]) is not w:
        return None
    zero = _filled(w, 1, 0.0, users)
    return [rm, *inf, eq, cond, *zero, w] if zero else None


def _swaps_last_two(tr: Op) -> bool:
    n = tr.results[0].type.rank
    return tuple(tr.attrs["perm"]) == (*range(n - 2), n - 1, n - 2)


def _regrouped_swap(kt, users: dict):
    """[reshape, transpose, reshape] when `kt` is K^T made with the batch axes regrouped around the swap of the last
    two (the ONNX exporter's [B,H,S,D] -> [B*H,S,D] -> [B*H,D,S] -> [B,H,D,S]), each used only by the next, or None."""
    outer = kt.owner
    tr = outer.operands[0].owner if isinstance(outer, Op) and outer.name == "reshape" else None
    inner = tr.operands[0].owner if isinstance(tr, Op) and tr.name == "transpose" else None
    if not (isinstance(inner, Op) and inner.name == "reshape" and _swaps_last_two(tr)):
        return None
    k, t_in, t_out = inner.operands[0].type, tr.operands[0].type, tr.results[0].type
    same_tail = k.rank >= 2 and tuple(k.shape[-2:]) == tuple(t_in.shape[-2:]) and \
        tuple(t_out.shape[-2:]) == tuple(kt.type.shape[-2:])
    single = _only_user(users, inner.results[0]) is tr and _only_user(users, tr.results[0]) is outer and \
        len(users.get(id(kt), [])) == 1
    return [inner, tr, outer] if same_tail and single else None


def _nan_guard(sm: Op, users: dict):
    """The ops of `where(isnan(p), 0, p)` after softmax `sm` (the ONNX exporter's SDPA: a row of NaN gives 0), [] when
    the softmax's only user is something else, or None."""
    p = sm.results[0]
    us = users.get(id(p), [])
    nan = next((u for u in us if u is not None and u.name == "isnan"), None)
    if len(us) == 1 or nan is None:
        return [] if len(us) == 1 else None
    w = _only_user(users, nan.results[0])
    if len(us) != 2 or w is None or w.name != "where" or w not in us or w.operands[0] is not nan.results[0] or \
            w.operands[2] is not p:
        return None
    zero = _filled(w, 1, 0.0, users)
    return [nan, *zero, w] if zero else None


def match_attention(mm: Op, users: dict):
    """The ops of an attention rooted at score matmul `mm`, or None."""
    q, kt = mm.operands
    tr, rank = kt.owner, q.type.rank
    if mm.results[0].type.dtype.value != "f32" or rank < 2:
        return None
    regrouped = _regrouped_swap(kt, users)
    if regrouped:
        tr = regrouped[1]
    swap = bool(regrouped) or isinstance(tr, Op) and tr.name == "transpose" and _only_user(users, kt) is mm and \
        _swaps_last_two(tr)
    # otherwise K^T is read as it is stored (BERT's [B,S,H,D] -> [B,H,D,S]; the ONNX exporter's K^T * sqrt(scale))
    ops, v = (regrouped or ([tr] if swap else [])) + [mm], mm.results[0]
    nxt = _next(users, v)
    if nxt is not None and nxt.name in ("div", "mul") and nxt.operands[0] is v and _scale_of(nxt):
        b, full = _scale_of(nxt)
        if _only_user(users, b.results[0]) is not nxt or _only_user(users, full.results[0]) is not b:
            return None
        ops += [full, b, nxt]
        v, nxt = nxt.results[0], _next(users, nxt.results[0])
    masked = _mask(nxt, v, users) if nxt is not None else None
    if masked:
        ops += masked
        v = masked[-1].results[0]
        nxt = _next(users, v)
    if nxt is None or nxt.name != "softmax" or nxt.attrs["axis"] not in (-1, rank - 1):
        return None
    guard = _guard(nxt, v, users) if _only_user(users, v) is not nxt else _nan_guard(nxt, users)
    if guard is None:
        return None
    out = guard[-1].results[0] if guard else nxt.results[0]
    pv = _only_user(users, out)
    if pv is None or pv.name != "matmul" or pv.operands[0] is not out:
        return None
    k, val = (regrouped[0].operands[0] if regrouped else tr.operands[0]) if swap else kt, pv.operands[1]
    d, dv = q.type.shape[-1], val.type.shape[-1]
    same_batch = k.type.rank == rank and val.type.rank == rank and \
        q.type.shape[:-2] == k.type.shape[:-2] == val.type.shape[:-2] and (swap or kt.type.shape[-2] == d)
    if not (same_batch and isinstance(d, int) and isinstance(dv, int) and d <= MAX_HEAD and dv <= MAX_HEAD):
        return None
    return ops + [nxt, *guard, pv]


@dataclass
class AttentionParts:
    """What a backend's kernel needs of a FuseAttention group, as values outside it (the fused op's operands)."""
    q: object
    k: object  # [.., keys, d], or K^T [.., d, keys] as stored when k_transposed
    v: object
    k_transposed: bool
    scale: float
    mask_kind: str | None  # "add" (f32 added to the scores), "keep" (bool: where it holds), or None
    mask: object
    guarded: int  # 0: a row with no key left is NaN (as softmax); 1: it gives 0; 2: every NaN row gives 0


def attention_parts(op: Op) -> AttentionParts:
    """The parts of fused attention `op` (FuseAttention's group)."""
    body = op.regions[0].ops
    source = dict(zip((id(a) for a in op.regions[0].args), op.operands))
    kind, mask = attention_mask(body)
    tr = next((o for o in body if o.name == "transpose"), None)
    matmuls = [o for o in body if o.name == "matmul"]
    mm, pv = matmuls[0], matmuls[-1]
    k_in = tr.operands[0] if tr is not None else mm.operands[1]
    while id(k_in) not in source:  # K regrouped by reshapes around its transpose (_regrouped_swap)
        k_in = k_in.owner.operands[0]
    scale = 1.0
    for o in body:
        if o.name in ("div", "mul"):
            c = float(o.operands[1].owner.operands[0].owner.attrs["value"])
            scale = 1.0 / c if o.name == "div" else c
    return AttentionParts(source[id(mm.operands[0])], source[id(k_in)], source[id(pv.operands[1])], tr is None,
                          scale, kind, source[id(mask)] if kind else None,
                          next((g for name, g in GUARDS.items() if any(o.name == name for o in body)), 0))


GUARDS = {"reduce_max": 1, "isnan": 2}  # the op that tells a guard's kind (AttentionParts.guarded)


def attention_mask(body: list) -> tuple:
    """("add", the f32 mask value), ("keep", the bool mask value) or (None, None): the mask of a FuseAttention group
    (its add or where before the softmax; the guard's where comes after it)."""
    softmax = next(k for k, o in enumerate(body) if o.name == "softmax")
    for o in body[:softmax]:
        if o.name == "add":
            return "add", next(x for x in o.operands if x.type.dtype.value == "f32" and not _is_scores(x, body))
        if o.name == "where":
            return "keep", o.operands[0]
    return None, None


def _is_scores(x, body: list) -> bool:
    """Whether `x` is computed in the group (the scores), not the mask coming in."""
    return any(x is r for o in body for r in o.results)


FILLED = ("mul", "div", "where", "eq")  # the ops of the pattern that read a broadcast scalar


def _reads_a_pattern_scalar(op) -> bool:
    """Whether `op` reads a scalar where the pattern has one: a scale of a matmul's result, a guard's 0."""
    producer = {"mul": "matmul", "div": "matmul", "where": "softmax"}.get(op.name) if op is not None else None
    x = op.operands[0 if op is not None and op.name != "where" else 2] if producer else None
    return producer is not None and isinstance(x.owner, Op) and x.owner.name == producer


def fill_scalar_constants(region: Region, module) -> None:
    """Read each rank-0 constant that the pattern reads through a broadcast_to as a `full` of its value (the ONNX
    frontend's scale 1/sqrt(d) and its guard's 0 are such constants), so the pattern's scalars are fills."""
    users, out = _users(region), []
    for op in region.ops:
        c = op.operands[0].owner if op.name == "broadcast_to" else None
        value = splat_value(op.operands[0], module) if isinstance(c, Op) and c.name == "constant" and \
            c.results[0].type.rank == 0 and c.results[0].type.dtype.value == "f32" else None
        if value is not None and all(_reads_a_pattern_scalar(u) for u in users.get(id(op.results[0]), [])):
            t = c.results[0].type
            f = Op("full", [], {"value": float(value), "shape": (), "dtype": t.dtype}, [t], loc=c.loc)
            f.parent = region
            out.append(f)
            op.operands[0] = f.results[0]
        out.append(op)
    region.ops = out


def unshare_fills(region: Region) -> None:
    """Give each mul/div/where/eq reading a broadcast scalar (broadcast_to of a `full`) that other ops read too its
    own copy of both (CSE shares one -inf or scale fill between every layer), dropping the shared ones left unused."""
    users = _users(region)
    out, changed = [], False
    for op in region.ops:
        for k, x in enumerate(op.operands):
            pair = _scale_of(op, k) if op.name in FILLED else None
            if pair and (len(users[id(x)]) > 1 or len(users[id(pair[1].results[0])]) > 1):
                b, f = pair
                f2 = Op("full", [], f.attrs, [f.results[0].type], loc=f.loc)
                b2 = Op("broadcast_to", [f2.results[0]], b.attrs, [x.type], loc=b.loc)
                f2.parent = b2.parent = region
                out += [f2, b2]
                op.operands[k], changed = b2.results[0], True
        out.append(op)
    region.ops = out
    for name in ("broadcast_to", "full") if changed else ():  # a shared fill nobody reads now, then its scalar
        used = _users(region)
        region.ops = [o for o in region.ops if o.name != name or used.get(id(o.results[0]))]


class FuseAttention(Pass):
    """Outline each matched attention (see the module docstring) into one fused library op."""

    name = "fuse-attention"

    def run_on_operation(self, fn: Function) -> bool:
        return self._region(fn, fn.body)

    def _region(self, fn: Function, region: Region) -> bool:
        fill_scalar_constants(region, fn.module)
        unshare_fills(region)
        users = _users(region)
        groups, taken = [], set()
        for op in region.ops:
            if op.name == "matmul" and id(op) not in taken:
                ops = match_attention(op, users)
                if ops is not None and not taken & {id(o) for o in ops}:
                    taken |= {id(o) for o in ops}
                    groups.append(_Group(ops[-1], ops, kind="library"))
        if groups:
            _outline_all(fn, region, groups)
            for op in region.ops:  # named for what it is (the outliner names a group after its first four ops)
                if op.name == "fused" and op.attrs["kind"] == "library" and \
                        any(o.name == "softmax" for o in op.regions[0].ops):
                    op.attrs["name"] = "attention"
        return bool(groups)
