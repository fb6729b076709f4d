"""How control leaves a block (`Return`, break, continue), where a statement stands in a loop body (`LoopRest`),
and the scans of a body's statements the translator decides by."""
from __future__ import annotations

import ast


class Return:
    """Control left the function with `value`; `nodes` are the `return` statements it comes from."""

    def __init__(self, value, nodes=()):
        self.value, self.nodes = value, tuple(nodes)


BREAK, CONTINUE = "break", "continue"
FINISHED = "finished"  # a tensor `if` ran the rest of the loop body in its branches: this iteration is done


class LoopFrame:
    """One loop being translated. `runtime`: a `while` op, where a jump on a tensor condition becomes carried
    flags ($live, $returned, $ret_<k>); `returned`: the structure of the value a `return` in it gives."""

    def __init__(self, runtime: bool):
        self.runtime = runtime
        self.returned = None
        self.leaves = 0


class LoopRest(list):
    """The statements after the current one up to the end of the loop body of `frame`."""

    def __init__(self, items, frame: LoopFrame):
        super().__init__(items)
        self.frame = frame


class NeedsRuntimeLoop(Exception):
    """A `break` or `return` on a tensor condition in a loop being unrolled: translate the loop as a `while`.
    Not a CuvilError, so no statement handler reports it on the way to the loop."""


def rest_after(rest, later) -> list:
    """What follows a statement: the later statements of its block, then what follows the block."""
    if rest is None:
        return None
    items = list(later) + list(rest)
    return LoopRest(items, rest.frame) if isinstance(rest, LoopRest) else items


def walk_body(stmts):
    """Nodes of these statements, not descending into nested functions, lambdas or comprehensions."""
    stack = list(stmts)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.Lambda, ast.ListComp, ast.GeneratorExp, ast.SetComp,
                                      ast.DictComp)):
                stack.append(child)


def returns(stmts) -> bool:
    return any(isinstance(n, ast.Return) for n in walk_body(stmts))


def jumps(stmts) -> bool:
    """A `break` or `continue` of the enclosing loop (not of a loop nested in these statements)."""
    stack = list(stmts)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Break, ast.Continue)):
            return True
        if not isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
        elif isinstance(node, (ast.For, ast.While)):
            stack.extend(node.orelse)
    return False


def breaks(stmts) -> bool:
    stack = list(stmts)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Break):
            return True
        if not isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return False


def assigned(stmts) -> set:
    """Names the statements bind, and those they assign into (`x[i] = v` rebinds x)."""
    names = set()
    for n in walk_body(stmts):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store):
            while isinstance(n, ast.Subscript):
                n = n.value
            if isinstance(n, ast.Name):
                names.add(n.id)
    return names
