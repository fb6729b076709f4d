"""FuseAttention: softmax(Q @ K^T * scale) @ V as one `fused` op of kind "library" (name "attention"), for a backend
with a fused attention kernel (the CUDA backend's flash-style one: scores never reach memory).

Matched (f32): matmul(Q, transpose(K) of the last two axes), optionally divided or multiplied by a broadcast scalar
constant, softmax over the last axis, matmul with V; Q, K, V of one rank and equal batch axes, head sizes static and
at most MAX_HEAD; every intermediate used once. Anything else (a mask added before the softmax) is left as it is.
"""
from __future__ import annotations

from ..ir.core import Function, Op, Region
from .fuse import _Group, _outline_all, _users
from .manager import Pass

MAX_HEAD = 128


def _only_user(users: dict, v):
    us = users.get(id(v), [])
    return us[0] if len(us) == 1 else None


def _scale_of(op: Op):
    """The constant a `div`/`mul` scales by (its right operand: broadcast_to of a `full`), or None."""
    b = op.operands[1].owner
    if not (isinstance(b, Op) and b.name == "broadcast_to" and isinstance(b.operands[0].owner, Op)
            and b.operands[0].owner.name == "full"):
        return None
    return b, b.operands[0].owner


def match_attention(mm: Op, users: dict):
    """The ops of an attention rooted at score matmul `mm`, or None."""
    q, kt = mm.operands
    tr = kt.owner
    if not (isinstance(tr, Op) and tr.name == "transpose" and mm.results[0].type.dtype.value == "f32"):
        return None
    rank = q.type.rank
    if rank < 2 or tuple(tr.attrs["perm"]) != (*range(rank - 2), rank - 1, rank - 2) or _only_user(users, kt) is not mm:
        return None
    ops, v = [tr, mm], mm.results[0]
    nxt = _only_user(users, v)
    if nxt is not None and nxt.name in ("div", "mul") and nxt.operands[0] is v and _scale_of(nxt):
        b, full = _scale_of(nxt)
        if _only_user(users, b.results[0]) is not nxt or _only_user(users, full.results[0]) is not b:
            return None
        ops += [full, b, nxt]
        v, nxt = nxt.results[0], _only_user(users, nxt.results[0])
    if nxt is None or nxt.name != "softmax" or nxt.attrs["axis"] not in (-1, rank - 1):
        return None
    pv = _only_user(users, nxt.results[0])
    if pv is None or pv.name != "matmul" or pv.operands[0] is not nxt.results[0]:
        return None
    k, val = tr.operands[0], pv.operands[1]
    d, dv = q.type.shape[-1], val.type.shape[-1]
    same_batch = k.type.rank == rank and val.type.rank == rank and \
        q.type.shape[:-2] == k.type.shape[:-2] == val.type.shape[:-2]
    if not (same_batch and isinstance(d, int) and isinstance(dv, int) and d <= MAX_HEAD and dv <= MAX_HEAD):
        return None
    return ops + [nxt, pv]


class FuseAttention(Pass):
    """Outline each matched attention (see the module docstring) into one fused library op."""

    name = "fuse-attention"

    def run_on_operation(self, fn: Function) -> bool:
        return self._region(fn, fn.body)

    def _region(self, fn: Function, region: Region) -> bool:
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
