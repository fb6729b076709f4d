"""How the CPU backend compiles generated code: the optimisation level, the model code's flags and where the
runtime headers lie (shared by in-process builds and the exported shared object, so both compile one object)."""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from . import targets


def runtime_dir() -> Path:
    return Path(str(resources.files(__package__) / "runtime"))


def opt_level() -> int:
    """`CUVIL_OPT_LEVEL` (tests use 1 to compile faster), else 3."""
    env = os.environ.get("CUVIL_OPT_LEVEL", "3")
    return int(env) if env.isdigit() else 3


def model_flags(target=None) -> tuple:
    """Flags for generated model code: no errno from math (so sqrt vectorises), and the target's own (full-width
    AVX-512 vectors where it has them: GCC's tuning otherwise prefers 256 bits; 512 runs the vectorised
    exp/tanh/sigmoid 1.5-2x faster here)."""
    return ("-fno-math-errno", *(target or targets.host_target()).model_flags)
