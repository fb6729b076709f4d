"""Statements and control flow: Python source to structured IR (`cond`, `while`) with SSA merging.

- `if` on a Python value is decided now; on a tensor it becomes a `cond` whose results are the variables
  either branch assigns. An `if` that returns takes the statements after it into its branches (tail
  duplication), so early returns need no flags.
- In a loop body, an `if` on a tensor whose branches break, continue or return takes the rest of the body
  into its branches; loops themselves are in loops.py.
"""
from __future__ import annotations

import ast

from ...errors import CuvilError, UnsupportedError
from ...ir.core import Region
from .expressions import UPDATE, ExpressionTranslator
from .flow import BREAK, CONTINUE, FINISHED, LoopRest, NeedsRuntimeLoop, Return, jumps, rest_after, returns
from .indexing import getitem
from .loops import LoopStatements
from .merge import Plan, coerce, flatten, plan_leaf, unflatten
from .setitem import mask_of, masked_update, setitem
from .values import TV, Undefined, is_dynamic


class FunctionTranslator(LoopStatements, ExpressionTranslator):
    """Translates one function body into the current region; `run` gives its return value."""

    def run(self, env: dict):
        self.params = [v for v in env.values() if isinstance(v, TV)]
        flow = self.block(self.src.tree.body, env, [])
        return flow.value if isinstance(flow, Return) else None

    def block(self, stmts, env: dict, rest):
        """Run statements; `rest` is what follows this block up to the function's end, or None in a loop."""
        for i, s in enumerate(stmts):
            flow = self.stmt(s, env, rest_after(rest, stmts[i + 1:]))
            if flow is not None:
                return flow
        return None

    def stmt(self, node, env, tail):
        outer = self.cx.loc
        self.cx.at(self.src.location(node))
        try:
            handler = _STMTS.get(type(node))
            if handler is None:
                raise UnsupportedError(_UNSUPPORTED.get(type(node), f"the statement `{type(node).__name__}` is not "
                                                                    "supported inside compiled code"))
            return handler(self, node, env, tail)
        except CuvilError as e:
            raise self.src.error(e, node) from None
        finally:
            self.cx.at(outer)

    # -- simple statements ------------------------------------------------------------------------------------
    def s_assign(self, node, env, tail):
        value = self.expr(node.value, env)
        for target in node.targets:
            self.assign(target, value, env)

    def s_annassign(self, node, env, tail):
        if node.value is not None:
            self.assign(node.target, self.expr(node.value, env), env)

    def s_augassign(self, node, env, tail):
        """`x += y` rebinds x (no tensor is modified in place); `x[i] += y` updates x[i] as `x[i] = x[i] + y`."""
        op = type(node.op)
        if isinstance(node.target, ast.Subscript):
            rhs = self.expr(node.value, env)

            def update(base, index):
                mask = mask_of(self.cx, index) if isinstance(base, TV) else None
                if mask is not None:  # x[mask] += y: every selected element of x + y
                    return masked_update(self.cx, base, mask, self.binop(op, base, rhs))
                current = getitem(self.cx, base, index) if isinstance(base, TV) else base[index]
                new = self.binop(op, current, rhs)
                return setitem(self.cx, base, index, new) if isinstance(base, TV) else new
            return self.store_item(node.target, env, update, UPDATE)
        if not isinstance(node.target, ast.Name):
            raise UnsupportedError("augmented assignment to an attribute is not supported: compiled code cannot "
                                   "change Python objects")
        current = self.expr(ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target), env)
        env[node.target.id] = self.binop(type(node.op), current, self.expr(node.value, env))

    def s_expr(self, node, env, tail):
        self.expr(node.value, env)

    def s_pass(self, node, env, tail):
        return None

    def s_delete(self, node, env, tail):
        line = self.src.location(node).line
        for t in node.targets:
            if not isinstance(t, ast.Name):
                raise UnsupportedError("del of an item or attribute is not supported (tensors are immutable here)")
            env[t.id] = Undefined(f"'{t.id}' is used after `del {t.id}` at line {line}")

    def s_return(self, node, env, tail):
        return Return(self.expr(node.value, env) if node.value is not None else None, [node])

    def s_break(self, node, env, tail):
        return BREAK

    def s_continue(self, node, env, tail):
        return CONTINUE

    def s_assert(self, node, env, tail):
        test = self.condition(node.test, env)
        if isinstance(test, TV):
            raise UnsupportedError("assert on a tensor value cannot be checked at compile time; assert on Python "
                                   "values (shapes, dtypes, arguments) only")
        if not test:
            msg = self.expr(node.msg, env) if node.msg is not None else ""
            raise CuvilError(f"assertion failed for these arguments: {msg}")

    def s_raise(self, node, env, tail):
        """The user's own exception when it can be made now (`raise ValueError("need 2-D")` on a shape check), so
        `except ValueError` works as without the compiler; the CuvilError it comes from names the line."""
        where = CuvilError(f"the function raises here for these arguments: {ast.unparse(node)}")
        exc = self._exception(node.exc, env) if node.exc is not None else None
        if exc is None:
            raise where
        raise exc from self.src.error(where, node)

    def _exception(self, node, env):
        func, args = (node.func, node.args) if isinstance(node, ast.Call) and not node.keywords else (node, [])
        try:
            cls, values = self.expr(func, env), self.items(args, env)
        except CuvilError:
            return None
        if isinstance(cls, BaseException) and not args:
            return cls
        if isinstance(cls, type) and issubclass(cls, BaseException) and not is_dynamic(values):
            return cls(*values)
        return None

    def s_with(self, node, env, tail):
        """`with torch.no_grad():` and friends only change autograd state: run the body."""
        for item in node.items:
            ctx = item.context_expr
            fn = self.expr(ctx.func, env) if isinstance(ctx, ast.Call) else None
            if getattr(fn, "__name__", None) not in _NEUTRAL_CONTEXTS or item.optional_vars is not None:
                raise UnsupportedError(f"`with {ast.unparse(ctx)}` is not supported; supported: "
                                       f"{', '.join(sorted(_NEUTRAL_CONTEXTS))}")
        return self.block(node.body, env, tail)

    # -- if ------------------------------------------------------------------------------------------------------
    def s_if(self, node, env, tail):
        pred = self.condition(node.test, env)
        if not isinstance(pred, TV):
            return self.block(node.body if pred else node.orelse, env, tail)
        leaves = returns(node.body) or returns(node.orelse)
        if isinstance(tail, LoopRest) and (leaves or jumps(node.body) or jumps(node.orelse)):
            return self.leaving_if(node, pred, env, tail)
        if leaves:
            return self.returning_if(node, pred, env, tail)
        regions, envs = [], []
        for stmts in (node.body, node.orelse):
            benv = dict(env)
            region, nb, flow = self.translate_region([], lambda e=benv, s=stmts: self.block(s, e, None))
            self._no_jump(flow, "an `if` on a tensor value")
            regions.append((region, nb))
            envs.append(benv)
        self.merge_branches(node, pred, env, regions, envs)
        return None

    def merge_branches(self, node, pred, env, regions, envs) -> None:
        """The names the branches bind differently become the cond's results."""
        names = sorted({n for e in envs for n in e if not all(n in e2 and e2[n] is e[n] for e2 in envs)})
        line = self.src.location(node).line
        columns = [[e.get(n, _missing(n, line, i)) for i, e in enumerate(envs)] for n in names]
        merged = self.emit_cond(pred, regions, columns, [f"'{n}'" for n in names])
        env.update(zip(names, merged))

    def leaving_if(self, node, pred, env, tail: LoopRest):
        """An `if` on a tensor value in a loop body whose branches break, continue or return: each branch runs on
        to the end of the body (the rest is copied into both); a break or return becomes the loop's flags."""
        frame = tail.frame
        regions, envs = [], []
        for stmts in (node.body, node.orelse):
            benv = dict(env)

            def run(e=benv, s=stmts):
                flow = self.block(list(s) + list(tail), e, LoopRest([], frame))
                if flow is BREAK or isinstance(flow, Return):
                    if not frame.runtime:
                        raise NeedsRuntimeLoop()
                    self.leave(e, flow, frame)
                return flow
            region, nb, _ = self.translate_region([], run)
            regions.append((region, nb))
            envs.append(benv)
        self.merge_branches(node, pred, env, regions, envs)
        return FINISHED

    def returning_if(self, node, pred, env, tail):
        """Both branches run on to the function's end (the tail is copied into each); the cond's results are
        the value returned."""
        if tail is None:
            raise UnsupportedError("`return` inside an `if` on a tensor value is not supported here; assign the "
                                   "result to a variable and return after the `if`")
        regions, values, nodes = [], [], []
        for stmts in (node.body, node.orelse):
            benv = dict(env)
            region, nb, flow = self.translate_region([], lambda e=benv, s=stmts: self.block(list(s) + tail, e, []))
            self._no_jump(flow, "an `if` on a tensor value")
            regions.append((region, nb))
            values.append(flow.value if isinstance(flow, Return) else None)
            nodes += flow.nodes if isinstance(flow, Return) else []
        try:
            value = self.emit_cond(pred, regions, [values], ["the return value"])[0]
            bad = [leaf for leaf in flatten(value)[0] if isinstance(leaf, Undefined)]
            if bad:
                raise CuvilError(bad[0].why)
        except CuvilError as e:  # point at the returns that disagree
            if not nodes or getattr(e, "quoted", False):
                raise
            lines = " and ".join(str(self.src.location(n).line) for n in nodes)
            raise self.src.error(type(e)(f"{e.message} (returned at lines {lines})"), nodes[0]) from None
        return Return(value, nodes)

    def emit_cond(self, pred: TV, regions, columns, whats) -> list:
        """Yield what differs between the branches and build the `cond`; returns the merged values."""
        trees = []
        for column, what in zip(columns, whats):
            flat = [flatten(v) for v in column]
            if any(f[1] != flat[0][1] for f in flat):
                trees.append((None, [_conflict(what)]))
                continue
            trees.append((flat[0][1], [plan_leaf(list(leaves), what, self.cx.mode)
                                       for leaves in zip(*(f[0] for f in flat))]))
        slots = [(c, k, p) for c, (_, plans) in enumerate(trees) for k, p in enumerate(plans) if p.slot is not None]
        for b, (_, nb) in enumerate(regions):
            with self.cx.building(nb):
                nb.yield_(*[coerce(self.cx, flatten(columns[c][b])[0][k], p.slot) for c, k, p in slots])
        op = self.cx.b.make_op("cond", [pred.value], {}, [r for r, _ in regions])
        results = dict(zip([(c, k) for c, k, _ in slots], op.results))
        out = []
        for c, (structure, plans) in enumerate(trees):
            leaves = [_result(p, results.get((c, k))) for k, p in enumerate(plans)]
            out.append(leaves[0] if structure is None and len(leaves) == 1 else unflatten(structure, leaves))
        return out

    def translate_region(self, arg_types, body):
        """Translate into a fresh region; returns (region, its builder, what `body` returned)."""
        region = Region(arg_types)
        nb = self.cx.b.nested(region)
        with self.cx.building(nb):
            out = body()
        return region, nb, out

    @staticmethod
    def _no_jump(flow, where: str) -> None:
        if flow in (BREAK, CONTINUE):
            raise UnsupportedError(f"`{flow}` inside {where} is not supported; loops that stop on a tensor "
                                   "condition are written as `while <tensor condition>:`")

