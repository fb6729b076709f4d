"""A small pattern-rewrite engine: rules are data (a pattern and a function that builds the replacement).

    rules = [
        Rule(Pat("mul", Pat.any("x"), Pat.splat(1.0)), lambda b, m: m.x),   # x * 1 -> x
    ]
    apply_rules(fn, rules)

A pattern matches a value by the op that produces it, that op's operands (patterns again), required
attribute values and an optional predicate; named sub-patterns bind values. Commutative binary ops match
with operands in either order. The engine runs rules to a fixpoint; the replacement function gets a
`Builder` positioned before the matched op and returns the new value, or None to decline.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..errors import VerificationError
from ..ir.builder import Builder
from ..ir.core import Function, Module, Op, Region, Value
from ..ops import registry

# constants of more elements than this, and more bytes than as many f32, are not scanned for a splat value (a bool
# mask of ViT's [2,1,197,197] is)
SPLAT_SCAN_LIMIT = 1 << 16


class Pat:
    """A value pattern. `op` is an op name or a set of names (None: any value)."""

    def __init__(self, op=None, *args: "Pat", bind: Optional[str] = None, attrs: Optional[dict] = None,
                 where: Optional[Callable[[Value, Module], bool]] = None):
        self.ops = None if op is None else ({op} if isinstance(op, str) else set(op))
        self.args = args if args else None
        self.bind = bind
        self.attrs = attrs or {}
        self.where = where

    @staticmethod
    def any(bind: Optional[str] = None, where=None) -> "Pat":
        return Pat(None, bind=bind, where=where)

    @staticmethod
    def splat(value: Optional[float] = None, bind: Optional[str] = None) -> "Pat":
        """A constant whose elements all equal `value` (any single value when None)."""
        def check(v: Value, module: Module) -> bool:
            s = splat_value(v, module)
            return s is not None and (value is None or s == value)
        return Pat(None, bind=bind, where=check)


class Match:
    """The values a pattern bound, as attributes (`m.x`), plus the matched root op."""

    def __init__(self, root: Op, bindings: dict):
        self.root = root
        self.__dict__.update(bindings)


@dataclass
class Rule:
    pattern: Pat
    rewrite: Callable  # (Builder, Match) -> Value | None
    name: str = ""


def match(pat: Pat, value: Value, bindings: dict, module: Module) -> bool:
    owner = value.owner if isinstance(value.owner, Op) else None
    if pat.ops is not None and (owner is None or owner.name not in pat.ops):
        return False
    if pat.attrs and any(owner.attrs.get(k) != v for k, v in pat.attrs.items()):
        return False
    if pat.args is not None:
        if len(pat.args) != len(owner.operands):
            return False
        if not _match_operands(pat.args, owner, bindings, module):
            return False
    if pat.where is not None and not pat.where(value, module):
        return False
    if pat.bind is not None:
        if pat.bind in bindings and bindings[pat.bind] is not value:
            return False
        bindings[pat.bind] = value
    return True


def _match_operands(args, owner: Op, bindings: dict, module: Module) -> bool:
    orders = [owner.operands]
    if len(owner.operands) == 2 and "commutative" in registry.get_op(owner.name).traits:
        orders.append(owner.operands[::-1])
    for operands in orders:
        trial = dict(bindings)
        if all(match(p, v, trial, module) for p, v in zip(args, operands)):
            bindings.update(trial)
            return True
    return False


def apply_rules(fn: Function, rules: list, max_rounds: int = 16) -> bool:
    """Rewrite `fn` with `rules` until none applies; return whether anything changed."""
    by_root: dict = {}
    for rule in rules:
        for name in rule.pattern.ops or [None]:
            by_root.setdefault(name, []).append(rule)
    changed = False
    for _ in range(max_rounds):
        round_changed = False
        for op in list(fn.walk()):
            if op.parent is None or len(op.results) != 1:
                continue
            for rule in by_root.get(op.name, []) + by_root.get(None, []):
                if _try_rule(fn, op, rule):
                    round_changed = True
                    break
        changed |= round_changed
        if not round_changed:
            break
    return changed


def _try_rule(fn: Function, op: Op, rule: Rule) -> bool:
    bindings: dict = {}
    root = op.results[0]
    if not match(rule.pattern, root, bindings, fn.module):
        return False
    scratch = Region()
    b = Builder(fn.module, fn, scratch, op.loc)
    new = rule.rewrite(b, Match(op, bindings))
    if new is None or new is root:
        return False
    if new.type != root.type:
        raise VerificationError(f"rewrite rule '{rule.name}' replaced {root.type} with {new.type}", op.loc)
    replace_op(fn, op, scratch.ops, [new])
    return True


def replace_op(fn: Function, op: Op, new_ops: list, new_results: list) -> None:
    """Put `new_ops` where `op` was and make every use of its results use `new_results`. Only the ops after it in
    its region (and the regions they hold) can use its results, so only those are visited: a pass that rewrites
    every op would otherwise walk the whole function each time (BERT-base: 0.67 s of its cold compile)."""
    region = op.parent
    at = region.ops.index(op)
    for new in new_ops:
        new.parent = region
    region.ops[at:at + 1] = new_ops
    op.parent = None
    mapping = {id(r): v for r, v in zip(op.results, new_results)}
    for later in region.ops[at + len(new_ops):]:
        for user in later.walk():
            if any(id(v) in mapping for v in user.operands):
                user.operands = [mapping.get(id(v), v) for v in user.operands]


def splat_value(v: Value, module: Module) -> Optional[float]:
    """The single value every element of `v` holds, when `v` is such a constant (through broadcast_to)."""
    owner = v.owner if isinstance(v.owner, Op) else None
    if owner is None:
        return None
    if owner.name == "full":
        return owner.attrs["value"]
    if owner.name == "broadcast_to":
        return splat_value(owner.operands[0], module)
    if owner.name == "constant":
        return _splat_of_array(module.constants.get(owner.attrs["name"]))
    return None


def _splat_of_array(arr) -> Optional[float]:
    too_big = arr is not None and arr.size > SPLAT_SCAN_LIMIT and arr.nbytes > 4 * SPLAT_SCAN_LIMIT
    if arr is None or arr.size == 0 or too_big or np.iscomplexobj(arr):  # a float cannot hold a complex one
        return None
    first = arr.flat[0]
    return float(first) if bool(np.all(arr == first)) else None
