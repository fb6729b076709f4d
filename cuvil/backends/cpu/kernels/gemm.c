/* Cuvil's fp32 GEMM, BLIS-style: B packed into NR-wide panels of KC rows, an MR x NR register block
 * (6 x 64 with AVX-512: 24 accumulators), A read in place, work items (rectangles of C) handed to threads.
 * The ABI and its semantics are in cuvil_kernels.h. What mattered for speed (shared/PEERS.md and measurements
 * here): a B block of KC x NC that stays in L2 (below), K split into near-equal blocks (1024 = 2 x 512, not
 * 768 + 256), row blocks that divide the rows (128 = 18 x 6 + 4 x 5), packing B while the first
 * row of micro-kernels runs, and, for M = 1, each thread streaming its own columns of B eight rows at a time.
 */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <pthread.h>

#include "cuvil_gemm.h"

/* ---- threads and buffers ---- */

/* Each thread's packing buffer (KC x NC floats), kept for the thread's life so that calls don't page-fault;
 * freed when the thread exits. */
static pthread_key_t buffer_key;
static pthread_once_t buffer_key_once = PTHREAD_ONCE_INIT;

static void make_buffer_key(void) { pthread_key_create(&buffer_key, free); }

static float *pack_buffer(void)
{
    pthread_once(&buffer_key_once, make_buffer_key);
    float *buf = pthread_getspecific(buffer_key);
    if (!buf) {
        buf = alloc_or_die(sizeof(float) * KC * NC_PANELS * NR);
        pthread_setspecific(buffer_key, buf);
    }
    return buf;
}

/* ---- packing: panel of B rows [k0, k0+kc), columns [j, j+nr) into kc x NR, zero-padded ---- */

static void pack_panel(const float *B, int64_t rsb, int64_t csb, int64_t k0, int64_t kc, int64_t j, int nr,
                       float *dst)
{
    const float *src = B + k0 * rsb + j * csb;
    if (nr < NR)
        for (int64_t k = 0; k < kc; k++) memset(dst + k * NR + nr, 0, sizeof(float) * (NR - nr));
    if (csb == 1) {
        for (int64_t k = 0; k < kc; k++) memcpy(dst + k * NR, src + k * rsb, sizeof(float) * nr);
    } else { /* transposed or strided B: walk down each column, the cheaper direction when rsb is small */
        for (int jj = 0; jj < nr; jj++)
            for (int64_t k = 0; k < kc; k++) dst[k * NR + jj] = src[k * rsb + jj * csb];
    }
}

static inline int64_t padded_n(int64_t N) { return ceil_div(N, NR) * NR; }

int64_t cuvil_sgemm_packed_size(int64_t K, int64_t N) { return K > 0 && N > 0 ? K * padded_n(N) : 0; }

/* Layout: K blocks (near-equal, <= KC rows) one after the other; within one, the NR-wide panels of
 * all N columns, each kc x NR row-major. Block kb starts at k0 * padded_n(N). */
typedef struct {
    int64_t K, N, rsb, csb, nk, panels;
    const float *B;
    float *packed;
} pack_job_t;

/* Panels [lo, hi) of all K blocks, numbered block-major. */
static int pack_panels(void *job, int64_t lo, int64_t hi)
{
    const pack_job_t *j = job;
    for (int64_t w = lo; w < hi; w++) {
        int64_t kb = w / j->panels, p = w % j->panels;
        int64_t k0 = split_at(j->K, j->nk, kb), kc = split_at(j->K, j->nk, kb + 1) - k0;
        pack_panel(j->B, j->rsb, j->csb, k0, kc, p * NR, (int)min64(NR, j->N - p * NR),
                   j->packed + k0 * padded_n(j->N) + p * kc * NR);
    }
    return 0;
}

