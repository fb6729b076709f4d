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

#include "cuvil_internal.h"

/* Block sizes; -D overrides them for experiments (bench/gemm.py --variant).
 * AVX-512: 6 x 64 (24 accumulators; 4 loads of B and 6 broadcasts per 24 FMAs). On Ice Lake it ran 10-25%
 * faster than 8 x 32, whose 10 loads per 16 FMAs saturate the two load ports; shared/PEERS.md found 8 x 32 and
 * 4 x 64 equal on Zen 5. AVX2 (16 ymm registers): 6 x 16. NEON (32 registers): 8 x 8. */
#ifndef CUVIL_MR
#if VL == 16 || VL == 8
#define CUVIL_MR 6
#elif defined(__aarch64__)
#define CUVIL_MR 8
#else
#define CUVIL_MR 4
#endif
#endif
#ifndef CUVIL_NV /* vectors per row of the register block */
#if VL == 16
#define CUVIL_NV 4
#else
#define CUVIL_NV 2
#endif
#endif
/* KC x NC is the B block kept in L2 (576 KB with AVX-512, 512 KB otherwise). With AVX-512 (1 MB or more of L2
 * per core), 768 x 192 rather than 256 x 512: a third of the round trips of C through the K blocks and longer
 * runs of the micro-kernel. Interleaved on the 2-core Xeon (tools: bench/gemm.py --variant): 1-9% faster on
 * the shapes of W1, W2, BERT and ResNet's im2col convolutions, 13% at (49, 4608, 512), never slower. */
#ifndef CUVIL_KC
#if VL == 16
#define CUVIL_KC 768
#else
#define CUVIL_KC 256
#endif
#endif
#ifndef CUVIL_NC
#if VL == 16
#define CUVIL_NC 192
#else
#define CUVIL_NC 512
#endif
#endif
/* Rows of B to prefetch ahead when a micro-kernel reads B in place, packing it (16) or not (8). Measured on
 * Ice Lake at M = 64 and 128: +15-25% over none; longer distances hurt the unpacked case (M <= MR). */
#ifndef CUVIL_PREFETCH_PACKING
#define CUVIL_PREFETCH_PACKING 16
#endif
#ifndef CUVIL_PREFETCH_DIRECT
#define CUVIL_PREFETCH_DIRECT 8
#endif
#ifndef CUVIL_PREFETCH_C
#define CUVIL_PREFETCH_C 1
#endif
#if CUVIL_MR < 1 || CUVIL_MR > 12
#error "CUVIL_MR must be in 1..12"
#endif

#define MR CUVIL_MR
#define NV CUVIL_NV
#define NR (NV * VL)
#define KC CUVIL_KC
#define NC_PANELS ((CUVIL_NC + NR - 1) / NR)
#define GEMV_COLS 512                 /* columns a thread accumulates at once on the M = 1 path */

#define STR2(x) #x
#define STR(x) STR2(x)

typedef struct {
    int64_t M, N, K;
    float alpha, beta;
    const float *A;
    int64_t rsa; /* A's column stride is 1 here: the entry points copy other layouts */
    const float *B;
    int64_t rsb, csb;
    const float *packed; /* pre-packed B, or NULL */
    float *C;
    int64_t ldc;
    const float *bias;     /* per column of C, or NULL */
    const float *row_bias; /* per row of C (an NCHW convolution's output channels), or NULL */
    int act;
} gemm_t;

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

/* ---- the micro-kernel: acc = A[0:mr, 0:kc] @ Bpanel[0:kc, 0:NR] ----
 * B comes from a packed panel (ldb = NR) or straight from B's rows (ldb = rsb); `pack`, when not NULL,
 * receives the panel as it streams by (fused packing). mr is a constant in every instance. */
