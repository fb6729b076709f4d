"""PyTorch's own operator database (OpInfo `op_db`) through `cuvil.compile`: the torch route's yardstick.

    python -m bench.opinfo                         # every op, float32 on the CPU, compiled; prints the summary
    python -m bench.opinfo --target interpreter    # the frontend alone (faster)
    python -m bench.opinfo -k norm --verbose       # ops whose name contains "norm", one line per sample
    python -m bench.opinfo -k det,inverse,cholesky # ops whose name contains any of these

Each op's first `--samples` sample inputs are wrapped in a small module (the sample's tensors as inputs, its
other arguments fixed) and exported; the ops that torch.export cannot capture are counted apart. The rest are
compiled and compared with eager PyTorch (float32: rtol 1e-4, atol 1e-5; integers and booleans exactly). Where the
raw outputs differ and the sample says how its outputs are compared (`output_process_fn_grad`: PyTorch's own way to
drop what is not unique, such as the signs of eigenvectors and singular vectors), both sides go through it, and the
summary counts those passes apart. An op passes when every sample passes. Outcomes: pass, refused (a Cuvil error
naming what is unsupported), wrong (values or shapes differ), internal (an exception that is not a Cuvil error).
Needs `expecttest`.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

import cuvil  # noqa: E402

# Ops whose values are random or uninitialised: nothing to compare, counted with those that do not export.
DETAIL_CHARS = 240  # of a message in the per-op listing (grouping reads the whole message)
RANDOM = ("bernoulli", "normal", "uniform", "rand", "multinomial", "dropout", "poisson", "randint", "empty")


class Sample(torch.nn.Module):
    """One sample as a module: its tensors are the inputs, everything else is fixed."""

    def __init__(self, op, template):
        super().__init__()
        self.op, self.template = op, template

    def forward(self, *tensors):
        it = iter(tensors)
        args, kwargs = pytree.tree_map(lambda x: next(it) if isinstance(x, torch.Tensor) else x, self.template)
        return self.op(*args, **kwargs)


def samples(opinfo, n: int) -> list:
    try:
        out = []
        for s in opinfo.sample_inputs("cpu", torch.float32, requires_grad=False):
            out.append(((s.input, *s.args), dict(s.kwargs), s.output_process_fn_grad))
            if len(out) == n:
                break
        return out
    except Exception:  # noqa: BLE001 (an op whose samples cannot be made here)
        return []


def close(got, want) -> bool:
    got, want = pytree.tree_leaves(got), pytree.tree_leaves(want)
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if not isinstance(w, torch.Tensor):
            if g != w:
                return False
            continue
        if not isinstance(g, torch.Tensor) or g.shape != w.shape or g.dtype != w.dtype:
            return False
        exact = not (w.is_floating_point() or w.is_complex())
        if not torch.allclose(g, w, rtol=0 if exact else 1e-4, atol=0 if exact else 1e-5, equal_nan=True):
            return False
    return True


SIGN_FREE = "compared as the sample defines (output_process_fn_grad)"


def run_sample(opinfo, sample, target: str) -> tuple[str, str]:
    """(outcome, detail) of one sample: "export", "pass", "refused", "wrong" or "internal"."""
    template, processed = sample[:2], sample[2]
    module = Sample(opinfo.op, template)
    tensors = tuple(x for x in pytree.tree_leaves(template) if isinstance(x, torch.Tensor))
    try:
        with torch.no_grad():
            want = module(*tensors)
    except Exception as e:  # noqa: BLE001
        return "export", f"eager: {type(e).__name__}: {str(e)[:120]}"
    try:
        compiled = cuvil.compile(module, tensors, target=target, cache=False)
        got = compiled(*tensors)
    except cuvil.CuvilError as e:
        if "torch.export could not capture" in str(e):
            return "export", str(e)[:160]
        return "refused", f"{type(e).__name__}: {e}"  # whole: refusals() groups on the part that names the op
    except Exception as e:  # noqa: BLE001
        return "internal", f"{type(e).__name__}: {e}"
    if close(got, want):
        return "pass", ""
    if _close_processed(processed, got, want):
        return "pass", SIGN_FREE
    return "wrong", _difference(got, want)


def _close_processed(processed, got, want) -> bool:
    try:
        return close(processed(got), processed(want))
    except Exception:  # noqa: BLE001 (outputs of another structure than eager's: wrong)
        return False


def _difference(got, want) -> str:
    g, w = pytree.tree_leaves(got), pytree.tree_leaves(want)
    shapes = [(tuple(getattr(a, "shape", ())), tuple(getattr(b, "shape", ()))) for a, b in zip(g, w)]
    return f"got {shapes} ({len(g)} outputs), want {len(w)} outputs"


def full_name(opinfo) -> str:
    return opinfo.name + (f".{opinfo.variant_test_name}" if opinfo.variant_test_name else "")


def op_outcome(opinfo, n: int, target: str, verbose: bool = False) -> tuple[str, str]:
    """The worst outcome over the op's first `n` samples, and its detail (a pass: SIGN_FREE where a sample needed
    that)."""
    outcomes = []
    for sample in samples(opinfo, n):
        if any(word in opinfo.name for word in RANDOM):
            outcomes.append(("export", "random op"))
            break
        outcome, detail = run_sample(opinfo, sample, target)
        outcomes.append((outcome, detail))
        if verbose:
            print(f"{opinfo.name:40s} {outcome:9s} {detail}", flush=True)
    kinds = [o for o, _ in outcomes]
    worst = next((k for k in ("internal", "wrong", "refused", "export") if k in kinds), "pass") if kinds else "none"
    if worst == "export" and "pass" in kinds:
        worst = "pass"  # some samples do not export; the others pass
    details = [d for o, d in outcomes if o == worst]
    return worst, SIGN_FREE if worst == "pass" and SIGN_FREE in details else next(iter(details), "")


def float32_ops(contains: str = "") -> list:
    """The OpInfos of `op_db` that take float32 on the CPU (and whose name contains one of the comma-separated
    words of `contains`)."""
    from torch.testing._internal.common_methods_invocations import op_db

    words = contains.split(",")
    return [o for o in op_db if any(w in o.name for w in words) and torch.float32 in o.supported_dtypes("cpu")]


def sweep(ops, n: int, target: str, verbose: bool) -> dict:
    per_op = {}
    for opinfo in ops:
        name = full_name(opinfo)
        per_op[name] = op_outcome(opinfo, n, target, verbose)
        print(f"[{len(per_op)}/{len(ops)}] {name}: {per_op[name][0]}", file=sys.stderr, flush=True)
    return per_op


def refusals(per_op: dict) -> dict:
    """Refused ops grouped by reason: the ATen op without a converter, or the head of the message."""
    groups = collections.defaultdict(list)
    for name, (kind, detail) in sorted(per_op.items()):
        if kind == "refused":
            missing = re.search(r"ATen op ([\w.]+?)(?:\.default|\.\w+)? \(FX node .*?has no Cuvil converter", detail,
                                re.S)
            reason = f"no converter: {missing.group(1)}" if missing else re.sub(r" \(FX node [^)]*\)+", "", detail)[:60]
            groups[reason].append(name)
    return groups


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-k", default="", help="only ops whose name contains this (or one of these, comma-separated)")
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--target", default="cpu", choices=("cpu", "interpreter"))
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    ops = float32_ops(args.k)
    per_op = sweep(ops, args.samples, args.target, args.verbose)
    counts = collections.Counter(kind for kind, _ in per_op.values())
    exported = sum(v for k, v in counts.items() if k not in ("export", "none"))
    for kind in ("wrong", "internal", "refused"):
        for name, (k, detail) in sorted(per_op.items()):
            if k == kind:
                print(f"{kind:9s} {name:40s} {' '.join(detail.split())[:DETAIL_CHARS]}")
    print("\nrefused, by reason:")
    for reason, names in sorted(refusals(per_op).items(), key=lambda kv: -len(kv[1])):
        print(f"{len(names):4d}  {reason:60s} {' '.join(names[:6])}{' ...' if len(names) > 6 else ''}")
    print(f"\n{len(per_op)} ops; {exported} export; of those {counts['pass']} pass "
          f"({100 * counts['pass'] / max(exported, 1):.1f}%), {counts['refused']} refused, {counts['wrong']} wrong, "
          f"{counts['internal']} internal errors; target {args.target}, {args.samples} samples per op")
    sign_free = sorted(name for name, (k, detail) in per_op.items() if k == "pass" and detail == SIGN_FREE)
    if sign_free:
        print(f"{len(sign_free)} of the passes {SIGN_FREE}: {' '.join(sign_free)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