def _missing(name: str, line: int, branch: int) -> Undefined:
    return Undefined(f"'{name}' is assigned on one path only: it is unbound when the condition of the `if` at line "
                     f"{line} is {'true' if branch == 0 else 'false'}; assign it on every path before using it")


def _conflict(what: str) -> Plan:
    return Plan(why=f"{what} has a different structure (tuple lengths or kinds) on different paths")


def _result(plan, value):
    if plan.why is not None:
        return Undefined(plan.why)
    if plan.slot is not None:
        return TV(value, plan.slot.weak)
    return plan.value


_NEUTRAL_CONTEXTS = {"no_grad", "inference_mode", "enable_grad", "errstate"}
_STMTS = {
    ast.Assign: FunctionTranslator.s_assign, ast.AnnAssign: FunctionTranslator.s_annassign,
    ast.AugAssign: FunctionTranslator.s_augassign, ast.Expr: FunctionTranslator.s_expr,
    ast.Pass: FunctionTranslator.s_pass, ast.Return: FunctionTranslator.s_return,
    ast.Break: FunctionTranslator.s_break, ast.Continue: FunctionTranslator.s_continue,
    ast.Assert: FunctionTranslator.s_assert, ast.Raise: FunctionTranslator.s_raise,
    ast.With: FunctionTranslator.s_with, ast.If: FunctionTranslator.s_if, ast.For: FunctionTranslator.s_for,
    ast.While: FunctionTranslator.s_while, ast.Delete: FunctionTranslator.s_delete,
}
_UNSUPPORTED = {
    ast.FunctionDef: "nested function definitions are not supported; define the helper at module level (calls "
                     "to plain Python functions are inlined) or use a lambda",
    ast.Try: "try/except is not supported inside compiled code",
    ast.Import: "imports inside compiled code are not supported; import at module level",
    ast.ImportFrom: "imports inside compiled code are not supported; import at module level",
    ast.Global: "global/nonlocal are not supported: compiled code cannot change Python state",
    ast.Nonlocal: "global/nonlocal are not supported: compiled code cannot change Python state",
    ast.ClassDef: "class definitions are not supported inside compiled code",
}
