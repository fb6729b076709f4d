"""Passes: transformations of IR modules."""
from .decompose import decompose

__all__ = ["decompose"]
