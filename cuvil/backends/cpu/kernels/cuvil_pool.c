/* Cuvil's thread pool: the threads of generated loop kernels and of the kernel library.
 *
 * cuvil_parallel_for(n, work, fn, ctx) runs fn(ctx, lo, hi) over chunks of [0, n) and returns the OR of what the calls
 * returned. The calling thread takes chunks itself from the start; workers take the rest as they arrive, so a kernel
 * never waits for a worker that has not started (one the scheduler left asleep), only for the chunks already taken. A
 * worker reads the job only while it holds one of its chunks, and the caller waits for the chunks, not for the
 * workers: one preempted before it took a chunk holds nothing up. The caller spins for a taken chunk about as long as
 * its own chunks took (twice their mean, plus 20 us; CUVIL_WAIT_SPIN_US fixes it), then sleeps until the last chunk
 * ends: a worker still not done by then is likely preempted (another process, or Ray's threads beside ours on the same
 * CPUs), and a sleeping caller frees its CPU for it. Workers spin for CUVIL_SPIN_US microseconds (default 200) after a
 * job, so the kernels of one call find them awake, yielding the CPU to any other runnable thread every few
 * microseconds, then sleep on a condition variable until the next job. A loop that runs on the calling thread alone
 * wakes sleeping workers without giving them work: a call that arrives after a gap (a server's request) usually starts
 * with such a loop, and its threaded kernels then find the workers spinning instead of waking them, a scheduler's
 * wake-up later, for the first of them. Such a wake-up is skipped where it cannot help: in a function that runs on one
 * thread (its kernels never publish a job), and after one that ended in the workers' sleep with no job published
 * (`futile`: a model whose loops are all small, called back to back, would keep a worker spinning on a CPU that other
 * work could use); the next published job clears it.
 *
 * The team of a call is its work over CUVIL_MIN_WORK (`work` is the cost of one of the n items, in elements), at most
 * cuvil_get_num_threads(): small loops run on the calling thread without touching the pool. The thread count is the
 * process's (cuvil_set_num_threads; by default CUVIL_NUM_THREADS, else the CPUs the process may run on) unless the
 * calling thread set its own for one compiled function (cuvil_swap_call_threads). One job runs at a time: a job
 * submitted while another runs (another Python thread, or a chunk that itself calls cuvil_parallel_for) runs on its
 * own thread, in order.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "cuvil_kernels.h"

#if defined(__wasi__) && !defined(_REENTRANT)
#define CUVIL_POOL_THREADS 0 /* wasm32 without threads: every loop runs on the calling thread */
#else
#define CUVIL_POOL_THREADS 1
#endif
#define CUVIL_POOL_MAX 256
#define CUVIL_CHUNKS_PER_THREAD 4 /* chunks a late worker leaves to the others */
#define GEN(t) ((t) >> 40)
#define CHUNKS(t) (((t) >> 20) & 0xfffffu)
#define NEXT(t) ((t) & 0xfffffu)

static int num_threads;                  /* the process's count; 0 until set or first read */
static _Thread_local int call_threads;   /* this thread's count for the compiled function it is running, or 0 */
static _Thread_local int last_team;      /* the team of this thread's last cuvil_parallel_team */

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t finished;      /* the last chunk of a job ended, for a caller that sleeps (caller_sleeps) */
    pthread_t threads[CUVIL_POOL_MAX];
    int started;                  /* workers running */
    atomic_int busy;              /* a job is being submitted or run */
    _Atomic uint64_t ticket;       /* job generation << 40 | chunks << 20 | next chunk: one atomic says what is left */
    _Atomic int64_t done;         /* chunks of the current job that ended */
    atomic_int caller_sleeps;     /* the caller sleeps on `finished` until `done` is the job's chunks */
    atomic_int sleepers;
    atomic_uint wakes;            /* wake-ups without a job (cuvil_parallel_team's small loops) */
    atomic_uint slept_at;         /* `wakes` when the last worker fell asleep: later ones are woken already */
    _Atomic uint64_t woken_gen;   /* the job generation at the last wake-up without a job */
    atomic_int futile;            /* that wake-up ended in sleep before any job: small loops wake no more */
    _Atomic int64_t woken;        /* times a worker left its sleep, for tests (cuvil_pool_state) */
    _Atomic int64_t regions, chunks, worker_chunks, waits, waited_ns, arrivals, arrival_ns; /* cuvil_pool_waits' */
    _Atomic int64_t caller_slept, spun_ns;                                                 /* cuvil_pool_idle's */
    int64_t published_ns;         /* when the current job was published, unchanged while one of its chunks runs */
    atomic_int result;
    int64_t n, chunk;             /* the current job, published before its ticket, fixed while one of its chunks runs */
    cuvil_range_fn fn;
    void *ctx;
    int64_t spin_ns;              /* a worker's spin after a job (CUVIL_SPIN_US) */
    int64_t wait_spin_ns;         /* the caller's spin for a taken chunk (CUVIL_WAIT_SPIN_US); -1: from its chunks */
} cuvil_pool_t;

