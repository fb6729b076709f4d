"""Expressions: names, attributes, calls, operators, subscripts and comprehensions, evaluated either at compile
time (Python values) or into IR (tensors). Every op is emitted at the location of its expression."""
from __future__ import annotations

import ast
import builtins
import inspect
import functools
import operator
import warnings
import weakref

import numpy as np

from ...errors import CuvilError, UnsupportedError
from ...ir.symbolic import SymExpr
from . import emit as E
from .accumulate import Accumulator, ListMethod, items_of, list_method
from .builtin_calls import BUILTINS
from .call_tables import lookup, method_table, supported_names
from .indexing import getitem
from .setitem import setitem
from .source import Source, describe
from .values import (TV, BoundMethod, RuntimeRange, StackedList, Undefined, is_dynamic, is_torch_tensor, to_dtype,
                     torch_module)

MAX_INLINE_DEPTH = 32
MAX_ITEMS = 4096  # a comprehension or Python loop longer than this is surely a mistake

_ARITH = {ast.Add: ("add", "add"), ast.Sub: ("sub", "subtract"), ast.Mult: ("mul", "multiply"),
          ast.Div: ("div", "true_divide"), ast.FloorDiv: ("floordiv", "floor_divide"), ast.Mod: ("mod", "remainder"),
          ast.Pow: ("pow", "power")}
_BITWISE = {ast.BitAnd: "bitwise_and", ast.BitOr: "bitwise_or", ast.BitXor: "bitwise_xor",
            ast.LShift: "shift_left", ast.RShift: "shift_right"}
_PY_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
              ast.MatMult: operator.matmul, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
              ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
_SYMBOLIC_OK = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)  # what symbolic sizes compute exactly
_COMPARE = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_PY_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
               ast.Gt: operator.gt, ast.GtE: operator.ge}


