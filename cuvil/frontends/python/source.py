"""A function's own source: its AST, the locations of its nodes, and errors that quote the line with a caret."""
from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Callable

from ...errors import CuvilError, UnsupportedError
from ...ir.core import Location


class Source:
    """The parsed source of one Python function and where it lives in its file."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.name = getattr(fn, "__qualname__", getattr(fn, "__name__", "<function>"))
        try:
            lines, first = inspect.getsourcelines(fn)
            self.file = inspect.getsourcefile(fn) or "<unknown>"
        except (OSError, TypeError) as e:
            raise UnsupportedError(f"cannot read the source of {self.name} ({e}); cuvil.jit compiles functions "
                                   "defined in a file (use fallback='python' to run it as Python)") from None
        self.lines = lines
        self.first_line = first
        text = "".join(lines)
        dedented = textwrap.dedent(text)
        self.indent = _indent_removed(text, dedented)
        tree = ast.parse(dedented)
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if not defs or isinstance(defs[0], ast.AsyncFunctionDef):
            raise UnsupportedError(f"{self.name} is not a plain `def` function (lambdas and async functions are not "
                                   "supported); define it with def")
        self.tree: ast.FunctionDef = defs[0]

    def location(self, node: ast.AST) -> Location:
        """`file:line:col` of a node, the column 1-based as editors count."""
        line = self.first_line + node.lineno - 1
        return Location(self.file, line, node.col_offset + self.indent + 1)

    def quote(self, node: ast.AST) -> str:
        """The source line of `node` with a caret under the expression."""
        text = self.lines[node.lineno - 1].rstrip("\n")
        start = node.col_offset + self.indent
        end_line = getattr(node, "end_lineno", node.lineno)
        end = node.end_col_offset + self.indent if end_line == node.lineno and node.end_col_offset else len(text)
        line = self.first_line + node.lineno - 1
        return (f'  File "{self.file}", line {line}, in {self.name}\n    {text.strip()}\n'
                f"    {' ' * (start - _lead(text))}{'^' * max(end - start, 1)}")

    def error(self, err: CuvilError, node: ast.AST) -> CuvilError:
        """`err` again with the quoted source appended (once: the innermost node wins)."""
        if getattr(err, "quoted", False):
            return err
        new = type(err)(f"{err.message}\n{self.quote(node)}")
        new.loc, new.quoted = self.location(node), True
        return new


def _lead(text: str) -> int:
    return len(text) - len(text.lstrip())


def _indent_removed(text: str, dedented: str) -> int:
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    first_d = next((ln for ln in dedented.splitlines() if ln.strip()), "")
    return _lead(first) - _lead(first_d)


def describe(node: ast.AST) -> str:
    """Short source text for messages (`np.fft.fft`)."""
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001 (only for a message)
        return type(node).__name__
