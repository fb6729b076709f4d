"""The progress display (cuvil/progress.py): shown on a terminal once a compile passes its delay, with the phases
the compile paths report (frontend, passes, C compilation with counts); silent elsewhere and without a display."""
from __future__ import annotations

import concurrent.futures
import io
import os
import pty
import subprocess
import sys

import numpy as np
import pytest

import cuvil
from cuvil import progress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_nothing_is_shown_before_the_delay_and_the_line_after():
    clock, term = Clock(), FakeTerminal()
    shown = progress.Display("compiling m.onnx", term, delay=1.0, clock=clock)
    shown.phase("frontend", "m.onnx")
    clock.now += 0.5
    shown.refresh()
    assert term.getvalue() == ""
    shown.step("passes", "canonicalize")
    shown.step("passes", "fuse")
    clock.now += 0.75
    shown.refresh()
    assert term.getvalue() == "\r\x1b[Kcuvil: compiling m.onnx [passes 2: fuse] 1.2 s"
    shown.step("C compilation", "12 kernels")
    clock.now += 1.0
    shown.close()
    assert term.getvalue().endswith("\r\x1b[Kcuvil: compiling m.onnx: done in 2.2 s "
                                    "(frontend, passes, C compilation)\n")


def test_not_a_terminal_gets_nothing():
    clock, stream = Clock(), io.StringIO()
    shown = progress.Display("compiling", stream, delay=0.0, clock=clock)
    shown.step("passes", "cse")
    clock.now += 5
    shown.refresh()
    shown.close()
    assert stream.getvalue() == ""


def test_a_compile_reports_its_phases_with_counts():
    term = FakeTerminal()

    def twice_plus_one(x):
        return x * 2 + 1

    with progress.display("compiling twice_plus_one", stream=term, delay=0.0, interval=0.005) as shown:
        progress.phase("frontend", "twice_plus_one")
        cuvil.jit(twice_plus_one)(np.arange(7, dtype=np.float32))
    assert shown.phases == ["frontend", "passes", "C compilation"]
    assert "done in" in term.getvalue() and "(frontend, passes, C compilation)" in term.getvalue()
    assert shown.detail.endswith("kernels")


def test_the_calls_do_nothing_without_a_display():
    assert progress._active is None
    progress.phase("frontend")
    progress.step("passes", "dce")  # no display: no error, no output


def test_displays_nest_into_the_outer_one():
    with progress.display("outer", stream=io.StringIO()) as outer:
        with progress.display("inner", stream=io.StringIO()) as inner:
            assert inner is outer
    assert progress._active is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pseudo-terminal")
def test_cuvil_compile_on_a_terminal_shows_progress(tmp_path):
    """Through a pseudo-terminal with the delay at 0: the status line and the summary reach stderr."""
    (tmp_path / "f.py").write_text("def f(x):\n    return x * 3 - 1\n")
    code = ("import sys, cuvil.progress as p, cuvil.cli as c; p.DELAY, p.INTERVAL = 0.0, 0.01; "
            "sys.exit(c.main(sys.argv[1:]))")
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": ROOT}
    child = subprocess.Popen([sys.executable, "-c", code, "compile", f"{tmp_path / 'f.py'}:f", "-o",
                              str(tmp_path / "f.cuv"), "-i", "x=4"], stdout=subprocess.PIPE, stderr=follower,
                             env=env)
    os.close(follower)
    reader = concurrent.futures.ThreadPoolExecutor(1).submit(_read_all, leader)  # a full terminal would block it
    assert child.wait(timeout=300) == 0
    text = reader.result(timeout=60).decode()
    os.close(leader)
    assert "cuvil: compiling" in text and "done in" in text and "frontend" in text and "passes" in text


def _read_all(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed its side
            return out
        if not chunk:
            return out
        out += chunk
