"""A one-line progress display for compiles run from the command line: the phase (frontend, passes, C
compilation) with its counts and the time so far, on stderr, only when stderr is a terminal and only once the
compile has taken more than about a second.

The compile paths call `phase()` and `step()` at their boundaries. Both do nothing unless the command line
opened a `display()`, so library users and anything not on a terminal see no extra output.

    >>> from cuvil import progress
    >>> with progress.display("compiling model.onnx"):   # stderr is not a terminal here: prints nothing
    ...     progress.phase("frontend", "12 ONNX nodes")
    ...     progress.step("passes", "fuse-ops")
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Optional

_active: Optional["Display"] = None  # the display the command line opened, if any (one per process)
DELAY, INTERVAL = 1.0, 0.2  # seconds before the line appears; between redraws


class Display:
    """The status line of one compile: what is compiled, the current phase, its count and detail, the time.

    `refresh()` redraws it (a background thread calls it every `interval` seconds); nothing is written before
    `delay` seconds have passed or when `stream` is not a terminal."""

    def __init__(self, what: str, stream, delay: float = 1.0, clock=time.monotonic):
        self.what, self.stream, self.delay, self.clock = what, stream, delay, clock
        self.start = clock()
        self.phases: list[str] = []  # in the order they began
        self.current, self.count, self.detail = "", 0, ""
        self.shown = False
        self._lock = threading.Lock()

    def phase(self, name: str, detail: str = "") -> None:
        with self._lock:
            if name != self.current:
                self.phases.append(name)
                self.current, self.count = name, 0
            self.detail = detail

    def step(self, name: str, detail: str = "") -> None:
        """One more unit of work (a pass, a library) in phase `name`."""
        self.phase(name, detail)
        with self._lock:
            self.count += 1

    def line(self) -> str:
        with self._lock:
            count = f" {self.count}" if self.count else ""
            detail = f": {self.detail}" if self.detail else ""
            return f"cuvil: {self.what} [{self.current or 'starting'}{count}{detail}] {self.elapsed():.1f} s"

    def elapsed(self) -> float:
        return self.clock() - self.start

    def visible(self) -> bool:
        return self.elapsed() >= self.delay and _is_terminal(self.stream)

    def refresh(self) -> None:
        if self.visible():
            self.stream.write("\r\x1b[K" + self.line())
            self.stream.flush()
            self.shown = True

    def close(self) -> None:
        """Replace the status line by a summary of the phases, if the compile took long enough to show one (the
        ticker may not have drawn it yet)."""
        if self.shown or self.visible():
            self.stream.write(f"\r\x1b[Kcuvil: {self.what}: done in {self.elapsed():.1f} s "
                              f"({', '.join(self.phases)})\n")
            self.stream.flush()


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


@contextlib.contextmanager
def display(what: str, stream=None, delay: Optional[float] = None, interval: Optional[float] = None):
    """Show the progress of the compiles inside the block on `stream` (stderr) after `delay` seconds (`DELAY`);
    nested blocks use the outer one."""
    global _active
    if _active is not None:
        yield _active
        return
    shown = Display(what, stream if stream is not None else sys.stderr, DELAY if delay is None else delay)
    interval = INTERVAL if interval is None else interval
    stop = threading.Event()
    ticker = threading.Thread(target=_tick, args=(shown, stop, interval), daemon=True, name="cuvil-progress")
    _active = shown
    ticker.start()
    try:
        yield shown
    finally:
        stop.set()
        ticker.join()
        _active = None
        shown.close()


def _tick(shown: Display, stop: threading.Event, interval: float) -> None:
    while not stop.wait(interval):
        shown.refresh()


def phase(name: str, detail: str = "") -> None:
    """A compile entered phase `name` ("frontend", "passes", "C compilation"); a no-op without a display."""
    if _active is not None:
        _active.phase(name, detail)


def step(name: str, detail: str = "") -> None:
    """One more unit of phase `name` done or begun (a pass by name, a library); a no-op without a display."""
    if _active is not None:
        _active.step(name, detail)
