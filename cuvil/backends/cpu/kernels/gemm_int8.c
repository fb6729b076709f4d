/* Cuvil's int8 GEMM (the convolution is conv_int8.c): uint8 activations x int8 weights with int32 accumulation,
 * and an epilogue that dequantises (or requantises to uint8), adds the bias and applies the activation in one pass
 * over C.
 *
 * The paths, chosen when called by the CPU's features (cuvil_int8_isa), all exact, so they agree bit for bit:
 *   4  AMX-INT8: tdpbusd, 32 rows x 32 columns per block (gemm_int8_amx.c), from 16 rows of A in cuvil_qlinear;
 *   3  AVX-512 VNNI: vpdpbusd, 8 rows x 32 columns per register block;
 *   2  AVX-512BW: bytes widened to 16 bits, vpmaddwd, 4 rows x 32 columns;
 *   1  AVX2: the same with 256-bit vectors, 2 rows x 16 columns;
 *   0  portable C.
 * CUVIL_INT8_ISA=N (or cuvil_int8_set_isa) caps the path, so the tests run every fallback on a VNNI machine.
 *
 * The packed weight (cuvil_qgemm_pack) is W[N, K] int8 in panels of 16 columns by KP groups of 4 along K (KP: the
 * groups rounded up to 16, so that a panel is whole AMX tiles of 16 groups x 64 bytes),
 * packed[(panel * KP + g) * 64 + col * 4 + t] = W[panel * 16 + col, g * 4 + t] (zero past N and K), followed by
 * the int32 column sums that subtract the activations' zero points: sum_k (a - za) w = sum_k a w - za sum_k w.
 * The layout belongs to this build; it is made at load time from the IR's plain [N, K] weight.
 */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "cuvil_omp.h"

#include "cuvil_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CUVIL_X86 1
#endif

#define QP 16 /* columns per packed panel */
#define QT 32 /* columns per register block (two panels) */
#define QMR_MAX 32 /* rows of the tallest register block (AMX's) */
/* AMX-INT8 (gemm_int8_amx.c, later in this unit): x86-64 and a compiler with its intrinsics */
#if defined(CUVIL_X86) && defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
#define QGEMM_AMX 1
#else
#define QGEMM_AMX 0
#endif

static int64_t k4_of(int64_t K) { return (K + 3) / 4; }
static int64_t kp_of(int64_t K) { return (k4_of(K) + 15) / 16 * 16; } /* groups per packed panel */
static int64_t panels_of(int64_t N) { return (N + QP - 1) / QP; }

/* -- which path ------------------------------------------------------------------------------------------ */
static int isa_cap = -1; /* -1: CUVIL_INT8_ISA, else the cap set by cuvil_int8_set_isa */
#if QGEMM_AMX
static int amx_int8_usable(void); /* gemm_int8_amx.c */
#else
static int amx_int8_usable(void) { return 0; }
#endif

static int isa_supported(void)
{
#ifdef CUVIL_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw")) return amx_int8_usable() ? 4 : 3;
    if (__builtin_cpu_supports("avx512bw")) return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1; /* the int4 path uses FMA */
#endif
    return 0;
}

void cuvil_int8_set_isa(int cap) { isa_cap = cap; }

int cuvil_int8_isa(void)
{
    int have = isa_supported(), cap = isa_cap;
    if (cap < 0) {
        const char *env = getenv("CUVIL_INT8_ISA");
        cap = env && *env ? atoi(env) : 4;
    }
    return cap < have ? (cap < 0 ? 0 : cap) : have;
}

/* -- packing --------------------------------------------------------------------------------------------- */
int64_t cuvil_qgemm_packed_bytes(int64_t N, int64_t K)
{
    return panels_of(N) * kp_of(K) * 64 + panels_of(N) * QP * 4;
}

