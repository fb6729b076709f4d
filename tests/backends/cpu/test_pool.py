"""Cuvil's thread pool (kernels/cuvil_pool.c): chunks cover each loop once whatever the team, a thread count per
compiled function, small loops on the calling thread (which wake sleeping workers), concurrent callers and fork."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import cuvil
from cuvil.backends.cpu import backend, kernels


def _lib():
    return kernels.load(backend.opt_level())


def add_one(x):
    return x * 2.0 + 1.0


def test_call_threads_are_this_threads_only():
    lib = _lib()
    process = lib.cuvil_get_num_threads()
    before = lib.cuvil_swap_call_threads(process + 3)
    try:
        assert lib.cuvil_get_num_threads() == process + 3
        seen = []
        t = threading.Thread(target=lambda: seen.append(lib.cuvil_get_num_threads()))
        t.start(), t.join()
        assert seen == [process]
    finally:
        lib.cuvil_swap_call_threads(before)
    assert lib.cuvil_get_num_threads() == process


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
def test_num_threads_per_function_sets_the_team(threads):
    x = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    f = cuvil.jit(add_one, num_threads=threads)
    np.testing.assert_array_equal(f(x), add_one(x))
    assert _lib().cuvil_last_team() == threads
    f._last.executable.set_num_threads(1)
    np.testing.assert_array_equal(f(x), add_one(x))
    assert _lib().cuvil_last_team() == 1


def test_small_loops_run_on_the_calling_thread():
    f = cuvil.jit(add_one, num_threads=4)
    x = np.ones(8192, np.float32)
    np.testing.assert_array_equal(f(x), add_one(x))
    assert _lib().cuvil_last_team() == 1


@pytest.mark.parametrize("n", [32768, 32769, 65535, 3 * 1024 * 17 + 5])
def test_chunks_cover_every_element_once(n):
    # more threads than cores: a worker the scheduler leaves waiting must not be waited for, nor skip a chunk
    x = np.arange(n, dtype=np.float32)
    f = cuvil.jit(add_one, num_threads=8)
    for _ in range(20):
        np.testing.assert_array_equal(f(x), add_one(x))


def test_threaded_nest_matches_numpy():
    def scale_rows(x, y):
        return x * y.reshape(1, 1, -1) + x.transpose(0, 2, 1).transpose(0, 2, 1)

    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((3, 177, 129)).astype(np.float32), rng.standard_normal(129).astype(np.float32)
    f = cuvil.jit(scale_rows, num_threads=3)
    np.testing.assert_allclose(f(x, y), scale_rows(x, y), rtol=1e-6)


def test_concurrent_callers_share_the_pool():
    fns = [cuvil.jit(add_one, num_threads=2), cuvil.jit(add_one, num_threads=3)]
    xs = [np.random.default_rng(i).standard_normal(1 << 16 + i).astype(np.float32) for i in range(2)]
    for f, x in zip(fns, xs):
        f(x)
    errors = []

    def run(k):
        f, x = fns[k % 2], xs[k % 2]
        for _ in range(100):
            if not np.array_equal(f(x), add_one(x)):
                errors.append(k)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_pool_works_after_fork():
    f = cuvil.jit(add_one, num_threads=2)
    x = np.ones(1 << 18, np.float32)
    f(x)  # the parent's workers exist now
    pid = os.fork()
    if pid == 0:  # the child: the workers did not survive; the pool must start new ones, not wait for the old
        signal.alarm(60)
        ok = np.array_equal(f(x), add_one(x)) and _lib().cuvil_last_team() == 2
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _pool_state(lib) -> tuple:
    """Workers started, asleep, times one left its sleep, wake-ups without a job."""
    out = np.zeros(4, np.int64)
    lib.cuvil_pool_state(out.ctypes.data)
    return tuple(int(v) for v in out)


def _until(test, seconds=5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not test():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_a_call_after_a_gap_wakes_the_sleeping_workers_at_its_first_loop():
    """A call whose first loop is small (on the calling thread) wakes the workers, so that its threaded kernels
    find them spinning rather than wait a scheduler's wake-up for them (bench/overhead.py's tails)."""
    lib = _lib()
    big, small = cuvil.jit(add_one, num_threads=2), cuvil.jit(add_one, num_threads=2)
    big(np.ones(1 << 20, np.float32))  # starts a worker
    started = _pool_state(lib)[0]
    assert started >= 1
    assert _until(lambda: _pool_state(lib)[1] == started)  # the spin (CUVIL_SPIN_US, 200 us) is over: all asleep
    woken = _pool_state(lib)[2]
    np.testing.assert_array_equal(small(np.ones(64, np.float32)), add_one(np.ones(64, np.float32)))
    assert lib.cuvil_last_team() == 1
    assert _until(lambda: _pool_state(lib)[2] > woken)


def _asleep_after_a_job(lib, big) -> None:
    """Runs a threaded call, then waits for its workers' spin to end: all asleep, the last wake-up one with a job."""
    big(np.ones(1 << 20, np.float32))
    assert _until(lambda: _pool_state(lib)[1] == _pool_state(lib)[0] >= 1)


