"""A `.cuv` for the `cuda` target (the container of docs/artifact.md, triple "nvptx64-nvidia-cuda"): PTX (sm_80, for
the driver to compile on any newer GPU) and cubins for sm_80 and sm_90, the optimised IR, the constants raw.
Built ahead of time on a machine without a GPU (`cuvil.export(obj, path, target="cuda")`).

Sections: meta (JSON: target, archs, entry names, the SHA-256 of each entry's kernel source), entries (JSON:
each entry's constants and their offsets in consts), native (the PTX of every entry, one module each, NUL
separated), sm_80 / sm_90 (cubins, the same order), consts (raw, 256-byte aligned), ir (each entry's module,
serialized). `load` rebuilds each entry's host program from its IR with the code generator (pure Python, no
compiler), checks that it generates the kernels the file carries, and runs them through the driver.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from ...errors import ArtifactError, UnsupportedError
from ...ir import serialize
from ...runtime import container
from . import codegen, toolchain
from .backend import CudaBuild, CudaRun

TRIPLE = "nvptx64-nvidia-cuda"
SEPARATOR = b"\0\0CUVIL-NEXT-MODULE\0\0"


def write(path, runs: dict) -> None:
    """`runs`: entry name -> CudaRun (a target="cuda" Executable's callable) and its module."""
    archs = list(toolchain.ARCHS)
    meta = {"target": "cuda", "archs": archs, "entries": list(runs), "sources": {}}
    entries, consts, offset, images = {}, [], 0, {"ptx": [], **{a: [] for a in archs}}
    for name, (run, module) in runs.items():
        program = run.built.program
        meta["sources"][name] = hashlib.sha256(program.source.encode()).hexdigest()
        table = {}
        for cname in program.constants:
            array = np.ascontiguousarray(module.constants[cname])
            table[cname] = {"offset": offset, "dtype": array.dtype.str, "shape": list(array.shape)}
            consts.append(array.tobytes() + b"\0" * (-array.nbytes % 256))
            offset += array.nbytes + (-array.nbytes % 256)
        entries[name] = {"constants": table}
        built = run.built.images if set(archs) <= set(run.built.images) else toolchain.build_images(program.source)
        for kind in images:
            images[kind].append(built[kind])
    sections = [container.Section("meta", [json.dumps(meta).encode()]),
                container.Section("entries", [json.dumps(entries).encode()]),
                container.Section("native", [SEPARATOR.join(images["ptx"])]),
                *(container.Section(a, [SEPARATOR.join(images[a])]) for a in archs),
                container.Section("consts", consts or [b""]),
                container.Section("ir", [SEPARATOR.join(serialize.to_bytes(m) for _, m in runs.values())])]
    container.write(os.fspath(path), sections, TRIPLE, 0)


def load(path, driver=None, blas=None, stream_priority: int = 0) -> dict:
    """entry name -> CudaRun of a cuda `.cuv` (its kernels load on the first call)."""
    c = container.Container.open(os.fspath(path))
    meta = json.loads(bytes(c.data("meta")))
    if meta.get("target") != "cuda":
        raise ArtifactError(f"{path}: a .cuv for {meta.get('target')!r}, not 'cuda'")
    entries = json.loads(bytes(c.data("entries")))
    irs = bytes(c.data("ir")).split(SEPARATOR)
    images = {"ptx": bytes(c.data("native")).split(SEPARATOR),
              **{a: bytes(c.data(a)).split(SEPARATOR) for a in meta["archs"]}}
    consts = bytes(c.data("consts"))
    out = {}
    for k, name in enumerate(meta["entries"]):
        module = serialize.from_bytes(irs[k])
        program = codegen.generate(module)
        if hashlib.sha256(program.source.encode()).hexdigest() != meta["sources"][name]:
            raise ArtifactError(f"{path}: entry {name!r} was built by another Cuvil (its kernels differ from what "
                                "this one generates from its IR); export it again")
        constants = {cname: np.frombuffer(consts, np.dtype(e["dtype"]), int(np.prod(e["shape"], dtype=np.int64)),
                                          e["offset"]).reshape(e["shape"])
                     for cname, e in entries[name]["constants"].items()}
        built = CudaBuild(program, {kind: images[kind][k] for kind in images})
        out[name] = CudaRun(built, constants, driver, blas, stream_priority)
    return out


def export_target_cuda(executables: dict) -> dict:
    """The (CudaRun, module) of each `target="cuda"` Executable; UnsupportedError for one of another target."""
    out = {}
    for name, exe in executables.items():
        if exe.target != "cuda" or not isinstance(exe._run, CudaRun):
            raise UnsupportedError(f"cuvil.export(target='cuda'): {name!r} was compiled for {exe.target!r}; compile "
                                   "it with target='cuda' (that needs no GPU)")
        out[name] = (exe._run, exe.module)
    return out