void cuvil_sgemm_pack_b(int64_t K, int64_t N, const float *B, int64_t rsb, int64_t csb, float *packed)
{
    pack_job_t job = {K, N, rsb, csb, ceil_div(K, KC), ceil_div(N, NR), B, packed};
    cuvil_parallel_team(job.nk * job.panels, threads_for(K * N / 8), pack_panels, &job);
}

void cuvil_sgemm_pack_b_serial(int64_t K, int64_t N, const float *B, int64_t rsb, int64_t csb, float *packed)
{
    pack_job_t job = {K, N, rsb, csb, ceil_div(K, KC), ceil_div(N, NR), B, packed};
    if (K > 0 && N > 0) pack_panels(&job, 0, job.nk * job.panels);
}

/* ---- one thread's rectangle: rows [m0, m1) x panels [p0, p1) ---- */

typedef struct {
    int64_t m0, rows, nrb; /* the thread's rows, split into nrb near-equal row blocks of at most MR */
    int64_t k0, kc, q0;    /* the K block and the first panel of the current NC chunk */
    float *bp;             /* the chunk's packed panels */
    int first, last;       /* first and last K block: where the epilogue reads C and applies bias/act */
} block_t;

/* One micro-tile: row block rb x panel p. `packs`: the first visit of this panel in this block of B, which
 * packs it (while computing, when B's rows are contiguous and the panel is whole), or with B pre-packed, asks
 * the next panel of the chunk into L2 (`last`: p is the chunk's last panel). */
static void tile_at(const gemm_t *g, const block_t *b, int64_t rb, int64_t p, int packs, int last)
{
    int64_t i = b->m0 + split_at(b->rows, b->nrb, rb), j = p * NR;
    int mr = (int)(b->m0 + split_at(b->rows, b->nrb, rb + 1) - i), nr = (int)min64(NR, g->N - j);
    const float *a = g->A + i * g->rsa + b->k0, *bsrc = g->B + b->k0 * g->rsb + j;
    float *panel = b->bp + (p - b->q0) * b->kc * NR;
    vf acc[MR][NV];
    if (g->packed && packs && !last && CUVIL_PREFETCH_PANEL) {
        run_kernel(FROM_PACKED_FETCHING, mr, b->kc, a, g->rsa, panel, NR, panel + b->kc * NR, acc);
    } else if (g->packed || !packs) {
        run_kernel(FROM_PACKED, mr, b->kc, a, g->rsa, panel, NR, NULL, acc);
    } else if (g->csb == 1 && nr == NR) { /* a lone row block reads B in place and packs nothing */
        run_kernel(b->nrb == 1 ? FROM_B : FROM_B_PACKING, mr, b->kc, a, g->rsa, bsrc, g->rsb, panel, acc);
    } else {
        pack_panel(g->B, g->rsb, g->csb, b->k0, b->kc, j, nr, panel);
        run_kernel(FROM_PACKED, mr, b->kc, a, g->rsa, panel, NR, NULL, acc);
    }
    store_tile(g, acc, mr, nr, i, j, b->first, b->last);
}

/* Ask for the C tile of row block rb x panel p ahead of its epilogue (C makes a round trip per K block, and
 * from L3 when the thread's part of C outgrows L2). */
static void prefetch_c(const gemm_t *g, const block_t *b, int64_t rb, int64_t p)
{
    if (rb >= b->nrb || (b->first && g->beta == 0.0f)) return;
    int64_t i = b->m0 + split_at(b->rows, b->nrb, rb), mr = b->m0 + split_at(b->rows, b->nrb, rb + 1) - i;
    int64_t j = p * NR, nr = min64(NR, g->N - j);
    for (int64_t r = 0; r < mr; r++)
        for (int64_t jj = 0; jj < nr; jj += 16) __builtin_prefetch(g->C + (i + r) * g->ldc + j + jj, 1, 3);
}

/* The row block of A stays in L1 while the panels of B stream from L2 (panels outermost, with a smaller KC so
 * that a panel fits L1, ran 5-10% slower on Ice Lake). */