static cuvil_pool_t pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

void cuvil_set_num_threads(int n) { num_threads = n > 0 ? n : 1; }

/* The CPUs this process may run on (its affinity mask: taskset, a container's cpuset), else those online. */
static int usable_cpus(void)
{
#if defined(__linux__) && defined(CPU_COUNT)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
#endif
    long procs = sysconf(_SC_NPROCESSORS_ONLN);
    return procs > 0 ? (int)procs : 1;
}

int cuvil_get_num_threads(void)
{
    if (call_threads > 0)
        return call_threads;
    if (num_threads <= 0) {
        const char *env = getenv("CUVIL_NUM_THREADS");
        int n = env ? atoi(env) : 0;
        num_threads = n > 0 ? n : usable_cpus();
    }
    return num_threads;
}

int cuvil_swap_call_threads(int n)
{
    int old = call_threads;
    call_threads = n > 0 ? n : 0;
    return old;
}

int cuvil_last_team(void) { return last_team; }

int cuvil_threads_for(int64_t work)
{
    int64_t n = work / CUVIL_MIN_WORK;
    int limit = cuvil_get_num_threads();
    return n < 1 ? 1 : (n < limit ? (int)n : limit);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void yield_cpu(void)
{
#if CUVIL_POOL_THREADS
    sched_yield();
#endif
}

/* Wakes the caller if it sleeps for the job's last chunk (`wait_for_chunks`). */
static void wake_caller(void)
{
    if (!atomic_load(&pool.caller_sleeps))
        return;
    pthread_mutex_lock(&pool.lock);
    pthread_cond_broadcast(&pool.finished);
    pthread_mutex_unlock(&pool.lock);
}

/* Takes and runs chunks of generation `gen` until none is left, and returns how many it ran. The job's fields stay as
 * published while one of its chunks runs (the caller waits for every chunk to end), so they are read only between
 * taking a chunk and counting it done. A worker passes when it saw the job (`arrived`), the caller 0. */
static int64_t run_chunks(uint64_t gen, int64_t arrived)
{
    int64_t ran = 0;
    uint64_t t = atomic_load(&pool.ticket);
    while (GEN(t) == gen && NEXT(t) < CHUNKS(t)) {
        if (!atomic_compare_exchange_weak(&pool.ticket, &t, t + 1))
            continue;
        if (ran++ == 0 && arrived) {
            atomic_fetch_add_explicit(&pool.arrivals, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&pool.arrival_ns, arrived - pool.published_ns, memory_order_relaxed);
        }
        int64_t lo = (int64_t)NEXT(t) * pool.chunk;
        int64_t hi = lo + pool.chunk < pool.n ? lo + pool.chunk : pool.n;
        int r = pool.fn(pool.ctx, lo, hi);
        if (r)
            atomic_fetch_or(&pool.result, r);
        if (atomic_fetch_add(&pool.done, 1) + 1 == (int64_t)CHUNKS(t) && arrived)
            wake_caller(); /* the job may be over and the next one published: only the lock is touched */
        t = atomic_load(&pool.ticket);
    }
    return ran;
}

/* The caller, its own chunks run, waits for the workers' `chunks` to end: spins `spin_ns`, then sleeps. */
static void wait_for_chunks(int64_t chunks, int64_t spin_ns)
{
    if (atomic_load(&pool.done) == chunks)
        return;
    int64_t t0 = now_ns();
    for (int i = 0; atomic_load(&pool.done) != chunks; i++) {
        cpu_relax();
        if ((i & 63) == 0 && now_ns() - t0 >= spin_ns) {
            pthread_mutex_lock(&pool.lock);
            atomic_store(&pool.caller_sleeps, 1);
            while (atomic_load(&pool.done) != chunks)
                pthread_cond_wait(&pool.finished, &pool.lock);
            atomic_store(&pool.caller_sleeps, 0);
            pthread_mutex_unlock(&pool.lock);
            atomic_fetch_add_explicit(&pool.caller_slept, 1, memory_order_relaxed);
            break;
        }
    }
    atomic_fetch_add_explicit(&pool.waits, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool.waited_ns, now_ns() - t0, memory_order_relaxed);
}

/* Sleeps until a job after generation `seen` is published or the sleepers are woken without one. */
static void sleep_until_job(uint64_t seen)
{
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add(&pool.sleepers, 1);
    unsigned wakes = atomic_load(&pool.wakes);
    atomic_store(&pool.slept_at, wakes);
    while (GEN(atomic_load(&pool.ticket)) == seen && atomic_load(&pool.wakes) == wakes)
        pthread_cond_wait(&pool.wake, &pool.lock);
    atomic_fetch_sub(&pool.sleepers, 1);
    atomic_fetch_add(&pool.woken, 1);
    pthread_mutex_unlock(&pool.lock);
}

/* Spins for CUVIL_SPIN_US, yielding to any other runnable thread every few microseconds (the caller's Python, Ray's
 * threads: on shared CPUs they run meanwhile), then sleeps, until a job after generation `seen` is published. */
static void wait_for_job(uint64_t seen)
{
    int64_t start = now_ns(), now = start;
    for (int i = 0; GEN(atomic_load_explicit(&pool.ticket, memory_order_acquire)) == seen; i++) {
        cpu_relax();
        if ((i & 255) != 255)
            continue;
        now = now_ns();
        if (now - start > pool.spin_ns) {
            atomic_fetch_add_explicit(&pool.spun_ns, now - start, memory_order_relaxed);
            if (atomic_load(&pool.woken_gen) == seen && GEN(atomic_load(&pool.ticket)) == seen)
                atomic_store(&pool.futile, 1); /* woken after job `seen` for one that never came */
            sleep_until_job(seen);
            return;
        }
        yield_cpu();
    }
    atomic_fetch_add_explicit(&pool.spun_ns, now_ns() - start, memory_order_relaxed);
}

static void *worker(void *arg)
{
    (void)arg;
#ifdef __linux__
    prctl(PR_SET_NAME, "cuvil-pool", 0, 0, 0); /* /proc/self/task/N/comm: bench.ray --trace tells them apart */
#endif
    uint64_t seen = GEN(atomic_load(&pool.ticket));
    for (;;) {
        wait_for_job(seen);
        seen = GEN(atomic_load(&pool.ticket));
        int64_t ran = run_chunks(seen, now_ns()); /* nothing when woken without a job, or its chunks all taken */
        if (ran)
            atomic_fetch_add_explicit(&pool.worker_chunks, ran, memory_order_relaxed);
    }
    return NULL;
}

/* Wakes the sleeping workers, with a job published (`job`) or without one; nothing when none sleeps, nor without a
 * job when every sleeper was woken already (it has not yet left its sleep): the loops of one call wake once. */
static void wake_sleepers(int job)
{
    if (atomic_load(&pool.sleepers) == 0 || (!job && atomic_load(&pool.slept_at) != atomic_load(&pool.wakes)))
        return;
    pthread_mutex_lock(&pool.lock);
    if (!job) {
        atomic_store(&pool.woken_gen, GEN(atomic_load(&pool.ticket)));
        atomic_fetch_add(&pool.wakes, 1);
    }
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
}

void cuvil_pool_state(int64_t *out)
{
    out[0] = pool.started;
    out[1] = atomic_load(&pool.sleepers);
    out[2] = atomic_load(&pool.woken);
    out[3] = atomic_load(&pool.wakes);
}

void cuvil_pool_waits(int64_t *out)
{
    out[0] = atomic_load(&pool.regions);
    out[1] = atomic_load(&pool.chunks);
    out[2] = atomic_load(&pool.worker_chunks);
    out[3] = atomic_load(&pool.waits);
    out[4] = atomic_load(&pool.waited_ns);
    out[5] = atomic_load(&pool.arrivals);
    out[6] = atomic_load(&pool.arrival_ns);
}

void cuvil_pool_idle(int64_t *out)
{
    out[0] = atomic_load(&pool.caller_slept);
    out[1] = atomic_load(&pool.spun_ns);
}

#if CUVIL_POOL_THREADS
static void after_fork_in_child(void)
{
    pool.started = 0; /* the workers did not survive the fork */
    atomic_store(&pool.busy, 0);
    atomic_store(&pool.caller_sleeps, 0);
    atomic_store(&pool.sleepers, 0);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.finished, NULL);
}

