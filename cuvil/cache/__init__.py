"""Compiled artifacts saved on disk and found again before any frontend or pass runs (see store.py), so a new
process that compiles a model it compiled before loads the result in milliseconds.

    CUVIL_ARTIFACT_CACHE=0     turns it off
    cuvil.cache.clear()        deletes the saved artifacts (the C compiler's own cache stays)
    cuvil.cache.verify()       checks every artifact in full and deletes the corrupt ones
"""
from .store import clear, enabled, entries, folder, verify

__all__ = ["clear", "enabled", "entries", "folder", "verify"]
