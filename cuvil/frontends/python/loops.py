"""Loops: unrolled when their iterations are known at compile time (up to the `unroll` limit), else a `while` op.

A `while` carries the names its body assigns that exist before it, a stacked buffer per list it appends to, and
for `break` and `return` on tensor conditions the flags `$live` (keep looping) and `$returned` with the returned
values (`$ret_<k>`); after the loop, the rest of the function runs under a `cond` on `$returned`. A loop being
unrolled whose body breaks or returns on a tensor condition is translated as a `while` instead (over a range or
a tensor's rows). Types settle by translating the body, widening, and translating again.
"""
from __future__ import annotations

from ...errors import CuvilError, UnsupportedError
from ...ir.core import Region
from . import emit as E
from .accumulate import Accumulator, appended_lists, stacked, trip_count
from .flow import (BREAK, LoopFrame, LoopRest, NeedsRuntimeLoop, Return, assigned, breaks, returns)
from .merge import Slot, coerce, flatten, join, slot_of, unflatten
from .values import TV, RuntimeRange, Undefined, is_tensorish

MAX_PYTHON_WHILE = 10000


class LoopStatements:
    """The loop statements of FunctionTranslator."""

    def s_for(self, node, env, tail):
        it = self.expr(node.iter, env)
        limit = self.cx.options.get("unroll", 16)
        if isinstance(it, RuntimeRange) or isinstance(it, range) and len(it) > limit:
            return self.range_loop(node, env, it, tail)
        if isinstance(it, TV) and it.rank and not (isinstance(it.shape[0], int) and it.shape[0] <= limit):
            return self.range_loop(node, env, RuntimeRange(0, it.shape[0], 1), tail, lambda i: self.view(it, i))
        saved = self._saved_state(env)
        try:
            return self.unrolled_for(node, env, it, tail)
        except NeedsRuntimeLoop:
            self._restore_state(saved, env)
        if isinstance(it, range):
            return self.range_loop(node, env, it, tail)
        if isinstance(it, TV) and it.rank:
            return self.range_loop(node, env, RuntimeRange(0, it.shape[0], 1), tail, lambda i: self.view(it, i))
        raise UnsupportedError("`break` or `return` on a tensor condition in a loop over a Python sequence is not "
                               "supported; loop over range(n) or over a tensor's rows")

    def unrolled_for(self, node, env, it, tail):
        frame = LoopFrame(runtime=False)
        for item in self.iterate(it):
            self.assign(node.target, item, env)
            flow = self.block(node.body, env, LoopRest([], frame))
            if flow is BREAK:
                return None
            if isinstance(flow, Return):
                return flow
        return self.block(node.orelse, env, tail)

    def s_while(self, node, env, tail):
        saved, frame = self._saved_state(env), LoopFrame(runtime=False)
        try:
            for _ in range(MAX_PYTHON_WHILE):
                test = self.condition(node.test, env)
                if isinstance(test, TV):
                    return self.while_loop(node, env, tail)
                if not test:
                    return self.block(node.orelse, env, tail)
                flow = self.block(node.body, env, LoopRest([], frame))
                if flow is BREAK:
                    return None
                if isinstance(flow, Return):
                    return flow
        except NeedsRuntimeLoop:
            self._restore_state(saved, env)
            return self.while_loop(node, env, tail)
        raise UnsupportedError(f"a while loop on a Python condition ran {MAX_PYTHON_WHILE} times at compile time")

    def while_loop(self, node, env, tail):
        return self.runtime_loop(node, env, assigned(node.body), lambda e: self.expr(node.test, e),
                                 lambda e, rest: self.block(node.body, e, rest), tail)

    def range_loop(self, node, env, rng, tail, item=None):
        """`for i in range(...)` as a `while` with a hidden counter; i is a weak i64 scalar in the body.
        Over a tensor, `item(i)` gives the row bound to the target."""
        env["$i"] = rng.start

        def test(e):
            return E.binary(self.cx, "lt" if rng.step > 0 else "gt", None, e["$i"], rng.stop)

        def body(e, rest):
            self.assign(node.target, e["$i"] if item is None else item(e["$i"]), e)
            flow = self.block(node.body, e, rest)
            e["$i"] = E.binary(self.cx, "add", "add", e["$i"], rng.step)
            return flow

        flow = self.runtime_loop(node, env, assigned(node.body) | {"$i"}, test, body, tail, trip_count(rng))
        env.pop("$i", None)
        for name in assigned([node.target]):
            env[name] = Undefined(f"the loop variable '{name}' of the loop at line {self.src.location(node).line} "
                                  "runs at run time and is not available after it")
        return flow

    def runtime_loop(self, node, env, names, test, body, tail, trips=None):
        """Emit a `while`; then the loop's else (or, when it returns, the rest of the function under a cond)."""
        line = self.src.location(node).line
        frame = LoopFrame(runtime=True)
        lists, accumulators = appended_lists(node.body, env), {}
        names = set(names)
        if breaks(node.body) or returns(node.body):
            test, names = self._leaving(node, env, names, test, tail, line)
        run = self._body(frame, body)
        if lists:
            run = self._accumulating(lists, trips, line, run, accumulators)
            env["$k"] = 0
            env.update({f"$acc_{n}": 0.0 for n in lists})  # placeholders until the body's appends are seen
            names |= {"$k", *(f"$acc_{n}" for n in lists)}
        known: dict = {}
        for _ in range(6):
            carried = self._carried(names, env)
            slots = [known.get(n) or slot_of(env[n]) for n in carried]
            saved = self._snapshot()
            cond_region, body_region, outs = self._loop_regions(env, carried, slots, test, run)
            widened = [accumulators[n[5:]].wanted(trips) if n.startswith("$acc_") else
                       join([s, slot_of(v)], f"'{n}' (carried by the loop at line {line})")
                       for n, s, v in zip(carried, slots, outs)]
            missing = self._return_slots(frame, env)  # a return seen for the first time: carry its values too
            names |= missing
            if widened == slots and not missing:
                break
            self._restore(saved)
            known.update(zip(carried, widened))
        else:
            raise UnsupportedError(f"the types of the variables of the loop at line {line} do not settle")
        with self.cx.building(body_region[1]):
            body_region[1].yield_(*[coerce(self.cx, v, s) for v, s in zip(outs, slots)])
        init = [coerce(self.cx, env[n], s) for n, s in zip(carried, slots)]
        op = self.cx.b.make_op("while", init, {}, [cond_region, body_region[0]])
        env.update({n: TV(r, s.weak) for n, r, s in zip(carried, op.results, slots)})
        for n in lists:
            env[n] = stacked(self.cx, env[n], env.pop(f"$acc_{n}"))
        for n in sorted(names - set(carried) - {"$i"}):
            env[n] = Undefined(f"'{n}' is assigned only inside the loop at line {line}, which may run zero times; "
                               "assign it before the loop")
        env.pop("$k", None)
        env.pop("$live", None)
        if frame.returned is not None:
            return self.return_after_loop(env, frame, tail)
        return self.block(node.orelse, env, tail)

    def _carried(self, names, env) -> list:
        carried = sorted(n for n in names if n in env and not isinstance(env[n], Undefined))
        for n in carried:
            if not is_tensorish(env[n]):
                what = "the value returned" if n.startswith("$ret_") else f"'{n}' ({type(env[n]).__name__})"
                raise UnsupportedError(f"{what} changes in a loop that runs at run time; only tensors, numbers "
                                       "and lists it appends to can")
        return carried

    def _leaving(self, node, env, names, test, tail, line: int):
        """Carry $live (and $returned): the loop runs while its condition holds and nothing broke or returned."""
        if node.orelse:
            raise UnsupportedError(f"`else` on the loop at line {line}, which runs at run time and may break or "
                                   "return, is not supported; test a flag after the loop instead")
        if returns(node.body):
            if not isinstance(tail, list) or isinstance(tail, LoopRest):
                raise UnsupportedError(f"`return` inside the loop at line {line}, nested in another loop that runs at "
                                       "run time, is not supported; assign the result and break out")
            env["$returned"] = False
            names.add("$returned")
        env["$live"] = True

        def live_test(e):
            return E.binary(self.cx, "and", None, E.truth(self.cx, test(e)), E.truth(self.cx, e["$live"]))
        return live_test, names | {"$live"}

    def _body(self, frame: LoopFrame, body):
        """The loop body; a break or return reaching its end becomes the carried flags."""
        def run(e):
            flow = body(e, LoopRest([], frame))
            if flow is BREAK or isinstance(flow, Return):
                self.leave(e, flow, frame)
            return None
        return run

    def leave(self, env, flow, frame: LoopFrame) -> None:
        """A path that breaks or returns in a loop that runs at run time, as the flags it carries."""
        env["$live"] = False
        if not isinstance(flow, Return):
            return
        leaves, structure = flatten(flow.value)
        if frame.returned is None:
            frame.returned, frame.leaves = (structure,), len(leaves)
        elif frame.returned != (structure,) or frame.leaves != len(leaves):
            raise UnsupportedError("the returns inside this loop give values of different structures")
        env["$returned"] = True
        env.update({f"$ret_{k}": leaf for k, leaf in enumerate(leaves)})

    @staticmethod
    def _return_slots(frame: LoopFrame, env) -> set:
        """Placeholders for the returned values, once the body showed what it returns."""
        if frame.returned is None:
            return set()
        missing = {f"$ret_{k}" for k in range(frame.leaves) if f"$ret_{k}" not in env}
        env.update({n: 0.0 for n in missing})
        return missing

    def return_after_loop(self, env, frame: LoopFrame, tail):
        """What the function returns: the loop's value if it returned, else what the rest of the function does."""
        pred = E.truth(self.cx, env.pop("$returned"))
        value = unflatten(frame.returned[0], [env.pop(f"$ret_{k}") for k in range(frame.leaves)])
        regions, values = [], []
        for returned in (True, False):
            benv = dict(env)
            region, nb, flow = self.translate_region(
                [], lambda e=benv, r=returned: Return(value) if r else self.block(list(tail), e, []))
            regions.append((region, nb))
            values.append(flow.value if isinstance(flow, Return) else None)
        merged = self.emit_cond(pred, regions, [values], ["the return value"])[0]
        bad = [leaf for leaf in flatten(merged)[0] if isinstance(leaf, Undefined)]
        if bad:
            raise CuvilError(bad[0].why)
        return Return(merged)

    def _accumulating(self, lists, trips, line: int, body, accumulators: dict):
        """The loop body with each list bound to an Accumulator writing row $k of its buffer."""
        if trips is None:
            raise UnsupportedError(f"appending to {lists[0]} in the loop at line {line}, whose number of iterations is "
                                   "only known at run time: the list's length must be known before the loop runs; "
                                   "loop over range(n) with n an int or a size, or unroll the loop")

        def run(e):
            for n in lists:
                accumulators[n] = e[n] = Accumulator(n, e[f"$acc_{n}"], e["$k"], self.cx.nesting)
            body(e)
            for n in lists:
                acc = accumulators[n]
                if acc.appends != 1:
                    raise UnsupportedError(f"{n}.append() must run once on every iteration of the loop at line {line}")
                e[f"$acc_{n}"] = acc.buffer
            e["$k"] = E.binary(self.cx, "add", "add", e["$k"], 1)
        return run

    def _loop_regions(self, env, carried, slots: list[Slot], test, body):
        types = [s.type for s in slots]

        def bind(region) -> dict:
            return {**env, **{n: TV(a, s.weak) for n, a, s in zip(carried, region.args, slots)}}

        cond_region = Region(types)
        nb = self.cx.b.nested(cond_region)
        with self.cx.building(nb):
            nb.yield_(E.tensor(self.cx, E.truth(self.cx, test(bind(cond_region)))).value)
        body_region = Region(types)
        bb = self.cx.b.nested(body_region)
        benv = bind(body_region)
        with self.cx.building(bb):
            body(benv)
        return cond_region, (body_region, bb), [benv[n] for n in carried]

    def _snapshot(self):
        fn = self.cx.b.function
        return list(fn.constraints), set(self.cx.module.constants)

    def _restore(self, saved) -> None:
        constraints, names = saved
        self.cx.b.function.constraints[:] = constraints
        for name in set(self.cx.module.constants) - names:
            del self.cx.module.constants[name]

    def _saved_state(self, env):
        """What translating a loop may change, to translate it again another way."""
        lists = [(v, list(v)) for v in env.values() if isinstance(v, list)]
        return self._snapshot(), dict(env), lists

    def _restore_state(self, saved, env) -> None:
        snapshot, before, lists = saved
        self._restore(snapshot)
        env.clear()
        env.update(before)
        for v, items in lists:
            v[:] = items