CUVIL_INLINE void micro_kernel(const int mr, int64_t kc, const float *restrict a, int64_t lda,
                               const float *restrict b, int64_t ldb, float *restrict pack, const int ahead,
                               vf acc[MR][NV])
{
    vf c[MR][NV];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) c[r][v] = (vf){0};
    for (int64_t k = 0; k < kc; k++) {
        vf bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = cuvil_load(b + k * ldb + v * VL);
        if (ahead) /* B's rows lie far apart: no hardware prefetcher follows them across pages */
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) __builtin_prefetch(b + (k + ahead) * ldb + v * VL, 0, 3);
        if (pack)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) cuvil_store(pack + k * NR + v * VL, bv[v]);
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++)
            if (r < mr)
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) c[r][v] += a[r * lda + k] * bv[v];
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = c[r][v];
}

enum { FROM_PACKED, FROM_B, FROM_B_PACKING };

#define KERNEL_CASE(m)                                                                                 \
    case m:                                                                                            \
        if (mode == FROM_PACKED) micro_kernel(m, kc, a, lda, b, NR, NULL, 0, acc);                    \
        else if (mode == FROM_B) micro_kernel(m, kc, a, lda, b, ldb, NULL, CUVIL_PREFETCH_DIRECT, acc); \
        else micro_kernel(m, kc, a, lda, b, ldb, pack, CUVIL_PREFETCH_PACKING, acc);                  \
        break;

static void run_kernel(int mode, int mr, int64_t kc, const float *a, int64_t lda, const float *b, int64_t ldb,
                       float *pack, vf acc[MR][NV])
{
    switch (mr) {
        KERNEL_CASE(1) KERNEL_CASE(2) KERNEL_CASE(3) KERNEL_CASE(4)
#if MR >= 5
        KERNEL_CASE(5)
#endif
#if MR >= 6
        KERNEL_CASE(6)
#endif
#if MR >= 7
        KERNEL_CASE(7)
#endif
#if MR >= 8
        KERNEL_CASE(8)
#endif
#if MR >= 9
        KERNEL_CASE(9)
#endif
#if MR >= 10
        KERNEL_CASE(10)
#endif
#if MR >= 11
        KERNEL_CASE(11)
#endif
#if MR >= 12
        KERNEL_CASE(12)
#endif
    default: break;
    }
}

/* ---- the epilogue: C = act(alpha acc + bias + beta C), applied per K block as the tile leaves registers ---- */

CUVIL_INLINE vf finish(const gemm_t *g, vf x, const float *c, vf bias, int first, int last)
{
    if (g->alpha != 1.0f) x *= g->alpha;
    if (!first) x += cuvil_load(c);
    else if (g->beta != 0.0f) x += g->beta * cuvil_load(c);
    if (last) x = cuvil_activate(x + bias, g->act);
    return x;
}

CUVIL_INLINE vf relu(vf x) { return cuvil_activate(x, CUVIL_ACT_RELU); }
CUVIL_INLINE vf relu6(vf x) { return cuvil_activate(x, CUVIL_ACT_RELU6); }

#define ACT_CASE(code, fn)                                                                         \
    case code:                                                                                     \
        for (int r = 0; r < mr; r++)                                                               \
            for (int v = 0; v < NV; v++) cuvil_store(c + r * ldc + v * VL, fn(cuvil_load(c + r * ldc + v * VL))); \
        break;

/* The activation as a second pass over a whole tile that is still in L1, one loop per activation. */
static void activate_tile(float *c, int64_t ldc, int mr, int act)
{
    switch (act) {
        ACT_CASE(CUVIL_ACT_RELU, relu)
        ACT_CASE(CUVIL_ACT_GELU_TANH, cuvil_v_gelu_tanh)
        ACT_CASE(CUVIL_ACT_GELU_ERF, cuvil_v_gelu_erf)
        ACT_CASE(CUVIL_ACT_SIGMOID, cuvil_v_sigmoid)
        ACT_CASE(CUVIL_ACT_TANH, cuvil_v_tanh)
        ACT_CASE(CUVIL_ACT_RELU6, relu6)
        ACT_CASE(CUVIL_ACT_SILU, cuvil_v_silu)
        ACT_CASE(CUVIL_ACT_HARDSWISH, cuvil_v_hardswish)
    default: break;
    }
}

