"""One fuzz case, run in the worker process: a model (bytes) and the inputs to call it with, through ONNX Runtime
and Cuvil, classified by outcome.

Outcomes:
- match: both ran and agree;
- cuvil-error: Cuvil refused (model or call) with a Cuvil error where ONNX Runtime ran;
- both-refuse: both refused;
- cuvil-only: Cuvil ran where ONNX Runtime refused (reported, not a failure: Cuvil may accept more);
- too-large: the mutated sizes ask for more memory than a test should use (not run);
- overflow: both ran on weights beyond EXTREME, inf or NaN, and differ where one side overflowed (f64 against
  f32 accumulation), or where Cuvil's compiled f32 code agrees with ORT or overflows too, and only the
  interpreter's f64 arithmetic stays finite (a saturating op, tanh or softmax, hides the inf downstream): not a
  failure;
- undefined: an input is empty and the outputs differ only where one side is NaN: the mean of an empty set,
  which ONNX leaves undefined (NumPy's NaN against ORT's 0): not a failure;
- mismatch: both ran and disagree (a failure);
- internal: Cuvil raised something other than a Cuvil error (a failure);
- known-...: an internal error of a known class in KNOWN, counted apart until its fix merges (none now: the
  window checks that were one have merged);
- crash, hang: the worker died or stopped answering (failures; see pool.py).
"""
from __future__ import annotations

import os

import numpy as np

FAILURES = ("mismatch", "internal", "crash", "hang")
MAX_ELEMENTS = 1 << 22  # an input larger than this comes from a mutated size: not run
RTOL, ATOL = 1e-4, 1e-4
HUGE = 1e30
EXTREME = 1e9  # a weight beyond this: a product of three such values leaves float32's range
# Failures of a known class another branch fixes: counted apart (by a match on the error), not failing the run.
KNOWN: dict = {}


def ort_session(data: bytes):
    """An ONNX Runtime session for the model, or the exception that refuses it."""
    if os.environ.get("CUVIL_FUZZ_ORT") == "0":  # AddressSanitizer runs: memory safety only, ORT not loaded
        return RuntimeError("ONNX Runtime is not run (CUVIL_FUZZ_ORT=0)")
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


def feeds_for(specs, rng, size: int = 2) -> dict | None:
    """Random arrays for (name, dtype, shape) specs, every symbolic dim `size`; None if too large."""
    feeds = {}
    for name, dtype, shape in specs:
        dims = [d if isinstance(d, int) and d >= 0 else size for d in shape]
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
    try:
        for i in session.get_inputs():
            if i.type not in table:
                return []
            specs.append((i.name, table[i.type], [d if isinstance(d, int) else str(d) for d in i.shape]))
    except UnicodeDecodeError:  # ORT hands names that are not UTF-8 to Python as they are
        return []
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
        elif not _close(g, w):
            err = np.nanmax(np.abs(g.astype(np.float64) - w)) if g.size else 0
            return f"output {k}: max abs difference {err:.3g}"
    return None


def _close(g: np.ndarray, w: np.ndarray) -> bool:
    """allclose, where values beyond HUGE on both sides (inf, NaN or finite) agree: the interpreter accumulates
    in f64, ORT in f32, so a sum of huge values overflows in one and not the other."""
    g64, w64 = g.astype(np.float64), w.astype(np.float64)
    huge_g, huge_w = ~(np.abs(g64) <= HUGE), ~(np.abs(w64) <= HUGE)  # NaN counts as huge
    if np.any(huge_g != huge_w):
        return False
    keep = ~huge_g
    return bool(np.allclose(g64[keep], w64[keep], rtol=RTOL, atol=ATOL))


def classify_call(call, ort_result, extreme: bool = False, compiled_call=None, empty: bool = False) -> tuple:
    """(outcome, detail) of one call of a loaded Cuvil model against ORT's result for the same feeds. With
    `extreme` weights (beyond EXTREME or not finite), outputs that differ where one side overflowed, or that
    `compiled_call` (Cuvil's f32 code for the same feeds) gives as ORT does, are `overflow`; with an `empty`
    input, differences only at NaNs are `undefined`."""
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
    if why and extreme and not all(np.isfinite(np.asarray(a, np.float64)).all() for a in (*got, *ort_result)):
        return "overflow", why
    if why and extreme and compiled_call is not None and _f32_overflow(compiled_call, ort_result):
        return "overflow", f"{why}; Cuvil's compiled f32 code agrees with ORT or overflows too"
    if why and empty and _differ_only_at_nans(got, ort_result):
        return "undefined", why
    return ("mismatch", why) if why else ("match", "")


def _f32_overflow(call, ort_result) -> bool:
    """Whether Cuvil's compiled f32 code gives ORT's result, or overflows too (where inf - inf lands depends on the
    summation order, which differs between kernels and optimisation levels)."""
    try:
        got = call()
    except Exception:  # noqa: BLE001 - the interpreter's answer is what is classified; this is a second opinion
        return False
    return compare(got, ort_result) is None or not all(np.isfinite(np.asarray(a, np.float64)).all() for a in got)


def _differ_only_at_nans(got: list, want: list) -> bool:
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.shape != w.shape:
            return False
        nan = np.isnan(g) | np.isnan(w)
        if not np.allclose(g[~nan], w[~nan], rtol=RTOL, atol=ATOL):
            return False
    return True


def extreme_weights(data: bytes) -> bool:
    """Whether a float initializer holds a value beyond EXTREME, inf or NaN (a mutant's): products and sums of such
    values overflow differently in the interpreter's f64 accumulation than in ORT's f32 one (inf against NaN)."""
    import onnx
    from onnx import numpy_helper

    p = onnx.ModelProto()
    try:
        p.ParseFromString(data)
        arrays = [numpy_helper.to_array(t) for t in p.graph.initializer]
    except Exception:  # noqa: BLE001 - a corrupt file: Cuvil refuses it anyway
        return False
    return any(a.dtype.kind == "f" and not (np.abs(a.astype(np.float64)) <= EXTREME).all() for a in arrays)


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
    order = ["internal", "mismatch", *KNOWN, "overflow", "undefined", "cuvil-only", "cuvil-error", "both-refuse",
             "too-large", "match"]
    return min(outcomes, key=lambda o: order.index(o[0]))
