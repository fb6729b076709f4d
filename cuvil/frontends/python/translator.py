"""Statements and control flow: Python source to structured IR (`cond`, `while`) with SSA merging.

- `if` on a Python value is decided now; on a tensor it becomes a `cond` whose results are the variables
  either branch assigns. An `if` that returns takes the statements after it into its branches (tail
  duplication), so early returns need no flags.
- `for` over a Python sequence, or over `range(n)` with n <= the unroll limit, unrolls; a longer or
  run-time range becomes a `while`, as does `while` on a tensor condition. Loop-carried values are the
  names the body assigns that exist before the loop; their types are settled by translating the body,
  widening weak types (Python numbers) to what the body produces, and translating again.
"""
from __future__ import annotations

import ast

from ...errors import CuvilError, UnsupportedError
from ...ir.core import Region
from . import emit as E
from .accumulate import Accumulator, appended_lists, stacked, trip_count
from .expressions import _UPDATE, ExpressionTranslator, RuntimeRange, is_dynamic
from .indexing import getitem
from .setitem import mask_of, masked_update, setitem
from .merge import Plan, Slot, coerce, flatten, join, plan_leaf, slot_of, unflatten
from .values import TV, Undefined, is_tensorish

MAX_PYTHON_WHILE = 10000


class Return:
    """Control left the function with `value`."""

    def __init__(self, value):
        self.value = value


BREAK, CONTINUE = "break", "continue"