def test_a_function_on_one_thread_leaves_the_workers_asleep():
    """A function set to one thread publishes no job: its small loops wake no worker (one would spin for nothing)."""
    lib = _lib()
    _asleep_after_a_job(lib, cuvil.jit(add_one, num_threads=2))
    x = np.ones(64, np.float32)
    wakes = _pool_state(lib)[3]
    np.testing.assert_array_equal(cuvil.jit(add_one, num_threads=1)(x), add_one(x))
    assert _pool_state(lib)[3] == wakes
    np.testing.assert_array_equal(cuvil.jit(add_one, num_threads=2)(x), add_one(x))  # two threads: it wakes them
    assert _pool_state(lib)[3] == wakes + 1


def test_small_loops_stop_waking_the_workers_when_no_job_followed():
    """A wake-up that ended in sleep with no job published makes the next small loops skip theirs, until a job."""
    lib = _lib()
    big, small, x = cuvil.jit(add_one, num_threads=2), cuvil.jit(add_one, num_threads=2), np.ones(64, np.float32)
    _asleep_after_a_job(lib, big)
    _, _, woken, wakes = _pool_state(lib)
    small(x)
    assert _pool_state(lib)[3] == wakes + 1
    assert _until(lambda: _pool_state(lib)[2] > woken and _pool_state(lib)[1] == _pool_state(lib)[0])  # for nothing
    for _ in range(3):
        np.testing.assert_array_equal(small(x), add_one(x))
    assert _pool_state(lib)[3] == wakes + 1
    _asleep_after_a_job(lib, big)
    small(x)
    assert _pool_state(lib)[3] == wakes + 2


def _pool_waits(lib) -> np.ndarray:
    out = np.zeros(7, np.int64)
    lib.cuvil_pool_waits(out.ctypes.data)
    return out


def test_pool_waits_counts_the_loops_and_chunks_of_a_threaded_call():
    """bench/overhead.py --trace reads these: loops, chunks (4 per thread of the team), the workers' share of them,
    and the caller's waits for a worker's chunk."""
    lib = _lib()
    f = cuvil.jit(add_one, num_threads=2)
    x = np.ones(1 << 20, np.float32)
    f(x)
    before = _pool_waits(lib)
    for _ in range(5):
        np.testing.assert_array_equal(f(x), add_one(x))
    regions, chunks, by_workers, waits, waited_ns, joins, join_ns = _pool_waits(lib) - before
    assert regions == 5 and chunks == 5 * 2 * 4
    assert 0 <= by_workers <= chunks and 0 <= waits <= regions and waited_ns >= 0
    assert (waits == 0) == (waited_ns == 0)
    # every started worker may join a loop (earlier tests' teams of 8 left 7 spinning), not only team - 1 of them
    assert 0 <= joins <= regions * _pool_state(lib)[0] and (joins == 0) == (by_workers == 0) and join_ns >= 0



def _pool_idle(lib) -> np.ndarray:
    out = np.zeros(2, np.int64)
    lib.cuvil_pool_idle(out.ctypes.data)
    return out


