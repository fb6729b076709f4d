"""Cuvil's runtime: load a `.cuv` file (docs/artifact.md) and call its entry points. It imports no frontend,
no pass and no compiler, and runs no C compiler.

    artifact = cuvil.load("model.cuv")
    y = artifact(x)                      # the `main` entry
    fn = artifact["main"]; fn.inputs     # [Param(name='x', dtype='f32', shape=('batch', 784))]

    rt = cuvil.runtime.Runtime(num_threads=4)          # TVM's and the seed's names (api.py), `cuvil.nd` tensors
    y = rt.load_executable("model.cuv").get_function("main")(cuvil.nd.array(x))
"""
from . import nd
from .api import Runtime
from .artifact import Artifact, load
from .function import Function, Param

__all__ = ["Artifact", "Function", "Param", "Runtime", "load", "nd"]
