"""Looking up what a call in compiled code means: numpy, math and (once torch is imported) torch functions, and
the methods and attributes of tensors, from the converter tables of calls.py and calls_torch.py. Apart from
calls.py so that the torch table, which uses calls.py's converters, is not imported by it."""
from __future__ import annotations

import math
import sys

import numpy as np

from . import calls_more as M
from .calls import NUMPY_ATTRS, NUMPY_FOLD_ONLY, NUMPY_FUNCS, NUMPY_METHODS, unary

_TABLES: dict = {}


def _numpy_table() -> dict:
    table = {}
    for name, conv in NUMPY_FUNCS.items():
        fn = getattr(np, name, None)
        if fn is not None:
            table.setdefault(fn, ("numpy", name, conv))
    for name in NUMPY_FOLD_ONLY:
        table.setdefault(getattr(np, name), ("numpy", name, None))
    table[np.linalg.norm] = ("numpy", "linalg.norm", M.np_norm)
    return table


_MATH = {"sqrt": "sqrt", "exp": "exp", "log": "log", "tanh": "tanh", "sin": "sin", "cos": "cos", "tan": "tan",
         "erf": "erf", "erfc": "erfc", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh",
         "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "log2": "log2", "log10": "log10", "log1p": "log1p",
         "expm1": "expm1"}


def _math_table() -> dict:
    """math.* runs at compile time; on sizes known only at run time the float ones become tensor ops."""
    table = {}
    for name in dir(math):
        fn = getattr(math, name)
        if callable(fn):
            table[fn] = ("math", name, unary(_MATH[name]) if name in _MATH else None)
    return table


def lookup(fn):
    """(namespace, name, converter or None for compile-time-only) for a supported library function, else None."""
    if "numpy" not in _TABLES:
        _TABLES["numpy"], _TABLES["math"] = _numpy_table(), _math_table()
    if "torch" not in _TABLES and "torch" in sys.modules:
        from .calls_torch import torch_table

        _TABLES["torch"] = torch_table()
    for table in _TABLES.values():
        try:
            hit = table.get(fn)
        except TypeError:  # unhashable
            return None
        if hit is not None:
            return hit
    return None


def method_table(mode: str) -> tuple:
    """(methods, attributes) of tensors in this mode."""
    if mode == "torch":
        from .calls_torch import TORCH_ATTRS, TORCH_METHODS

        return TORCH_METHODS, TORCH_ATTRS
    return NUMPY_METHODS, NUMPY_ATTRS


def supported_names(namespace: str) -> str:
    lookup(None)
    names = sorted({name for ns, name, _ in _TABLES.get(namespace, {}).values()} if namespace in _TABLES else [])
    return ", ".join(names)