/* Store rows [i, i+mr) x columns [j, j+nr) of C. Whole tiles take one or two FMAs per vector and no branches;
 * a partial tile goes through a padded copy. */
static void store_tile(const gemm_t *g, vf acc[MR][NV], int mr, int nr, int64_t i, int64_t j, int first, int last)
{
    const float *bias = g->bias && last ? g->bias + j : NULL;
    const float *row_bias = g->row_bias && last ? g->row_bias + i : NULL;
    float *c = g->C + i * g->ldc + j;
    if (nr == NR) {
        float alpha = g->alpha, cscale = first ? g->beta : 1.0f;
        int64_t ldc = g->ldc;
        vf add[NV];
        for (int v = 0; v < NV; v++) add[v] = bias ? cuvil_load(bias + v * VL) : (vf){0};
        if (cscale == 0.0f) {
            for (int r = 0; r < mr; r++) {
                vf row_add = row_bias ? cuvil_splat(row_bias[r]) : (vf){0};
                for (int v = 0; v < NV; v++) cuvil_store(c + r * ldc + v * VL, acc[r][v] * alpha + (add[v] + row_add));
            }
        } else {
            for (int r = 0; r < mr; r++) {
                vf row_add = row_bias ? cuvil_splat(row_bias[r]) : (vf){0};
                for (int v = 0; v < NV; v++) {
                    float *cv = c + r * ldc + v * VL;
                    cuvil_store(cv, acc[r][v] * alpha + (cuvil_load(cv) * cscale + (add[v] + row_add)));
                }
            }
        }
        if (last) activate_tile(c, ldc, mr, g->act);
        return;
    }
    float row[NR] __attribute__((aligned(64))), bias_pad[NR] __attribute__((aligned(64)));
    int reads_c = !first || g->beta != 0.0f;
    memset(bias_pad, 0, sizeof bias_pad);
    if (bias) memcpy(bias_pad, bias, sizeof(float) * nr);
    for (int r = 0; r < mr; r++) {
        float *crow = c + r * g->ldc;
        vf row_add = row_bias ? cuvil_splat(row_bias[r]) : (vf){0};
        memset(row, 0, sizeof row);
        if (reads_c) memcpy(row, crow, sizeof(float) * nr);
        for (int v = 0; v < NV; v++)
            cuvil_store(row + v * VL, finish(g, acc[r][v], row + v * VL, cuvil_load(bias_pad + v * VL) + row_add,
                                             first, last));
        memcpy(crow, row, sizeof(float) * nr);
    }
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
 * packs it (while computing, when B's rows are contiguous and the panel is whole). */
static void tile_at(const gemm_t *g, const block_t *b, int64_t rb, int64_t p, int packs)
{
    int64_t i = b->m0 + split_at(b->rows, b->nrb, rb), j = p * NR;
    int mr = (int)(b->m0 + split_at(b->rows, b->nrb, rb + 1) - i), nr = (int)min64(NR, g->N - j);
    const float *a = g->A + i * g->rsa + b->k0, *bsrc = g->B + b->k0 * g->rsb + j;
    float *panel = b->bp + (p - b->q0) * b->kc * NR;
    vf acc[MR][NV];
    if (g->packed || !packs) {
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
                    tile_at(g, &b, rb, p, rb == 0);
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

void cuvil_activation(int act, int64_t n, const float *x, float *y)
{
    int64_t i = 0;
    for (; i + VL <= n; i += VL) cuvil_store(y + i, cuvil_activate(cuvil_load(x + i), act));
    if (i < n) {
        float tmp[VL] = {0};
        memcpy(tmp, x + i, sizeof(float) * (n - i));
        cuvil_store(tmp, cuvil_activate(cuvil_load(tmp), act));
        memcpy(y + i, tmp, sizeof(float) * (n - i));
    }
}

int cuvil_kernels_abi_version(void) { return CUVIL_KERNELS_ABI_VERSION; }

const char *cuvil_kernels_config(void)
{
    return "vl=" STR(VL) " mr=" STR(MR) " nr=" STR(NV) "x" STR(VL) " kc=" STR(KC) " nc=" STR(CUVIL_NC);
}
