"""The `cuvil` command (also `python -m cuvil`).

    cuvil compile MODEL.onnx | FILE.py:FUNCTION -o model.cuv [--target cpu] [--input x=1,3,224,224]
                  [--dynamic x:0=batch] [--precision fp32] [--c]
    cuvil run     model.cuv | MODEL.onnx | FILE.py:FUNCTION [--input x=x.npy] [--random] [-o DIR]
    cuvil inspect model.cuv | MODEL.onnx | FILE.py:FUNCTION [--ir] [--c]
    cuvil bench   model.cuv | MODEL.onnx | FILE.py:FUNCTION [--threads N] [--compare onnxruntime]
    cuvil cache   info | clear | verify
    cuvil build-runtime --out DIR
    cuvil demo

Errors in what the user gave (a bad file, a missing input, an unsupported option) print one line and exit 1.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import CuvilError
from ..quantize import PRECISIONS
from . import commands
from .inputs import parse_dynamic, parse_input

def _argument(parse):
    """An argparse type from a parser of ours: its error message printed as it is (argparse's own is generic)."""
    def typed(text: str):
        try:
            return parse(text)
        except CuvilError as e:
            raise argparse.ArgumentTypeError(e.message) from None
    typed.__name__ = parse.__name__
    return typed


MODEL_HELP = "a .cuv file, an .onnx model, or FILE.py:FUNCTION (a Python function, compiled with @cuvil.jit)"


def _model(p, inputs_help: str) -> None:
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--input", "-i", dest="inputs", action="append", type=_argument(parse_input), default=[],
                   metavar="SPEC", help=inputs_help)
    p.add_argument("--dynamic", action="append", type=_argument(parse_dynamic), default=[],
                   metavar="INPUT:AXIS=SYMBOL", help="make a size symbolic, e.g. x:0=batch (repeatable)")


def _entry(p) -> None:
    p.add_argument("--entry", default="main", help="the entry point of a .cuv file (default: main)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")


def _compile_options(p) -> None:
    _model(p, "an input's shape NAME=D0,D1,...[:DTYPE] (e.g. x=1,3,224,224; Python functions: the example "
              "arrays, default dtype f32), or NAME=FILE.npy")
    p.add_argument("-o", "--output", required=True, help="the .cuv file to write")
    p.add_argument("--target", default="cpu", help="what to compile for (default: cpu)")
    p.add_argument("--precision", default="fp32", choices=PRECISIONS,
                   help="numeric precision (default: fp32; docs/precision.md)")
    p.add_argument("--c", action="store_true", help="keep the generated C in the file (cuvil inspect --c)")
    p.set_defaults(entry="main")


def _run_options(p) -> None:
    _model(p, "an input: NAME=FILE.npy, or NAME=D0,D1,... (random values of that shape); repeatable")
    p.add_argument("--random", action="store_true", help="random values for every input not given")
    p.add_argument("-o", "--output-dir", metavar="DIR", help="save the outputs as DIR/output_<i>.npy")
    _entry(p)


def _inspect_options(p) -> None:
    _model(p, "Python functions: the example arrays to compile for (NAME=D0,D1,...[:DTYPE] or NAME=FILE.npy)")
    p.add_argument("--ir", action="store_true", help="print the optimised IR")
    p.add_argument("--c", action="store_true", help="print the generated C")
    _entry(p)


def _bench_options(p) -> None:
    _model(p, "an input: NAME=FILE.npy or NAME=D0,D1,... (others are random of their static shape)")
    p.add_argument("--threads", type=int, help="threads per call (default: the physical cores)")
    p.add_argument("--repeat", type=int, default=100, help="timed calls (default: 100)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls first (default: 10)")
    p.add_argument("--compare", choices=("onnxruntime",), help="time ONNX Runtime on the same file and inputs")
    _entry(p)


def _cache_options(p) -> None:
    p.add_argument("action", choices=("info", "clear", "verify"), nargs="?", default="info")


def _build_runtime_options(p) -> None:
    p.set_defaults(rest=[])  # what follows goes to the runtime builder as it is (--out DIR, ...)


def _demo_options(p) -> None:
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeat", type=int, default=200)
    p.add_argument("--target", choices=("cpu", "interpreter"), default="cpu")


# name, help, options, command
COMMANDS = [
    ("compile", "compile an ONNX model or a Python function into a .cuv file", _compile_options,
     commands.compile_model),
    ("run", "run a model once on given or random inputs", _run_options, commands.run_model),
    ("inspect", "print a model's metadata and signature, its IR and generated C", _inspect_options,
     commands.inspect_model),
    ("bench", "time a model's calls (latency percentiles), beside ONNX Runtime's", _bench_options,
     commands.bench_model),
    ("cache", "the on-disk artifact cache: info, clear, verify", _cache_options, commands.cache_command),
    ("build-runtime", "build the standalone C runtime and cuvil-run", _build_runtime_options, commands.build_runtime),
    ("demo", "compile a small built-in model and compare it with NumPy", _demo_options, commands.demo),
]


def parser() -> argparse.ArgumentParser:
    from .. import __version__

    top = argparse.ArgumentParser(prog="cuvil", description="Cuvil: a compiler for AI inference")
    top.add_argument("--version", action="version", version=f"cuvil {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text, options, command in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        options(p)
        p.set_defaults(run=command)
    return top


def main(argv=None) -> int:
    top = parser()
    args, rest = top.parse_known_args(argv)
    if rest and args.command != "build-runtime":
        top.error(f"unrecognized arguments: {' '.join(rest)}")
    args.rest = rest
    if hasattr(args, "dynamic"):  # each --dynamic may name several sizes
        args.dynamic = [d for group in args.dynamic for d in group]
    try:
        return args.run(args)
    except BrokenPipeError:  # the reader went away (`cuvil inspect --c | head`): stop quietly
        sys.stdout = open(os.devnull, "w")
        return 0
    except (CuvilError, OSError) as e:
        print(f"cuvil {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
