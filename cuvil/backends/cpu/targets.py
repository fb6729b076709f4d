"""The C backend's targets as a table: what each compiles for, with which toolchain and flags, and what it needs.

    >>> from cuvil.backends.cpu import targets
    >>> [t.name for t in targets.levels("x86_64")]
    ['x86_64-v2', 'x86_64-v3', 'x86_64-v4']
    >>> targets.get("aarch64").vector_lanes, targets.get("aarch64").triple
    (4, 'aarch64-linux-gnu')
    >>> [t.name for t in targets.levels("wasm32")]
    ['wasm32', 'wasm32-relaxed']

`"cpu"` is the host, compiled with `-march=native` (what in-process code always uses). The other rows are fixed
instruction-set levels a `.cuv` can be exported for (docs/targets.md). A family name (`"x86_64"`, `"aarch64"`)
names several levels of one architecture: one file carries them all and the loader picks the best the CPU has.
`"wasm32"` is a row (SIMD128) and a family (with `"wasm32-relaxed"`, relaxed-SIMD's FMA): a WebAssembly module
built by zig's clang (backends/cpu/wasm.py), the level chosen by the engine's features (cuvil.js, runtime/wasm.py).
Generated code and the kernel library select their vectors from the compiler's predefined macros (`cuvil_simd.h`),
so a row's flags decide the vector width; `vector_bits` says what they give, for the IR's layout choices.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools

from ...errors import UnsupportedError


@dataclasses.dataclass(frozen=True)
class Target:
    """One row: a target's triple, vectors, flags per toolchain family, required CPU features, and what the
    platform offers (OpenMP threads, dlopen)."""
    name: str
    triple: str                 # written into the .cuv header; the loaders compare it with the host's
    vector_bits: int            # the f32 vector the kernels use (CUVIL_VL * 32)
    simd: str                   # the instruction set those vectors lower to
    header: str                 # the intrinsics header the kernels may include under the macros below
    macros: tuple               # predefined macros that select the vectors in cuvil_simd.h
    gcc_flags: tuple            # machine flags for gcc and clang
    zig_flags: tuple            # the same for `zig cc` (which names CPUs, not -march levels)
    features: tuple             # CPU features (runtime/host.py FEATURE_BITS names) the code needs
    gemm_block: tuple = ()      # (MR, NV): the GEMM's register block, rows x vectors (empty: gemm.c's default)
    model_flags: tuple = ()     # extra flags for generated model code
    gcc_prefix: str = ""        # the Debian cross compiler's prefix (empty: the host's compiler)
    openmp: bool = True         # threads through OpenMP, where the toolchain has it (zig's clang has not)
    dlopen: bool = True         # shared objects loaded at run time (wasm32 links one module instead)
    widens_blocks: bool = False  # kernels built with each module, vectors as wide as its IR's blocks (wasm32)
    conv_strip: int = 0         # the blocked convolution's strip, output pixels (0: conv_nchwc.c's default)

    @property
    def vector_lanes(self) -> int:
        return self.vector_bits // 32

    @property
    def is_host(self) -> bool:
        return self.name == "cpu"

    def flags(self, toolchain_family: str) -> tuple:
        """Machine and model flags for `toolchain_family` ("gcc" or "zig"), plus the GEMM's register block and the
        convolution's strip."""
        machine = self.zig_flags if toolchain_family == "zig" else self.gcc_flags
        block = (f"-DCUVIL_MR={self.gemm_block[0]}", f"-DCUVIL_NV={self.gemm_block[1]}") if self.gemm_block else ()
        strip = (f"-DCUVIL_NCHWC_W0={self.conv_strip}",) if self.conv_strip else ()
        return (*machine, *block, *strip)


_X86_V3 = ("sse4_2", "avx", "avx2", "fma", "f16c")
WASM32_GEMM_BLOCK = (4, 2)


def _wasm32(name: str, simd: str, macros: tuple, flags: tuple, features: tuple) -> Target:
    """A wasm32 row: zig's clang only (no gcc for wasm32-wasi), no OpenMP (no threads yet), one module, no dlopen."""
    return Target(name, "wasm32-wasi", 128, simd, "wasm_simd128.h", ("__wasm_simd128__", *macros), (),
                  ("-msimd128", *flags), ("simd128", *features), WASM32_GEMM_BLOCK, openmp=False, dlopen=False,
                  widens_blocks=True)