class ExpressionTranslator:
    """Evaluates expressions of one function (its globals, closure and source) in an environment."""

    def __init__(self, cx: E.Context, source: Source, depth: int = 0):
        self.cx, self.src, self.depth = cx, source, depth
        self.params: list = []  # the tensors the function was called with (assigning into them is checked)
        fn = source.fn
        self.globals = fn.__globals__
        self.closure = {}
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                self.closure[name] = cell.cell_contents
            except ValueError:  # a cell not filled yet
                pass

    # -- dispatch ---------------------------------------------------------------------------------------------
    def expr(self, node: ast.AST, env: dict):
        outer = self.cx.loc
        self.cx.at(self.src.location(node))
        try:
            handler = _EXPRS.get(type(node))
            if handler is None:
                raise UnsupportedError(f"the expression `{type(node).__name__}` is not supported here (supported: "
                                       "operators, calls, attributes, subscripts, tuples, lists, comprehensions)")
            return handler(self, node, env)
        except CuvilError as e:
            raise self.src.error(e, node) from None
        except RecursionError:
            raise
        except Exception as e:  # the original would raise this too: say so at the line
            err = CuvilError(f"evaluating this at compile time raised {type(e).__name__}: {e}")
            raise self.src.error(err, node) from e
        finally:
            self.cx.at(outer)

    def condition(self, node, env):
        """The truth of an expression: a Python bool, or a bool scalar tensor (errors point at the expression)."""
        value = self.expr(node, env)
        try:
            return E.truth(self.cx, value)
        except CuvilError as e:
            raise self.src.error(e, node) from None

    def lift(self, v):
        """Arrays and tensors from globals, closures or compile-time calls become constants."""
        if isinstance(v, (tuple, list)) and not hasattr(v, "_fields"):
            return type(v)(self.lift(x) for x in v)
        if isinstance(v, np.ndarray):
            return self.cx.constant(v)
        if is_torch_tensor(v):
            if v.device.type != "cpu":
                raise UnsupportedError(f"a torch tensor on {v.device} cannot be a constant; move it to the CPU")
            return self.cx.constant(v.detach().numpy())
        return v

    # -- leaves ------------------------------------------------------------------------------------------------
    def e_constant(self, node, env):
        return node.value

    def e_name(self, node, env):
        if node.id in env:
            v = env[node.id]
            if isinstance(v, Undefined):
                raise CuvilError(v.why)
            return v
        for scope in (self.closure, self.globals, builtins.__dict__):
            if node.id in scope:
                return self.lift(scope[node.id])
        raise CuvilError(f"name '{node.id}' is not defined (or not assigned on this path)")

    def e_lambda(self, node, env):
        """A lambda is translated where it is called; as in Python, it reads the names of its scope then (late
        binding) and its defaults now."""
        return Lambda(node, env, self.items(node.args.defaults, env))

    def e_namedexpr(self, node, env):
        """`(s := x.sum())`: bind, then use the value."""
        value = self.expr(node.value, env)
        self.assign(node.target, value, env)
        return value

    def e_tuple(self, node, env):
        return tuple(self.items(node.elts, env))

    def e_list(self, node, env):
        return self.items(node.elts, env)

    def e_dict(self, node, env):
        if any(k is None for k in node.keys):
            raise UnsupportedError("**mapping in a dict literal is not supported")
        return {self.expr(k, env): self.expr(v, env) for k, v in zip(node.keys, node.values)}

    def items(self, nodes, env) -> list:
        out = []
        for n in nodes:
            if isinstance(n, ast.Starred):
                out.extend(self.iterate(self.expr(n.value, env)))
            else:
                out.append(self.expr(n, env))
        return out

    def e_joined_str(self, node, env):
        parts = []
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                value = self.expr(v.value, env)
                if is_dynamic(value) and not isinstance(value, SymExpr):
                    raise UnsupportedError("f-strings can only format values known at compile time")
                spec = self.expr(v.format_spec, env) if v.format_spec else ""
                parts.append(format({115: str, 114: repr, 97: ascii}.get(v.conversion, lambda x: x)(value), spec))
            else:
                parts.append(v.value)
        return "".join(parts)

    # -- attributes and subscripts -------------------------------------------------------------------------------
    def e_attribute(self, node, env):
        return self.attribute(self.expr(node.value, env), node.attr)

    def attribute(self, base, attr: str):
        if isinstance(base, TV):
            methods, attrs = method_table(self.cx.mode)
            if attr in attrs:
                out = attrs[attr](self.cx, base)
                if attr in ("T", "mT") and isinstance(out, TV):
                    self.cx.views[id(out)] = (out, base)
                return out
            if attr in methods:
                return BoundMethod(base, attr)
            raise UnsupportedError(f"tensor attribute or method '.{attr}' is not supported; supported: "
                                   f"{', '.join(sorted({*attrs, *methods}))}")
        if isinstance(base, (SymExpr, RuntimeRange)):
            raise UnsupportedError(f"'.{attr}' of a size known only at run time is not supported")
        if isinstance(base, (Accumulator, StackedList)):
            return ListMethod(base, attr)
        return self.lift(getattr(base, attr))

    def e_subscript(self, node, env):
        base = self.expr(node.value, env)
        index = self.index(node.slice, env)
        if isinstance(base, Accumulator):
            raise UnsupportedError(f"reading the list '{base.name}' inside the loop that appends to it (at run time) "
                                   "is not supported; keep the value you need in a variable")
        if isinstance(base, StackedList):
            rows = E.stack(self.cx, base, 0)
            return StackedList([(getitem(self.cx, rows, index), True)]) if isinstance(index, slice) else \
                getitem(self.cx, rows, index)
        if isinstance(base, TV):
            return self.view(base, index)
        if is_dynamic(index):
            raise UnsupportedError(f"indexing a Python {type(base).__name__} needs an index known at compile time")
        return base[index]

    def view(self, base: TV, index) -> TV:
        """base[index], remembered as a view of base when NumPy and torch give one (assigning into it would change
        base too)."""
        out = getitem(self.cx, base, index)
        if _is_basic(index):
            self.cx.views[id(out)] = (out, base)
        return out

    def index(self, node, env):
        if isinstance(node, ast.Slice):
            return slice(*(self.expr(p, env) if p is not None else None for p in (node.lower, node.upper, node.step)))
        if isinstance(node, ast.Tuple):
            return tuple(self.index(e, env) for e in node.elts)
        return self.expr(node, env)

    # -- operators ----------------------------------------------------------------------------------------------------
    def e_binop(self, node, env):
        return self.binop(type(node.op), self.expr(node.left, env), self.expr(node.right, env))

    def binop(self, op, a, b):
        tensors = isinstance(a, TV) or isinstance(b, TV)
        symbolic = isinstance(a, SymExpr) or isinstance(b, SymExpr)
        if not tensors and (not symbolic or op in _SYMBOLIC_OK):
            return _PY_BINOPS[op](a, b)
        if op is ast.MatMult:
            return E.matmul(self.cx, a, b)
        if op in _BITWISE:
            return E.bitwise(self.cx, _BITWISE[op], a, b)
        if op not in _ARITH:
            raise UnsupportedError(f"the operator {op.__name__} is not supported on tensors")
        return E.binary(self.cx, *_ARITH[op], a, b)

    def e_unaryop(self, node, env):
        v = self.expr(node.operand, env)
        op = type(node.op)
        if not isinstance(v, (TV, SymExpr)):
            return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                    ast.Invert: operator.invert}[op](v)
        if op is ast.UAdd:
            return v
        if op is ast.USub:
            if isinstance(v, SymExpr):
                return -v
            if v.dtype.value == "bool":
                raise UnsupportedError("negating a boolean tensor is not supported (NumPy and torch refuse it too)")
            return TV(self.cx.b.neg(v.value), v.weak)
        if op is ast.Not:
            return E.logical_not(self.cx, E.truth(self.cx, v))
        return E.invert(self.cx, v)

    def e_boolop(self, node, env):
        """`and`/`or` short-circuit on Python values; on tensors both sides become one boolean."""
        is_and = isinstance(node.op, ast.And)
        v = self.expr(node.values[0], env)
        for nxt in node.values[1:]:
            if not isinstance(v, (TV, SymExpr)):
                if bool(v) != is_and:
                    return v
                v = self.expr(nxt, env)
                continue
            w = self.expr(nxt, env)
            v = E.binary(self.cx, "and" if is_and else "or", None, E.truth(self.cx, v), E.truth(self.cx, w))
        return v

    def e_compare(self, node, env):
        """Chained comparisons: `a < b < c` is `a < b and b < c`."""
        left, result = self.expr(node.left, env), None
        for op, right_node in zip(node.ops, node.comparators):
            right = self.expr(right_node, env)
            r = self.compare(type(op), left, right)
            if result is None:
                result = r
            elif isinstance(result, TV) or isinstance(r, TV):
                result = E.binary(self.cx, "and", None, result, r)
            else:
                result = result and r
            if not isinstance(result, TV) and not result:
                return result
            left = right
        return result

    def compare(self, op, a, b):
        if op in (ast.Is, ast.IsNot):
            return (a is b) == (op is ast.Is)
        if op in (ast.In, ast.NotIn):
            if is_dynamic(b):
                raise UnsupportedError("`in` needs a container known at compile time")
            if not isinstance(a, (TV, SymExpr)):
                return (a in b) == (op is ast.In)
            found = self._any_all([self.compare(ast.Eq, a, x) for x in b], any)  # a size bound at run time
            return found if op is ast.In else self._negate(found)
        if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and is_dynamic([a, b]):
            if op not in (ast.Eq, ast.NotEq):
                raise UnsupportedError("ordering sequences that hold sizes bound at run time is not supported")
            same = len(a) == len(b) and self._any_all([self.compare(ast.Eq, x, y) for x, y in zip(a, b)], all)
            return same if op is ast.Eq else self._negate(same)
        if not isinstance(a, (TV, SymExpr)) and not isinstance(b, (TV, SymExpr)):
            return _PY_COMPARE[op](a, b)
        if a is None or b is None:
            raise UnsupportedError("compare tensors with None using `is None` / `is not None`")
        return E.binary(self.cx, _COMPARE[op], None, a, b)

    def _any_all(self, results: list, py):
        """any/all of Python truth values and run-time conditions."""
        static = py(r for r in results if not isinstance(r, TV))
        if static is (py is any):  # decided already: some True for any, some False for all
            return static
        conds = [r for r in results if isinstance(r, TV)]
        out = conds[0] if conds else static
        for r in conds[1:]:
            out = E.binary(self.cx, "or" if py is any else "and", None, out, r)
        return out

    def _negate(self, v):
        return E.logical_not(self.cx, v) if isinstance(v, TV) else not v

    def e_ifexp(self, node, env):
        c = self.condition(node.test, env)
        if not isinstance(c, TV):
            return self.expr(node.body if c else node.orelse, env)
        return E.where(self.cx, c, self.expr(node.body, env), self.expr(node.orelse, env))

    # -- comprehensions ------------------------------------------------------------------------------------------------
    def e_listcomp(self, node, env):
        out: list = []
        self._comprehend(node, node.generators, dict(env), out)
        return tuple(out) if isinstance(node, ast.GeneratorExp) else out

    def _comprehend(self, node, gens, env, out):
        if not gens:
            out.append(self.expr(node.elt, env))
            return
        g = gens[0]
        for item in self.iterate(self.expr(g.iter, env)):
            local = dict(env)
            self.assign(g.target, item, local)
            conds = [self.condition(c, local) for c in g.ifs]
            if any(isinstance(c, TV) for c in conds):
                raise UnsupportedError("comprehension conditions must be known at compile time")
            if all(conds):
                self._comprehend(node, gens[1:], local, out)

    def iterate(self, v) -> list:
        """The items of something a Python loop runs over at compile time."""
        if isinstance(v, TV):
            if v.rank == 0 or not isinstance(v.shape[0], int):
                raise UnsupportedError(f"iterating over a tensor of shape {list(v.shape)} needs a static first dim")
            return [self.view(v, i) for i in range(v.shape[0])]
        if isinstance(v, RuntimeRange):
            raise UnsupportedError("only `for` loops can run over a range known at run time")
        if isinstance(v, StackedList):
            return items_of(self.cx, v)
        if isinstance(v, (SymExpr, BoundMethod)):
            raise UnsupportedError(f"a {type(v).__name__} is not iterable")
        items = list(v)
        if len(items) > MAX_ITEMS:
            raise UnsupportedError(f"iterating over {len(items)} items at compile time is too many")
        return items

    def assign(self, target, value, env: dict) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            self._unpack(target.elts, self.iterate(value), env)
        elif isinstance(target, ast.Subscript):
            self.store_item(target, env, lambda base, index: setitem(self.cx, base, index, value), value)
        elif isinstance(target, ast.Attribute):
            raise UnsupportedError("assigning to an attribute is not supported: compiled code cannot change Python "
                                   "objects; bind the value to a name")
        else:
            raise UnsupportedError(f"cannot assign to `{describe(target)}`")

    def store_item(self, target: ast.Subscript, env: dict, update, value) -> None:
        """`x[index] = value`: x is rebound to `update(x, index)`, a new tensor (Python lists and dicts known at
        compile time are changed as in Python, with `value`)."""
        base = self.expr(target.value, env)
        index = self.index(target.slice, env)
        if isinstance(base, (list, dict)):
            if self.cx.nesting:
                raise UnsupportedError("assigning into a Python list or dict inside a branch on a tensor value or a "
                                       "loop that runs at run time is not supported")
            if is_dynamic(index):
                raise UnsupportedError("indexing a Python list or dict needs an index known at compile time")
            base[index] = value if value is not UPDATE else update(base, index)
            return
        if not isinstance(base, TV):
            raise UnsupportedError(f"cannot assign into a {type(base).__name__}")
        if isinstance(target.value, ast.Subscript) and not _is_basic(self.index(target.value.slice, env)):
            raise UnsupportedError("x[idx][...] = v with a tensor or list index assigns into a copy in NumPy and "
                                   "torch (x is unchanged); index once: x[idx, ...] = v")
        # x[i][j] = v writes x[i] back into x, so x[i] being a view of x is what makes it right
        written_back = isinstance(target.value, ast.Subscript) and isinstance(self.expr(target.value.value, env), TV)
        self.check_owner(target.value.id if isinstance(target.value, ast.Name) else None, base, env, written_back)
        self.assign(target.value, update(base, index), env)

    def check_owner(self, name, t: TV, env: dict, written_back: bool = False) -> None:
        """Assigning into a tensor changes every name that shares its memory in NumPy and torch; compiled code
        rebinds one name (`name`, or an item of a list), so sharing is an error (an argument's caller is warned:
        its array stays as it was)."""
        others = [n for n, v in env.items() if v is t and n != name and not n.startswith("$")]
        if others:
            what = f"'{name}'" if name else "this item"
            raise UnsupportedError(f"{what} and '{others[0]}' are the same array here: assigning into it would "
                                   f"change '{others[0]}' too; copy it first ({others[0]}.copy(), or .clone() in "
                                   "torch)")
        base = None if written_back else self.cx.views.get(id(t), (None, None))[1]
        owner = next((n for n, v in env.items() if base is not None and v is base), None)
        if owner is not None:
            raise UnsupportedError(f"'{name or 'this item'}' is a view of '{owner}': assigning into it would change "
                                   f"'{owner}' too; "
                                   f"assign into '{owner}' directly, or copy the view first (.copy() / .clone())")
        if name is not None and any(t is p for p in self.params):
            if self.depth:
                raise UnsupportedError(f"assigning into the argument '{name}' of an inlined function would change the "
                                       "caller's array; return the new value instead")
            warnings.warn(f"cuvil.jit: assigning into the argument '{name}' of {self.src.name} updates the compiled "
                          "function's own copy; the caller's array is not modified", stacklevel=1)

    def _unpack(self, targets, items: list, env: dict) -> None:
        stars = [i for i, t in enumerate(targets) if isinstance(t, ast.Starred)]
        if not stars and len(items) != len(targets):
            raise CuvilError(f"cannot unpack {len(items)} values into {len(targets)} names")
        if stars:
            k, after = stars[0], len(targets) - stars[0] - 1
            if len(items) < len(targets) - 1:
                raise CuvilError(f"not enough values to unpack ({len(items)})")
            items = items[:k] + [list(items[k:len(items) - after])] + items[len(items) - after:]
            targets = [t.value if isinstance(t, ast.Starred) else t for t in targets]
        for t, v in zip(targets, items):
            self.assign(t, v, env)

    # -- calls -------------------------------------------------------------------------------------------------------
    def e_call(self, node, env):
        fn = self.expr(node.func, env)
        args = self.items(node.args, env)
        kwargs = {}
        for kw in node.keywords:
            value = self.expr(kw.value, env)
            if kw.arg is None:
                if not isinstance(value, dict):
                    raise UnsupportedError("**kwargs must be a dict known at compile time")
                kwargs.update(value)
            else:
                kwargs[kw.arg] = value
        return self.call(fn, args, kwargs, describe(node.func))

    def call(self, fn, args, kwargs, label: str):
        if isinstance(fn, ListMethod):
            return list_method(self.cx, fn.owner, fn.name, args, kwargs)
        if isinstance(fn, BoundMethod):
            methods, _ = method_table(self.cx.mode)
            out = self.invoke(methods[fn.name], [fn.tensor, *args], kwargs, label)
            if fn.name in _VIEW_METHODS and isinstance(out, TV):
                self.cx.views[id(out)] = (out, fn.tensor)
            return out
        if getattr(fn, "_cuvil_jit", False):
            return self.inline(fn.python_function, [*fn.receiver, *args], kwargs, label)
        if isinstance(fn, Lambda):
            return self.expr(fn.node.body, {**fn.env, **fn.bind(args, kwargs, label)})
        if _is_hashable(fn) and fn in BUILTINS:
            return BUILTINS[fn](self, *args, **kwargs)
        if isinstance(fn, type) and issubclass(fn, tuple) and hasattr(fn, "_fields"):
            return fn(*args, **kwargs)  # a named tuple holding tensors
        if isinstance(fn, type) and issubclass(fn, np.generic):  # np.float32(x): a cast, or a NumPy scalar now
            return E.cast(self.cx, args[0], to_dtype(fn)) if is_dynamic(args) else fn(*args, **kwargs)
        if _is_value_method(fn) and not is_dynamic(args) and not is_dynamic(kwargs):
            return fn(*args, **kwargs)  # shape.index(4), "{}".format(n): methods of immutable Python values
        if _is_list_method(fn):
            return self.change_list(fn, args, kwargs, label)
        hit = lookup(fn)
        if hit is None:
            callee = python_callee(fn)
            if callee is None:
                raise UnsupportedError(_unsupported_call(fn, label))
            fn, lead, fixed = callee
            return self.inline(fn, [*lead, *args], {**fixed, **kwargs}, label)
        conv = hit[2]
        if not is_dynamic(args) and not is_dynamic(kwargs):
            return self.lift(fn(*args, **kwargs))  # a library call on constants runs now
        if conv is None:
            raise UnsupportedError(f"{label} is supported with arguments known at compile time only")
        return self.invoke(conv, args, kwargs, label)

    def change_list(self, fn, args, kwargs, label: str):
        """`outs.append(y)` in straight-line code or an unrolled loop runs now, on the list being built. In a
        branch or loop on a tensor value the body is translated once for every run: the list cannot follow."""
        if self.cx.nesting:
            raise UnsupportedError(f"{label}() inside a branch on a tensor value or a loop that runs at run time "
                                   "is not supported; build the list where the control flow is known at compile time "
                                   "(a loop over range(n) unrolls up to cuvil.jit(unroll=...) iterations)")
        return fn(*args, **kwargs)

    def invoke(self, conv, args, kwargs, label: str):
        try:
            inspect.signature(conv).bind(self.cx, *args, **kwargs)
        except TypeError as e:
            raise UnsupportedError(f"{label}(): {e} (these arguments are not supported)") from None
        return conv(self.cx, *args, **kwargs)

    def inline(self, fn, args, kwargs, label: str):
        """A call to a Python function (a helper, a method, an nn.Module's forward, another @cuvil.jit
        function): translate its own source here, with these arguments. Recursion is inlined too, so it must
        end on Python values at compile time."""
        if self.depth >= MAX_INLINE_DEPTH:
            raise UnsupportedError(f"calls nest {MAX_INLINE_DEPTH} deep at {label}(): a recursion that does not end "
                                   "at compile time (on Python values) cannot be compiled, since calls are inlined; "
                                   "write it as a loop")
        src = source_of(fn)
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as e:
            raise CuvilError(f"calling {src.name}: {e}") from None
        bound.apply_defaults()
        where = self.cx.loc
        try:
            return type(self)(self.cx, src, self.depth + 1).run(dict(bound.arguments))  # a FunctionTranslator
        except CuvilError as e:
            if not getattr(e, "quoted", False) or e.message.count("\n  called from") >= 3:
                raise
            new = type(e)(f"{e.message}\n  called from {label}() at {where.file}:{where.line}")
            new.loc, new.quoted = e.loc, True
            raise new from None


