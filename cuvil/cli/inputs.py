"""The command line's input arguments: `--input x=1,3,224,224` (a shape, optionally `:dtype`), `--input x=x.npy`
(a file), `--dynamic x:0=batch` (a symbolic size), and the arrays a run gets from them."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import ShapeError
from ..runtime.nd import numpy_dtype


@dataclass
class InputArg:
    """One `--input`: a name (None: the next input in order) and either a file or a shape (with a dtype)."""

    name: Optional[str]
    file: Optional[str] = None
    shape: Optional[tuple] = None
    dtype: Optional[str] = None


@dataclass(frozen=True)
class Param:
    """A model input as the commands see it: name, Cuvil dtype name (`f32`), shape of ints and symbol names."""

    name: str
    dtype: str
    shape: tuple

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}[{','.join(map(str, self.shape))}]"


def parse_input(text: str) -> InputArg:
    """`x=1,3,224,224`, `x=1,3:i64`, `x=x.npy`, or `x.npy` / `1,3` without a name."""
    name, _, value = text.rpartition("=") if "=" in text else (None, "", text)
    if name is not None and not name:
        raise ShapeError(f"--input {text!r}: the name before '=' is empty")
    if value.endswith(".npy") or os.path.exists(value):
        return InputArg(name, file=value)
    dims, _, dtype = value.partition(":")
    try:
        shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
    except ValueError:
        raise ShapeError(f"--input {text!r}: expected NAME=FILE.npy or NAME=D0,D1,...[:DTYPE] "
                         f"(e.g. x=1,3,224,224 or x=2,8:i64)") from None
    if any(d < 0 for d in shape):
        raise ShapeError(f"--input {text!r}: sizes must be at least 0")
    return InputArg(name, shape=shape, dtype=dtype or None)


def parse_dynamic(text: str) -> list:
    """`x:0=batch` (several separated by commas) -> [(input, axis, symbol)]."""
    out = []
    for item in filter(None, text.split(",")):
        where, _, symbol = item.partition("=")
        name, _, axis = where.rpartition(":")
        if not name or not axis.lstrip("-").isdigit() or not symbol.isidentifier():
            raise ShapeError(f"--dynamic {item!r}: expected INPUT:AXIS=SYMBOL (e.g. x:0=batch)")
        out.append((name, int(axis), symbol))
    return out


def assign(args: list, names: list) -> dict:
    """The `--input`s by input name; unnamed ones take the inputs not named, in order."""
    named = {a.name: a for a in args if a.name is not None}
    unknown = sorted(set(named) - set(names))
    if unknown:
        raise ShapeError(f"--input names {', '.join(unknown)}, but the model's inputs are {', '.join(names)}")
    free = [n for n in names if n not in named]
    unnamed = [a for a in args if a.name is None]
    if len(unnamed) > len(free):
        raise ShapeError(f"{len(unnamed)} unnamed --input(s) but only {len(free)} input(s) left to give "
                         f"({', '.join(free) or 'none'})")
    return {**named, **dict(zip(free, unnamed))}


def arrays_for(params: list, given: dict, random: bool, seed: int = 0) -> dict:
    """An array for each input: read from its file, random of its given shape, or random of its signature's
    static shape where `random` is on; a clear error for any input left without one."""
    rng = np.random.default_rng(seed)
    out, missing = {}, []
    for p in params:
        arg = given.get(p.name)
        if arg is not None and arg.file is not None:
            out[p.name] = _load_npy(arg.file, p)
        elif arg is not None or random:
            out[p.name] = random_array(rng, _shape(p, arg), arg.dtype if arg and arg.dtype else p.dtype)
        else:
            missing.append(p)
    if missing:
        raise ShapeError("no value for input(s) " + ", ".join(map(str, missing)) +
                         ": give --input NAME=FILE.npy, or --random (with --input NAME=SHAPE for symbolic sizes)")
    return out


def _shape(p: Param, arg: Optional[InputArg]) -> tuple:
    if arg is not None and arg.shape is not None:
        if len(arg.shape) != len(p.shape) or any(isinstance(d, int) and d != n for d, n in zip(p.shape, arg.shape)):
            raise ShapeError(f"--input {p.name}={','.join(map(str, arg.shape))} does not fit the signature {p}")
        return arg.shape
    symbolic = [d for d in p.shape if not isinstance(d, int)]
    if symbolic:
        raise ShapeError(f"input {p} has symbolic size(s) {', '.join(map(str, symbolic))}: give its shape with "
                         f"--input {p.name}=" + ",".join(str(d) if isinstance(d, int) else "N" for d in p.shape))
    return tuple(p.shape)


def random_array(rng, shape: tuple, dtype: str) -> np.ndarray:
    """Standard normal floats, integers in [0, 4) (small enough to index most axes), random booleans."""
    dt = numpy_dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, 4, shape).astype(dt)


def _load_npy(path: str, p: Param) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ShapeError(f"--input {p.name}={path}: cannot read it as a .npy file ({e})") from None