void cuvil_qgemm_pack(int64_t N, int64_t K, const int8_t *W, void *packed)
{
    int64_t KP = kp_of(K), np = panels_of(N);
    int8_t *p = (int8_t *)packed;
    int32_t *sums = (int32_t *)(p + np * KP * 64);
    memset(p, 0, (size_t)(np * KP * 64));
    for (int64_t n = 0; n < np * QP; n++) {
        int32_t s = 0;
        for (int64_t k = 0; n < N && k < K; k++) {
            int8_t w = W[n * K + k];
            p[((n / QP) * KP + k / 4) * 64 + (n % QP) * 4 + k % 4] = w;
            s += w;
        }
        sums[n] = s;
    }
}

/* -- register blocks: acc[r][c] = sum over K4 groups of A[r, 4g..4g+3] . W[4g..4g+3, c], c < 32 ------------ */
typedef void (*tile_fn)(int64_t mr, int64_t K4, const uint8_t *A, int64_t lda, const int8_t *w0,
                        const int8_t *w1, int32_t acc[][QT]);

static void tile_scalar(int64_t mr, int64_t K4, const uint8_t *A, int64_t lda, const int8_t *w0, const int8_t *w1,
                        int32_t acc[][QT])
{
    for (int64_t r = 0; r < mr; r++)
        for (int c = 0; c < QT; c++) {
            const int8_t *w = c < QP ? w0 : w1;
            int32_t s = 0;
            for (int64_t g = 0; w && g < K4; g++)
                for (int t = 0; t < 4; t++) s += (int32_t)A[r * lda + g * 4 + t] * w[g * 64 + (c % QP) * 4 + t];
            acc[r][c] = s;
        }
}

#ifdef CUVIL_X86
static inline int32_t load4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The rows of a register block; past the last row (mr < MR) the first is read again, its sums dropped: the loops
 * over rows keep a constant trip count, so the accumulators stay in registers. */
static inline void block_rows(int64_t mr, int height, const uint8_t *A, int64_t lda, const uint8_t **rows)
{
    for (int r = 0; r < height; r++) rows[r] = A + (r < mr ? r : 0) * lda;
}

#define VNNI_MR 8
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void tile_vnni(int64_t mr, int64_t K4, const uint8_t *A, int64_t lda, const int8_t *w0, const int8_t *w1,
                      int32_t acc[][QT])
{
    __m512i c0[VNNI_MR], c1[VNNI_MR];
    const uint8_t *rows[VNNI_MR];
    block_rows(mr, VNNI_MR, A, lda, rows);
    for (int r = 0; r < VNNI_MR; r++) c0[r] = c1[r] = _mm512_setzero_si512();
    const int8_t *w1p = w1 ? w1 : w0;
    for (int64_t g = 0; g < K4; g++) {
        __m512i b0 = _mm512_loadu_si512(w0 + g * 64), b1 = _mm512_loadu_si512(w1p + g * 64);
        for (int r = 0; r < VNNI_MR; r++) {
            __m512i a = _mm512_set1_epi32(load4(rows[r] + g * 4));
            c0[r] = _mm512_dpbusd_epi32(c0[r], a, b0);
            c1[r] = _mm512_dpbusd_epi32(c1[r], a, b1);
        }
    }
    for (int r = 0; r < mr; r++) {
        _mm512_storeu_si512(acc[r], c0[r]);
        _mm512_storeu_si512(acc[r] + QP, c1[r]);
    }
}

/* VNNI below 5 rows (batch-1 linear layers): R rows exactly (no padding rows computed), and even and odd groups of
 * K on their own accumulators, so that one row keeps four vpdpbusd chains in flight. */
