"""Cuvil's runtime: load a `.cuv` file (docs/artifact.md) and call its entry points. It imports no frontend,
no pass and no compiler, and runs no C compiler.

    artifact = cuvil.load("model.cuv")
    y = artifact(x)                      # the `main` entry
    fn = artifact["main"]; fn.inputs     # [Param(name='x', dtype='f32', shape=('batch', 784))]

    rt = cuvil.runtime.Runtime(num_threads=4)          # TVM's and the seed's names (api.py), `cuvil.nd` tensors
    y = rt.load_executable("model.cuv").get_function("main")(cuvil.nd.array(x))
"""
from .artifact import Artifact, load
from .function import Function, Param


def __getattr__(name: str):
    """`Runtime` and `nd`, imported on first use: `cuvil.load` needs neither."""
    if name == "Runtime":
        from .api import Runtime

        return Runtime
    if name == "nd":
        import importlib

        return importlib.import_module(".nd", __name__)  # not `from . import nd`: its hasattr would recurse here
    raise AttributeError(f"module 'cuvil.runtime' has no attribute {name!r}")


__all__ = ["Artifact", "Function", "Param", "Runtime", "load", "nd"]
