"""What a compiled PyTorch module needs at call time, apart from the converter machinery (which imports sympy
through torch.export): a cached `cuvil.compile` loads only this."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.utils._pytree as pytree


@dataclass
class Signature:
    """How the compiled callable maps the user's (args, kwargs) to IR inputs and IR outputs back.

    `inputs[i]` is the flat position of IR argument i among the user's inputs (in the exported order);
    `outputs[j]` is ("ir", k) for the k-th IR result or ("const", value) for an output fixed at export;
    `mutations` pairs (flat input position, IR result) for the inputs the program updates in place (batch norm's
    running statistics in training mode): the result is copied into that input after each call.
    """

    in_spec: object
    out_spec: object
    n_flat_inputs: int
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    mutations: list = field(default_factory=list)


def signature_json(sig: Signature) -> dict:
    """The signature as JSON (pytree specs in torch's own serialised form), for the artifact cache."""
    return {"in_spec": pytree.treespec_dumps(sig.in_spec), "out_spec": pytree.treespec_dumps(sig.out_spec),
            "n_flat_inputs": sig.n_flat_inputs, "inputs": sig.inputs, "outputs": sig.outputs,
            "mutations": sig.mutations}


def signature_from_json(data: dict) -> Signature:
    return Signature(pytree.treespec_loads(data["in_spec"]), pytree.treespec_loads(data["out_spec"]),
                     data["n_flat_inputs"], list(data["inputs"]), [tuple(o) for o in data["outputs"]],
                     [tuple(m) for m in data.get("mutations", ())])


def tensor_to_numpy(t: torch.Tensor):
    """The tensor's memory as a NumPy array, without a copy (bfloat16 through an int16 view)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()
