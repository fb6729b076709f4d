"""Capturing a PyTorch module or function with `torch.export`, in eval mode, at the ATen level.

`run_decompositions` brings the program to the core ATen op set (functional: no in-place ops), except for
the ops in `PRESERVED`, which have direct IR equivalents that are smaller than their decompositions.
"""
from __future__ import annotations

import contextlib
import functools
import inspect

import torch

from ...errors import UnsupportedError

PRESERVED = ("linear", "layer_norm", "scaled_dot_product_attention", "matmul")


class FunctionModule(torch.nn.Module):
    """A plain function as a module. `forward` is the function itself, so placeholders carry its argument
    names and stack traces point into it."""

    def __init__(self, fn):
        super().__init__()
        self.forward = fn
        # export keeps only frames named "forward" and registered anchors in stack traces
        anchor = getattr(torch.fx.proxy, "_register_stack_trace_anchor", None)
        if anchor is not None:
            anchor(fn)


def as_module(obj) -> torch.nn.Module:
    if isinstance(obj, torch.nn.Module):
        return obj
    if callable(obj):
        return FunctionModule(obj)
    raise TypeError(f"cuvil.compile needs a torch.nn.Module or a function, got {type(obj).__name__}")


def forward_arg_names(module: torch.nn.Module) -> list[str]:
    params = inspect.signature(module.forward).parameters.values()
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


@contextlib.contextmanager
def eval_mode(module: torch.nn.Module):
    """Export in eval mode (dropout off, batch norm on running statistics) and restore the user's flags."""
    flags = {m: m.training for m in module.modules()}
    module.eval()
    try:
        yield module
    finally:
        for m, training in flags.items():
            m.training = training


def export_program(obj, args: tuple, kwargs: dict, dynamic_shapes=None):
    """The core-ATen `ExportedProgram` of `obj` called with example `args` and `kwargs`."""
    module = as_module(obj)
    with eval_mode(module), torch.no_grad():
        try:
            program = torch.export.export(module, tuple(args), dict(kwargs), dynamic_shapes=dynamic_shapes)
        except Exception as e:  # torch's message says what to change; keep it, under Cuvil's error type
            hint = " (for a transformers model, set config.use_cache=False)" if "Cache" in str(e) else ""
            raise UnsupportedError(f"torch.export could not capture {type(obj).__name__}{hint}: "
                                   f"{type(e).__name__}: {e}") from e
    return program.run_decompositions(_decomposition_table().copy())


@functools.cache
def _decomposition_table():
    """The core-ATen table without the PRESERVED ops (built once: collecting it takes a quarter second)."""
    table = torch.export.default_decompositions()
    for name in PRESERVED:
        op = getattr(torch.ops.aten, name).default
        if op in table:
            del table[op]
    return table
