"""Fusion grouping: decide which ops share one kernel and wrap each group in a `fused` op.

The backend says which ops its loop kernels can compute (`loop_ops`) and which reductions can close a
group (`reduce_ops`). Walking each region from its end, a producer joins its consumers' group when:
- every user of the producer is in that group or comes after the group's root (so the group can run at
  the root's position without a cycle), and the group has one consumer group (no duplicated work);
- it does not multiply work: its element count equals the group's domain, or it only moves data
  (broadcast of a constant, reshape...), which is free to recompute; a broadcast that feeds several loop ops
  is first copied once per user, so that no kernel materialises it for the others to read;
- in a reduce group, a value at the reduction's input domain is never needed outside the group, and only
  the reduction's output domain feeds the epilogue: a reduction's result is not re-read inside the loop
  nest that computes it, and the epilogue reads each result where it was computed (elementwise ops and
  reshapes; a gather or a transpose of the result starts a group of its own).
Every remaining loop op becomes a group of its own, so the backend sees only `fused` ops, the ops it
implements directly (matmul, conv, ...) and control flow.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir.core import Function, Op, Region
from .manager import Pass
from .rewrite import splat_value

CHEAP_OPS = frozenset({"broadcast_to", "reshape", "transpose", "slice", "full", "iota", "dim_size", "cast",
                       "concat", "pad", "neg"})


@dataclass
class _Group:
    root: Op
    ops: list = field(default_factory=list)
    reduce: Op = None
    kind: str = ""

    @property
    def domain(self):
        """Element count of the iteration space: the reduction's input, or the root's output."""
        v = self.reduce.operands[0] if self.reduce is not None else self.root.results[0]
        return v.type.numel

    @property
    def out_domain(self):
        return (self.reduce or self.root).results[0].type.numel


class FuseOps(Pass):
    """Group loop-computable ops into `fused` kernels (see the module docstring for the rules)."""

    name = "fuse"

    def __init__(self, loop_ops, reduce_ops: frozenset, join: bool = True):
        """`loop_ops`: a set of op names, or a predicate on the name (user ops may join at any time).
        With `join=False` every op gets a kernel of its own (fusion off, for comparison and debugging)."""
        self.is_loop = loop_ops if callable(loop_ops) else frozenset(loop_ops).__contains__
        self.reduce_ops = frozenset(reduce_ops)
        self.join = join

    def run_on_operation(self, fn: Function) -> bool:
        return self._region(fn, fn.body)

    def _region(self, fn: Function, region: Region) -> bool:
        changed = False
        for op in region.ops:
            if op.name != "fused":
                for r in op.regions:
                    changed |= self._region(fn, r)
        if self.join:
            self._replicate_broadcasts(region)
        groups = self._groups(region)
        if groups:
            _outline_all(fn, region, groups)
        return changed or bool(groups)

    def _replicate_broadcasts(self, region: Region) -> None:
        """Give each loop op that reads a shared broadcast its own copy (CSE merges a transformer's per-layer
        scale factors into one; reading the broadcast tensor costs what recomputing its index saves)."""
        users = _users(region)
        for op in [o for o in region.ops if o.name == "broadcast_to"]:
            v = op.results[0]
            # each reading op once: an op that reads the broadcast twice (concat(b, b, x)) gets one copy
            uses = users.get(id(v), [])
            readers = list({id(u): u for u in uses if u is not None and self.is_loop(u.name)
                            and any(x is v for x in u.operands)}.values())
            others = sum(1 for u in uses if u is None or all(u is not r for r in readers))
            for u in readers if others else readers[1:]:
                copy = Op(op.name, op.operands, op.attrs, [v.type], (), op.loc)
                copy.parent = region
                region.ops.insert(region.ops.index(u), copy)
                u.operands = [copy.results[0] if x is v else x for x in u.operands]

    def _groups(self, region: Region) -> list:
        position = {id(op): i for i, op in enumerate(region.ops)}
        users = _users(region)
        group_of: dict = {}
        groups: list = []
        for op in reversed(region.ops):
            if not self.is_loop(op.name) and op.name not in self.reduce_ops:
                continue
            if len(op.results) != 1:
                continue
            target = self._target_group(op, users, group_of, position) if self.join else None
            if target is None:
                target = _Group(op, reduce=op if op.name in self.reduce_ops else None)
                groups.append(target)
            elif op.name in self.reduce_ops:
                target.reduce = op
            target.ops.append(op)
            group_of[id(op)] = target
        return groups

    def _target_group(self, op: Op, users: dict, group_of: dict, position: dict):
        op_users = users.get(id(op.results[0]), [])
        consumer_groups = {id(group_of[id(u)]): group_of[id(u)] for u in op_users if id(u) in group_of}
        if len(consumer_groups) != 1:
            return None
        g = next(iter(consumer_groups.values()))
        root_at = position[id(g.root)]
        outside = [u for u in op_users if group_of.get(id(u)) is not g]
        if any(u is None or position.get(id(u), -1) <= root_at for u in outside):
            return None
        numel = op.results[0].type.numel
        if op.name in self.reduce_ops:
            # a reduction closes a loop group whose domain is its output: it becomes the group's reduction, if the
            # group reads each result where the reduction leaves it (not through a gather or a transpose)
            return g if g.reduce is None and numel == g.domain and not outside and _read_in_place(op, g) else None
        if g.reduce is not None:
            feeds_reduction = _reaches(op, g.reduce, g)
            if feeds_reduction:
                return g if numel == g.domain and not outside else None
            return g if numel == g.out_domain else None
        if outside and numel != g.domain:
            return None
        return g if numel == g.domain or op.name in CHEAP_OPS else None


def _users(region: Region) -> dict:
    """value id -> ops of this region that use it (an op holding a nested use counts as the user);
    uses by the terminator map to None, which never joins a group."""
    out: dict = {}
    for op in region.ops:
        for v in _operands_deep(op):
            user = None if "terminator" in _traits(op) else op
            out.setdefault(id(v), []).append(user)
    return out


def _operands_deep(op: Op):
    yield from op.operands
    for r in op.regions:
        for inner in r.walk():
            yield from inner.operands


def _traits(op: Op):
    from ..ops import registry

    return registry.get_op(op.name).traits


# Ops that read each element of their operand at the position they write it (flat, in row-major order).
IN_PLACE_READS = frozenset({"reshape"})


def _read_in_place(op: Op, g: _Group) -> bool:
    """Whether every op of `g` reached from `op`'s result reads it element for element (elementwise ops and
    reshapes): a reduction's epilogue sees the result only at the position the reduction computed."""
    stack, seen = [op.results[0]], set()
    while stack:
        v = stack.pop()
        for u in (o for o in g.ops if any(x is v for x in o.operands)):
            if u.name not in IN_PLACE_READS and "elementwise" not in _traits(u):
                return False
            if id(u) not in seen:
                seen.add(id(u))
                stack += u.results
    return True


