"""The fuzz worker: a child process that reads jobs (JSON lines: {"kind": ..., "args": {...}}) on stdin and
answers on its original stdout with phase markers and one result per job; native output goes to stderr.

Replay one case in this process: `python -m tests.fuzz.worker mutant seed_model=cnn seed=0 index=17`
(or `graph seed=0 index=3 below=0 compiled=1`)."""
from __future__ import annotations

import json
import os
import sys
import traceback

from .jobs import JOBS


def serve() -> None:
    if os.environ.get("CUVIL_FUZZ_EXACT_ARENA") == "1":
        from . import exact_arena

        exact_arena.install()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # prints of the code under test must not corrupt the protocol
    sys.stdout = sys.stderr

    def send(msg: dict) -> None:
        out.write(json.dumps(msg) + "\n")
        out.flush()
    for line in sys.stdin:
        job = json.loads(line)
        try:
            result = JOBS[job["kind"]](**job["args"], phase=lambda p: send({"phase": p}))
        except Exception:  # noqa: BLE001 - a bug of the fuzzer itself, reported as a failure
            result = ("internal", "fuzzer: " + traceback.format_exc()[-1500:])
        send({"result": list(result)})


def replay(argv: list) -> None:
    args = {k: (int(v) if v.lstrip("-").isdigit() else v) for k, v in (a.split("=", 1) for a in argv[1:])}
    print(JOBS[argv[0]](**args))


if __name__ == "__main__":
    replay(sys.argv[1:]) if len(sys.argv) > 1 else serve()
