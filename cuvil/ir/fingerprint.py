"""A structural fingerprint: SHA-256 over a canonical form of the module.

Value names, constant names and locations do not count, nor the words of a relation; every op, attribute,
type, relation (its kind and sizes) and constant byte does. Values are numbered in definition order,
constants are hashed by content. Compile caches are keyed by it.
"""
from __future__ import annotations

import hashlib

import numpy as np

from .. import mapped_pages
from .core import Function, Module, Region
from .printer import format_attr


def fingerprint(module: Module) -> str:
    """Hex SHA-256 of `module`'s canonical form."""
    h = hashlib.sha256(b"cuvil-ir-fingerprint-v1\n")
    digests = {name: _array_digest(arr) for name, arr in module.constants.items()}
    for name in sorted(module.functions):
        _Canon(h, digests).function(module.functions[name])
    return h.hexdigest()


def _array_digest(arr: np.ndarray) -> str:
    """SHA-256 of the dtype, shape and bytes, the bytes read in place (a copy of a model's largest weight, an
    embedding table of 100-150 MB, was most of a cold compile's peak memory)."""
    a = np.ascontiguousarray(arr)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.reshape(-1).view(np.uint8))
    mapped_pages.release(a)  # a weight mapped from a model file need not stay resident for this one read
    return h.hexdigest()


class _Canon:
    def __init__(self, h, constant_digests: dict):
        self.h, self.digests, self.ids = h, constant_digests, {}

    def emit(self, text: str) -> None:
        self.h.update(text.encode() + b"\n")

    def number(self, v) -> str:
        self.ids[id(v)] = len(self.ids)
        return f"v{self.ids[id(v)]}:{v.type}"

    def function(self, fn: Function) -> None:
        relations = sorted(":".join(r.key) for r in fn.constraints)
        self.emit(f"func {fn.name} {relations}")
        self.region(fn.body)

    def region(self, region: Region) -> None:
        self.emit("region(" + ",".join(self.number(a) for a in region.args) + ")")
        for op in region.ops:
            attrs = {k: v for k, v in op.attrs.items()}
            if op.name == "constant":
                attrs["name"] = self.digests.get(attrs["name"], attrs["name"])
            operands = ",".join(f"v{self.ids.get(id(v), '?')}" for v in op.operands)
            attr_text = ",".join(f"{k}={format_attr(v)}" for k, v in sorted(attrs.items()))
            results = ",".join(self.number(r) for r in op.results)
            self.emit(f"{op.name}({operands}){{{attr_text}}}->{results}")
            for r in op.regions:
                self.region(r)
            self.emit("end")
