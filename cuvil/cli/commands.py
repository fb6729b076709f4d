"""One short function per subcommand of `cuvil` (the table that names them and their options is in __init__.py)."""
from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path

import numpy as np

from .. import progress
from ..errors import CuvilError, UnsupportedError
from .inputs import arrays_for, assign
from .models import compile_onnx, compile_python, kind_of, open_model


def compile_model(args) -> int:
    """MODEL.onnx or FILE.py:FUNCTION -> a .cuv file."""
    import cuvil

    kind = kind_of(args.model)
    if kind == "cuv":
        raise CuvilError(f"{args.model} is compiled already (cuvil inspect shows what it holds)")
    with progress.display(f"compiling {args.model}"):
        obj = compile_onnx(args.model, args, reshape=True) if kind == "onnx" else compile_python(args.model, args)[0]
        progress.phase("export", args.output)
        cuvil.export(obj, args.output, target=args.target, include_c=args.c)
    print(f"wrote {args.output} ({Path(args.output).stat().st_size:,} bytes)")
    for line in open_model(args.output, args).signatures():
        print(f"  {line}")
    return 0


def run_model(args) -> int:
    """Run once on the given (or random) inputs; print the outputs, or save them as output_<i>.npy."""
    source = open_model(args.model, args)
    arrays = arrays_for(source.inputs, assign(args.inputs, [p.name for p in source.inputs]), args.random, args.seed)
    outputs = source(arrays)
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
    for i, (name, out) in enumerate(zip(source.output_names(len(outputs)), outputs)):
        out = np.asarray(out)
        print(f"{name}: {out.dtype}{list(out.shape)} {_summary(out)}")
        if args.output_dir:
            path = os.path.join(args.output_dir, f"output_{i}.npy")
            np.save(path, out)
            print(f"  saved {path}")
    return 0


def _summary(out: np.ndarray) -> str:
    if out.size == 0 or out.dtype.kind not in "fiub":
        return ""
    flat = out.reshape(-1)
    head = np.array2string(flat[:6], precision=4, separator=", ")
    if out.dtype.kind == "b":
        return f"{head}{' ...' if flat.size > 6 else ''}"
    return f"min {flat.min():.6g} max {flat.max():.6g} mean {flat.mean(dtype=np.float64):.6g}  {head}" \
           f"{' ...' if flat.size > 6 else ''}"


def inspect_model(args) -> int:
    """Metadata and signature; the optimised IR with --ir, the generated C with --c."""
    source = open_model(args.model, args)
    print(f"{args.model} ({kind_of(args.model)})")
    for key, value in source.metadata().items():
        if value in ("", None):
            continue
        print(f"  {key}: {value if isinstance(value, (str, int, float)) else json.dumps(value)}")
    print("signature:")
    for line in source.signatures():
        print(f"  {line}")
    if args.ir:
        print("\n" + source.ir().rstrip())
    if args.c:
        print("\n" + source.c().rstrip())
    return 0


def bench_model(args) -> int:
    """Latency percentiles of one call, beside ONNX Runtime's on the same file and inputs with --compare."""
    if args.compare and kind_of(args.model) != "onnx":
        raise CuvilError(f"--compare {args.compare} needs the ONNX file itself (MODEL.onnx), not {args.model}")
    source = open_model(args.model, args)
    if args.threads:
        source.set_num_threads(args.threads)
    arrays = arrays_for(source.inputs, assign(args.inputs, [p.name for p in source.inputs]), True, args.seed)
    threads = f"{args.threads} thread(s)" if args.threads else "default threads"
    print(f"{args.model}: {', '.join(f'{n}{list(a.shape)}' for n, a in arrays.items())}; {threads}; "
          f"{args.warmup} warm-up + {args.repeat} timed calls")
    print(_row("cuvil", latencies(source.timed_call(arrays), args.warmup, args.repeat)))
    if args.compare:
        session = _onnxruntime(args.model, args.threads)
        call = lambda: session.run(None, arrays)  # noqa: E731
        print(_row("onnxruntime", latencies(call, args.warmup, args.repeat)))
        diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)), initial=0))
                   for a, b in zip(source(arrays), call()))
        print(f"max |cuvil - onnxruntime| over the outputs: {diff:.3g}")
    return 0


def latencies(call, warmup: int, repeat: int) -> np.ndarray:
    """Milliseconds per call, `repeat` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        call()
    times = np.empty(repeat)
    for i in range(repeat):
        t0 = time.perf_counter()
        call()
        times[i] = time.perf_counter() - t0
    return times * 1e3


def _row(name: str, ms: np.ndarray) -> str:
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return (f"{name:>12}: p50 {p50:.4f} ms  p90 {p90:.4f} ms  p99 {p99:.4f} ms  mean {ms.mean():.4f} ms  "
            f"min {ms.min():.4f} ms")


def _onnxruntime(path: str, threads):
    try:
        import onnxruntime as ort
    except ImportError:
        raise UnsupportedError("--compare onnxruntime needs the onnxruntime package (pip install onnxruntime)") \
            from None
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def cache_command(args) -> int:
    """`info`: where the caches are and what they hold; `clear`: delete the artifacts; `verify`: check them all."""
    from .. import cache
    from ..backends.cpu import toolchain

    if args.action == "clear":
        count = len(cache.entries())
        cache.clear()
        print(f"deleted {count} compiled artifact(s) from {cache.folder()}")
    elif args.action == "verify":
        entries, bad = cache.entries(), cache.verify()
        print(f"checked {len(entries)} artifact(s) in {cache.folder()}: {len(bad)} corrupt" +
              "".join(f"\n  deleted {path}" for path in bad))
        return 1 if bad else 0
    else:
        entries = cache.entries()
        print(f"artifact cache: {cache.folder()} ({'on' if cache.enabled() else 'off: CUVIL_ARTIFACT_CACHE=0'})")
        print(f"  {len(entries)} artifact(s), {sum(map(_bytes, entries)):,} bytes")
        kernels = toolchain.cache_dir()
        print(f"C compiler cache: {kernels} ({_bytes(kernels) - _bytes(cache.folder()):,} bytes)")
    return 0


def _bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def build_runtime(args) -> int:
    """The standalone C runtime and `cuvil-run`, built from the shipped sources (cuvil/runtime/build.py)."""
    if importlib.util.find_spec("cuvil.runtime.build") is None:
        raise UnsupportedError("this cuvil has no runtime builder (cuvil/runtime/build.py) yet, so "
                               "`cuvil build-runtime` cannot build the C runtime and cuvil-run")
    from ..runtime import build

    return build.main(args.rest)


def demo(args) -> int:
    from .demo import demo as run_demo

    return run_demo(args)
