"""Calibration: the range each chosen tensor takes over a dataset, by min-max, percentile or entropy (KL divergence).

    >>> import numpy as np
    >>> from cuvil.quantize.calibrate import Observer
    >>> obs = Observer(1)
    >>> obs.update([np.array([-1.0, 0.5, 3.0])])
    >>> obs.ranges("minmax")
    [(-1.0, 3.0)]

The module is run on each sample (up to `max_samples`) with the tensors to observe added to its results; min-max
needs one pass, percentile and entropy a second one that fills a histogram over the first pass's range. The ranges
become the quantized ops' `x_scale` and `x_zero` attributes (`scale_and_zero`), so a compiled model, its `.cuv`
file and its cache entry carry them. The ranges are also kept under `CUVIL_CACHE_DIR/calibration`, keyed by the
module's fingerprint, the observed tensors, the method and the samples' bytes: compiling the same model with the
same data again, in this process or another, skips the runs (`CUVIL_CALIBRATION_CACHE=0` turns that off).
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from ..backends.cpu.toolchain import cache_dir
from ..compiler import compile_module
from ..errors import ShapeError, UnsupportedError
from ..ir.core import Module, Value
from ..ir.fingerprint import fingerprint

METHODS = ("minmax", "percentile", "entropy")
DEFAULT_MAX_SAMPLES = 128
BINS = 2048
PERCENTILE = 99.99  # of the values kept inside the range, at each end
ENTROPY_LEVELS = 128  # quantization levels of |x| the KL search compares against (one side of int8)


def samples(dataset: Iterable, fn, max_samples: int) -> list[list[np.ndarray]]:
    """Up to `max_samples` input lists from an iterable of tuples, dicts (by argument name) or single arrays."""
    if max_samples < 1:
        raise ShapeError(f"calibration max_samples must be >= 1, got {max_samples}")
    names = [a.name for a in fn.args]
    out = []
    for item in dataset:
        if len(out) >= max_samples:
            break
        if isinstance(item, dict):
            missing = [n for n in names if n not in item]
            if missing:
                raise ShapeError(f"calibration sample {len(out)} lacks inputs {missing} (the model takes {names})")
            item = [item[n] for n in names]
        elif not isinstance(item, (tuple, list)):
            item = [item]
        if len(item) != len(names):
            raise ShapeError(f"calibration sample {len(out)} has {len(item)} inputs, the model takes {len(names)}")
        out.append([np.asarray(x, dtype=a.type.dtype.numpy) for x, a in zip(item, fn.args)])
    if not out:
        raise ShapeError("the calibration dataset is empty")
    return out


class Observer:
    """Running statistics of `count` tensors: min and max, then (second pass) histograms over that range."""

    def __init__(self, count: int):
        self.lo = np.full(count, np.inf)
        self.hi = np.full(count, -np.inf)
        self.hist: Optional[np.ndarray] = None

    def update(self, values: Sequence[np.ndarray]) -> None:
        for i, v in enumerate(values):
            if v.size:
                self.lo[i], self.hi[i] = min(self.lo[i], float(v.min())), max(self.hi[i], float(v.max()))

    def update_histogram(self, values: Sequence[np.ndarray]) -> None:
        if self.hist is None:
            self.hist = np.zeros((len(values), BINS))
        for i, v in enumerate(values):
            lo, hi = self._span(i)
            self.hist[i] += np.histogram(v, bins=BINS, range=(lo, hi))[0]

    def _span(self, i: int) -> tuple:
        lo, hi = min(self.lo[i], 0.0), max(self.hi[i], 0.0)
        return (lo, hi) if hi > lo else (-1.0, 1.0)

    def ranges(self, method: str, percentile: float = PERCENTILE) -> list[tuple]:
        """(lo, hi) per tensor, holding 0."""
        out = []
        for i in range(len(self.lo)):
            lo, hi = self._span(i)
            if method == "percentile":
                lo, hi = _percentile_range(self.hist[i], lo, hi, percentile)
            elif method == "entropy":
                t = _entropy_threshold(self.hist[i], lo, hi)
                lo, hi = max(lo, -t), min(hi, t)
            out.append((float(min(lo, 0.0)), float(max(hi, 0.0))))
        return out


def _percentile_range(hist: np.ndarray, lo: float, hi: float, percentile: float) -> tuple:
    cdf = np.cumsum(hist) / max(hist.sum(), 1)
    edges = np.linspace(lo, hi, len(hist) + 1)
    tail = 1 - percentile / 100
    first = int(np.searchsorted(cdf, tail, side="right"))
    last = int(np.searchsorted(cdf, 1 - tail, side="left"))
    return float(edges[first]), float(edges[min(last + 1, len(hist))])


def _abs_histogram(hist: np.ndarray, lo: float, hi: float) -> tuple:
    """The histogram of |x| over [0, max(|lo|, hi)] in BINS bins, from the signed one (bins folded by centre)."""
    edges = np.linspace(lo, hi, len(hist) + 1)
    centres = np.abs((edges[:-1] + edges[1:]) / 2)
    top = max(-lo, hi)
    folded = np.histogram(centres, bins=BINS, range=(0, top), weights=hist)[0]
    return folded, top


def _entropy_threshold(hist: np.ndarray, lo: float, hi: float) -> float:
    """The |x| threshold whose clipped, 128-level quantized distribution is nearest (KL) to the observed one."""
    folded, top = _abs_histogram(hist, lo, hi)
    best, best_kl = BINS, np.inf
    for stop in range(ENTROPY_LEVELS, BINS + 1, 16):
        ref = folded[:stop].copy()
        ref[-1] += folded[stop:].sum()  # clipped values land in the last bin
        kl = _kl_to_quantized(ref, folded[:stop])
        if kl < best_kl:
            best, best_kl = stop, kl
    return top * best / BINS


def _kl_to_quantized(ref: np.ndarray, kept: np.ndarray) -> float:
    """KL(ref || the kept bins merged into ENTROPY_LEVELS levels and spread back over their non-empty bins)."""
    groups = np.array_split(np.arange(len(ref)), ENTROPY_LEVELS)
    expanded = np.zeros_like(ref)
    for g in groups:
        part = kept[g[0]:g[-1] + 1]
        nonzero = part > 0
        if nonzero.any():
            expanded[g[0]:g[-1] + 1][nonzero] = part.sum() / nonzero.sum()
    p, q = ref / max(ref.sum(), 1e-30), expanded / max(expanded.sum(), 1e-30)
    keep = p > 0
    return float(np.sum(p[keep] * np.log(p[keep] / np.maximum(q[keep], 1e-30))))


def scale_and_zero(lo: float, hi: float) -> tuple:
    """The uint8 scale and zero point that map [lo, hi] (holding 0) onto 0..255."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = np.float32((hi - lo) / 255) if hi > lo else np.float32(1)
    return float(scale), int(np.clip(np.rint(-lo / scale), 0, 255))


