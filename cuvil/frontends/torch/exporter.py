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
from .quantized import exportable_copy, has_quantized_modules

# the activations too: decomposed (x * clamp(x + 3, 0, 6) / 6), they leave a blocked conv's epilogue unfused
PRESERVED = ("linear", "layer_norm", "scaled_dot_product_attention", "matmul", "hardswish", "hardsigmoid", "silu")


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
    """The core-ATen `ExportedProgram` of `obj` called with example `args` and `kwargs`.

    torch.export specialises every size that is 1 in the example, even one marked dynamic (`Constraints
    violated (batch)` for a batch-1 example). Such examples are widened to 2 along the dynamic axes first (the
    values are repeated: export reads sizes, not values), then along axis 0 alone (a channel of 1 that a conv
    fixes); if no widened example exports, the original one is exported as given.
    """
    module = as_module(obj)
    _register_cache_pytrees(module)
    if has_quantized_modules(module):
        module = exportable_copy(module)
    wider = _widened_examples(args, kwargs, dynamic_shapes, forward_arg_names(module)) if dynamic_shapes else []
    with eval_mode(module), torch.no_grad():
        for wide_args, wide_kwargs in wider:
            try:
                return _core(torch.export.export(module, wide_args, wide_kwargs, dynamic_shapes=dynamic_shapes))
            except Exception:  # noqa: BLE001 (the example as given is tried last: its error is the one to report)
                continue
        try:
            program = torch.export.export(module, tuple(args), dict(kwargs), dynamic_shapes=dynamic_shapes)
        except Exception as e:  # torch's message says what to change; keep it, under Cuvil's error type
            raise UnsupportedError(f"torch.export could not capture {type(obj).__name__}{_hint(e)}: "
                                   f"{type(e).__name__}: {e}") from e
    try:
        return _core(program)
    except Exception as e:  # noqa: BLE001 (torch's own decomposition failed: say where, keep its words)
        raise UnsupportedError(f"torch could not bring the exported {type(obj).__name__} to core ATen ops "
                               f"(run_decompositions): {type(e).__name__}: {e}") from e


def _register_cache_pytrees(module: torch.nn.Module) -> None:
    """A transformers decoder returns (and takes) its KV cache as a `DynamicCache`: registered as a pytree, it
    is flattened to its key and value tensors, so models compile with their default `use_cache=True`."""
    if not type(module).__module__.startswith("transformers."):
        return
    try:
        from transformers.integrations.executorch import register_dynamic_cache_export_support
    except ImportError:  # an older transformers: export then names the cache type in its error
        return
    register_dynamic_cache_export_support()


def _core(program):
    """The program at the core-ATen level. Tensors that forward creates (`torch.tensor([])` in a transformers
    cache layer) are lifted under qualified names (`h.0.attn.lifted_tensor_0`), but run_decompositions looks
    them up by the last part: each is given that name too (they are numbered across the model, so unique)."""
    for name in [k for k in program.constants if "." in k and "lifted_tensor" in k]:
        program.constants.setdefault(name.rsplit(".", 1)[1], program.constants[name])
    return program.run_decompositions(_decomposition_table().copy())


def _hint(e: Exception) -> str:
    text = str(e)
    if "Cache" in text:
        return " (for a transformers model, set config.use_cache=False)"
    if "specialized it to be a constant (1)" in text:
        return (" (torch.export fixes a size that is 1 in the example; Cuvil retried with it widened to 2 and the "
                "model did not export that way: give an example whose dynamic sizes are at least 2)")
    return ""


def _widened_examples(args: tuple, kwargs: dict, dynamic_shapes, names: list) -> list:
    """Examples with the top-level tensor inputs that are 1 along an axis marked dynamic repeated to 2 along it:
    along every such axis, then along axis 0 only; the distinct ones that differ from the original."""
    specs = dynamic_shapes if isinstance(dynamic_shapes, dict) else dict(zip(names, dynamic_shapes))

    def widen(name, x, axes):
        spec = specs.get(name)
        spec = dict(enumerate(spec)) if isinstance(spec, (list, tuple)) else spec
        if not isinstance(x, torch.Tensor) or not isinstance(spec, dict):
            return x
        for axis, dim in spec.items():
            if axis in axes and _is_dynamic(dim) and x.shape[axis] == 1:
                x = torch.cat([x, x], dim=axis)
        return x

    out, seen = [], {_sizes(args, kwargs)}
    for axes in (range(64), (0,)):
        wide = (tuple(widen(n, a, axes) for n, a in zip([*names, *[None] * len(args)], args)),
                {k: widen(k, v, axes) for k, v in kwargs.items()})
        if _sizes(*wide) not in seen:
            seen.add(_sizes(*wide))
            out.append(wide)
    return out


def _sizes(args: tuple, kwargs: dict) -> tuple:
    return tuple(tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in (*args, *kwargs.values()))


def _is_dynamic(dim) -> bool:
    hint = getattr(torch.export.Dim, "STATIC", None)
    return isinstance(dim, torch.export.Dim) or (isinstance(dim, type(torch.export.Dim.AUTO)) and dim is not hint)


@functools.cache
def _decomposition_table():
    """The core-ATen table without the PRESERVED ops (built once: collecting it takes a quarter second)."""
    table = torch.export.default_decompositions()
    for name in PRESERVED:
        op = getattr(torch.ops.aten, name).default
        if op in table:
            del table[op]
    return table
