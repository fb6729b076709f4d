"""Passes: transformations of IR modules, the pass manager and the built-in pipelines.

The default pipeline reads top to bottom in `default_pipeline`. User passes subclass `Pass` and join it
through `passes=[...]` (placed by their `anchor`, by default before fusion).
"""
from __future__ import annotations

from typing import Iterable

from .attention import FuseAttention
from .decompose import decompose
from .fuse import FuseLibraryEpilogue, FuseOps
from .inference import FoldBatchNorm
from .layout import BlockLayout
from .lower import SplitToSlices
from .recompose import Recompose
from .manager import Pass, PassManager, Pipeline, PipelineBuilder
from .rewrite import Match, Pat, Rule, apply_rules
from .simplify import CSE, DCE, Canonicalize, Decompose, FoldConstants, Simplify


def default_pipeline(target: str = "cpu", level: int = 2, passes: Iterable[Pass] = (),
                     enable_fusion: bool = True) -> Pipeline:
    """The passes `cuvil.jit`, `cuvil.compile` and `.optimize()` run, in order."""
    pb = PipelineBuilder(f"{target}-O{level}")
    pb.add(Canonicalize())
    if level >= 1:
        pb.add_fixpoint("cleanup", FoldConstants(), Simplify(), Canonicalize(), CSE(), DCE())
        pb.add(Recompose(), FoldBatchNorm(), DCE())
    if target not in ("interpreter", "cuda"):  # a C-backend target (backends/cpu/targets.py)
        from ..backends.cpu.backend import conv_block, keeps_composite
        from ..backends.cpu.loops import REDUCE_OPS, is_loop_op

        pb.add(Decompose(keep=keeps_composite), SplitToSlices())
        if level >= 1 and conv_block() is not None:
            pb.add(BlockLayout(conv_block()))
        pb.add_fixpoint("cleanup-lowered", FoldConstants(), Simplify(), Canonicalize(), CSE(), DCE())
        if enable_fusion:
            pb.add(FuseAttention(), FuseLibraryEpilogue())
        pb.add(FuseOps(is_loop_op, REDUCE_OPS, join=enable_fusion))
    elif target == "cuda":
        from ..backends.common.index import is_loop_op
        from ..backends.cuda.backend import REDUCE_OPS, keeps_composite

        pb.add(Decompose(keep=keeps_composite), SplitToSlices())
        pb.add_fixpoint("cleanup-lowered", FoldConstants(), Simplify(), Canonicalize(), CSE(), DCE())
        if enable_fusion:
            pb.add(FuseAttention(), FuseLibraryEpilogue())
        pb.add(FuseOps(is_loop_op, REDUCE_OPS, join=enable_fusion))
    for p in passes:
        pb.insert(p)
    return pb.build()


def run_pipeline(module, pipeline: Pipeline | None = None, **manager_options) -> PassManager:
    """Run `pipeline` (default: the default pipeline) on `module` in place; returns the manager (timings)."""
    manager = PassManager(**manager_options)
    manager.run(pipeline or default_pipeline(), module)
    return manager


__all__ = ["BlockLayout", "CSE", "Canonicalize", "DCE", "Decompose", "FoldBatchNorm", "FoldConstants",
           "FuseAttention", "FuseLibraryEpilogue", "FuseOps", "Match", "Pass", "PassManager", "Pat", "Pipeline",
           "PipelineBuilder", "Recompose", "Rule", "Simplify", "SplitToSlices", "apply_rules", "decompose",
           "default_pipeline", "run_pipeline"]
