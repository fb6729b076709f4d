"""Running compiled artifacts: `cuvil.runtime.Runtime` (TVM's and the seed's names) and `cuvil.nd` tensors."""
from . import nd
from .api import Runtime

__all__ = ["Runtime", "nd"]
