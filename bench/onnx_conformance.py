"""ONNX conformance: ONNX's own backend node tests and light models through `cuvil.load_onnx`.

    python bench/onnx_conformance.py              # every node case and light model; writes docs/onnx_conformance.md
    python bench/onnx_conformance.py -k resize    # cases whose name contains "resize"; prints only
    python bench/onnx_conformance.py --compiled   # also through .optimize() (the compiled backend's column)

Each case runs through the reference interpreter and is compared as ONNX's backend runner compares
(same shape and dtype, then assert_allclose with the case's rtol/atol, by default 1e-3 and 1e-7).
Sequence outputs are compared element by element (a list each), absent optionals as None.
Exclusions are limited to string ops, each with its reason (the training domain's optimizers convert).
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import signal
import sys
import time
import warnings
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import onnx  # noqa: E402
from onnx import TensorProto  # noqa: E402

import cuvil  # noqa: E402

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "onnx_conformance.md")
LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
TIMEOUT_S = 120
RANDOM_OPS = {"RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Bernoulli", "Multinomial"}
STRING_OPS = {"StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch"}
# test-name prefixes whose op the name does not spell
NAME_ALIASES = {"sce": "SoftmaxCrossEntropyLoss", "nllloss": "NegativeLogLikelihoodLoss",
                "mvn": "MeanVarianceNormalization", "rms_normalization": "RMSNormalization"}


@dataclass
class Result:
    name: str
    op: str
    status: str  # pass, fail, skip
    reason: str = ""
    compiled: str = ""  # pass, fail or "" (not run)
    compiled_reason: str = ""
    seconds: float = 0.0
    specialized: bool = False  # converted per value of small inputs (shape tensors fed as graph inputs)


# -- classifying cases --------------------------------------------------------------------------------------
def _snake(op: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", op).lower()


def primary_ops(cases) -> dict:
    """Test name -> the op type it tests: the one op of a single-op graph, else the op its name spells."""
    all_ops = {n.op_type for c in cases for n in c.model.graph.node}
    spellings = sorted(((s, op) for op in all_ops for s in {_snake(op), op.lower()}), key=lambda p: -len(p[0]))
    spellings = list(NAME_ALIASES.items()) + spellings
    single = {}
    for c in cases:
        ops = {n.op_type for n in c.model.graph.node}
        if len(ops) == 1:
            single[c.name] = ops.pop()
    out = {}
    for c in cases:
        base = re.sub(r"_expanded(_ver\d+)?$", "", c.name)
        out[c.name] = single.get(c.name) or single.get(base) or next(
            (op for s, op in spellings if base[5:].startswith(s)), "(other)")
    return out


def _types(graph):
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        yield v.type
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _types(a.g)


def exclusion(model) -> str:
    """Why a case is excluded (a string op), or ""."""
    nodes = list(model.graph.node)
    strings = any(t.WhichOneof("value") == "tensor_type" and t.tensor_type.elem_type == TensorProto.STRING
                  for t in _types(model.graph))
    if strings or any(n.op_type in STRING_OPS for n in nodes):
        return "string ops"
    return ""


# -- running ----------------------------------------------------------------------------------------------------
class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _normalize(x):
    """An array, or a list of them for a sequence, or None for an absent optional."""
    if isinstance(x, (list, tuple)):
        return [_normalize(e) for e in x]
    return onnx.numpy_helper.to_array(x) if isinstance(x, TensorProto) else x


def compare(outputs, expected, rtol: float, atol: float) -> None:
    if len(outputs) != len(expected):
        raise AssertionError(f"{len(outputs)} outputs, expected {len(expected)}")
    for i, (out, ref) in enumerate(zip(outputs, expected)):
        ref = _normalize(ref)
        if isinstance(ref, list) or ref is None or isinstance(out, list) or out is None:
            if type(out) is not type(ref):
                raise AssertionError(f"output {i} is {type(out).__name__}, expected {type(ref).__name__}")
            if ref is not None:
                compare(out, ref, rtol, atol)
            continue
        if out.shape != ref.shape or out.dtype != ref.dtype:
            raise AssertionError(f"output {i} is {out.dtype}{list(out.shape)}, expected {ref.dtype}{list(ref.shape)}")
        r = rtol
        if out.dtype.name == "bfloat16":
            out, ref, r = out.astype(np.float32), ref.astype(np.float32), max(rtol, 2 ** -6)
        np.testing.assert_allclose(out, ref, rtol=r, atol=atol)


def _outcome(fn) -> tuple:
    """("pass", "") or ("fail", a one-line reason)."""
    signal.alarm(TIMEOUT_S)
    try:
        fn()
        return "pass", ""
    except _Timeout:
        return "fail", f"timeout after {TIMEOUT_S} s"
    except AssertionError as e:
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        return "fail", "mismatch: " + (" ".join(lines[:3]) if lines else "")[:200]
    except cuvil.CuvilError as e:
        return "fail", f"{type(e).__name__}: {e}".splitlines()[0][:300]
    except Exception as e:  # a crash is a bug: report it as such
        return "fail", f"CRASH {type(e).__name__}: {e}".splitlines()[0][:300]
    finally:
        signal.alarm(0)


def _draws_random_values(model) -> bool:
    """The case's expected output holds NumPy's random draws (a random op, or Dropout in training mode)."""
    return any(n.op_type in RANDOM_OPS or n.op_type == "Dropout" and len(n.input) > 2 for n in model.graph.node)


def run_case(case, op: str, compiled: bool) -> Result:
    why = exclusion(case.model)
    if why:
        return Result(case.name, op, "skip", why)
    data = [([_normalize(x) for x in inputs], expected) for inputs, expected in case.data_sets]
    result = run_model(case.name, op, case.model, data, case.rtol, case.atol, compiled)
    if result.reason.startswith("mismatch") and _draws_random_values(case.model):
        result.reason = ("compares exact random values: Cuvil draws from Philox4x32 (docs/onnx.md), the expected "
                         "output from NumPy's generator")
    return result


def run_model(name: str, op: str, source, data: list, rtol: float, atol: float, compiled: bool) -> Result:
    """Load `source`, run each (inputs, expected) pair through the interpreter (and .optimize() if asked)."""
    start = time.perf_counter()
    loaded = []

    def check(fn):
        for inputs, expected in data:
            compare(fn(*inputs), expected, rtol, atol)

    def interpret():
        loaded.append(cuvil.load_onnx(source))
        check(loaded[0])
    status, reason = _outcome(interpret)
    done, done_reason = "", ""
    if compiled:
        done, done_reason = (_outcome(lambda: check(loaded[0].optimize(target="cpu"))) if status == "pass"
                             else ("fail", "the interpreter failed"))
    specialized = bool(loaded) and hasattr(loaded[0], "value_inputs")
    return Result(name, op, status, reason, done, done_reason, time.perf_counter() - start, specialized)


def light_inputs(model) -> list:
    """ONNX's runner's dummy data for the light models: arange(n) / n in each input's shape."""
    init = {i.name for i in model.graph.initializer}
    out = []
    for v in model.graph.input:
        if v.name in init:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in v.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        out.append((np.arange(n).reshape(shape) / n).astype(np.float32))
    return out


