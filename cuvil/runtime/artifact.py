"""`cuvil.load`: a `.cuv` file as callables, with no frontend, no pass and no compiler.

    >>> import numpy as np, cuvil, tempfile, os
    >>> @cuvil.jit
    ... def double(x):
    ...     return x * 2
    >>> path = os.path.join(tempfile.mkdtemp(), "double.cuv")
    >>> cuvil.export(double, path, example_inputs=(np.ones(3, np.float32),))
    >>> with cuvil.load(path) as art:
    ...     art(np.arange(3, dtype=np.float32)).tolist()
    [0.0, 2.0, 4.0]

Loading checks the file in the order docs/artifact.md lists before it maps the native code; the constants'
SHA-256 runs in a background thread started at load, and the first call waits for it.
"""
from __future__ import annotations

import json
import os
import threading
import numpy as np

from ..errors import ArtifactError, CuvilError
from . import entries as entry_text
from . import host
from .container import Container, cpu_count
from .function import Function, Param  # noqa: F401 (Param: public here too)

FORMAT = 1


class Artifact:
    """A loaded `.cuv`: its entry points (`entries`, `function(name)`, `artifact[name]`; calling it calls `main`)
    and `metadata` (the `meta` JSON)."""

    def __init__(self, container: Container, meta: dict, lib, verified: "_Verification"):
        self.path, self.metadata, self._lib = container.path, meta, lib
        self._container, self._verified = container, verified
        self._functions: dict = {}
        self._threads_set = False  # the default thread count is applied at the first call unless set before
        self.closed = False

    @property
    def entries(self) -> list:
        """The names of the entry points (other compiled signatures of one function are part of it)."""
        return [n for n, e in self.metadata["entries"].items() if "variant_of" not in e.get("route", {})]

    def function(self, name: str = "main") -> Function:
        if self.closed:
            raise CuvilError(f"{self.path} is closed")
        if name not in self.entries:
            raise KeyError(f"{self.path} has no entry {name!r} (entries: {', '.join(self.entries)})")
        if name not in self._functions:
            variants = [name] + [n for n, e in self.metadata["entries"].items()
                                 if e.get("route", {}).get("variant_of") == name]
            self._functions[name] = Function(self, name, variants)
        return self._functions[name]

    __getitem__ = function

    def __call__(self, *args, **kwargs):
        return self.function("main")(*args, **kwargs)

    def set_num_threads(self, n: int) -> None:
        """Threads for every entry of this file (one kernel library per file)."""
        self._lib.cuvil_set_num_threads(int(n))
        self._threads_set = True

    def _default_threads(self) -> None:
        """The same default as in-process code, at the first call (its module pulls in the toolchain: not at load)."""
        if not self._threads_set:
            from ..backends.cpu.kernels import default_num_threads

            self.set_num_threads(default_num_threads())

    def close(self) -> None:
        """Drop the functions; calls after this fail. (The native code stays mapped: nothing unloads it.)"""
        self.closed = True
        self._functions.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"<cuvil.runtime.Artifact {self.path}: {', '.join(self.entries)}>"

    # -- what Function reads --------------------------------------------------------------------------------------
    def verify(self) -> None:
        """Wait for the background check of the constants (and the rest); ArtifactError if it failed."""
        self._verified.wait()

    def constants(self, name: str) -> tuple:
        """(constants by name, saved prepared buffers by index) of entry `name`, as views of the mapping, once the
        background check of their sections has passed."""
        self._verified.wait()
        e = self.metadata["entries"][name]
        consts = self._arrays("consts", e["constants"])
        prepared = self._arrays("prepared", e["prepared"], np.uint8)
        return {c["name"]: a for c, a in zip(e["constants"], consts)}, \
            {p["index"]: a for p, a in zip(e["prepared"], prepared)}

    def ir_text(self, name: str = "main") -> str:
        """The optimised IR of entry `name` (the `ir` section), as `cuvil.inspect_ir` prints it."""
        return self._text("ir", name)

    def c_text(self, name: str = "main") -> str:
        """The generated C of entry `name` (the `csrc` section, written by `export(..., include_c=True)`)."""
        return self._text("csrc", name)

    def _text(self, section: str, name: str) -> str:
        if section not in self._container.rows:
            raise ArtifactError(f"{self.path} holds no {section} section")
        try:
            return json.loads(self._container.inflated(section))[name]
        except (ValueError, KeyError, TypeError) as e:
            raise ArtifactError(f"{self.path}: the {section} section has no text for {name!r} ({e})") from e

    def _arrays(self, section: str, items: list, dtype=None) -> list:
        if not items:
            return []
        view = self._container.data(section, check=False)  # checked by the background verification
        out = []
        for c in items:
            if c.get("derived"):  # left out: its prepared forms are saved in its place (docs/artifact.md)
                out.append(None)
                continue
            try:
                dt = np.dtype(dtype) if dtype is not None else _numpy_dtype(c["dtype"])
                shape = (c["nbytes"],) if dtype is not None else tuple(c["shape"])
                out.append(np.frombuffer(view, dt, c["nbytes"] // dt.itemsize, c["offset"]).reshape(shape))
            except (TypeError, ValueError, KeyError) as e:
                raise ArtifactError(f"{self.path}: buffer {c!r} of the {section} section is malformed: {e}") from e
        return out


LATE_SECTIONS = ("consts", "prepared", "ir", "csrc")  # check 5: hashed in the background, before the first call


def load(path, *, _verified_by=None) -> Artifact:
    """Open a `.cuv` file, or its bytes (bytes, a memoryview or a uint8 array, used in place where 64-byte aligned,
    else copied; docs/artifact.md): every check before its native code is mapped; `cuvil.ArtifactError` names the
    one that failed (a file that cannot be opened raises its OSError).
    (`_verified_by(container)`: the artifact cache's record that this very file passed check 5 already, see
    cuvil/cache/store.py; True skips check 5.)"""
    container, meta, native = _checked(path)
    lib = host.dlopen(container.data(native, check=False), os.path.basename(container.path).strip("<>"))
    if lib.cuvil_abi_version() != 1:
        raise ArtifactError(f"{container.path}: native ABI version {lib.cuvil_abi_version()}, this loader knows 1")
    late = [] if _verified_by is not None and _verified_by(container) else LATE_SECTIONS
    # started last: on a machine with few cores its threads would otherwise slow the rest of the load
    verified = _Verification(container, [n for n in late if n in container.rows])
    artifact = Artifact(container, meta, lib, verified)
    artifact.native = native  # the level chosen: `native`, `native.1`, ... (meta["levels"] names them in order)
    return artifact


def check(path) -> dict:
    """Every check `load` makes, the constants' too, without loading the native code; returns `meta`."""
    container, meta, _ = _checked(path)
    container.check_all([n for n in LATE_SECTIONS if n in container.rows], cpu_count())
    return meta




def _checked(path) -> tuple:
    """Checks 1-4: (container, meta, the native section to load)."""
    is_bytes = isinstance(path, (bytes, bytearray, memoryview, np.ndarray))
    container = Container.from_buffer(_aligned(path)) if is_bytes else Container.open(path)
    meta = _meta(container)
    native = _choose_native(container)
    container.check(native)
    if container.triple != host.triple():
        raise ArtifactError(f"{container.path}: made for {container.triple}, this machine is {host.triple()}")
    missing = container.rows[native].features & ~host.feature_bits()
    if missing:
        raise ArtifactError(f"{container.path}: the native code needs CPU features this machine lacks: "
                            f"{', '.join(host.names(missing))}")
    return container, meta, native


def _aligned(data) -> memoryview:
    """The caller's bytes, read-only and in place where they start on a 64-byte boundary (constants and saved
    prepared buffers are views of them and must be aligned), else a copy that does: as cuvil_open_memory."""
    view = memoryview(data).cast("B")
    if np.frombuffer(view, np.uint8).ctypes.data % 64:
        from ..backends.cpu.kernels import aligned_empty

        copy = aligned_empty(view.nbytes, np.uint8)
        copy[:] = view
        view = memoryview(copy)
    return view.toreadonly()


def _meta(container: Container) -> dict:
    """Check 3 for `meta` and `entries`: their SHA-256, JSON, and the two saying the same."""
    path = container.path
    try:
        meta = json.loads(bytes(container.data("meta")).decode("utf-8"))
        text = bytes(container.data("entries")).decode("ascii")
    except (UnicodeDecodeError, ValueError) as e:
        raise ArtifactError(f"{path}: meta or entries does not parse: {e}") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("entries"), dict) \
            or not meta["entries"]:
        raise ArtifactError(f"{path}: meta is not a format-1 object with entries")
    sizes = [container.rows[n].size if n in container.rows else 0 for n in ("consts", "prepared")]
    for name, e in meta["entries"].items():
        if not isinstance(e, dict):
            raise ArtifactError(f"{path}: entry {name!r} in meta is not an object")
        entry_text.check_meta_entry(name, e, *sizes, path)
    entry_text.check_entries(text, meta["entries"], path)
    return meta


def _choose_native(container: Container, have: int | None = None) -> str:
    """The native section with the most feature bits that this CPU (or wasm32 engine: `have`) has (`native` when
    none fits: check 4 says what is missing)."""
    have = host.feature_bits() if have is None else have
    natives = [r for n, r in container.rows.items() if n == "native" or n.startswith("native.")]
    fitting = [r for r in natives if not r.features & ~have]
    return max(fitting, key=lambda r: bin(r.features).count("1")).name if fitting else "native"


def _numpy_dtype(name: str) -> np.dtype:
    from ..ir.dtypes import DType

    try:
        return DType(name).numpy
    except ValueError:
        raise ArtifactError(f"unknown dtype {name!r}") from None


class _Verification:
    """Check 5 in a background thread: the SHA-256 of the sections the first call reads (and of the small `ir` and
    `csrc`, so that a corrupt one fails the first call too, not only a later `inspect`); `wait` re-raises a
    mismatch in every caller."""

    def __init__(self, container: Container, names: list):
        self.error = None
        # format 2 hashes sections in pieces: one thread per CPU shares the pieces of every section
        self._threads = [threading.Thread(target=self._run, args=(container, names), daemon=True,
                                          name="cuvil-verify")] if names else []
        for t in self._threads:
            t.start()

    def _run(self, container: Container, names: list) -> None:
        try:
            container.check_all(names, cpu_count())
        except ArtifactError as e:
            self.error = e

    def wait(self) -> None:
        for t in self._threads:
            t.join()
        if self.error is not None:
            raise ArtifactError(self.error.message)