/* Starts workers up to `want` (the pool holds `busy`); fewer if the system refuses threads. */
static void grow(int want)
{
    if (pool.started == 0) {
        const char *env = getenv("CUVIL_SPIN_US");
        pool.spin_ns = (env && *env ? atoll(env) : 200) * 1000;
        const char *wait = getenv("CUVIL_WAIT_SPIN_US");
        pool.wait_spin_ns = wait && *wait ? atoll(wait) * 1000 : -1;
        static int registered;
        if (!registered && pthread_atfork(NULL, NULL, after_fork_in_child) == 0)
            registered = 1;
    }
    want = want < CUVIL_POOL_MAX ? want : CUVIL_POOL_MAX;
    while (pool.started < want) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&pool.threads[pool.started], &attr, worker, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
        pool.started++;
    }
}
#endif

int cuvil_parallel_for(int64_t n, int64_t work, cuvil_range_fn fn, void *ctx)
{
    return cuvil_parallel_team(n, cuvil_threads_for(n * (work > 0 ? work : 1)), fn, ctx);
}

int cuvil_parallel_team(int64_t n, int team, cuvil_range_fn fn, void *ctx)
{
    if (n <= 0)
        return 0;
    team = team < n ? team : (int)n;
    int expected = 0;
    if (!CUVIL_POOL_THREADS || team <= 1 || !atomic_compare_exchange_strong(&pool.busy, &expected, 1)) {
        if (CUVIL_POOL_THREADS && team <= 1 && cuvil_get_num_threads() > 1 && !atomic_load(&pool.futile))
            wake_sleepers(0); /* for the threaded kernels after this one */
        last_team = 1;
        return fn(ctx, 0, n);
    }
#if CUVIL_POOL_THREADS
    last_team = team;
    grow(team - 1);
    int64_t chunks = (int64_t)team * CUVIL_CHUNKS_PER_THREAD;
    chunks = chunks < n ? chunks : n;
    pool.n = n, pool.fn = fn, pool.ctx = ctx;
    pool.chunk = (n + chunks - 1) / chunks;
    chunks = (n + pool.chunk - 1) / pool.chunk;
    atomic_store(&pool.result, 0);
    atomic_store(&pool.done, 0);
    pool.published_ns = now_ns();
    uint64_t gen = (GEN(atomic_load(&pool.ticket)) + 1) & 0xffffffu;
    atomic_store(&pool.ticket, gen << 40 | (uint64_t)chunks << 20);
    atomic_fetch_add_explicit(&pool.regions, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool.chunks, chunks, memory_order_relaxed);
    if (atomic_load_explicit(&pool.futile, memory_order_relaxed))
        atomic_store(&pool.futile, 0);
    wake_sleepers(1);
    int64_t ran = run_chunks(gen, 0);
    int64_t spin = pool.wait_spin_ns; /* twice the mean of the caller's chunks: a running worker's ends by then */
    if (spin < 0)
        spin = 20000 + (ran ? 2 * (now_ns() - pool.published_ns) / ran : 0);
    wait_for_chunks(chunks, spin);
    int result = atomic_load(&pool.result);
    atomic_store(&pool.busy, 0);
    return result;
#endif
}
