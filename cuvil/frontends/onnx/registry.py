"""The converter tables: op type -> converter (builds IR) and op type -> folder (computes known values).

A converter takes a `NodeContext` and returns one entry per ONNX output: an IR value, a `Tensor`, or None
for an optional output it does not produce. A folder returns a list of `Tensor`s with known contents, or
None when the node cannot be evaluated at conversion time; then the converter runs.
"""
from __future__ import annotations

from typing import Callable

CONVERTERS: dict[str, Callable] = {}
DOMAIN_CONVERTERS: dict[tuple, Callable] = {}  # (domain, op type) -> converter, for ai.onnx.ml, com.microsoft...
FOLDERS: dict[str, Callable] = {}


def converter(*op_types: str, domain: str = ""):
    def register(fn):
        for op in op_types:
            if domain:
                DOMAIN_CONVERTERS[(domain, op)] = fn
            else:
                CONVERTERS[op] = fn
        return fn
    return register


def folder(*op_types: str):
    def register(fn):
        for op in op_types:
            FOLDERS[op] = fn
        return fn
    return register
