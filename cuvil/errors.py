"""Cuvil's error types. Each carries the source location it is about, when there is one."""
from __future__ import annotations


class CuvilError(Exception):
    """Base of every error Cuvil raises on purpose; `loc` names the user's source line or model node."""

    def __init__(self, message: str, loc=None):
        self.message = message
        self.loc = loc
        super().__init__(f"{message} (at {loc})" if loc is not None and str(loc) else message)


class ShapeError(CuvilError, ValueError):
    """Operands whose shapes or dtypes an op cannot accept, or sizes that break a recorded relation."""


class IndexRangeError(CuvilError, IndexError):
    """An index input outside the axis it indexes (gather, scatter), found by the reference interpreter; compiled
    code clamps such an index instead, so it never reads out of bounds."""


class VerificationError(CuvilError):
    """IR that breaks a structural rule (dominance, types, attributes, regions)."""


class ParseError(CuvilError, ValueError):
    """Text that is not a well-formed Cuvil module; `loc` is the line number."""


class UnsupportedError(CuvilError, NotImplementedError):
    """An op, attribute, dtype or construct Cuvil does not support."""


class SerializationError(CuvilError, ValueError):
    """A malformed, truncated or incompatible serialized module."""


class ArtifactError(CuvilError, ValueError):
    """A `.cuv` file that is truncated, corrupt, of a newer format or made for another machine (see
    docs/artifact.md); raised before any of its native code runs."""
