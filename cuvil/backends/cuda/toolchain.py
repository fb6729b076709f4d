"""The CUDA toolchain: CUDA C to PTX and cubins, with NVRTC (the pip wheel `nvidia-cuda-nvrtc-cu12`, through ctypes)
or `nvcc`, cached on disk beside the CPU libraries (`CUVIL_CACHE_DIR`), keyed by source, header, architecture and
compiler. Needs no GPU: an ahead-of-time build on a CPU-only machine makes the same images.

`CUVIL_CUDA_COMPILER=nvcc` or `=nvrtc` picks one; by default NVRTC when its library loads, else nvcc on the PATH.
`CUVIL_CUDA_ARCHS` narrows the cubins built for `target="cuda"` (export always builds ARCHS).
"""
from __future__ import annotations

import ctypes
import functools
import glob
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from importlib import resources
from pathlib import Path

from ...errors import CuvilError, UnsupportedError
from ..cpu.toolchain import cache_dir

ARCHS = ("sm_80", "sm_90")  # the cubins a .cuv for cuda carries; PTX for the oldest runs on newer GPUs by JIT


def default_archs() -> tuple:
    """`CUVIL_CUDA_ARCHS` (comma separated, e.g. "sm_90": build for one GPU only, faster), else ARCHS."""
    env = os.environ.get("CUVIL_CUDA_ARCHS", "")
    return tuple(a.strip() for a in env.split(",") if a.strip()) or ARCHS


class CudaCompileError(CuvilError):
    """Generated CUDA C that NVRTC or nvcc refused: a bug in the CUDA backend; the message holds the log."""


def header_dir() -> Path:
    return Path(str(resources.files(__package__) / "runtime"))


def header_dirs() -> list:
    """The folders the kernels' includes come from: cuvil_cuda.h's, and the CPU kernels' for cuvil_scalar.inc (the
    scalar helpers both backends share)."""
    return [header_dir(), Path(str(resources.files("cuvil.backends.cpu") / "kernels"))]


def headers() -> dict:
    """name -> text of every header the generated CUDA C includes (NVRTC takes them in memory)."""
    return {name: (folder / name).read_bytes() for folder, name in zip(header_dirs(), HEADERS)}


HEADERS = ("cuvil_cuda.h", "cuvil_scalar.inc")  # in header_dirs() order


def wheel_libraries(stem: str) -> list:
    """Shared libraries `stem`.so* in NVIDIA's pip wheels (the `nvidia` namespace package: nvidia/cuda_nvrtc/lib for
    CUDA 12's wheels, nvidia/cu13/lib for CUDA 13's), newest first, then the plain names for the loader's path."""
    found = []
    try:
        import nvidia

        for root in nvidia.__path__:
            found += glob.glob(os.path.join(root, "**", f"{stem}.so*"), recursive=True)
    except ImportError:
        pass
    found = sorted((f for f in found if "builtins" not in f and ".alt." not in f), reverse=True)
    return found + [f"{stem}.so.13", f"{stem}.so.12", f"{stem}.so"]


@functools.lru_cache(maxsize=None)
def _nvrtc():
    """The NVRTC library (ctypes), or None: a pip wheel's first, then the system's."""
    for c in wheel_libraries("libnvrtc"):
        try:
            lib = ctypes.CDLL(c)
        except OSError:
            continue
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        return lib
    return None


def compiler() -> str:
    """"nvrtc" or "nvcc", the one this machine compiles CUDA C with; UnsupportedError when it has neither."""
    want = os.environ.get("CUVIL_CUDA_COMPILER", "")
    if want in ("", "nvrtc") and _nvrtc() is not None:
        return "nvrtc"
    if want in ("", "nvcc") and shutil.which("nvcc"):
        return "nvcc"
    raise UnsupportedError("the CUDA backend needs NVRTC (pip install 'cuvil[cuda]') or nvcc on the PATH to "
                           "compile its kernels" + (f" (CUVIL_CUDA_COMPILER={want})" if want else ""))