_SOURCES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def source_of(fn) -> Source:
    """The parsed source of a function, read once per function."""
    src = _SOURCES.get(fn)
    if src is None:
        src = _SOURCES[fn] = Source(fn)
    return src


_LIBRARIES = ("numpy", "torch", "jax", "scipy")


def python_callee(fn):
    """(function, leading arguments, fixed keywords) for a callable whose Python source is inlined, else None:
    plain functions outside the array libraries, bound methods (self first), functools.partial, nn.Module
    objects (their forward) and objects whose class defines __call__ in Python."""
    if inspect.isfunction(fn):
        module = getattr(fn, "__module__", None) or ""
        return None if module.split(".")[0] in _LIBRARIES else (fn, [], {})
    if inspect.ismethod(fn) and inspect.isfunction(fn.__func__):
        return fn.__func__, [fn.__self__], {}
    if isinstance(fn, functools.partial):
        inner = python_callee(fn.func)
        return None if inner is None else (inner[0], [*inner[1], *fn.args], {**inner[2], **fn.keywords})
    if is_torch_module(fn):
        check_module(fn)
        return type(fn).forward, [fn], {}
    call = next((vars(c)["__call__"] for c in type(fn).__mro__ if "__call__" in vars(c)), None)
    if not isinstance(fn, type) and inspect.isfunction(call):
        return call, [fn], {}
    return None


