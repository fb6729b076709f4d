"""How much to fuzz. CI's counts by default; for a longer local run set CUVIL_FUZZ_CASES (mutants per seed model,
300 in CI; the graph tests scale with it) and CUVIL_FUZZ_SEED (0 in CI) for other cases."""
from __future__ import annotations

import os
import time

from .cases import FAILURES
from .pool import run_jobs, summary

SEED = int(os.environ.get("CUVIL_FUZZ_SEED", "0"))
MUTANTS = int(os.environ.get("CUVIL_FUZZ_CASES", "300"))


def scaled(ci_count: int) -> int:
    """A test's case count: `ci_count` at CI's setting, in proportion to CUVIL_FUZZ_CASES otherwise."""
    return max(1, ci_count * MUTANTS // 300)


def fuzz(title: str, jobs: list, record_property, failures=FAILURES, timeout: float = 60.0, env=None,
         first_timeout: float | None = None) -> list:
    """Run the jobs in a worker process, record the summary line, fail on any result in `failures`."""
    start = time.monotonic()
    results = run_jobs(jobs, timeout, env, first_timeout)
    line = summary(title, SEED, results, time.monotonic() - start)
    print(line)
    record_property("fuzz", line)
    bad = [r for r in results if r.outcome in failures]
    assert not bad, line + "\n" + "\n".join(f"{r.outcome}: {r.detail}\n  replay: {r.replay()}" for r in bad[:10])
    return results