def _reaches(op: Op, target: Op, g: _Group) -> bool:
    """Whether `op`'s result flows into `target` through ops of the group."""
    members = {id(o) for o in g.ops}
    stack, seen = [target], set()
    while stack:
        cur = stack.pop()
        for v in cur.operands:
            owner = v.owner
            if owner is op:
                return True
            if isinstance(owner, Op) and id(owner) in members and id(owner) not in seen:
                seen.add(id(owner))
                stack.append(owner)
    return False


def _outline_all(fn: Function, region: Region, groups: list) -> None:
    """Replace each group's ops with one `fused` op placed where its root was; remap uses once."""
    users = _users(region)
    position = {id(op): i for i, op in enumerate(region.ops)}
    remap, fused_after = {}, {}
    for g in groups:
        members = sorted(g.ops, key=lambda o: position[id(o)])
        fused, outputs = _outline(g, members, users)
        remap.update({id(v): r for v, r in zip(outputs, fused.results)})
        fused_after[id(members[-1])] = fused
    member_ids = {id(o) for g in groups for o in g.ops}
    new_ops = []
    for op in region.ops:
        if id(op) not in member_ids:
            new_ops.append(op)
        else:
            op.parent = None
        if id(op) in fused_after:
            fused_after[id(op)].parent = region
            new_ops.append(fused_after[id(op)])
    region.ops = new_ops
    fn.replace_uses(remap)


def _outline(g: _Group, members: list, users: dict):
    member_ids = {id(o) for o in members}
    inputs, seen = [], set()
    for o in members:
        for v in o.operands:
            if not (isinstance(v.owner, Op) and id(v.owner) in member_ids) and id(v) not in seen:
                seen.add(id(v))
                inputs.append(v)
    outputs = [r for o in members for r in o.results
               if any(u is None or id(u) not in member_ids for u in users.get(id(r), []))]
    body = Region([v.type for v in inputs])
    mapping = {id(v): a for v, a in zip(inputs, body.args)}
    for o in members:
        clone = Op(o.name, [mapping[id(v)] for v in o.operands], o.attrs, [r.type for r in o.results], (), o.loc)
        for r, c in zip(o.results, clone.results):
            mapping[id(r)] = c
        body.append(clone)
    body.append(Op("yield", [mapping[id(v)] for v in outputs], {}, [], (), g.root.loc))
    kind = g.kind or ("reduce" if g.reduce is not None else "loop")
    names = list(dict.fromkeys(o.name for o in members if o.name not in ("full", "dim_size")))
    fused = Op("fused", inputs, {"kind": kind, "name": "_".join(names[:4]) or members[-1].name},
               [v.type for v in outputs], [body], g.root.loc)
    return fused, outputs


