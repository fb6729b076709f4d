/* Cuvil's thread pool: the threads of generated loop kernels and of the kernel library.
 *
 * cuvil_parallel_for(n, work, fn, ctx) runs fn(ctx, lo, hi) over chunks of [0, n) and returns the OR of what the
 * calls returned. The calling thread takes chunks itself from the start; workers take the rest as they arrive, so a
 * kernel never waits for a worker that has not started (one the scheduler left asleep), only for the chunks already
 * taken. Workers spin for CUVIL_SPIN_US microseconds (default 200) after a job, so the kernels of one call find them
 * awake, then sleep on a condition variable until the next job. A loop that runs on the calling thread alone wakes
 * sleeping workers without giving them work: a call that arrives after a gap (a server's request) usually starts
 * with such a loop, and its threaded kernels then find the workers spinning instead of waking them, a scheduler's
 * wake-up later, for the first of them.
 *
 * The team of a call is its work over CUVIL_MIN_WORK (`work` is the cost of one of the n items, in elements), at
 * most cuvil_get_num_threads(): small loops run on the calling thread without touching the pool. The thread count
 * is the process's (cuvil_set_num_threads) unless the calling thread set its own for one compiled function
 * (cuvil_swap_call_threads). One job runs at a time: a job submitted while another runs (another Python thread, or
 * a chunk that itself calls cuvil_parallel_for) runs on its own thread, in order.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

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
    pthread_t threads[CUVIL_POOL_MAX];
    int started;                  /* workers running */
    atomic_int busy;              /* a job is being submitted or run */
    _Atomic uint64_t ticket;       /* job generation << 40 | chunks << 20 | next chunk: one atomic says what is left */
    atomic_int active;            /* workers that took a chunk of the current job and have not finished it */
    atomic_int sleepers;
    atomic_uint wakes;            /* wake-ups without a job (cuvil_parallel_team's small loops) */
    atomic_uint slept_at;         /* `wakes` when the last worker fell asleep: later ones are woken already */
    _Atomic int64_t woken;        /* times a worker left its sleep, for tests (cuvil_pool_state) */
    _Atomic int64_t regions, chunks, worker_chunks, waits, waited_ns, arrivals, arrival_ns; /* cuvil_pool_waits' */
    int64_t published_ns;         /* when the current job was published, unchanged while a worker is active */
    atomic_int result;
    int64_t n, chunk;             /* the current job, published before its ticket, unchanged while a worker is active */
    cuvil_range_fn fn;
    void *ctx;
    int64_t spin_ns;
} cuvil_pool_t;

static cuvil_pool_t pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

void cuvil_set_num_threads(int n) { num_threads = n > 0 ? n : 1; }

