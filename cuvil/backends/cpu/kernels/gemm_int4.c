/* Cuvil's int4 weight-only GEMM: y[M, N] = act(x[M, K] @ W^T + bias) with W[N, K] stored as 4-bit q, a scale and a
 * zero point per group of G consecutive k (G a multiple of 32): W[n, k] = (q - zero[n, k / G]) * scale[n, k / G].
 *
 * Layout (cuvil/quantize/int8.py packs it): row n of q is K / 2 bytes; in each run of 32 k starting at k0, byte j
 * holds k0 + j in its low nibble and k0 + 16 + j in its high nibble, so one 16-byte load widens to two vectors of
 * 16 consecutive k with no shuffle. A few rows (decode): the weights are dequantised in registers and read once
 * (AVX-512 looks them up in per-group tables, AVX2 widens and scales them; C sums x q - zero * sum_k x per group).
 * More rows: blocks of W dequantised to f32 and the fp32 GEMM, each block by one thread into its own buffer.
 * The paths follow cuvil_int8_isa (2 or more: AVX-512, 1: AVX2, 0: C).
 */
#include <stdlib.h>
#include <string.h>

#include "cuvil_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CUVIL_X86_I4 1
#endif

#define I4_ROWS 4  /* up to this many rows the weights are unpacked inside the dot product */
#define I4_FEW_ROWS 16 /* up to this many, in runs of I4_ROWS: the fp32 GEMM would pad x^T to its panel width */
#define I4_BLOCK 64 /* rows of W dequantised per fp32 GEMM for more rows */
#define I4_SLICES 8 /* at most this many threads share those blocks, each with its own buffer in the scratch */

/* sum_k x[k] * q[k] over one group of G k (q's bytes as in the layout). */
static float dot_q4_scalar(const float *x, const uint8_t *q, int64_t G)
{
    float s = 0.0f;
    for (int64_t b = 0; b < G; b += 32, q += 16, x += 32)
        for (int j = 0; j < 16; j++) s += x[j] * (float)(q[j] & 15) + x[j + 16] * (float)(q[j] >> 4);
    return s;
}

#ifdef CUVIL_X86_I4
/* AVX-512, up to I4_ROWS rows: for each group, a 16-entry table (j - zero) * scale per row of W, and vpermps looks
 * each nibble up in it (it reads the low 4 bits of a lane): the dequantised weights cost a widening, a shift and two
 * permutes per 32, with no correction by sum_k x afterwards. I4_NB rows of W at once share the loads of x. */
#define I4_NB 4
static float i4_minus_zero[256][16] __attribute__((aligned(64))); /* [z][j] = j - z, any u8 zero point */

__attribute__((constructor)) static void i4_fill_tables(void)
{
    for (int z = 0; z < 256; z++)
        for (int j = 0; j < 16; j++) i4_minus_zero[z][j] = (float)(j - z);
}

__attribute__((target("avx512f,avx512bw"))) static inline __attribute__((always_inline))
void i4_block_avx512(const int R, int64_t K, int64_t G, const float *x, const uint8_t *const *q,
                     const float *const *scale, const uint8_t *const *zero, float out[][I4_NB])
{
    __m512 acc[I4_ROWS][I4_NB], acc_hi[2][I4_NB]; /* R <= 2: the high nibbles' own chains, twice as many in flight */
    for (int r = 0; r < R; r++)
        for (int b = 0; b < I4_NB; b++) acc[r][b] = acc_hi[r % 2][b] = _mm512_setzero_ps();
    for (int64_t g = 0, k0 = 0; k0 < K; g++) {
        __m512 lut[I4_NB];
        for (int b = 0; b < I4_NB; b++) /* one multiply: j - zero comes from a table */
            lut[b] = _mm512_mul_ps(_mm512_load_ps(i4_minus_zero[zero[b][g]]), _mm512_set1_ps(scale[b][g]));
        for (int64_t end = k0 + G; k0 < end; k0 += 32)
            for (int b = 0; b < I4_NB; b++) {
                __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q[b] + k0 / 2)));
                __m512 lo = _mm512_permutexvar_ps(v, lut[b]), hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4),
                                                                                        lut[b]);
                for (int r = 0; r < R; r++) {
                    acc[r][b] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * K + k0), lo, acc[r][b]);
                    __m512 *h = R <= 2 ? &acc_hi[r % 2][b] : &acc[r][b];
                    *h = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * K + k0 + 16), hi, *h);
                }
            }
    }
    for (int r = 0; r < R; r++)
        for (int b = 0; b < I4_NB; b++)
            out[r][b] = _mm512_reduce_add_ps(R <= 2 ? _mm512_add_ps(acc[r][b], acc_hi[r % 2][b]) : acc[r][b]);
}

