"""One fuzz case, run in the worker process: a model (bytes) and the inputs to call it with, through ONNX Runtime
and Cuvil, classified by outcome.

Outcomes:
- match: both ran and agree;
- cuvil-error: Cuvil refused (model or call) with a Cuvil error where ONNX Runtime ran;
- both-refuse: both refused;
- cuvil-only: Cuvil ran where ONNX Runtime refused (reported, not a failure: Cuvil may accept more);
- too-large: the mutated sizes ask for more memory than a test should use (not run);
- mismatch: both ran and disagree (a failure);
- internal: Cuvil raised something other than a Cuvil error (a failure);
- known-window: an internal error of the known class in KNOWN (counted apart until its fix merges);
- crash, hang: the worker died or stopped answering (failures; see pool.py).
"""
from __future__ import annotations

import re

import numpy as np

FAILURES = ("mismatch", "internal", "crash", "hang")
MAX_ELEMENTS = 1 << 22  # an input larger than this comes from a mutated size: not run
RTOL, ATOL = 1e-4, 1e-4
# Failures of a known class another branch fixes: counted apart (by a match on the error), not failing the run.
KNOWN = {"known-window": re.compile(r"window shape cannot be larger than input array shape")}


def ort_session(data: bytes):
    """An ONNX Runtime session for the model, or the exception that refuses it."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 4
    try:
        return onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - ORT raises its own unrelated exception classes
        return e


def ort_run(session, feeds: dict):
    """ORT's outputs, or the exception that refuses the call."""
    try:
        return session.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        return e


def feeds_for(specs, rng, sizes: dict) -> dict | None:
    """Random arrays for (name, dtype, shape) specs, symbolic dims from `sizes` (default 2); None if too large."""
    feeds = {}
    for name, dtype, shape in specs:
        dims = [d if isinstance(d, int) and d >= 0 else sizes.get(str(d), 2) for d in shape]
        if int(np.prod(dims)) > MAX_ELEMENTS:
            return None
        dtype = np.dtype(dtype)
        feeds[name] = (rng.standard_normal(dims).astype(dtype) if dtype.kind == "f"
                       else rng.integers(0, 3, dims).astype(dtype))
    return feeds


def ort_specs(session) -> list:
    import onnxruntime  # noqa: F401 - session types

    table = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
             "tensor(int32)": np.int32, "tensor(bool)": np.bool_, "tensor(float16)": np.float16,
             "tensor(int8)": np.int8, "tensor(uint8)": np.uint8}
    specs = []
    for i in session.get_inputs():
        if i.type not in table:
            return []
        specs.append((i.name, table[i.type], [d if isinstance(d, int) else str(d) for d in i.shape]))
    return specs


def compare(got: list, want: list) -> str | None:
    """Why Cuvil's outputs differ from ORT's, or None."""
    if len(got) != len(want):
        return f"{len(got)} outputs, ORT gives {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {k}: {g.dtype}{list(g.shape)}, ORT gives {w.dtype}{list(w.shape)}"
        if g.dtype.kind in "biu":
            if not np.array_equal(g, w):
                return f"output {k}: integers differ"
        elif not np.allclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=True):
            err = np.nanmax(np.abs(g.astype(np.float64) - w)) if g.size else 0
            return f"output {k}: max abs difference {err:.3g}"
    return None


def classify_call(call, ort_result) -> tuple:
    """(outcome, detail) of one call of a loaded Cuvil model against ORT's result for the same feeds."""
    import cuvil

    try:
        got = call()
    except cuvil.CuvilError as e:
        return ("both-refuse" if isinstance(ort_result, Exception) else "cuvil-error"), _short(e)
    except MemoryError as e:
        return "too-large", _short(e)
    except Exception as e:  # noqa: BLE001 - anything else is the bug this fuzzer looks for
        return _internal(e)
    if isinstance(ort_result, Exception):
        return "cuvil-only", f"ORT refuses: {_short(ort_result)}"
    why = compare(got, ort_result)
    return ("mismatch", why) if why else ("match", "")


def load(data: bytes):
    """(Cuvil model or None, outcome or None, detail)."""
    import cuvil

    try:
        return cuvil.load_onnx(data), None, ""
    except cuvil.CuvilError as e:
        return None, "cuvil-error", _short(e)
    except MemoryError as e:
        return None, "too-large", _short(e)
    except Exception as e:  # noqa: BLE001
        return (None, *_internal(e))


def _internal(e: Exception) -> tuple:
    detail = f"{type(e).__name__}: {_short(e)}"
    return next((name for name, pattern in KNOWN.items() if pattern.search(detail)), "internal"), detail


def _short(e) -> str:
    return " ".join(str(e).split())[:300]


def worst(outcomes: list) -> tuple:
    """The outcome that says most about a case with several calls: a failure first, then a refusal."""
    order = ["internal", "mismatch", *KNOWN, "cuvil-only", "cuvil-error", "both-refuse", "too-large", "match"]
    return min(outcomes, key=lambda o: order.index(o[0]))