class FunctionTranslator(ExpressionTranslator):
    """Translates one function body into the current region; `run` gives its return value."""

    def run(self, env: dict):
        self.params = [v for v in env.values() if isinstance(v, TV)]
        flow = self.block(self.src.tree.body, env, [])
        return flow.value if isinstance(flow, Return) else None

    def block(self, stmts, env: dict, rest):
        """Run statements; `rest` is what follows this block up to the function's end, or None in a loop."""
        for i, s in enumerate(stmts):
            flow = self.stmt(s, env, None if rest is None else list(stmts[i + 1:]) + rest)
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
            return self.store_item(node.target, env, update, _UPDATE)
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
        return Return(self.expr(node.value, env) if node.value is not None else None)

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
        if _returns(node.body) or _returns(node.orelse):
            return self.returning_if(node, pred, env, tail)
        regions, envs = [], []
        for stmts in (node.body, node.orelse):
            benv = dict(env)
            region, nb, flow = self.translate_region([], lambda e=benv, s=stmts: self.block(s, e, None))
            self._no_jump(flow, "an `if` on a tensor value")
            regions.append((region, nb))
            envs.append(benv)
        names = sorted({n for e in envs for n in e if not all(n in e2 and e2[n] is e[n] for e2 in envs)})
        line = self.src.location(node).line
        columns = [[e.get(n, _missing(n, line, i)) for i, e in enumerate(envs)] for n in names]
        merged = self.emit_cond(pred, regions, columns, [f"'{n}'" for n in names])
        env.update(zip(names, merged))
        return None

    def returning_if(self, node, pred, env, tail):
        """Both branches run on to the function's end (the tail is copied into each); the cond's results are
        the value returned."""
        if tail is None:
            raise UnsupportedError("`return` inside an `if` on a tensor value is not supported inside a loop; "
                                   "assign the result to a variable and return after the loop")
        regions, values = [], []
        for stmts in (node.body, node.orelse):
            benv = dict(env)
            region, nb, flow = self.translate_region([], lambda e=benv, s=stmts: self.block(list(s) + tail, e, []))
            self._no_jump(flow, "an `if` on a tensor value")
            regions.append((region, nb))
            values.append(flow.value if isinstance(flow, Return) else None)
        value = self.emit_cond(pred, regions, [values], ["the return value"])[0]
        bad = [leaf for leaf in flatten(value)[0] if isinstance(leaf, Undefined)]
        if bad:
            raise CuvilError(bad[0].why)
        return Return(value)

    def emit_cond(self, pred: TV, regions, columns, whats) -> list:
        """Yield what differs between the branches and build the `cond`; returns the merged values."""
        trees = []
        for column, what in zip(columns, whats):
            flat = [flatten(v) for v in column]
            if any(f[1] != flat[0][1] for f in flat):
                trees.append((None, [_conflict(what)]))
                continue
            trees.append((flat[0][1], [plan_leaf(list(leaves), what) for leaves in zip(*(f[0] for f in flat))]))
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

    # -- loops ---------------------------------------------------------------------------------------------------
    def s_for(self, node, env, tail):
        it = self.expr(node.iter, env)
        limit = self.cx.options.get("unroll", 16)
        if isinstance(it, RuntimeRange) or isinstance(it, range) and len(it) > limit:
            self.range_loop(node, env, it)
            return self.block(node.orelse, env, tail)
        if isinstance(it, TV) and it.rank and not (isinstance(it.shape[0], int) and it.shape[0] <= limit):
            self.range_loop(node, env, RuntimeRange(0, it.shape[0], 1), lambda i: getitem(self.cx, it, i))
            return self.block(node.orelse, env, tail)
        for item in self.iterate(it):
            self.assign(node.target, item, env)
            flow = self.block(node.body, env, None)
            if flow is BREAK:
                return None
            if isinstance(flow, Return):
                return flow
        return self.block(node.orelse, env, tail)

    def s_while(self, node, env, tail):
        for _ in range(MAX_PYTHON_WHILE):
            test = self.condition(node.test, env)
            if isinstance(test, TV):
                self.runtime_loop(node, env, _assigned(node.body),
                                  lambda e: self.expr(node.test, e), lambda e: self.block(node.body, e, None))
                return self.block(node.orelse, env, tail)
            if not test:
                return self.block(node.orelse, env, tail)
            flow = self.block(node.body, env, None)
            if flow is BREAK:
                return None
            if isinstance(flow, Return):
                return flow
        raise UnsupportedError(f"a while loop on a Python condition ran {MAX_PYTHON_WHILE} times at compile time")

    def range_loop(self, node, env, rng, item=None) -> None:
        """`for i in range(...)` as a `while` with a hidden counter; i is a weak i64 scalar in the body.
        Over a tensor, `item(i)` gives the row bound to the target."""
        env["$i"] = rng.start

        def test(e):
            return E.binary(self.cx, "lt" if rng.step > 0 else "gt", None, e["$i"], rng.stop)

        def body(e):
            self.assign(node.target, e["$i"] if item is None else item(e["$i"]), e)
            flow = self.block(node.body, e, None)
            e["$i"] = E.binary(self.cx, "add", "add", e["$i"], rng.step)
            return flow

        self.runtime_loop(node, env, _assigned(node.body) | {"$i"}, test, body, trip_count(rng))
        del env["$i"]
        for name in _assigned([node.target]):
            env[name] = Undefined(f"the loop variable '{name}' of the loop at line {self.src.location(node).line} "
                                  "runs at run time and is not available after it")

    def runtime_loop(self, node, env, names, test, body, trips=None) -> None:
        """Emit a `while` carrying the names the body assigns that exist before the loop, and a stacked buffer
        for each list the body appends to."""
        line = self.src.location(node).line
        lists, accumulators = appended_lists(node.body, env), {}
        if lists:
            body = self._accumulating(lists, trips, line, body, accumulators)
            env["$k"] = 0
            env.update({f"$acc_{n}": 0.0 for n in lists})  # placeholders until the body's appends are seen
            names = names | {"$k", *(f"$acc_{n}" for n in lists)}
        carried = sorted(n for n in names if n in env and not isinstance(env[n], Undefined))
        for n in carried:
            if not is_tensorish(env[n]):
                raise UnsupportedError(f"'{n}' ({type(env[n]).__name__}) changes in a loop that runs at run time; "
                                       "only tensors, numbers and lists it appends to can")
        slots = [slot_of(env[n]) for n in carried]
        for _ in range(4):
            saved = self._snapshot()
            cond_region, body_region, outs = self._loop_regions(env, carried, slots, test, body, line)
            widened = [accumulators[n[5:]].wanted(trips) if n.startswith("$acc_") else
                       join([s, slot_of(v)], f"'{n}' (carried by the loop at line {line})")
                       for n, s, v in zip(carried, slots, outs)]
            if widened == slots:
                break
            self._restore(saved)
            slots = widened
        else:
            raise UnsupportedError(f"the types of the variables of the loop at line {line} do not settle")
        with self.cx.building(body_region[1]):
            body_region[1].yield_(*[coerce(self.cx, v, s) for v, s in zip(outs, slots)])
        init = [coerce(self.cx, env[n], s) for n, s in zip(carried, slots)]
        op = self.cx.b.make_op("while", init, {}, [cond_region, body_region[0]])
        env.update({n: TV(r, s.weak) for n, r, s in zip(carried, op.results, slots)})
        for n in lists:
            env[n] = stacked(self.cx, env[n], env.pop(f"$acc_{n}"))
        env.pop("$k", None)
        for n in sorted(names - set(carried) - {"$i"}):
            env[n] = Undefined(f"'{n}' is assigned only inside the loop at line {line}, which may run zero times; "
                               "assign it before the loop")

    def _accumulating(self, lists, trips, line: int, body, accumulators: dict):
        """The loop body with each list bound to an Accumulator writing row $k of its buffer."""
        if trips is None:
            raise UnsupportedError(f"appending to {lists[0]} in the loop at line {line}, whose number of iterations is "
                                   "only known at run time: the list's length must be known before the loop runs; "
                                   "loop over range(n) with n an int or a size, or unroll the loop")

        def run(e):
            for n in lists:
                accumulators[n] = e[n] = Accumulator(n, e[f"$acc_{n}"], e["$k"], self.cx.nesting)
            flow = body(e)
            for n in lists:
                acc = accumulators[n]
                if acc.appends != 1:
                    raise UnsupportedError(f"{n}.append() must run once on every iteration of the loop at line {line}")
                e[f"$acc_{n}"] = acc.buffer
            e["$k"] = E.binary(self.cx, "add", "add", e["$k"], 1)
            return flow
        return run

    def _loop_regions(self, env, carried, slots: list[Slot], test, body, line):
        types = [s.type for s in slots]

        def bind(region) -> dict:
            return {**env, **{n: TV(a, s.weak) for n, a, s in zip(carried, region.args, slots)}}

        def cond_body():
            pred = E.truth(self.cx, test(bind(cond_region)))
            return E.tensor(self.cx, pred)

        cond_region = Region(types)
        nb = self.cx.b.nested(cond_region)
        with self.cx.building(nb):
            nb.yield_(cond_body().value)
        body_region = Region(types)
        bb = self.cx.b.nested(body_region)
        benv = bind(body_region)
        with self.cx.building(bb):
            flow = body(benv)
        self._no_jump(flow, f"a loop that runs at run time (line {line})")
        if isinstance(flow, Return):
            raise UnsupportedError(f"`return` inside the loop at line {line}, which runs at run time, is not "
                                   "supported; assign the result and return after the loop")
        return cond_region, (body_region, bb), [benv[n] for n in carried]

    def _snapshot(self):
        fn = self.cx.b.function
        return list(fn.constraints), set(self.cx.module.constants)

    def _restore(self, saved) -> None:
        constraints, names = saved
        self.cx.b.function.constraints[:] = constraints
        for name in set(self.cx.module.constants) - names:
            del self.cx.module.constants[name]


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