typedef struct {
    int64_t M, N, K, G;
    const float *x, *scale, *bias;
    const uint8_t *w, *zero;
    float *y;
} i4_job_t;

/* Blocks [lo, hi) of I4_NB rows of W, every row of x; past N the last row of W is read again, its sums dropped. */
__attribute__((target("avx512f,avx512bw")))
static int i4_blocks_avx512(void *ctx, int64_t lo, int64_t hi)
{
    const i4_job_t *j = ctx;
    int64_t groups = j->K / j->G;
    for (int64_t blk = lo; blk < hi; blk++) {
        const uint8_t *q[I4_NB], *zero[I4_NB];
        const float *scale[I4_NB];
        for (int b = 0; b < I4_NB; b++) {
            int64_t n = blk * I4_NB + b < j->N ? blk * I4_NB + b : j->N - 1;
            q[b] = j->w + n * (j->K / 2), scale[b] = j->scale + n * groups, zero[b] = j->zero + n * groups;
        }
        float out[I4_ROWS][I4_NB];
        switch (j->M) {
        case 1: i4_block_avx512(1, j->K, j->G, j->x, q, scale, zero, out); break;
        case 2: i4_block_avx512(2, j->K, j->G, j->x, q, scale, zero, out); break;
        case 3: i4_block_avx512(3, j->K, j->G, j->x, q, scale, zero, out); break;
        default: i4_block_avx512(4, j->K, j->G, j->x, q, scale, zero, out); break;
        }
        for (int64_t m = 0; m < j->M; m++)
            for (int b = 0; b < I4_NB && blk * I4_NB + b < j->N; b++) {
                int64_t n = blk * I4_NB + b;
                j->y[m * j->N + n] = out[m][b] + (j->bias ? j->bias[n] : 0.0f);
            }
    }
    return 0;
}
/* AVX2, up to I4_ROWS rows: one row of W at a time, each 8 nibbles widened and dequantised by one FMA
 * (q * scale - zero * scale), low and high nibbles on their own chains. */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline))
void i4_row_avx2(const int R, int64_t K, int64_t G, const float *x, const uint8_t *q, const float *scale,
                 const uint8_t *zero, float *out)
{
    const __m256i low = _mm256_set1_epi32(15);
    __m256 acc[I4_ROWS][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t g = 0, k0 = 0; k0 < K; g++) {
        __m256 s = _mm256_set1_ps(scale[g]), zs = _mm256_set1_ps(-(float)zero[g] * scale[g]);
        for (int64_t end = k0 + G; k0 < end; k0 += 32)
            for (int h = 0; h < 2; h++) {
                __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + k0 / 2 + 8 * h)));
                __m256 lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, low)), s, zs);
                __m256 hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)), s, zs);
                for (int r = 0; r < R; r++) {
                    acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * K + k0 + 8 * h), lo, acc[r][0]);
                    acc[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * K + k0 + 16 + 8 * h), hi, acc[r][1]);
                }
            }
    }
    for (int r = 0; r < R; r++) {
        __m256 a = _mm256_add_ps(acc[r][0], acc[r][1]);
        __m128 t = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        t = _mm_add_ps(t, _mm_movehl_ps(t, t));
        out[r] = _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
    }
}

/* Rows [lo, hi) of W, every row of x. */
__attribute__((target("avx2,fma")))
static int i4_rows_avx2(void *ctx, int64_t lo, int64_t hi)
{
    const i4_job_t *j = ctx;
    int64_t groups = j->K / j->G;
    for (int64_t n = lo; n < hi; n++) {
        const uint8_t *q = j->w + n * (j->K / 2), *zero = j->zero + n * groups;
        const float *scale = j->scale + n * groups;
        float out[I4_ROWS];
        switch (j->M) {
        case 1: i4_row_avx2(1, j->K, j->G, j->x, q, scale, zero, out); break;
        case 2: i4_row_avx2(2, j->K, j->G, j->x, q, scale, zero, out); break;
        case 3: i4_row_avx2(3, j->K, j->G, j->x, q, scale, zero, out); break;
        default: i4_row_avx2(4, j->K, j->G, j->x, q, scale, zero, out); break;
        }
        for (int64_t m = 0; m < j->M; m++) j->y[m * j->N + n] = out[m] + (j->bias ? j->bias[n] : 0.0f);
    }
    return 0;
}
#endif