def is_torch_module(obj) -> bool:
    torch = torch_module()
    return torch is not None and isinstance(obj, torch.nn.Module)


def check_module(m) -> None:
    """An nn.Module is traced through its forward: hooks would not run, and training mode is random or
    updates state."""
    name = type(m).__name__
    if m._forward_hooks or m._forward_pre_hooks or getattr(m, "_backward_hooks", None):
        raise UnsupportedError(f"the {name} module has hooks, which compiled code would not run; remove them")
    nn = torch_module().nn.modules
    stateful = (nn.dropout._DropoutNd, nn.batchnorm._BatchNorm)
    if any(s.training and isinstance(s, stateful) for s in m.modules()):
        raise UnsupportedError(f"the {name} module is in training mode (dropout is random, batch norm updates its "
                               "statistics); call .eval() on it first")


class Lambda:
    """`lambda a, b=1: ...` inside compiled code: its node and the names it closes over."""

    def __init__(self, node, env: dict, defaults: list):
        self.node, self.env, self.defaults = node, env, defaults

    def bind(self, args, kwargs, label: str) -> dict:
        a = self.node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
            raise UnsupportedError("lambdas with *args, **kwargs or keyword-only parameters are not supported")
        names = [p.arg for p in a.args]
        bound = dict(zip(names[len(names) - len(self.defaults):], self.defaults))
        bound.update(zip(names, args))
        bound.update(kwargs)
        if len(args) > len(names) or set(bound) != set(names):
            raise UnsupportedError(f"{label}(): the arguments do not match the lambda's parameters {names}")
        return bound