int cuvil_get_num_threads(void)
{
    if (call_threads > 0)
        return call_threads;
    if (num_threads <= 0) {
        const char *env = getenv("CUVIL_NUM_THREADS");
        int n = env ? atoi(env) : 0;
        long procs = sysconf(_SC_NPROCESSORS_ONLN);
        num_threads = n > 0 ? n : (procs > 0 ? (int)procs : 1);
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

/* Takes and runs chunks of generation `gen` until none is left, and returns how many it ran; the caller counted itself
 * in `active`, so the job's fields stay as published while it runs one. */
static int64_t run_chunks(uint64_t gen)
{
    int64_t ran = 0;
    uint64_t t = atomic_load(&pool.ticket);
    while (GEN(t) == gen && NEXT(t) < CHUNKS(t)) {
        if (!atomic_compare_exchange_weak(&pool.ticket, &t, t + 1))
            continue;
        ran++;
        int64_t lo = (int64_t)NEXT(t) * pool.chunk;
        int64_t hi = lo + pool.chunk < pool.n ? lo + pool.chunk : pool.n;
        int r = pool.fn(pool.ctx, lo, hi);
        if (r)
            atomic_fetch_or(&pool.result, r);
        t = atomic_load(&pool.ticket);
    }
    return ran;
}

/* Spins, then sleeps, until a job after generation `seen` is published or the sleepers are woken without one. */
static void wait_for_job(uint64_t seen)
{
    int64_t deadline = now_ns() + pool.spin_ns;
    for (int i = 0; GEN(atomic_load_explicit(&pool.ticket, memory_order_acquire)) == seen; i++) {
        cpu_relax();
        if ((i & 255) == 255 && now_ns() > deadline) {
            pthread_mutex_lock(&pool.lock);
            atomic_fetch_add(&pool.sleepers, 1);
            unsigned wakes = atomic_load(&pool.wakes);
            atomic_store(&pool.slept_at, wakes);
            while (GEN(atomic_load(&pool.ticket)) == seen && atomic_load(&pool.wakes) == wakes)
                pthread_cond_wait(&pool.wake, &pool.lock);
            atomic_fetch_sub(&pool.sleepers, 1);
            atomic_fetch_add(&pool.woken, 1);
            pthread_mutex_unlock(&pool.lock);
            return;
        }
    }
}

static void *worker(void *arg)
{
    (void)arg;
    uint64_t seen = GEN(atomic_load(&pool.ticket));
    for (;;) {
        wait_for_job(seen);
        atomic_fetch_add(&pool.active, 1);
        seen = GEN(atomic_load(&pool.ticket));
        int64_t arrived = now_ns();
        int64_t ran = run_chunks(seen); /* nothing when woken without a job: its chunks are all taken */
        if (ran) {
            atomic_fetch_add_explicit(&pool.worker_chunks, ran, memory_order_relaxed);
            atomic_fetch_add_explicit(&pool.arrivals, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&pool.arrival_ns, arrived - pool.published_ns, memory_order_relaxed);
        }
        atomic_fetch_sub(&pool.active, 1);
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
    if (!job)
        atomic_fetch_add(&pool.wakes, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
}

void cuvil_pool_state(int64_t *out)
{
    out[0] = pool.started;
    out[1] = atomic_load(&pool.sleepers);
    out[2] = atomic_load(&pool.woken);
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

#if CUVIL_POOL_THREADS
static void after_fork_in_child(void)
{
    pool.started = 0; /* the workers did not survive the fork */
    atomic_store(&pool.busy, 0);
    atomic_store(&pool.active, 0);
    atomic_store(&pool.sleepers, 0);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
}

/* Starts workers up to `want` (the pool holds `busy`); fewer if the system refuses threads. */
static void grow(int want)
{
    if (pool.started == 0) {
        const char *env = getenv("CUVIL_SPIN_US");
        pool.spin_ns = (env && *env ? atoll(env) : 200) * 1000;
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
        if (CUVIL_POOL_THREADS && team <= 1)
            wake_sleepers(0); /* for the threaded kernels after this one */
        last_team = 1;
        return fn(ctx, 0, n);
    }
#if CUVIL_POOL_THREADS
    last_team = team;
    grow(team - 1);
    while (atomic_load(&pool.active) != 0) /* a late worker of the last job is leaving */
        cpu_relax();
    int64_t chunks = (int64_t)team * CUVIL_CHUNKS_PER_THREAD;
    chunks = chunks < n ? chunks : n;
    pool.n = n, pool.fn = fn, pool.ctx = ctx;
    pool.chunk = (n + chunks - 1) / chunks;
    chunks = (n + pool.chunk - 1) / pool.chunk;
    atomic_store(&pool.result, 0);
    pool.published_ns = now_ns();
    uint64_t gen = (GEN(atomic_load(&pool.ticket)) + 1) & 0xffffffu;
    atomic_store(&pool.ticket, gen << 40 | (uint64_t)chunks << 20);
    atomic_fetch_add_explicit(&pool.regions, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool.chunks, chunks, memory_order_relaxed);
    wake_sleepers(1);
    run_chunks(gen);
    if (atomic_load(&pool.active) != 0) { /* only workers that took a chunk: they are running (or preempted) */
        int64_t t0 = now_ns();
        while (atomic_load(&pool.active) != 0)
            cpu_relax();
        atomic_fetch_add_explicit(&pool.waits, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool.waited_ns, now_ns() - t0, memory_order_relaxed);
    }
    int result = atomic_load(&pool.result);
    atomic_store(&pool.busy, 0);
    return result;
#endif
}