static void gemm_rect(const gemm_t *g, int64_t m0, int64_t m1, int64_t p0, int64_t p1)
{
    block_t b = {m0, m1 - m0, ceil_div(m1 - m0, MR), 0, 0, 0, NULL, 0, 0};
    int64_t nk = ceil_div(g->K, KC), nch = ceil_div(p1 - p0, NC_PANELS);
    float *buf = g->packed ? NULL : pack_buffer();
    for (int64_t ch = 0; ch < nch; ch++) {
        int64_t q1 = p0 + split_at(p1 - p0, nch, ch + 1);
        b.q0 = p0 + split_at(p1 - p0, nch, ch);
        for (int64_t kb = 0; kb < nk; kb++) {
            b.k0 = split_at(g->K, nk, kb), b.kc = split_at(g->K, nk, kb + 1) - b.k0;
            b.first = kb == 0, b.last = kb == nk - 1;
            b.bp = g->packed ? (float *)g->packed + b.k0 * padded_n(g->N) + b.q0 * b.kc * NR : buf;
            for (int64_t rb = 0; rb < b.nrb; rb++)
                for (int64_t p = b.q0; p < q1; p++) {
#if CUVIL_PREFETCH_C
                    if (p + 1 < q1) prefetch_c(g, &b, rb, p + 1);
                    else prefetch_c(g, &b, rb + 1, b.q0);
#endif
                    tile_at(g, &b, rb, p, rb == 0, p + 1 == q1);
                }
        }
    }
}

/* ---- M = 1: each thread owns columns [j0, j1) and streams B eight rows at a time ---- */

/* The epilogue for w outputs of row 0 accumulated in y (zero beyond w, up to a multiple of NR). */
static void store_row(const gemm_t *g, const float *y, int64_t c0, int64_t w)
{
    for (int64_t jj = 0; jj < w; jj += NR) {
        vf acc[MR][NV];
        for (int v = 0; v < NV; v++) acc[0][v] = cuvil_load(y + jj + v * VL);
        store_tile(g, acc, 1, (int)min64(NR, w - jj), 0, c0 + jj, 1, 1);
    }
}

static void gemv_cols(const gemm_t *g, int64_t j0, int64_t j1)
{
    float y[GEMV_COLS] __attribute__((aligned(64)));
    const float *a = g->A;
    for (int64_t c0 = j0; c0 < j1; c0 += GEMV_COLS) {
        int64_t w = min64(GEMV_COLS, j1 - c0), vw = w / VL * VL;
        memset(y, 0, sizeof y);
        for (int64_t k = 0; k < g->K; k += 8) {
            int64_t kk = min64(8, g->K - k);
            const float *b = g->B + k * g->rsb + c0;
            if (kk == 8) {
                int64_t s = g->rsb;
                for (int64_t jj = 0; jj < vw; jj += VL) {
                    const float *bj = b + jj;
                    vf t = cuvil_load(y + jj) + a[k] * cuvil_load(bj) + a[k + 1] * cuvil_load(bj + s)
                           + a[k + 2] * cuvil_load(bj + 2 * s) + a[k + 3] * cuvil_load(bj + 3 * s)
                           + a[k + 4] * cuvil_load(bj + 4 * s) + a[k + 5] * cuvil_load(bj + 5 * s)
                           + a[k + 6] * cuvil_load(bj + 6 * s) + a[k + 7] * cuvil_load(bj + 7 * s);
                    cuvil_store(y + jj, t);
                }
                for (int64_t jj = vw; jj < w; jj++)
                    for (int r = 0; r < 8; r++) y[jj] += a[k + r] * b[r * s + jj];
            } else {
                for (int r = 0; r < kk; r++)
                    for (int64_t jj = 0; jj < w; jj++) y[jj] += a[k + r] * b[r * g->rsb + jj];
            }
        }
        store_row(g, y, c0, w);
    }
}