GEMM_ACTIVATIONS = {"relu", "gelu", "sigmoid", "tanh", "silu", "hardswish"}  # the kernel library's epilogues


class FuseLibraryEpilogue(Pass):
    """Library kernels with their epilogue, each as one `fused` op of kind "library":
    - matmul -> (+ bias broadcast along rows) -> (activation): the GEMM applies it while its output tile is in
      registers;
    - depthwise f32 conv -> clamps (relu, clip, max/min with a constant): `cuvil_dwconv2d` clamps on its way
      out; other f32 convs -> relu or relu6: their GEMM's epilogue. The chain becomes one `clip` in the body,
      so a bound broadcast only for it is never materialised;
    - other f32 convs -> sigmoid, tanh, gelu, silu or hardswish: the GEMM's epilogue too."""

    name = "fuse-library-epilogue"

    def run_on_operation(self, fn: Function) -> bool:
        changed = False
        regions = [fn.body] + [r for op in fn.walk() if op.name in ("cond", "while") for r in op.regions]
        for region in regions:
            users = _users(region)
            for op in list(region.ops):
                rule = LIBRARY_EPILOGUES.get(op.name)
                if rule is not None and op.parent is region and rule(fn, region, op, users):
                    users = _users(region)
                    changed = True
        return changed


def _gemm_epilogue(fn: Function, region: Region, mm: Op, users: dict) -> bool:
    chain = _epilogue_chain(mm, users) if mm.results[0].type.dtype.value == "f32" else []
    if len(chain) > 1:
        _outline_all(fn, region, [_Group(chain[-1], chain, kind="library")])
    return len(chain) > 1


# The clamps a GEMM-computed conv's epilogue applies: relu and relu6 (MobileNet's).
CONV_GEMM_CLAMPS = {(0.0, math.inf): "relu", (0.0, 6.0): "relu6"}


def _conv_clamp(fn: Function, region: Region, conv: Op, users: dict) -> bool:
    """f32 conv -> clamps: any clamp for a depthwise 1-D/2-D conv (`cuvil_dwconv2d` clamps), relu or relu6 for
    a conv on the GEMM (more than one input channel per group: its epilogue)."""
    w, y = conv.operands[1].type, conv.results[0].type
    depthwise = w.shape[1] == 1
    if y.dtype.value != "f32" or (depthwise and w.rank > 4):
        return False
    chain, lo, hi = _clamp_chain(conv.results[0], users, fn.module)
    act = _only_user(conv.results[0], users)
    if not chain and not depthwise and act is not None and act.name in GEMM_ACTIVATIONS:
        _fuse_conv(fn, region, conv, [act], act.name, act.attrs)
        return True
    if not chain or (not depthwise and (lo, hi) not in CONV_GEMM_CLAMPS):
        return False
    _fuse_conv(fn, region, conv, chain, "clip", {"min": lo, "max": hi})
    return True


def _fuse_conv(fn: Function, region: Region, conv: Op, chain: list, epilogue: str, attrs: dict) -> None:
    """Replaces conv and the `chain` after it with one `fused` library op: conv, then the op `epilogue` (`attrs`)
    on its result."""
    y = conv.results[0].type
    body = Region([v.type for v in conv.operands])
    inner = body.append(Op("conv", body.args, conv.attrs, [y], (), conv.loc))
    epilogue = body.append(Op(epilogue, inner.results, attrs, [y], (), chain[-1].loc))
    body.append(Op("yield", epilogue.results, {}, [], (), chain[-1].loc))
    members = [conv] + chain
    name = "_".join(dict.fromkeys(o.name for o in members))
    fused = Op("fused", list(conv.operands), {"kind": "library", "name": name}, [y], [body], conv.loc)
    fused.parent = region
    bounds = [v.owner for o in chain for v in o.operands if isinstance(v.owner, Op) and v.owner not in members]
    region.ops[region.ops.index(chain[-1])] = fused
    for o in members[:-1]:
        region.ops.remove(o)
    for o in members:
        o.parent = None
    fn.replace_uses({id(chain[-1].results[0]): fused.results[0]})
    _drop_unused(region, bounds)


def _clamp_chain(v, users: dict, module) -> tuple:
    """(ops, lo, hi): the clamps applied to `v` one after another, each the only user of the one before, and
    the bounds of the one clamp they make. Stops before a clamp whose bounds miss the others' (a constant)."""
    chain, lo, hi = [], -math.inf, math.inf
    op = _only_user(v, users)
    while op is not None and op.name in CLAMPS:
        bounds = CLAMPS[op.name](op, v, module)
        if bounds is None or max(lo, bounds[0]) > min(hi, bounds[1]):
            break
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
        chain.append(op)
        v = op.results[0]
        op = _only_user(v, users)
    return chain, lo, hi


