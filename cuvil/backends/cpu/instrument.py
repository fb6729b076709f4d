"""Timers for instrumented builds (`cuvil.profile`): each op that emits code is wrapped in two clock reads.

The generated library then exports, beside its entry point,

    int64_t cuvil_prof_ns[n], cuvil_prof_calls[n];          per timed region: total nanoseconds, times run
    int64_t cuvil_prof_events[3 * CAP], cuvil_prof_nevents; (region, start ns, end ns) per run, the first CAP

with times from CLOCK_MONOTONIC (the clock of Python's `time.monotonic_ns`). `cond` and `while` are not timed
themselves: the ops of their bodies are, each time they run. The default build has none of this.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...ir.core import Op

EVENT_CAPACITY = 1 << 16
UNTIMED = frozenset({"cond", "while"})
_CALL = re.compile(r"^\s*([A-Za-z_]\w*)\(")


@dataclass
class TimedRegion:
    """One timer: the C function that does its work (a loop kernel or library routine; the last one called, after
    any set-up such as padding fills) and the IR op it computes."""

    kernel: str
    op: Op


def prelude(count: int) -> str:
    n = max(count, 1)
    return f"""#include <time.h>
#define CUVIL_PROF_CAP {EVENT_CAPACITY}
int64_t cuvil_prof_ns[{n}], cuvil_prof_calls[{n}], cuvil_prof_events[3 * CUVIL_PROF_CAP], cuvil_prof_nevents;
int64_t cuvil_prof_regions(void) {{ return {count}; }}
static inline int64_t cuvil_prof_now(void)
{{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}}
static inline void cuvil_prof_record(int64_t k, int64_t t0)
{{
    int64_t t1 = cuvil_prof_now();
    cuvil_prof_ns[k] += t1 - t0;
    cuvil_prof_calls[k] += 1;
    if (cuvil_prof_nevents < CUVIL_PROF_CAP) {{
        int64_t *e = cuvil_prof_events + 3 * cuvil_prof_nevents++;
        e[0] = k, e[1] = t0, e[2] = t1;
    }}
}}
"""


def emit_timed(gen, op: Op, depth: int) -> None:
    """Emit `op` between two clock reads; ops that emit no code (constants, views) get no timer."""
    if op.name in UNTIMED:
        gen.emit_op(op, depth)
        return
    k = len(gen.timed)
    gen.line(depth, f"const int64_t cuvil_t{k} = cuvil_prof_now();")
    start = len(gen.body)
    gen.emit_op(op, depth)
    emitted = gen.body[start:]
    if not emitted:
        gen.body.pop()
        return
    gen.line(depth, f"cuvil_prof_record({k}, cuvil_t{k});")
    calls = [m.group(1) for m in map(_CALL.match, emitted) if m and m.group(1) not in ("if", "for")]
    gen.timed.append(TimedRegion(calls[-1] if calls else op.name, op))  # the last: set-up calls come first