def _walk_body(stmts):
    """Nodes of these statements, not descending into nested functions, lambdas or comprehensions."""
    stack = list(stmts)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.Lambda, ast.ListComp, ast.GeneratorExp, ast.SetComp,
                                      ast.DictComp)):
                stack.append(child)


def _returns(stmts) -> bool:
    return any(isinstance(n, ast.Return) for n in _walk_body(stmts))


def _assigned(stmts) -> set:
    """Names the statements bind, and those they assign into (`x[i] = v` rebinds x)."""
    names = set()
    for n in _walk_body(stmts):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store):
            while isinstance(n, ast.Subscript):
                n = n.value
            if isinstance(n, ast.Name):
                names.add(n.id)
    return names


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
    ast.FunctionDef: "nested function definitions are not supported; define the helper at module level and "
                     "decorate it with @cuvil.jit",
    ast.Try: "try/except is not supported inside compiled code",
    ast.Import: "imports inside compiled code are not supported; import at module level",
    ast.ImportFrom: "imports inside compiled code are not supported; import at module level",
    ast.Global: "global/nonlocal are not supported: compiled code cannot change Python state",
    ast.Nonlocal: "global/nonlocal are not supported: compiled code cannot change Python state",
    ast.ClassDef: "class definitions are not supported inside compiled code",
}
