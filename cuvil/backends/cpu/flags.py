"""How the CPU backend compiles generated code: the optimisation level, the model code's flags and where the
runtime headers lie (shared by in-process builds and the exported shared object, so both compile one object)."""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from . import toolchain


def runtime_dir() -> Path:
    return Path(str(resources.files(__package__) / "runtime"))


def opt_level() -> int:
    """`CUVIL_OPT_LEVEL` (tests use 1 to compile faster), else 3."""
    env = os.environ.get("CUVIL_OPT_LEVEL", "3")
    return int(env) if env.isdigit() else 3


def model_flags() -> tuple:
    """Flags for generated model code: no errno from math (so sqrt vectorises), and full-width AVX-512 vectors
    where the host has them (GCC's tuning otherwise prefers 256 bits; 512 runs the vectorised exp/tanh/sigmoid
    1.5-2x faster here)."""
    wide = ("-mprefer-vector-width=512",) if "avx512f" in toolchain.cpu_features() else ()
    return ("-fno-math-errno", *wide)