def _splat_bound(op: Op, v, module):
    """The constant that binary `op` compares `v` with, when its other operand is one (NaN would win)."""
    other = op.operands[1] if op.operands[0] is v else op.operands[0]
    c = splat_value(other, module) if other is not v else None
    return None if c is None or math.isnan(c) else c


def _lower_bound(op: Op, v, module):
    c = _splat_bound(op, v, module)
    return None if c is None else (c, math.inf)


def _upper_bound(op: Op, v, module):
    c = _splat_bound(op, v, module)
    return None if c is None else (-math.inf, c)


# The clamp [lo, hi] each op applies to the conv's result `v` (NaN passes through every one), or None.
CLAMPS = {
    "relu": lambda op, v, module: (0.0, math.inf),
    "clip": lambda op, v, module: (op.attrs["min"], op.attrs["max"]),
    "max": _lower_bound,
    "min": _upper_bound,
}


def _drop_unused(region: Region, ops: list) -> None:
    """Remove those of `ops` whose results nothing uses now, then their producers in turn (ops are pure)."""
    users = _users(region)
    stack = list(ops)
    while stack:
        op = stack.pop()
        if op.parent is region and not any(users.get(id(r)) for r in op.results):
            region.ops.remove(op)
            op.parent = None
            for v in op.operands:
                users.get(id(v), []).remove(op)
                stack += [v.owner] if isinstance(v.owner, Op) else []


def _only_user(v, users: dict):
    us = users.get(id(v), [])
    return us[0] if len(us) == 1 and us[0] is not None else None


def _swaps_last_two(op) -> bool:
    perm = op.attrs["perm"]
    n = len(perm)
    return n >= 2 and perm == tuple(range(n - 2)) + (n - 1, n - 2)


def _gemm_reads_in_place(op: Op) -> bool:
    """An operand the GEMM reads without it being materialised: a transpose (through strides), or a 16-bit
    constant weight widened to f32 (cuvil/passes/precision.py: the GEMM packs the 16-bit weight itself)."""
    if op.name == "transpose":
        return _swaps_last_two(op)
    return op.name == "cast" and isinstance(op.operands[0].owner, Op) and op.operands[0].owner.name == "constant" \
        and op.operands[0].type.dtype.value in ("bf16", "f16") and op.results[0].type.dtype.value == "f32"


def _epilogue_chain(mm: Op, users: dict) -> list:
    """[transposes or 16-bit weights of the operands, matmul, broadcast_to, add, reshape, act] as far as the pattern
    holds (the GEMM reads a transposed operand through strides; the bias is a vector along the rows; the reshape only
    adds or drops leading unit axes, and only before an act)."""
    chain = [v.owner for v in mm.operands if isinstance(v.owner, Op) and _gemm_reads_in_place(v.owner)
             and v.owner.parent is mm.parent and _only_user(v, users) is mm]
    chain.append(mm)
    out = mm.results[0]
    add = _only_user(out, users)
    if add is not None and add.name == "add":
        other = add.operands[1] if add.operands[0] is out else add.operands[0]
        bc = other.owner if isinstance(other.owner, Op) else None
        if (bc is not None and bc.name == "broadcast_to" and bc.parent is mm.parent and bc.operands[0].type.rank == 1
                and bc.operands[0].type.shape[0] == out.type.shape[-1] and _only_user(other, users) is add):
            chain += [bc, add]
            out = add.results[0]
    act = _only_user(out, users)
    view = act if act is not None and act.name == "reshape" and _unit_axes_only(act) else None
    if view is not None:  # GPT-2's Gemm of [64, N] viewed as [1, 64, N] before its gelu: the same C
        act = _only_user(view.results[0], users)
    if act is not None and act.name in GEMM_ACTIVATIONS:
        chain += [view, act] if view is not None else [act]
    return chain


def _unit_axes_only(reshape: Op) -> bool:
    """Whether `reshape` only adds or drops leading axes of size 1 (a view of the same rows and columns)."""
    src, dst = (tuple(t.shape) for t in (reshape.operands[0].type, reshape.results[0].type))
    short, long = sorted((src, dst), key=len)
    lead = long[:len(long) - len(short)]
    return len(short) >= 2 and long[len(lead):] == short and all(isinstance(d, int) and d == 1 for d in lead)


LIBRARY_EPILOGUES = {"matmul": _gemm_epilogue, "conv": _conv_clamp}
