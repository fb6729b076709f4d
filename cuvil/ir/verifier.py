"""The verifier: structural rules every module must keep, checked after every pass in tests and debug mode.

Checks: operands defined before use in the same or an enclosing region (dominance), no value from another
function, registered ops with the right arity, attributes from the whitelist, of their kind and in normal
form, result types equal to the shape rule's, symbolic relations recorded on the function, regions of
the right number and signature ending in their terminator. Messages name the op and its location.
"""
from __future__ import annotations

from ..errors import CuvilError, VerificationError
from ..ops import registry
from .core import Function, Module, Op, Region, ShapeContext, Value
from .dynamic import defined_sizes


def verify(module: Module) -> None:
    """Raise VerificationError on the first broken rule."""
    owners = {}
    for fn in module.functions.values():
        for v in _defined_values(fn):
            owners[id(v)] = fn.name
    for fn in module.functions.values():
        _Verifier(module, fn, owners).run()


def _defined_values(fn: Function):
    yield from fn.args
    for op in fn.walk():
        yield from op.results
        for r in op.regions:
            yield from r.args


class _Verifier:
    def __init__(self, module: Module, fn: Function, owners: dict):
        self.module, self.fn, self.owners = module, fn, owners
        self.visible: list[set] = []

    def fail(self, op: Op, message: str) -> VerificationError:
        return VerificationError(f"'{op.name}' in @{self.fn.name}: {message}", op.loc)

    def run(self) -> None:
        body = self.fn.body
        if not body.ops or body.ops[-1].name != "return":
            raise VerificationError(f"function @{self.fn.name} must end with 'return'")
        self.region(body, "return")
        self.data_sizes()

    def data_sizes(self) -> None:
        """A data-dependent size is defined by one op, and no input's shape names it (a call would bind it too)."""
        inputs = set().union(*(a.type.free_symbols for a in self.fn.args))
        definer: dict = {}
        for op in self.fn.walk():
            for name in defined_sizes(op):
                if name in inputs:
                    raise self.fail(op, f"defines the size {name}, which an input's shape already names")
                if name in definer:
                    raise self.fail(op, f"defines the size {name}, which an earlier '{definer[name].name}' defines")
                definer[name] = op
            inner = {name for r in op.regions for nested in r.walk() for name in defined_sizes(nested)}
            leaving = inner and inner & set().union(*(r.type.free_symbols for r in op.results))
            if leaving:
                raise self.fail(op, f"gives results of the size {', '.join(sorted(leaving))}, which its region "
                                    f"computes from the data: such a size cannot leave the region")

    def region(self, region: Region, terminator: str) -> None:
        self.visible.append({id(a) for a in region.args})
        for i, op in enumerate(region.ops):
            if op.parent is not region:
                raise self.fail(op, "op's parent link does not point at the region that holds it")
            is_last = i == len(region.ops) - 1
            if registry.has_op(op.name) and "terminator" in registry.get_op(op.name).traits:
                if not is_last or op.name != terminator:
                    raise self.fail(op, f"a region here must end with '{terminator}' and have no other terminator")
            elif is_last:
                raise self.fail(op, f"region does not end with '{terminator}'")
            self.op(op)
            self.visible[-1].update(id(r) for r in op.results)
        self.visible.pop()

    def op(self, op: Op) -> None:
        if not registry.has_op(op.name):
            raise self.fail(op, "unknown op")
        opdef = registry.get_op(op.name)
        problem = opdef.check_arity(len(op.operands))
        if problem:
            raise self.fail(op, problem)
        for i, v in enumerate(op.operands):
            self.operand(op, i, v)
        self.attributes(op, opdef)
        if len(op.regions) != opdef.regions:
            raise self.fail(op, f"has {len(op.regions)} regions, expected {opdef.regions}")
        isolated = "isolated" in opdef.traits
        for r in op.regions:
            if r.parent is not op:
                raise self.fail(op, "region's parent link does not point at its op")
            outer, self.visible = self.visible, (self.visible if not isolated else [])
            self.region(r, "yield")
            self.visible = outer
        self.result_types(op, opdef)

    def operand(self, op: Op, i: int, v: Value) -> None:
        if not isinstance(v, Value):
            raise self.fail(op, f"operand {i} is not a value")
        if any(id(v) in scope for scope in self.visible):
            return
        owner = self.owners.get(id(v))
        if owner is not None and owner != self.fn.name:
            raise self.fail(op, f"operand {i} is a value of function @{owner}")
        if owner is None:
            raise self.fail(op, f"operand {i} ({v.type}) is dangling: no op or region of the module defines it")
        raise self.fail(op, f"operand {i} ({v.type}) is used before its definition, outside its region, or "
                            "inside an isolated region that does not take it as an argument")

    def attributes(self, op: Op, opdef) -> None:
        try:
            complete = opdef.complete_attrs(op.attrs)
        except ValueError as e:
            raise self.fail(op, str(e)) from None
        if complete != op.attrs or any(type(complete[k]) is not type(op.attrs[k]) for k in complete):
            missing = sorted(set(complete) - set(op.attrs))
            raise self.fail(op, f"attributes are not complete and canonical (missing: {missing or 'none'})")
        if opdef.normalize is not None:
            try:
                normal = opdef.normalize([v.type for v in op.operands], op.attrs)
            except ValueError as e:
                raise self.fail(op, str(e)) from None
            if normal != op.attrs:
                raise self.fail(op, f"attributes are not in normal form: {op.attrs} should be {normal}")

    def result_types(self, op: Op, opdef) -> None:
        refusal = opdef.complex_refusal([v.type for v in op.operands])
        if refusal:
            raise self.fail(op, refusal)
        scratch = Function("scratch", [])  # collects the relations the rule asks for
        ctx = ShapeContext(self.module, scratch, op.loc, op.regions)
        try:
            expected = opdef.shape(ctx, [v.type for v in op.operands], op.attrs)
            ctx.require_sizes(op.name, expected)
        except (CuvilError, ValueError) as e:
            raise self.fail(op, f"shape rule rejects the operands: {getattr(e, 'message', e)}") from None
        got = [r.type for r in op.results]
        if got != list(expected):
            raise self.fail(op, f"result types ({', '.join(map(str, got))}) differ from the shape rule's "
                                f"({', '.join(map(str, expected))})")
        for relation in scratch.constraints:
            if not self.fn.implies(relation):
                raise self.fail(op, f"needs {relation}, which @{self.fn.name} does not record")