#define VNNI_SMALL 4
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static inline __attribute__((always_inline))
void tile_vnni_rows(const int R, int64_t K4, const uint8_t *A, int64_t lda, const int8_t *w0, const int8_t *w1,
                    int32_t acc[][QT])
{
    __m512i c[VNNI_SMALL][2][2];
    for (int r = 0; r < R; r++)
        for (int e = 0; e < 2; e++) c[r][e][0] = c[r][e][1] = _mm512_setzero_si512();
    const int8_t *w1p = w1 ? w1 : w0;
    int64_t g = 0;
    for (; g + 2 <= K4; g += 2)
        for (int e = 0; e < 2; e++) {
            __m512i b0 = _mm512_loadu_si512(w0 + (g + e) * 64), b1 = _mm512_loadu_si512(w1p + (g + e) * 64);
            for (int r = 0; r < R; r++) {
                __m512i a = _mm512_set1_epi32(load4(A + r * lda + (g + e) * 4));
                c[r][e][0] = _mm512_dpbusd_epi32(c[r][e][0], a, b0);
                c[r][e][1] = _mm512_dpbusd_epi32(c[r][e][1], a, b1);
            }
        }
    if (g < K4) {
        __m512i b0 = _mm512_loadu_si512(w0 + g * 64), b1 = _mm512_loadu_si512(w1p + g * 64);
        for (int r = 0; r < R; r++) {
            __m512i a = _mm512_set1_epi32(load4(A + r * lda + g * 4));
            c[r][0][0] = _mm512_dpbusd_epi32(c[r][0][0], a, b0);
            c[r][0][1] = _mm512_dpbusd_epi32(c[r][0][1], a, b1);
        }
    }
    for (int r = 0; r < R; r++) {
        _mm512_storeu_si512(acc[r], _mm512_add_epi32(c[r][0][0], c[r][1][0]));
        _mm512_storeu_si512(acc[r] + QP, _mm512_add_epi32(c[r][0][1], c[r][1][1]));
    }
}

__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void tile_vnni_small(int64_t mr, int64_t K4, const uint8_t *A, int64_t lda, const int8_t *w0, const int8_t *w1,
                            int32_t acc[][QT])
{
    switch (mr) {
    case 1: tile_vnni_rows(1, K4, A, lda, w0, w1, acc); break;
    case 2: tile_vnni_rows(2, K4, A, lda, w0, w1, acc); break;
    case 3: tile_vnni_rows(3, K4, A, lda, w0, w1, acc); break;
    default: tile_vnni_rows(4, K4, A, lda, w0, w1, acc); break;
    }
}

/* 16-bit paths: 64 weight bytes (16 columns x 4) widen to two vectors of 8 columns x 4; one vpmaddwd with the
 * row's 4 bytes (widened, repeated) gives two partial sums per column, added pairwise at the end. */
static void pairs_to_columns(int64_t mr, int32_t pairs[][2 * QT], int32_t acc[][QT])
{
    for (int64_t r = 0; r < mr; r++)
        for (int c = 0; c < QT; c++) acc[r][c] = pairs[r][2 * c] + pairs[r][2 * c + 1];
}

#define BW_MR 4
__attribute__((target("avx512f,avx512bw")))
static void tile_avx512bw(int64_t mr, int64_t K4, const uint8_t *A, int64_t lda, const int8_t *w0, const int8_t *w1,
                          int32_t acc[][QT])
{
    __m512i c[BW_MR][4];
    const uint8_t *rows[BW_MR];
    block_rows(mr, BW_MR, A, lda, rows);
    for (int r = 0; r < BW_MR; r++)
        for (int j = 0; j < 4; j++) c[r][j] = _mm512_setzero_si512();
    const int8_t *w1p = w1 ? w1 : w0;
    for (int64_t g = 0; g < K4; g++) {
        __m512i b[4];
        for (int j = 0; j < 4; j++)
            b[j] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)((j < 2 ? w0 : w1p) + g * 64 +
                                                                             (j % 2) * 32)));
        for (int r = 0; r < BW_MR; r++) {
            __m128i a8 = _mm_cvtsi32_si128(load4(rows[r] + g * 4));
            __m512i a = _mm512_broadcastq_epi64(_mm_cvtepu8_epi16(a8));
            for (int j = 0; j < 4; j++) c[r][j] = _mm512_add_epi32(c[r][j], _mm512_madd_epi16(a, b[j]));
        }
    }
    int32_t pairs[BW_MR][2 * QT];
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < 4; j++) _mm512_storeu_si512(pairs[r] + j * 16, c[r][j]);
    pairs_to_columns(mr, pairs, acc);
}

