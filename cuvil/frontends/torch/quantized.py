"""torch.ao's dynamically quantised modules in ops that torch.export captures.

`torch.ao.quantization.quantize_dynamic` replaces `nn.Linear` with a module whose packed int8 weights torch.export
cannot trace. Each such Linear is exported as what it computes: its activations quantised per call to uint8 over
their range (fbgemm's and x86's `reduce_range`: 7 bits; qnnpack's: 8), its weights dequantised, products summed in
float32. The result equals torch's own within float rounding. Other quantised modules are refused by name.
"""
from __future__ import annotations

import copy

import torch

from ...errors import UnsupportedError

_QUANTIZED = "torch.ao.nn.quantized"


class DynamicQuantizedLinear(torch.nn.Module):
    def __init__(self, q: torch.nn.Module):
        super().__init__()
        self.register_buffer("weight", q.weight().dequantize())
        bias = q.bias()
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self.int8 = q._packed_params.dtype == torch.qint8  # float16 weights: no activation quantisation
        self.qmax = 127 if torch.backends.quantized.engine in ("x86", "fbgemm") else 255

    def forward(self, x):
        if self.int8:
            lo, hi = torch.clamp(x.min(), max=0.0), torch.clamp(x.max(), min=0.0)
            scale = torch.clamp((hi - lo) / self.qmax, min=torch.finfo(torch.float32).eps)
            zero = torch.clamp(-torch.round(lo / scale), 0, self.qmax)
            x = (torch.clamp(torch.round(x / scale) + zero, 0, self.qmax) - zero) * scale
        return torch.nn.functional.linear(x, self.weight, self.bias)


def has_quantized_modules(module: torch.nn.Module) -> bool:
    return any(type(m).__module__.startswith(_QUANTIZED) for m in module.modules())


def exportable_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of `module` with every dynamically quantised Linear replaced (the user's module is left as is)."""
    out, replaced = copy.deepcopy(module), []
    for name, m in list(out.named_modules()):
        kind = type(m)
        if not kind.__module__.startswith(_QUANTIZED) or any(name.startswith(f"{r}.") for r in replaced):
            continue
        if kind.__module__.startswith(f"{_QUANTIZED}.dynamic") and kind.__name__ == "Linear":
            _replace(out, name, DynamicQuantizedLinear(m))
            replaced.append(name)
        else:
            raise UnsupportedError(f"the quantised module {name or type(out).__name__} ({kind.__module__}."
                                   f"{kind.__name__}) is not supported: torch.export cannot capture its packed "
                                   f"weights; only dynamically quantised nn.Linear layers are (compile the float "
                                   f"model instead)")
    return out


def _replace(root: torch.nn.Module, name: str, new: torch.nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, leaf, new)