@functools.lru_cache(maxsize=None)
def compiler_version(which: str) -> str:
    if which == "nvrtc":
        major, minor = ctypes.c_int(), ctypes.c_int()
        _nvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return f"nvrtc {major.value}.{minor.value}"
    return subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]


def compile_source(source: str, arch: str, kind: str) -> bytes:
    """`source` as `kind` ("ptx" or "cubin") for `arch` (e.g. "sm_90"), from the cache when built before."""
    which = compiler()
    header = "\0".join(text.decode() for text in headers().values())
    key = hashlib.sha256("\0".join(["cuvil-cuda-v1", source, header, arch, kind, which,
                                    compiler_version(which)]).encode()).hexdigest()
    path = cache_dir() / "cuda" / f"{key}.{kind}"
    if path.exists():
        return path.read_bytes()
    image = _nvrtc_compile(source, arch, kind) if which == "nvrtc" else _nvcc_compile(source, arch, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")  # builds may run in threads
    tmp.write_bytes(image)
    os.replace(tmp, path)
    return image


def _options(arch: str) -> list:
    return [f"-arch={arch}", *(f"-I{d}" for d in header_dirs()), "-std=c++17", "-lineinfo", *_QUIET]


# Unused coordinates (a broadcast drops an axis) are expected in generated kernels: warning 177 says nothing.
_QUIET = ("-diag-suppress=177",)


def _errors(log: str) -> str:
    """The error lines of a compiler log with the source line after each, at most 4000 characters."""
    lines = log.splitlines()
    keep = [f"{line}\n{lines[i + 1] if i + 1 < len(lines) else ''}" for i, line in enumerate(lines) if "error" in line]
    return "\n".join(keep)[:4000] or log[-4000:]


def _nvcc_compile(source: str, arch: str, kind: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="cuvil-cuda-") as tmp:
        src, out = Path(tmp) / "model.cu", Path(tmp) / f"model.{kind}"
        src.write_text(source)
        proc = subprocess.run(["nvcc", f"-{kind}", *_options(arch), "-o", str(out), str(src)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise CudaCompileError(f"nvcc failed for {arch}:\n{_errors(proc.stderr)}")
        return out.read_bytes()


def _nvrtc_compile(source: str, arch: str, kind: str) -> bytes:
    lib = _nvrtc()
    prog = ctypes.c_void_p()
    texts = headers()
    contents = (ctypes.c_char_p * len(texts))(*texts.values())
    names = (ctypes.c_char_p * len(texts))(*(n.encode() for n in texts))
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"model.cu", len(texts), contents, names))
    try:
        target = arch if kind == "cubin" else arch.replace("sm_", "compute_")
        opts = [f"-arch={target}".encode(), b"-std=c++17", b"-lineinfo", *(o.encode() for o in _QUIET)]
        rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        if rc != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise CudaCompileError(f"NVRTC failed for {arch}:\n{_errors(log.value.decode(errors='replace'))}")
        getsize, get = (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN) if kind == "cubin" else \
            (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX)
        size = ctypes.c_size_t()
        _check(lib, getsize(prog, ctypes.byref(size)))
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, get(prog, buf))
        return buf.raw.rstrip(b"\0") if kind == "ptx" else buf.raw  # PTX kept without its NUL (as nvcc writes it)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _check(lib, rc: int) -> None:
    if rc != 0:
        raise CudaCompileError(f"NVRTC: {lib.nvrtcGetErrorString(rc).decode()}")


def build_images(source: str, archs=ARCHS) -> dict:
    """PTX for the oldest of `archs` and a cubin for each: {"ptx": bytes, "sm_80": bytes, ...}; `archs=()`: the PTX
    (for sm_80) alone."""
    images = {"ptx": compile_source(source, min(archs, default="sm_80"), "ptx")}
    for arch in archs:
        images[arch] = compile_source(source, arch, "cubin")
    return images