int64_t cuvil_gemm_int4_scratch_bytes(int64_t M, int64_t K, int64_t G)
{
    if (M <= I4_FEW_ROWS) return I4_ROWS * (K / G) * 4 + 64;
    return ((int64_t)I4_SLICES * I4_BLOCK * (K + M) + cuvil_sgemm_packed_size(K, M)) * 4 + 64;
}

typedef struct {
    int64_t M, N, K, G;
    const float *x, *scale, *bias, *xsum;
    const uint8_t *w, *zero;
    float *out;
} i4_scalar_job_t;

/* Output columns [lo, hi) of every row, portable C, from the rows' group sums of x. */
static int i4_columns_scalar(void *ctx, int64_t lo, int64_t hi)
{
    const i4_scalar_job_t *j = ctx;
    int64_t K = j->K, G = j->G, groups = K / G;
    for (int64_t n = lo; n < hi; n++)
        for (int64_t m = 0; m < j->M; m++) {
            float acc = 0.0f;
            for (int64_t g = 0; g < groups; g++) {
                int64_t at = n * groups + g;
                float d = dot_q4_scalar(j->x + m * K + g * G, j->w + n * (K / 2) + g * (G / 2), G);
                acc += j->scale[at] * (d - (float)j->zero[at] * j->xsum[m * groups + g]);
            }
            j->out[m * j->N + n] = acc + (j->bias ? j->bias[n] : 0.0f);
        }
    return 0;
}

/* y = x @ W^T for M <= I4_ROWS in portable C: one output column per step, the rows' group sums of x computed once. */
static void gemm_int4_rows(int64_t M, int64_t N, int64_t K, int64_t G, const float *x, const uint8_t *w,
                           const float *scale, const uint8_t *zero, const float *bias, float *y, float *xsum)
{
    int64_t groups = K / G;
    for (int64_t m = 0; m < M; m++)
        for (int64_t g = 0; g < groups; g++) {
            float s = 0.0f;
            for (int64_t k = 0; k < G; k++) s += x[m * K + g * G + k];
            xsum[m * groups + g] = s;
        }
    i4_scalar_job_t j = {M, N, K, G, x, scale, bias, xsum, w, zero, y};
    cuvil_parallel_team(N, threads_for(M * N * K), i4_columns_scalar, &j);
}

/* Weight rows [n0, n0 + rows) widened to f32 into out (K floats a row). */
static void i4_dequantize(int64_t n0, int64_t rows, int64_t K, int64_t G, const uint8_t *w, const float *scale,
                          const uint8_t *zero, float *out)
{
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *q = w + (n0 + r) * (K / 2);
        for (int64_t k0 = 0; k0 < K; k0 += 32, q += 16) {
            int64_t at = (n0 + r) * (K / G) + k0 / G;
            float s = scale[at], z = (float)zero[at];
            for (int i = 0; i < 16; i++) {
                out[r * K + k0 + i] = ((float)(q[i] & 15) - z) * s;
                out[r * K + k0 + 16 + i] = ((float)(q[i] >> 4) - z) * s;
            }
        }
    }
}

#ifdef CUVIL_X86_I4
/* i4_dequantize on AVX-512: each group's 16 values (j - zero) * scale in a table, each nibble looked up (same bits). */
__attribute__((target("avx512f,avx512bw")))
static void i4_dequantize_avx512(int64_t n0, int64_t rows, int64_t K, int64_t G, const uint8_t *w, const float *scale,
                                 const uint8_t *zero, float *out)
{
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *q = w + (n0 + r) * (K / 2);
        for (int64_t g = 0, k0 = 0; k0 < K; g++) {
            int64_t at = (n0 + r) * (K / G) + g;
            __m512 lut = _mm512_mul_ps(_mm512_load_ps(i4_minus_zero[zero[at]]), _mm512_set1_ps(scale[at]));
            for (int64_t end = k0 + G; k0 < end; k0 += 32) {
                __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + k0 / 2)));
                _mm512_storeu_ps(out + r * K + k0, _mm512_permutexvar_ps(v, lut));
                _mm512_storeu_ps(out + r * K + k0 + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut));
            }
        }
    }
}
#endif

typedef struct {
    int64_t M, N, K, G, blocks, slices;
    const float *xt, *scale, *bias; /* xt: x^T [K, M] packed for cuvil_sgemm_packed */
    const uint8_t *w, *zero;
    float *y, *buf;
    int avx512;
} i4_panel_job_t;

