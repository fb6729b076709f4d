"""Running fuzz jobs in a child process: one worker runs many jobs and is restarted when it dies (a crash) or
stops answering within the timeout (a hang). A crash or hang while ONNX Runtime runs is ORT's, reported apart."""
from __future__ import annotations

import json
import os
import pathlib
import select
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).parents[2]


@dataclass
class Result:
    job: dict
    outcome: str
    detail: str

    def replay(self) -> str:
        args = " ".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in self.job["args"].items())
        return f"python -m tests.fuzz.worker {self.job['kind']} {args}"


class Worker:
    def __init__(self, env: dict | None = None):
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self.proc = None
        self.log = None

    def start(self) -> None:
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.worker"], cwd=ROOT, env=self.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self.buf = b""

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def run(self, job: dict, timeout: float) -> Result:
        if self.proc is None:
            self.start()
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
        self.proc.stdin.flush()
        deadline, phase = time.monotonic() + timeout, "start"
        while True:
            line = self._readline(deadline)
            if line is None or line == b"":
                why = "hang" if line is None else "crash"
                detail = self._stderr_tail()
                self.stop()
                return Result(job, f"ort-{why}" if phase == "ort" else why, f"in phase {phase}: {detail}")
            msg = json.loads(line)
            if "phase" in msg:
                phase = msg["phase"]
                continue
            return Result(job, *msg["result"])

    def _readline(self, deadline: float):
        """A line from the worker, b'' when it died, None past the deadline."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return b""
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def _stderr_tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-3000:]


def run_jobs(jobs: list, timeout: float = 60.0, env: dict | None = None, first_timeout: float | None = None) -> list:
    """Each job within `timeout`; the first within `first_timeout` where given (it may build a cold cache's kernel
    library, minutes under ASan on a loaded machine, and is no hang)."""
    worker = Worker(env)
    try:
        return [worker.run(job, first_timeout if i == 0 and first_timeout else timeout) for i, job in enumerate(jobs)]
    finally:
        worker.stop()


def summary(title: str, seed: int, results: list, seconds: float) -> str:
    counts = Counter(r.outcome for r in results)
    parts = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{title}: seed {seed}, {len(results)} cases in {seconds:.0f} s: {parts}"