/* M = 1 with B's columns contiguous (B = W^T, rsb == 1): each output is a dot product of A with a column of
 * B; four at a time so that the loads of A serve four columns. */
static void gemv_t_cols(const gemm_t *g, int64_t j0, int64_t j1)
{
    float y[GEMV_COLS] __attribute__((aligned(64)));
    const float *a = g->A;
    int64_t K = g->K, vk = K / VL * VL;
    for (int64_t c0 = j0; c0 < j1; c0 += GEMV_COLS) {
        int64_t w = min64(GEMV_COLS, j1 - c0);
        memset(y, 0, sizeof y);
        for (int64_t jj = 0; jj < w; jj += 4) {
            int q4 = (int)min64(4, w - jj);
            const float *col[4];
            for (int q = 0; q < 4; q++) col[q] = g->B + (c0 + jj + (q < q4 ? q : 0)) * g->csb;
            vf s[4] = {{0}, {0}, {0}, {0}};
            for (int64_t k = 0; k < vk; k += VL) {
                vf va = cuvil_load(a + k);
                for (int q = 0; q < 4; q++) s[q] += va * cuvil_load(col[q] + k);
            }
            for (int q = 0; q < q4; q++) {
                float t = 0;
                for (int l = 0; l < VL; l++) t += s[q][l];
                for (int64_t k = vk; k < K; k++) t += a[k] * col[q][k];
                y[jj + q] = t;
            }
        }
        store_row(g, y, c0, w);
    }
}

/* ---- the drivers ---- */

#if defined(__wasm_simd128__) && VL == 4
/* wasm32, one row of A (M = 1, W2's GEMV; packed_row_panels) against a packed panel: K in steps of four, one set
 * of NV accumulators per step, so that no chain of adds (of relaxed_madds at the relaxed level) paces the stream of
 * B: 4 x NV + NV + 1 v128 values, within the 15 xmm registers V8 allocates on x86-64. */
CUVIL_INLINE void row_kernel(int64_t kc, const float *restrict a, const float *restrict b, vf out[NV])
{
    vf c[4][NV];
    for (int u = 0; u < 4; u++)
        for (int v = 0; v < NV; v++) c[u][v] = (vf){0};
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) c[u][v] += a[k + u] * cuvil_load(b + (k + u) * NR + v * VL);
    for (; k < kc; k++)
        for (int v = 0; v < NV; v++) c[0][v] += a[k] * cuvil_load(b + k * NR + v * VL);
    for (int v = 0; v < NV; v++) out[v] = (c[0][v] + c[1][v]) + (c[2][v] + c[3][v]);
}

/* wasm32, M = 1 against packed B, panels [lo, hi): each panel's K blocks summed in registers by the row kernel and
 * stored once (the blocked driver makes C a round trip and runs the epilogue per K block). */
static int packed_row_panels(void *job, int64_t lo, int64_t hi)
{
    const gemm_t *g = job;
    int64_t nk = ceil_div(g->K, KC);
    for (int64_t p = lo; p < hi; p++) {
        vf acc[MR][NV], part[NV];
        for (int v = 0; v < NV; v++) acc[0][v] = (vf){0};
        for (int64_t kb = 0; kb < nk; kb++) {
            int64_t k0 = split_at(g->K, nk, kb), kc = split_at(g->K, nk, kb + 1) - k0;
            row_kernel(kc, g->A + k0, g->packed + k0 * padded_n(g->N) + p * kc * NR, part);
            for (int v = 0; v < NV; v++) acc[0][v] += part[v];
        }
        store_tile(g, acc, 1, (int)min64(NR, g->N - p * NR), 0, p * NR, 1, 1);
    }
    return 0;
}
#endif

