"""Running one entry of a wasm32 `.cuv` under Node.js with cuvil.js (run_node.mjs), from the tests."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).with_name("run_node.mjs")


RELAXED_FLAG = "--experimental-wasm-relaxed-simd"  # Node.js 20 (V8 11.3); on by default from Node.js 22


def run(cuv: Path, inputs: list, folder: Path, entry: str = "main", features=None, relaxed: bool = False) -> dict:
    """{"outputs": [arrays], "native": the section run} or {"error": {kind, message}} from cuvil.js; `features`:
    load's (default the engine's), `relaxed`: Node.js with relaxed-SIMD on."""
    spec = {"cuv": str(cuv), "entry": entry, "out": str(folder / "out"), "inputs": [], "features": features}
    for k, x in enumerate(inputs):
        x = np.ascontiguousarray(x)
        x.tofile(folder / f"in{k}.bin")
        spec["inputs"].append({"file": str(folder / f"in{k}.bin"), "shape": list(x.shape), "dtype": _name(x.dtype)})
    (folder / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run(["node", *([RELAXED_FLAG] if relaxed else []), str(SCRIPT), str(folder / "spec.json")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads((folder / "out.json").read_text())
    if "outputs" in result:
        result["outputs"] = [np.fromfile(folder / f"out.{k}.bin", _dtype(o["dtype"])).reshape(o["shape"])
                             for k, o in enumerate(result["outputs"])]
    return result


def _name(dtype: np.dtype) -> str:
    from cuvil.ir.dtypes import DType

    return next(str(d) for d in DType if d.numpy == dtype)


def _dtype(name: str) -> np.dtype:
    from cuvil.ir.dtypes import DType

    return DType(name).numpy
