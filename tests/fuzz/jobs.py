"""The fuzz jobs a worker runs, each rebuilt from its seed and index (so a job's description replays it):
`mutant` (one mutation of a seed model, called once through Cuvil's interpreter) and `graph` (one random graph,
compiled or interpreted, called at several sizes). Each returns (outcome, detail) as classified in cases.py."""
from __future__ import annotations

import numpy as np

from .cases import classify_call, extreme_weights, feeds_for, load, ort_run, ort_session, ort_specs, worst
from .mutate import mutant
from .random_graphs import call_sizes, random_graph
from .seeds import SEEDS

SEED_IDS = {name: i for i, name in enumerate(SEEDS)}


def _cuvil_specs(model) -> list:
    return [(s.name, s.dtype, [d if isinstance(d, int) else str(d) for d in s.shape]) for s in model.inputs]


def mutant_job(seed_model: str, seed: int, index: int, compiled: bool = False, phase=lambda p: None) -> tuple:
    """Interpreted: one call with symbolic sizes 2. Compiled: calls at sizes 4 then 1 (a smaller after a larger)."""
    rng = np.random.default_rng([seed, SEED_IDS[seed_model], index])
    kind, data = mutant(SEEDS[seed_model](), rng)
    session, (model, outcome, detail) = _both_sessions(data, compiled, phase)
    ort_refuses = isinstance(session, Exception)
    specs = ort_specs(session) if not ort_refuses else _cuvil_specs(model) if model is not None else []
    results = []
    for size in ((4, 1) if compiled else (2,)):
        feeds = feeds_for(specs, rng, size)
        if feeds is None:
            return "too-large", kind
        phase("ort")
        want = session if ort_refuses else ort_run(session, feeds)
        phase("cuvil")
        if model is None:
            return ("both-refuse" if outcome == "cuvil-error" and isinstance(want, Exception) else outcome), \
                f"{kind}: {detail}"
        empty = any(np.asarray(v).size == 0 for v in feeds.values())
        outcome, detail = classify_call(lambda feeds=feeds: model(**feeds), want, extreme_weights(data),
                                        None if compiled else lambda feeds=feeds: model.optimize()(**feeds), empty)
        results.append((outcome, f"{kind}: {detail}"))
    return worst(results)


def graph_job(seed: int, index: int, below: bool = False, compiled: bool = True, calls: int = 3,
              phase=lambda p: None) -> tuple:
    rng = np.random.default_rng([seed, 1000 + index])
    g = random_graph(rng)
    data = g.proto.SerializeToString()
    ops = " ".join(g.ops)
    session, (model, outcome, detail) = _both_sessions(data, compiled, phase)
    if model is None:
        return outcome, f"[{ops}] {detail}"
    results = []
    for batch, h, w in call_sizes(g, rng, calls, below):
        feeds = {"x": rng.standard_normal((batch, g.channels, h, w)).astype(np.float32)}
        phase("ort")
        want = session if isinstance(session, Exception) else ort_run(session, feeds)
        phase("cuvil")
        outcome, detail = classify_call(lambda feeds=feeds: model(**feeds), want)
        results.append((outcome, f"[{ops}] at {batch}x{g.channels}x{h}x{w}: {detail}"))
    return worst(results) if results else ("match", f"[{ops}] no sizes")


def _both_sessions(data: bytes, compiled: bool, phase) -> tuple:
    """ONNX Runtime's session (or its error) and Cuvil's (model, outcome, detail), compiled if asked."""
    phase("ort")
    session = ort_session(data)
    phase("cuvil")
    loaded = load(data)
    if loaded[0] is not None and compiled:
        loaded = _optimized(loaded[0])
    return session, loaded


def _optimized(model) -> tuple:
    import cuvil

    try:
        return model.optimize(), None, ""
    except cuvil.CuvilError as e:
        return None, "cuvil-error", f"compile: {e}"
    except Exception as e:  # noqa: BLE001
        return None, "internal", f"compile: {type(e).__name__}: {e}"


JOBS = {"mutant": mutant_job, "graph": graph_job}
