"""A `.cuv` for the `cuda` target (the container of docs/artifact.md, triple "nvptx64-nvidia-cuda"): PTX (sm_80, for
the driver to compile on any newer GPU) and cubins for sm_80 and sm_90, the optimised IR, the constants raw.
Built ahead of time on a machine without a GPU (`cuvil.export(obj, path, target="cuda")`).

Sections: meta (JSON: target, archs, the SHA-256 of each entry's kernel source, and each entry's signature, check
program and constants as the CPU's meta has them), entries (the same as text records for the C runtime,
runtime/entries.py), native (the PTX of every entry, one module each, separated), sm_80 / sm_90 (cubins, the same
order), cuda_steps (each entry's host steps as text, host_steps.py), consts (raw, 256-byte aligned), ir (each
entry's module, serialized). `load` rebuilds each entry's host program from its IR with the code generator (pure
Python, no compiler), checks that it generates the kernels the file carries, and runs them through the driver;
the standalone C runtime (cuvil_cuda_rt.c) runs the file from its cuda_steps instead.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from ...errors import ArtifactError, UnsupportedError
from ...ir import serialize
from ...runtime import container, entries
from ..cpu.executable import binding_table
from ..cpu.export import _param
from ..cpu.fastcall import check_program
from . import codegen, host_steps, toolchain
from .backend import CudaBuild, CudaRun

TRIPLE = "nvptx64-nvidia-cuda"
SEPARATOR = b"\0\0CUVIL-NEXT-MODULE\0\0"


def write(path, runs: dict) -> None:
    """`runs`: entry name -> CudaRun (a target="cuda" Executable's callable) and its module."""
    archs = list(toolchain.ARCHS)
    meta = {"target": "cuda", "archs": archs, "entries": {}, "sources": {}}
    consts, offset, images = [], 0, {"ptx": [], **{a: [] for a in archs}}
    for k, (name, (run, module)) in enumerate(runs.items()):
        program = run.built.program
        meta["sources"][name] = hashlib.sha256(program.source.encode()).hexdigest()
        table = []
        for cname in program.constants:
            array = np.ascontiguousarray(module.constants[cname])
            table.append({"name": cname, "offset": offset, "nbytes": array.nbytes, "dtype": array.dtype.str,
                          "shape": list(array.shape)})
            consts.append(array.tobytes() + b"\0" * (-array.nbytes % 256))
            offset += array.nbytes + (-array.nbytes % 256)
        meta["entries"][name] = _signature(program, f"cuvil_e{k}_", table)
        built = run.built.images if set(archs) <= set(run.built.images) else toolchain.build_images(program.source)
        for kind in images:
            images[kind].append(built[kind])
    steps = host_steps.format_section({name: run.built.program for name, (run, _) in runs.items()})
    sections = [container.Section("meta", [json.dumps(meta).encode()]),
                container.Section("entries", [entries.format_entries(meta["entries"]).encode()]),
                container.Section("native", [SEPARATOR.join(images["ptx"])]),
                *(container.Section(a, [SEPARATOR.join(images[a])]) for a in archs),
                container.Section("cuda_steps", [steps.encode()]),
                container.Section("consts", consts or [b""]),
                container.Section("ir", [SEPARATOR.join(serialize.to_bytes(m) for _, m in runs.values())])]
    container.write(os.fspath(path), sections, TRIPLE, 0)


def _signature(program, prefix: str, constants: list) -> dict:
    """An entry of meta in the form of the C runtime's `entries` records (runtime/entries.py): names, sizes, the
    check program that binds the symbols and gives the output sizes, and where each constant lies."""
    fn = program.function
    arg_types = [a.type for a in fn.args]
    checks = check_program(arg_types, fn.result_types, program.symbols, binding_table(program.symbols, arg_types),
                           fn.constraints)
    return {"prefix": prefix,
            "inputs": [_param(a.name or f"input_{i}", a.type) for i, a in enumerate(fn.args)],
            "outputs": [_param(f"output_{j}", t) for j, t in enumerate(fn.result_types)],
            "symbols": list(program.symbols), "constants": constants, "prepared": [], "checks": checks}


def load(path, driver=None, blas=None, stream_priority: int = 0) -> dict:
    """entry name -> CudaRun of a cuda `.cuv` (its kernels load on the first call)."""
    return read(path, driver, blas, stream_priority)[1]


def read(path, driver=None, blas=None, stream_priority: int = 0) -> tuple:
    """(meta, entry name -> CudaRun) of a cuda `.cuv`."""
    c = container.Container.open(os.fspath(path))
    meta = json.loads(bytes(c.data("meta")))
    if meta.get("target") != "cuda":
        raise ArtifactError(f"{path}: a .cuv for {meta.get('target')!r}, not 'cuda'")
    irs = bytes(c.data("ir")).split(SEPARATOR)
    images = {"ptx": bytes(c.data("native")).split(SEPARATOR),
              **{a: bytes(c.data(a)).split(SEPARATOR) for a in meta["archs"]}}
    consts = bytes(c.data("consts"))
    out = {}
    for k, (name, entry) in enumerate(meta["entries"].items()):
        module = serialize.from_bytes(irs[k])
        program = codegen.generate(module)
        if hashlib.sha256(program.source.encode()).hexdigest() != meta["sources"][name]:
            raise ArtifactError(f"{path}: entry {name!r} was built by another Cuvil (its kernels differ from what "
                                "this one generates from its IR); export it again")
        constants = {e["name"]: np.frombuffer(consts, np.dtype(e["dtype"]), int(np.prod(e["shape"], dtype=np.int64)),
                                              e["offset"]).reshape(e["shape"])
                     for e in entry["constants"]}
        built = CudaBuild(program, {kind: images[kind][k] for kind in images})
        out[name] = CudaRun(built, constants, driver, blas, stream_priority)
    return meta, out


def export_target_cuda(executables: dict) -> dict:
    """The (CudaRun, module) of each `target="cuda"` Executable; UnsupportedError for one of another target."""
    out = {}
    for name, exe in executables.items():
        if exe.target != "cuda" or not isinstance(exe._run, CudaRun):
            raise UnsupportedError(f"cuvil.export(target='cuda'): {name!r} was compiled for {exe.target!r}; compile "
                                   "it with target='cuda' (that needs no GPU)")
        out[name] = (exe._run, exe.module)
    return out
