"""Cuvil's runtime: load a `.cuv` file (docs/artifact.md) and call its entry points. It imports no frontend,
no pass and no compiler, and runs no C compiler.

    artifact = cuvil.load("model.cuv")
    y = artifact(x)                      # the `main` entry
    fn = artifact["main"]; fn.inputs     # [Param(name='x', dtype='f32', shape=('batch', 784))]
"""
from .artifact import Artifact, load
from .function import Function, Param

__all__ = ["Artifact", "Function", "Param", "load"]