# GEMM register blocks, rows x vectors. x86: gemm.c's measured defaults (6 x 4 zmm, 6 x 2 ymm; SSE's 16 registers
# take 4 x 2). aarch64: 8 x 2 q-registers = 16 accumulators + 2 of B + 8 broadcasts of A fit NEON's 32 registers
# (the choice of OpenBLAS's and XNNPACK's NEON kernels); unmeasured here (see docs/targets.md for how to).
TABLE = {t.name: t for t in (
    Target("x86_64-v2", "x86_64-linux-gnu", 128, "sse4.2", "immintrin.h", ("__SSE4_2__",),
           ("-march=x86-64-v2",), ("-mcpu=x86_64_v2",), ("sse4_2",), (4, 2)),
    Target("x86_64-v3", "x86_64-linux-gnu", 256, "avx2+fma", "immintrin.h", ("__AVX2__", "__FMA__"),
           ("-march=x86-64-v3",), ("-mcpu=x86_64_v3",), _X86_V3, (6, 2)),
    Target("x86_64-v4", "x86_64-linux-gnu", 512, "avx512", "immintrin.h", ("__AVX512F__",),
           ("-march=x86-64-v4",), ("-mcpu=x86_64_v4",), (*_X86_V3, "avx512f", "avx512bw", "avx512vl", "avx512dq"),
           (6, 4), ("-mprefer-vector-width=512",)),
    Target("aarch64", "aarch64-linux-gnu", 128, "neon", "arm_neon.h", ("__ARM_NEON",),
           ("-march=armv8-a",), ("-mcpu=generic",), ("neon",), (8, 2), gcc_prefix="aarch64-linux-gnu-"),
    # SVE: the kernels keep their 128-bit NEON vectors; generated loops are vectorised for SVE's scalable ones.
    Target("aarch64-sve", "aarch64-linux-gnu", 128, "neon+sve", "arm_sve.h", ("__ARM_NEON", "__ARM_FEATURE_SVE"),
           ("-march=armv8.2-a+sve",), ("-mcpu=generic+sve",), ("neon", "sve"), (8, 2),
           gcc_prefix="aarch64-linux-gnu-"),
    _wasm32("wasm32", "simd128", (), (), ()),
    # relaxed-SIMD: clang contracts `a * b + c` into f32x4.relaxed_madd (an FMA where the CPU has one)
    _wasm32("wasm32-relaxed", "simd128+relaxed", ("__wasm_relaxed_simd__",), ("-mrelaxed-simd",), ("relaxed_simd",)),
)}
# Families: one .cuv holding every level, the loader choosing (SVE where present, else NEON; the widest x86;
# relaxed-SIMD where the engine validates it, else SIMD128).
FAMILIES = {"x86_64": ("x86_64-v2", "x86_64-v3", "x86_64-v4"), "aarch64": ("aarch64", "aarch64-sve"),
            "wasm32": ("wasm32", "wasm32-relaxed")}
NAMES = ("cpu", *TABLE, *(f for f in FAMILIES if f not in TABLE))


@functools.lru_cache(maxsize=1)
def host_target() -> Target:
    """The `"cpu"` row: this machine, `-march=native`, every feature it has (code may use any of them)."""
    from ...runtime import host  # not at import: `import cuvil` stays without the runtime
    from . import toolchain  # the host's features come from the toolchain's probe (cpuinfo, else the compiler)

    features = toolchain.cpu_features()
    bits = 512 if "avx512f" in features else 256 if "avx" in features or "avx2" in features else 128
    simd = "avx512" if bits == 512 else "avx2" if bits == 256 else "neon" if "neon" in features else "sse"
    wide = ("-mprefer-vector-width=512",) if bits == 512 else ()
    return Target("cpu", host.triple(), bits, simd, "arm_neon.h" if simd == "neon" else "immintrin.h", (),
                  ("-march=native",), ("-march=native",), tuple(host.names(host.cpuinfo_bits())), (), wide)


def get(name) -> Target:
    """The row named `name` ("cpu" is the host; a Target is its own row)."""
    if isinstance(name, Target):
        return name
    if name == "cpu":
        return host_target()
    if name not in TABLE:
        raise UnsupportedError(f"unknown target {name!r}; expected one of {', '.join(NAMES)}")
    return TABLE[name]


def levels(target) -> tuple:
    """The rows a `target=` argument names: a row, a family, or a list of rows of one triple (one .cuv)."""
    names = [target] if isinstance(target, str) else list(target)
    rows = [get(n) for name in names for n in FAMILIES.get(name, (name,))]
    if not rows:
        raise UnsupportedError("target=: no target named")
    if len({r.triple for r in rows}) > 1:
        raise UnsupportedError(f"target={target!r} mixes {', '.join(sorted({r.triple for r in rows}))}: one .cuv "
                               "holds one architecture (export one file per architecture)")
    return tuple(dict.fromkeys(rows))


def is_native(target) -> bool:
    """Whether `target` names C-backend rows (not the interpreter)."""
    try:
        levels(target)
    except (UnsupportedError, TypeError):
        return False
    return True


def runs_here(rows: tuple) -> bool:
    """Whether code for `rows` can be loaded into this process: only the host's own (`cpu`) kernel library is."""
    return all(r.is_host for r in rows)


_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("cuvil_target", default=None)


@contextlib.contextmanager
def use(target):
    """Compile for `target` (a row, family or list) inside the block: the passes lay out and the toolchain builds
    for it."""
    token = _ACTIVE.set(levels(target))
    try:
        yield _ACTIVE.get()
    finally:
        _ACTIVE.reset(token)


def active() -> tuple:
    """The rows being compiled for (the host's by default)."""
    return _ACTIVE.get() or (host_target(),)


def layout_lanes():
    """The vector every active level shares (the blocked convolution's channel block), else None: a file holding
    levels of different widths keeps convolutions unblocked, since one IR serves every level."""
    lanes = {r.vector_lanes for r in active()}
    return lanes.pop() if len(lanes) == 1 else None


def widens_blocks() -> bool:
    """Whether every active level builds its kernels with the module, as wide as the IR's blocks (wasm32: a host's
    layout runs, its vectors several v128)."""
    return all(r.widens_blocks for r in active())