_SLEEPING_CALLER = """
import os, sys, numpy as np, cuvil
from cuvil.backends.cpu import backend, kernels
if sys.argv[1] == "one-cpu":
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
lib = kernels.load(backend.opt_level())


def add_one(x):
    return x * 2.0 + 1.0


f = cuvil.jit(add_one, num_threads=3)
for n in (1 << 16, (1 << 18) + 7, 3 * 1024 * 17 + 5, 1 << 22):
    x = np.arange(n, dtype=np.float32)
    for _ in range(60):
        assert np.array_equal(f(x), x * 2.0 + 1.0)
waits, idle = np.zeros(7, np.int64), np.zeros(2, np.int64)
lib.cuvil_pool_waits(waits.ctypes.data), lib.cuvil_pool_idle(idle.ctypes.data)
print(int(waits[3]), int(idle[0]))
"""


@pytest.mark.parametrize("cpus", ["one-cpu", "all"])
def test_a_caller_that_sleeps_for_a_workers_chunk_is_woken_when_it_ends(tmp_path, cpus):
    """CUVIL_WAIT_SPIN_US=0: the caller sleeps at once whenever a worker still holds a chunk (what it does after its
    spin when the worker was preempted), and the worker's last chunk wakes it, on one CPU (the worker preempted by
    the caller) and on all."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = {**os.environ, "CUVIL_WAIT_SPIN_US": "0", "CUVIL_NUM_THREADS": "3", "PYTHONPATH": root}
    script = tmp_path / "sleeping_caller.py"
    script.write_text(_SLEEPING_CALLER)
    out = subprocess.run([sys.executable, str(script), cpus], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    waits, slept = map(int, out.stdout.split())
    assert 0 <= slept <= waits  # each sleep ended (the worker's chunk woke it); a chunk ending at once is no sleep
    if cpus == "all" and len(os.sched_getaffinity(0)) > 1:
        assert slept > 0  # 16 MiB loops, 60 in a row: the workers join, and the caller sleeps for one now and then


def test_workers_count_the_time_they_spin_between_jobs():
    """cuvil_pool_idle's spin time (bench.overhead --trace's "workers spun"): a worker woken for a job spins for
    CUVIL_SPIN_US (200 us) after it before it sleeps again."""
    lib = _lib()
    f = cuvil.jit(add_one, num_threads=2)
    f(np.ones(1 << 20, np.float32))
    all_asleep = lambda: _pool_state(lib)[1] == _pool_state(lib)[0]  # noqa: E731
    assert _until(all_asleep)
    woken, spun = _pool_state(lib)[2], _pool_idle(lib)[1]
    f(np.ones(1 << 20, np.float32))
    assert _until(lambda: _pool_state(lib)[2] > woken and all_asleep())
    assert _pool_idle(lib)[1] - spun >= 200_000


@pytest.mark.parametrize("v2, v1, want", [("200000 100000\n", None, 2), ("150000 100000\n", None, 2),
                                          ("max 100000\n", None, None), (None, ("-1", "100000"), None),
                                          (None, ("300000", "100000"), 3), (None, None, None)])
def test_cgroup_cpu_quota_reads_v2_and_v1_files(tmp_path, v2, v1, want):
    files = ((str(tmp_path / "cpu.max"), None), (str(tmp_path / "quota"), str(tmp_path / "period")))
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2)
    if v1 is not None:
        (tmp_path / "quota").write_text(v1[0] + "\n"), (tmp_path / "period").write_text(v1[1] + "\n")
    assert kernels.cgroup_cpu_quota(files) == want


def test_default_threads_stay_under_the_cgroup_quota(tmp_path, monkeypatch):
    """A container's CPU quota bounds the default count (CUVIL_NUM_THREADS still wins)."""
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    monkeypatch.setattr(kernels, "CGROUP_QUOTAS", ((str(tmp_path / "cpu.max"), None),))
    monkeypatch.setattr(kernels.toolchain, "physical_cores", lambda: 8)
    monkeypatch.delenv("CUVIL_NUM_THREADS", raising=False)
    assert kernels.default_num_threads() == 1
    monkeypatch.setenv("CUVIL_NUM_THREADS", "3")
    assert kernels.default_num_threads() == 3