#define AVX2_MR 2
__attribute__((target("avx2")))
static void tile_avx2(int64_t mr, int64_t K4, const uint8_t *A, int64_t lda, const int8_t *w0, const int8_t *w1,
                      int32_t acc[][QT])
{
    int32_t pairs[AVX2_MR][2 * QT];
    const uint8_t *rows[AVX2_MR];
    block_rows(mr, AVX2_MR, A, lda, rows);
    for (int half = 0; half < 2; half++) {
        const int8_t *w = half ? w1 : w0;
        __m256i c[AVX2_MR][4];
        for (int r = 0; r < AVX2_MR; r++)
            for (int j = 0; j < 4; j++) c[r][j] = _mm256_setzero_si256();
        for (int64_t g = 0; w && g < K4; g++) {
            __m256i b[4];
            for (int j = 0; j < 4; j++) b[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + g * 64 +
                                                                                                    j * 16)));
            for (int r = 0; r < AVX2_MR; r++) {
                __m128i a8 = _mm_cvtsi32_si128(load4(rows[r] + g * 4));
                __m256i a = _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(a8));
                for (int j = 0; j < 4; j++) c[r][j] = _mm256_add_epi32(c[r][j], _mm256_madd_epi16(a, b[j]));
            }
        }
        for (int r = 0; r < mr; r++)
            for (int j = 0; j < 4; j++) _mm256_storeu_si256((__m256i *)(pairs[r] + half * QT + j * 8), c[r][j]);
    }
    pairs_to_columns(mr, pairs, acc);
}
#endif

#if QGEMM_AMX
#define AMX_MR 32
static void tile_amx(int64_t mr, int64_t K4, const uint8_t *A, int64_t lda, const int8_t *w0, const int8_t *w1,
                     int32_t acc[][QT]);
static int qgemm_blocks_amx(void *ctx, int64_t lo, int64_t hi);
#endif

/* The register block for this path and M rows (mr: its height). */
static tile_fn tile_for(int isa, int64_t M, int64_t *mr)
{
#if QGEMM_AMX
    if (isa >= 4 && M >= 16) return *mr = AMX_MR, tile_amx;
#endif
#ifdef CUVIL_X86
    if (isa >= 3 && M <= VNNI_SMALL) return *mr = M, tile_vnni_small;
    if (isa >= 3) return *mr = VNNI_MR, tile_vnni;
    if (isa == 2) return *mr = BW_MR, tile_avx512bw;
    if (isa == 1) return *mr = AVX2_MR, tile_avx2;
#endif
    (void)isa, (void)M;
    return *mr = 4, tile_scalar;
}

/* -- epilogue: one row's columns at a time, vectorised ------------------------------------------------------- */
static inline float relu_act(int act, float v) /* relu or relu6; NaN passes */
{
    float lo = v < 0.0f ? 0.0f : v;
    return v != v ? v : act == CUVIL_ACT_RELU6 ? (lo > 6.0f ? 6.0f : lo) : lo;
}

/* rint(y / div) + zero clamped to [0, 255], as the reference computes it, written so that it vectorises without
 * mask juggling (the float clamp of before took more time than the AMX tiles it follows) and, where FMA is there,
 * without a division: q = y * inv (inv = 1 / div) corrected once by its exact fma residual is y / div correctly
 * rounded (Markstein), except for a subnormal y, whose quotient rounds to 0 either way. y is clamped to +-512 div
 * first (NaN to its low end, 0 as before), outside which the result is 0 or 255 anyway: the int conversion is exact. */
