"""Tree ensembles against ONNX Runtime: `python -m bench.trees [--trees 100] [--depth 8] [--rounds 30] [--threads 1,2]`.

scikit-learn random forests and gradient boosting, regressor and classifier (100 trees by default: a 3-class
gradient-boosting classifier has a third of the estimators, one tree per class each), converted by skl2onnx, compiled
by Cuvil and run by ONNX Runtime (every optimisation, the same thread count each), at batch 1 and 1,000, interleaved
round by round in one process after checking that the outputs agree. Prints each median and Cuvil's latency as a
multiple of ONNX Runtime's (below 1.0 is faster), through the model's call and through its compiled executable
alone (`exe`: without the ONNX wrapper's per-call input checks).
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

FEATURES = 20
BATCHES = (1, 1000)


def models(trees: int, depth: int) -> dict:
    """name -> ModelProto of the fitted estimators (probabilities as a tensor, no ZipMap)."""
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification
    from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor, RandomForestClassifier,
                                  RandomForestRegressor)

    x, y = make_classification(2000, FEATURES, n_informative=10, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    estimators = {"random forest regressor": RandomForestRegressor(trees, max_depth=depth, random_state=0),
                  "random forest classifier": RandomForestClassifier(trees, max_depth=depth, random_state=0),
                  "gradient boosting regressor": GradientBoostingRegressor(n_estimators=trees, max_depth=depth // 2,
                                                                           random_state=0),
                  "gradient boosting classifier": GradientBoostingClassifier(n_estimators=trees // 3 or 1,
                                                                             max_depth=depth // 2, random_state=0)}
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, est in estimators.items():
            est.fit(x, y)
            options = {id(est): {"zipmap": False}} if hasattr(est, "classes_") else None
            out[name] = to_onnx(est, x[:1], options=options)
    return out


def runners(proto, threads: int, x: np.ndarray) -> dict:
    import onnxruntime as ort

    import cuvil
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    compiled = cuvil.load_onnx(proto).optimize()
    exe = compiled.executable
    exe.set_num_threads(threads)
    out = {"cuvil": lambda: compiled(x), "exe": lambda: exe(x), "onnxruntime": lambda: session.run(None, {name: x})}
    got, want = out["cuvil"](), out["onnxruntime"]()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    return out


def interleaved(run: dict, rounds: int, round_s: float = 0.05) -> dict:
    """Median ms per call of each runner, alternating their order round by round."""
    reps = {}
    for k, f in run.items():
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < round_s:
            f()
            n += 1
        reps[k] = max(1, n)
    samples = {k: [] for k in run}
    for r in range(rounds):
        for k in (list(run) if r % 2 == 0 else list(run)[::-1]):
            for _ in range(reps[k]):
                t0 = time.perf_counter()
                run[k]()
                samples[k].append((time.perf_counter() - t0) * 1e3)
    return {k: float(np.median(v)) for k, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{args.trees} trees, depth {args.depth}, {FEATURES} features")
    for name, proto in models(args.trees, args.depth).items():
        for threads in map(int, args.threads.split(",")):
            for batch in BATCHES:
                x = rng.standard_normal((batch, FEATURES)).astype(np.float32)
                med = interleaved(runners(proto, threads, x), args.rounds)
                ort = med["onnxruntime"]
                print(f"{name:30s} {threads} thread(s) batch {batch:5d}: cuvil {med['cuvil']:.4f} ms "
                      f"(exe {med['exe']:.4f}), onnxruntime {ort:.4f} ms, ratio {med['cuvil'] / ort:.2f}x "
                      f"(exe {med['exe'] / ort:.2f}x)")


if __name__ == "__main__":
    main()