_VIEW_METHODS = frozenset({"reshape", "view", "transpose", "permute", "squeeze", "unsqueeze", "flatten", "ravel",
                           "swapaxes", "expand", "t", "view_as", "expand_as"})  # results share memory with x
UPDATE = object()  # store_item's value for an augmented assignment: the update computes it


def _is_basic(index) -> bool:
    """Ints, slices, None and ...: the indexing that gives a view (tensor and list indices copy)."""
    items = index if isinstance(index, tuple) else (index,)
    return not any(isinstance(i, (TV, list, np.ndarray)) and not (isinstance(i, TV) and i.rank == 0) for i in items)


def _is_value_method(fn) -> bool:
    return inspect.isbuiltin(fn) and isinstance(getattr(fn, "__self__", None), (tuple, str, dict, range, int, float))


_LIST_METHODS = ("append", "extend", "insert", "pop", "reverse", "clear")


def _is_list_method(fn) -> bool:
    return inspect.isbuiltin(fn) and type(getattr(fn, "__self__", None)) is list and fn.__name__ in _LIST_METHODS


def _is_hashable(fn) -> bool:
    try:
        hash(fn)
        return True
    except TypeError:
        return False


def _unsupported_call(fn, label: str) -> str:
    module = getattr(fn, "__module__", None) or ""
    if isinstance(fn, np.ufunc) or module.startswith("numpy"):
        return f"{label} is not supported; supported numpy functions: {supported_names('numpy')}"
    if module.startswith("torch.nn.functional"):
        return f"{label} is not supported; supported torch.nn.functional functions: {supported_names('F')}"
    if module.startswith("torch"):
        return f"{label} is not supported; supported torch functions: {supported_names('torch')}"
    return f"calling {label} ({type(fn).__name__}) is not supported inside compiled code"



_EXPRS = {
    ast.Constant: ExpressionTranslator.e_constant, ast.Name: ExpressionTranslator.e_name,
    ast.Tuple: ExpressionTranslator.e_tuple, ast.List: ExpressionTranslator.e_list,
    ast.Dict: ExpressionTranslator.e_dict, ast.JoinedStr: ExpressionTranslator.e_joined_str,
    ast.Attribute: ExpressionTranslator.e_attribute, ast.Subscript: ExpressionTranslator.e_subscript,
    ast.BinOp: ExpressionTranslator.e_binop, ast.UnaryOp: ExpressionTranslator.e_unaryop,
    ast.BoolOp: ExpressionTranslator.e_boolop, ast.Compare: ExpressionTranslator.e_compare,
    ast.IfExp: ExpressionTranslator.e_ifexp, ast.Call: ExpressionTranslator.e_call,
    ast.ListComp: ExpressionTranslator.e_listcomp, ast.GeneratorExp: ExpressionTranslator.e_listcomp,
    ast.NamedExpr: ExpressionTranslator.e_namedexpr, ast.Lambda: ExpressionTranslator.e_lambda,
}