def run_light(compiled: bool) -> list:
    from onnx.backend.test.case.model import collect_testcases as model_cases

    tolerances = {c.model_name: (c.rtol, c.atol) for c in model_cases()}
    results = []
    for path in sorted(glob.glob(os.path.join(LIGHT, "light_*.onnx"))):
        name = os.path.basename(path)[len("light_"):-len(".onnx")]
        rtol, atol = tolerances.get(name, (1e-3, 1e-7))
        expected = [onnx.load_tensor(p) for p in sorted(glob.glob(path[:-5] + "_output_*.pb"))]
        results.append(run_model(name, "(model)", path, [(light_inputs(onnx.load(path)), expected)], rtol, atol,
                                 compiled))
        print(f"  light {name}: {results[-1].status} {results[-1].reason} ({results[-1].seconds:.1f} s)", flush=True)
    return results


# -- reporting --------------------------------------------------------------------------------------------------
def _count(results, key="status") -> collections.Counter:
    return collections.Counter(getattr(r, key) for r in results)


def summary_line(results) -> str:
    c, total = _count(results), len(results)
    return (f"{c['pass']} of {total} passed ({100 * c['pass'] / max(total, 1):.1f}%), {c['fail']} failed, "
            f"{c['skip']} skipped")


def markdown(results, light, command: str, compiled: bool) -> str:
    by_op = collections.defaultdict(list)
    for r in results:
        by_op[r.op].append(r)
    lines = ["# ONNX conformance", "", f"Produced by `{command}` with onnx {onnx.__version__} "
             f"(newest opset {onnx.defs.onnx_opset_version()}). Node cases come from "
             "`onnx.backend.test.case.node.collect_testcases(None)`; each runs through "
             "`cuvil.load_onnx(model)(*inputs)` (the reference interpreter) and is compared as ONNX's backend runner "
             "compares: same dtype and shape, then `assert_allclose` with the case's rtol/atol (1e-3 / 1e-7 unless the "
             "case says otherwise).", "",
             f"**Node cases: {summary_line(results)}.**", "",
             f"**Light models: {_count(light)['pass']} of {len(light)} match their shipped outputs.**", "",
             "The compiled column counts cases that also pass through `.optimize(target='cpu')`"
             + ("." if compiled else "; it is filled in by `--compiled` once the CPU backend runs ONNX models."), "",
             "How some cases run: element types the IR lacks (uint16/32/64, int4/2, float8, float4) are carried in "
             "wider IR types, with casts rounding to the narrow format; and where a test feeds a shape-like input "
             "(Reshape's shape, Reduce axes, Pad pads, Resize scales...) as a graph input, the model is converted per "
             f"value of those small inputs ({sum(r.specialized and r.status == 'pass' for r in results)} passing "
             "cases).", "",
             "## Per op type", "", "| op type | cases | passed | failed | skipped | compiled |",
             "|---|---|---|---|---|---|"]
    for op in sorted(by_op):
        c, cc = _count(by_op[op]), _count(by_op[op], "compiled")
        lines.append(f"| {op} | {len(by_op[op])} | {c['pass']} | {c['fail']} | {c['skip']} | "
                     f"{cc['pass'] if compiled else '—'} |")
    lines += ["", "## Light models", "", "| model | result | seconds | compiled |", "|---|---|---|---|"]
    lines += [f"| {r.name} | {r.status}{' — ' + r.reason if r.reason else ''} | {r.seconds:.1f} | "
              f"{r.compiled or '—'} |" for r in light]
    lines += ["", "## Exclusions", "", "Allowed only for string ops.",
              "", "| case | op type | reason |", "|---|---|---|"]
    lines += [f"| {r.name} | {r.op} | {r.reason} |" for r in results if r.status == "skip"]
    lines += ["", "## Failures", "", "| case | op type | reason |", "|---|---|---|"]
    lines += [f"| {r.name} | {r.op} | {r.reason.replace('|', '/')} |" for r in results if r.status == "fail"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose name contains this; prints, writes nothing")
    parser.add_argument("--compiled", action="store_true", help="also run each passing case through .optimize()")
    parser.add_argument("--no-models", action="store_true", help="skip the light models")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    from onnx.backend.test.case.node import collect_testcases

    cases = collect_testcases(None)
    ops = primary_ops(cases)
    picked = [c for c in cases if args.k in c.name]
    signal.signal(signal.SIGALRM, _alarm)
    results = []
    for i, case in enumerate(picked):
        results.append(run_case(case, ops[case.name], args.compiled))
        if results[-1].status == "fail" and args.k:
            print(f"  FAIL {case.name}: {results[-1].reason}")
        elif results[-1].compiled == "fail" and args.k:
            print(f"  FAIL compiled {case.name}: {results[-1].compiled_reason}")
        if (i + 1) % 200 == 0:
            print(f"  {i + 1}/{len(picked)}: {summary_line(results)}", flush=True)
    light = [] if args.no_models or args.k else run_light(args.compiled)
    print(f"node cases: {summary_line(results)}"
          + (f"; compiled {_count(results, 'compiled')['pass']} of {len(results)}" if args.compiled else ""))
    worst = sorted(collections.Counter(r.op for r in results if r.status == "fail").items(), key=lambda kv: -kv[1])
    print("most failures: " + ", ".join(f"{op} {n}" for op, n in worst[:15]))
    if light:
        print(f"light models: {_count(light)['pass']} of {len(light)} match")
    if not args.k:
        command = "python bench/onnx_conformance.py" + (" --compiled" if args.compiled else "")
        with open(DOC, "w") as f:
            f.write(markdown(results, light, command, args.compiled))
        print(f"wrote {os.path.relpath(DOC)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