def calibrate(module: Module, values: Sequence[Value], dataset: Iterable, method: str = "minmax",
              max_samples: int = DEFAULT_MAX_SAMPLES, run: Optional[Callable] = None) -> list[tuple]:
    """The (lo, hi) range of each of `values` (of `module.main`) over the dataset's samples. `run(module)` gives
    a callable of NumPy inputs (default: compiled for the CPU)."""
    if method not in METHODS:
        raise UnsupportedError(f"unknown calibration method {method!r}; expected one of {', '.join(METHODS)}")
    fn = module.main
    inputs = samples(dataset, fn, max_samples)
    key = _cache_key(module, values, inputs, method)
    cached = _cached_ranges(key)
    if cached is not None:
        return cached
    ret = fn.body.terminator
    n_results, original = len(ret.operands), list(ret.operands)
    ret.operands = original + list(values)
    try:
        call = run(module) if run is not None else compile_module(module, "cpu")
    finally:
        ret.operands = original
    observer = Observer(len(values))
    for x in inputs:
        observer.update(call(*x)[n_results:])
    if method != "minmax":
        for x in inputs:
            observer.update_histogram(call(*x)[n_results:])
    ranges = observer.ranges(method)
    _save_ranges(key, ranges)
    return ranges


def _cache_key(module: Module, values: Sequence[Value], inputs: list, method: str) -> str:
    index = {id(v): i for i, op in enumerate(module.main.walk()) for v in op.results}
    h = hashlib.sha256(f"cuvil-calibration-v1 {method} {BINS} {PERCENTILE} {fingerprint(module)}".encode())
    h.update(json.dumps([index.get(id(v), -1 - i) for i, v in enumerate(values)]).encode())
    for sample in inputs:
        for x in sample:
            h.update(f"{x.dtype.str}{x.shape}".encode() + np.ascontiguousarray(x).tobytes())
    return h.hexdigest()


def _cache_file(key: str):
    if os.environ.get("CUVIL_CALIBRATION_CACHE", "1") == "0":
        return None
    return cache_dir() / "calibration" / f"{key[:40]}.json"


def _cached_ranges(key: str) -> Optional[list]:
    path = _cache_file(key)
    try:
        data = json.loads(path.read_text()) if path is not None and path.exists() else None
    except (OSError, ValueError):
        return None  # unreadable or half-written: calibrate again
    return [tuple(r) for r in data["ranges"]] if data and data.get("key") == key else None


def _save_ranges(key: str, ranges: list) -> None:
    path = _cache_file(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "ranges": [list(r) for r in ranges]}))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache folder: the ranges are still in the module