/* Work items for nt threads: row groups x column chunks, handed out dynamically so that a thread the OS
 * preempts (shared machines) delays the call by one item, not by its whole share. About four items per thread;
 * a row group packs (or, pre-packed, streams from memory) its own copy of B, so groups stay above MIN_GROUP_ROWS
 * rows: packing costs about two rows of multiply-adds, and pre-packed B in 6-row groups ran 8-38% slower at
 * M = 64 and 128 (BERT's shapes). Every C element still sums its K blocks in the same order: results don't
 * depend on nt. */
#define ITEMS_PER_THREAD 4
#define MIN_GROUP_ROWS (16 * MR)

static void plan_items(const gemm_t *g, int nt, int64_t *row_groups, int64_t *col_chunks)
{
    int64_t panels = ceil_div(g->N, NR), want = nt > 1 ? ITEMS_PER_THREAD * nt : 1;
    int64_t chunks = ceil_div(panels, NC_PANELS), most_groups = g->M / MIN_GROUP_ROWS > 1 ? g->M / MIN_GROUP_ROWS : 1;
    int64_t groups = min64(most_groups, ceil_div(want, chunks));
    if (groups * chunks < want) chunks = min64(panels, ceil_div(want, groups));
    *row_groups = groups, *col_chunks = chunks;
}

typedef struct {
    const gemm_t *g;
    int64_t groups, chunks, panels;
} items_t;

/* Work items [lo, hi): row group w / chunks x column chunk w % chunks. */
static int gemm_items(void *job, int64_t lo, int64_t hi)
{
    const items_t *it = job;
    for (int64_t w = lo; w < hi; w++) {
        int64_t r = w / it->chunks, c = w % it->chunks, M = it->g->M;
        gemm_rect(it->g, split_at(M, it->groups, r), split_at(M, it->groups, r + 1),
                  split_at(it->panels, it->chunks, c), split_at(it->panels, it->chunks, c + 1));
    }
    return 0;
}

/* Whole cache lines [lo, hi) of C on the M = 1 path. */
static int gemv_lines(void *job, int64_t lo, int64_t hi)
{
    const gemm_t *g = job;
    int64_t j0 = min64(g->N, lo * 16), j1 = min64(g->N, hi * 16);
    if (g->csb == 1) gemv_cols(g, j0, j1);
    else gemv_t_cols(g, j0, j1);
    return 0;
}

static void gemm_run(const gemm_t *g, int max_threads)
{
    int64_t M = g->M, N = g->N;
    int nt = threads_for(M * N * g->K);
    nt = nt < max_threads ? nt : max_threads;
    if (M == 1 && !g->packed && (g->csb == 1 || g->rsb == 1)) {
        cuvil_parallel_team(ceil_div(N, 16), nt, gemv_lines, (void *)g);
        return;
    }
#if defined(__wasm_simd128__) && VL == 4
    if (M == 1 && g->packed) {
        cuvil_parallel_team(ceil_div(N, NR), nt, packed_row_panels, (void *)g);
        return;
    }
#endif
    items_t it = {g, 0, 0, ceil_div(N, NR)};
    plan_items(g, nt, &it.groups, &it.chunks);
    cuvil_parallel_team(it.groups * it.chunks, nt, gemm_items, &it);
}

/* K = 0: only the epilogue, C = act(bias + beta C). */
static void epilogue_only(const gemm_t *g)
{
    vf acc[MR][NV];
    memset(acc, 0, sizeof acc);
    for (int64_t i = 0; i < g->M; i++)
        for (int64_t j = 0; j < g->N; j += NR) store_tile(g, acc, 1, (int)min64(NR, g->N - j), i, j, 1, 1);
}

/* Run g, first copying A to a row-major buffer when its columns are not contiguous. */
static void gemm_dispatch(gemm_t g, int64_t csa, int max_threads)
{
    if (g.M <= 0 || g.N <= 0) return;
    if (g.K <= 0) {
        epilogue_only(&g);
        return;
    }
    float *copy = NULL;
    if (csa != 1 && !(g.M == 1 && g.K == 1)) {
        copy = alloc_or_die(sizeof(float) * g.M * g.K);
        for (int64_t i = 0; i < g.M; i++)
            for (int64_t k = 0; k < g.K; k++) copy[i * g.K + k] = g.A[i * g.rsa + k * csa];
        g.A = copy, g.rsa = g.K;
    }
    gemm_run(&g, max_threads);
    free(copy);
}