static inline uint8_t requantize_u8(float y, float div, float inv, int32_t zero)
{
    float lim = 512.0f * div, c = y > -lim ? y : -lim;
    c = c < lim ? c : lim;
#ifdef __FMA__
    float q = c * inv;
    q = fmaf(fmaf(-q, div, c), inv, q);
#else
    (void)inv;
    float q = c / div;
#endif
    int32_t v = (int32_t)rintf(q) + zero;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static void epilogue(const cuvil_qgemm_args *q, int64_t i0, int64_t mr, int64_t j0, int32_t acc[][QT],
                     const int32_t *sums)
{
    int64_t nc = q->N - j0 < QT ? q->N - j0 : QT, cs = q->csc;
    const float *ws = q->w_scale + j0;
    const int32_t *colsum = sums + j0;
    float bias[QT];
    for (int64_t c = 0; c < nc; c++) bias[c] = q->bias ? q->bias[j0 + c] : 0.0f;
    for (int64_t r = 0; r < mr; r++) {
        int64_t i = i0 + r;
        float sa = q->a_scale[q->a_step * i], y[QT];
        int32_t za = q->a_zero[q->a_step * i];
#pragma omp simd
        for (int64_t c = 0; c < nc; c++) y[c] = (float)(acc[r][c] - za * colsum[c]) * (sa * ws[c]) + bias[c];
        if (q->act == CUVIL_ACT_RELU || q->act == CUVIL_ACT_RELU6) {
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) y[c] = relu_act(q->act, y[c]);
        } else if (q->act) {
            cuvil_activation(q->act, nc, y, y);
        }
        if (q->out_scale > 0.0f) {
            uint8_t *out = (uint8_t *)q->C + i * q->rsc + j0 * cs;
            float div = q->out_scale, inv = 1.0f / div;
            int32_t zero = q->out_zero;
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) out[c * cs] = requantize_u8(y[c], div, inv, zero);
        } else {
            float *out = (float *)q->C + i * q->rsc + j0 * cs;
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) out[c * cs] = y[c];
        }
    }
}

typedef struct {
    const cuvil_qgemm_args *q;
    tile_fn tile;
    int64_t mr, K4, kp, np, row_blocks;
    const int32_t *sums;
} qgemm_job_t;

/* Register block b (column block b / row_blocks x row block b % row_blocks) and its epilogue. */
static void qgemm_block(const qgemm_job_t *j, int64_t b)
{
    const cuvil_qgemm_args *q = j->q;
    int64_t jb = b / j->row_blocks, i0 = b % j->row_blocks * j->mr;
    int64_t rows = q->M - i0 < j->mr ? q->M - i0 : j->mr;
    int32_t acc[QMR_MAX][QT];
    const int8_t *w0 = (const int8_t *)q->packed + 2 * jb * j->kp * 64;
    const int8_t *w1 = 2 * jb + 1 < j->np ? w0 + j->kp * 64 : NULL;
    j->tile(rows, j->K4, q->A + i0 * q->lda, q->lda, w0, w1, acc);
    epilogue(q, i0, rows, 2 * jb * QP, acc, j->sums);
}

static int qgemm_blocks(void *ctx, int64_t lo, int64_t hi)
{
    for (int64_t b = lo; b < hi; b++) qgemm_block(ctx, b);
    return 0;
}

/* On the thread pool (an OpenMP team of its own would spin against the pool's threads between layers). Path 4
 * (AMX) needs A's rows padded to a multiple of 16 and lda >= kp * 4 (cuvil_qlinear's scratch). */
static void qgemm_run(const cuvil_qgemm_args *q, int isa)
{
    qgemm_job_t j = {q, NULL, 0, k4_of(q->K), kp_of(q->K), panels_of(q->N), 0, NULL};
    j.tile = tile_for(isa, q->M, &j.mr);
    j.sums = (const int32_t *)((const int8_t *)q->packed + j.np * j.kp * 64);
    j.row_blocks = (q->M + j.mr - 1) / j.mr;
    cuvil_range_fn run = qgemm_blocks;
#if QGEMM_AMX
    if (j.tile == tile_amx) run = qgemm_blocks_amx; /* a tile configuration per thread */
#endif
    cuvil_parallel_team((j.np + 1) / 2 * j.row_blocks, threads_for(q->M * q->N * q->K / 4), run, &j);
}

void cuvil_qgemm(const cuvil_qgemm_args *q)
{
    int isa = cuvil_int8_isa();
    qgemm_run(q, isa < 3 ? isa : 3);
}

/* -- activations to uint8 -------------------------------------------------------------------------------- */
typedef struct {
    int64_t K, ldx, ldq;
    const float *x;
    uint8_t *q;
    float *scale, static_scale;
    int32_t *zero, static_zero;
} quantize_job_t;