/* Slices [lo, hi): slice s owns the I4_BLOCK-row blocks of W [s * blocks / slices, (s + 1) * blocks / slices) and
 * its own buffers. Each block is dequantised once, row-major as stored, and is the A of a GEMM against the packed
 * x^T (on this thread: inside a pool job the pool runs it inline): y^T's block, written back transposed with the
 * bias. */
static int i4_panels(void *ctx, int64_t lo, int64_t hi)
{
    const i4_panel_job_t *j = ctx;
    int64_t M = j->M, K = j->K;
    for (int64_t s = lo; s < hi; s++) {
        float *wf = j->buf + s * I4_BLOCK * (K + M), *yt = wf + I4_BLOCK * K;
        for (int64_t b = s * j->blocks / j->slices; b < (s + 1) * j->blocks / j->slices; b++) {
            int64_t n0 = b * I4_BLOCK, rows = j->N - n0 < I4_BLOCK ? j->N - n0 : I4_BLOCK;
#ifdef CUVIL_X86_I4
            if (j->avx512) i4_dequantize_avx512(n0, rows, K, j->G, j->w, j->scale, j->zero, wf);
            else
#endif
                i4_dequantize(n0, rows, K, j->G, j->w, j->scale, j->zero, wf);
            cuvil_sgemm_packed(rows, M, K, 1.0f, wf, K, 1, j->xt, 0.0f, yt, M, NULL, 0);
            for (int64_t m = 0; m < M; m++)
                for (int64_t r = 0; r < rows; r++)
                    j->y[m * j->N + n0 + r] = yt[r * M + m] + (j->bias ? j->bias[n0 + r] : 0.0f);
        }
    }
    return 0;
}

/* More than I4_FEW_ROWS rows: x^T packed once, then one pool job over the slices (one dispatch a call). */
static void gemm_int4_panels(int64_t M, int64_t N, int64_t K, int64_t G, const float *x, const uint8_t *w,
                             const float *scale, const uint8_t *zero, const float *bias, float *y, float *buf)
{
    int64_t blocks = (N + I4_BLOCK - 1) / I4_BLOCK;
    int64_t slices = threads_for(M * N * K);
    slices = slices < I4_SLICES ? slices : I4_SLICES;
    slices = slices < blocks ? slices : blocks;
    float *xt = buf + I4_SLICES * I4_BLOCK * (K + M);
    cuvil_sgemm_pack_b(K, M, x, 1, K, xt);
    i4_panel_job_t j = {M, N, K, G, blocks, slices, xt, scale, bias, w, zero, y, buf, cuvil_int8_isa() >= 2};
    cuvil_parallel_team(slices, (int)slices, i4_panels, &j);
}

/* Up to I4_ROWS rows: the weights dequantised in registers, on the path cuvil_int8_isa chooses. */
static void gemm_int4_few_rows(int64_t M, int64_t N, int64_t K, int64_t G, const float *x, const uint8_t *w,
                               const float *scale, const uint8_t *zero, const float *bias, float *y, float *buf)
{
    int isa = cuvil_int8_isa();
#ifdef CUVIL_X86_I4
    i4_job_t job = {M, N, K, G, x, scale, bias, w, zero, y};
    if (isa >= 2) cuvil_parallel_team((N + I4_NB - 1) / I4_NB, threads_for(M * N * K), i4_blocks_avx512, &job);
    else if (isa == 1) cuvil_parallel_team(N, threads_for(M * N * K), i4_rows_avx2, &job);
    else
#endif
        gemm_int4_rows(M, N, K, G, x, w, scale, zero, bias, y, buf);
    (void)isa;
}

void cuvil_gemm_int4(int64_t M, int64_t N, int64_t K, int64_t G, const float *x, const uint8_t *w,
                     const float *scale, const uint8_t *zero, const float *bias, int act, float *y, void *scratch)
{
    if (M <= I4_FEW_ROWS)
        for (int64_t m0 = 0; m0 < M; m0 += I4_ROWS)
            gemm_int4_few_rows(M - m0 < I4_ROWS ? M - m0 : I4_ROWS, N, K, G, x + m0 * K, w, scale, zero, bias,
                               y + m0 * N, (float *)scratch);
    else
        gemm_int4_panels(M, N, K, G, x, w, scale, zero, bias, y, (float *)scratch);
    if (act) cuvil_activation(act, M * N, y, y);
}