void cuvil_sgemm(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t rsa, int64_t csa,
                 const float *B, int64_t rsb, int64_t csb, float beta, float *C, int64_t ldc,
                 const float *bias, int act)
{
    gemm_t g = {M, N, K, alpha, beta, A, rsa, B, rsb, csb, NULL, C, ldc, bias, NULL, act};
    gemm_dispatch(g, csa, cuvil_get_num_threads());
}

void cuvil_sgemm_serial(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t rsa, int64_t csa,
                        const float *B, int64_t rsb, int64_t csb, float beta, float *C, int64_t ldc,
                        const float *bias, int act)
{
    gemm_t g = {M, N, K, alpha, beta, A, rsa, B, rsb, csb, NULL, C, ldc, bias, NULL, act};
    gemm_dispatch(g, csa, 1);
}

void cuvil_sgemm_row_bias(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t rsa, int64_t csa,
                          const float *B, int64_t rsb, int64_t csb, float beta, float *C, int64_t ldc,
                          const float *row_bias, int act)
{
    gemm_t g = {M, N, K, alpha, beta, A, rsa, B, rsb, csb, NULL, C, ldc, NULL, row_bias, act};
    gemm_dispatch(g, csa, cuvil_get_num_threads());
}

void cuvil_sgemm_packed(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t rsa, int64_t csa,
                        const float *packed_b, float beta, float *C, int64_t ldc, const float *bias, int act)
{
    gemm_t g = {M, N, K, alpha, beta, A, rsa, NULL, 0, 0, packed_b, C, ldc, bias, NULL, act};
    gemm_dispatch(g, csa, cuvil_get_num_threads());
}

void cuvil_sgemm_packed_serial(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t rsa,
                               int64_t csa, const float *packed_b, float beta, float *C, int64_t ldc,
                               const float *bias, int act)
{
    gemm_t g = {M, N, K, alpha, beta, A, rsa, NULL, 0, 0, packed_b, C, ldc, bias, NULL, act};
    gemm_dispatch(g, csa, 1);
}

typedef struct {
    gemm_t g; /* item 0 */
    int64_t csa, sa, sb, sc;
    int per_item;
} batched_t;

static int batched_items(void *job, int64_t lo, int64_t hi)
{
    const batched_t *b = job;
    for (int64_t t = lo; t < hi; t++) {
        gemm_t g = b->g;
        g.A += t * b->sa, g.B += t * b->sb, g.C += t * b->sc;
        gemm_dispatch(g, b->csa, b->per_item);
    }
    return 0;
}

void cuvil_sgemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t rsa, int64_t csa, int64_t sa,
                         const float *B, int64_t rsb, int64_t csb, int64_t sb,
                         float beta, float *C, int64_t ldc, int64_t sc, const float *bias, int act)
{
    batched_t job = {{M, N, K, alpha, beta, A, rsa, B, rsb, csb, NULL, C, ldc, bias, NULL, act}, csa, sa, sb, sc};
    int nt = cuvil_get_num_threads();
    job.per_item = batch >= nt ? 1 : nt; /* enough items: one thread each; else threads inside each */
    cuvil_parallel_team(batch, job.per_item == 1 ? threads_for(batch * M * N * K) : 1, batched_items, &job);
}

int cuvil_kernels_abi_version(void) { return CUVIL_KERNELS_ABI_VERSION; }

const char *cuvil_kernels_config(void)
{
    return "vl=" STR(VL) " mr=" STR(MR) " nr=" STR(NV) "x" STR(VL) " kc=" STR(KC) " nc=" STR(CUVIL_NC);
}