/* Rows [lo, hi). */
static int quantize_rows(void *ctx, int64_t lo_row, int64_t hi_row)
{
    const quantize_job_t *j = ctx;
    int64_t K = j->K;
    for (int64_t i = lo_row; i < hi_row; i++) {
        const float *row = j->x + i * j->ldx;
        float s = j->static_scale;
        int32_t z = j->static_zero;
        if (!(s > 0.0f)) { /* dynamic: the row's range, widened to hold 0, onto 0..255 */
            float lo = 0.0f, hi = 0.0f;
            for (int64_t k = 0; k < K; k++) {
                lo = row[k] < lo ? row[k] : lo;
                hi = row[k] > hi ? row[k] : hi;
            }
            s = hi > lo ? (hi - lo) / 255.0f : 1.0f;
            z = (int32_t)rintf(-lo / s);
            z = z < 0 ? 0 : z > 255 ? 255 : z;
            j->scale[i] = s, j->zero[i] = z;
        }
        float inv = 1.0f / s;
        uint8_t *out = j->q + i * j->ldq;
        for (int64_t k = 0; k < K; k++) {
            float v = rintf(row[k] * inv) + (float)z;
            out[k] = (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
        }
        for (int64_t k = K; k < j->ldq; k++) out[k] = (uint8_t)z;
    }
    return 0;
}

/* On the thread pool, as the GEMM (an OpenMP team between two pool jobs spins against the pool's threads). */
void cuvil_quantize_rows_u8(int64_t M, int64_t K, const float *x, int64_t ldx, uint8_t *q, int64_t ldq,
                            float *scale, int32_t *zero, float static_scale, int32_t static_zero)
{
    quantize_job_t j = {K, ldx, ldq, x, q, scale, static_scale, zero, static_zero};
    cuvil_parallel_team(M, threads_for(M * K * 8), quantize_rows, &j);
}

/* A's rows: K padded to kp groups, M to a multiple of 16 (whole AMX tiles); then the per-row scales and zeros. */
static int64_t qlinear_rows(int64_t M) { return (M + 15) / 16 * 16; }

int64_t cuvil_qlinear_scratch_bytes(int64_t M, int64_t K) { return qlinear_rows(M) * kp_of(K) * 4 + M * 8 + 64; }

void cuvil_qlinear(cuvil_qgemm_args *q, const void *x, int x_is_u8, float x_scale, int32_t x_zero, void *scratch)
{
    int64_t ld = kp_of(q->K) * 4, rows = qlinear_rows(q->M);
    uint8_t *a = (uint8_t *)scratch;
    float *scale = (float *)(a + rows * ld);
    int32_t *zero = (int32_t *)(scale + q->M);
    if (x_is_u8) {
        for (int64_t i = 0; i < q->M; i++) {
            memcpy(a + i * ld, (const uint8_t *)x + i * q->K, (size_t)q->K);
            memset(a + i * ld + q->K, (int)x_zero, (size_t)(ld - q->K));
        }
    } else {
        cuvil_quantize_rows_u8(q->M, q->K, (const float *)x, q->K, a, ld, scale, zero, x_scale, x_zero);
    }
    memset(a + q->M * ld, 0, (size_t)((rows - q->M) * ld)); /* rows an AMX tile reads past M, their sums dropped */
    int dynamic = !x_is_u8 && !(x_scale > 0.0f);
    scale[0] = dynamic ? scale[0] : x_scale;
    zero[0] = dynamic ? zero[0] : x_zero;
    q->A = a, q->lda = ld, q->a_scale = scale, q->a_zero = zero, q->a_step = dynamic;
    qgemm_run(q, cuvil_int8_isa());
}

/* -- a tensor's range, widened to hold 0, onto 0..255 (the dynamic conv, conv_int8.c) ------------------ */
static float tensor_range_u8(int64_t n, const float *x, int32_t *zero)
{
    float lo = 0.0f, hi = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    float s = hi > lo ? (hi - lo) / 255.0f : 1.0f;
    int32_t z = (int32_t)rintf(-lo / s);
    *zero = z < 0 ? 0 : z > 255 ? 255 : z;
    return s;
}
