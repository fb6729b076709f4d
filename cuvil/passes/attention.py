"""FuseAttention: softmax(Q @ K^T * scale) @ V as one `fused` op of kind "library" (name "attention"), for a backend
with a fused attention kernel (the CUDA backend's flash-style one: scores never reach memory).

Matched (f32): matmul(Q, transpose(K) of the last two axes, or K^T made by another transpose), optionally divided
or multiplied by a broadcast scalar constant, optionally masked (`add` of an f32 tensor of the scores' shape: an
additive mask; or `where(bool mask, scores, -inf)`: torch SDPA's padding and causal masks), softmax over the last
axis, optionally guarded (`where(reduce_max(scores) == -inf, 0, softmax)`: a row with no key left gives 0), matmul
with V; Q, K, V of one rank and equal batch axes, head sizes static and at most MAX_HEAD; every intermediate used
only inside the pattern.
Anything else is left as it is.
"""
from __future__ import annotations

from ..ir.core import Function, Op, Region
from .fuse import _Group, _outline_all, _users
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


def match_attention(mm: Op, users: dict):
    """The ops of an attention rooted at score matmul `mm`, or None."""
    q, kt = mm.operands
    tr, rank = kt.owner, q.type.rank
    if mm.results[0].type.dtype.value != "f32" or rank < 2:
        return None
    swap = isinstance(tr, Op) and tr.name == "transpose" and _only_user(users, kt) is mm and \
        tuple(tr.attrs["perm"]) == (*range(rank - 2), rank - 1, rank - 2)
    if not swap and not (isinstance(tr, Op) and tr.name == "transpose"):
        return None  # K^T of another transpose (BERT's [B,S,H,D] -> [B,H,D,S]) is read as it is stored
    ops, v = ([tr] if swap else []) + [mm], mm.results[0]
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
    guard = _guard(nxt, v, users) if _only_user(users, v) is not nxt else []
    if guard is None:
        return None
    out = guard[-1].results[0] if guard else nxt.results[0]
    pv = _only_user(users, out)
    if pv is None or pv.name != "matmul" or pv.operands[0] is not out:
        return None
    k, val = tr.operands[0] if swap else kt, pv.operands[1]
    d, dv = q.type.shape[-1], val.type.shape[-1]
    same_batch = k.type.rank == rank and val.type.rank == rank and \
        q.type.shape[:-2] == k.type.shape[:-2] == val.type.shape[:-2] and (swap or kt.type.shape[-2] == d)
    if not (same_batch and isinstance(d, int) and isinstance(dv, int) and d <= MAX_HEAD and dv <= MAX_HEAD):
        return None
    return ops + [nxt, *guard, pv]


FILLED = ("mul", "div", "where", "eq")  # the ops of the pattern that read a broadcast scalar


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
