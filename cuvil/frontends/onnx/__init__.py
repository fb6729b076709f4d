"""The ONNX frontend: `load_onnx` turns an ONNX model into an `OnnxModel` (an IR module plus its weights).

Converters are small functions in tables keyed by op type (`convert_*.py`, one file per op family); the
graph walker (`graph.py`) folds shape arithmetic at conversion time and expands ops that ONNX defines as
functions of other ops.
"""
from .loader import load_onnx
from .model import OnnxModel, TensorSpec

__all__ = ["OnnxModel", "TensorSpec", "load_onnx"]
