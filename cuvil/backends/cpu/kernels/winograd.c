/* Winograd F(4x4, 3x3) convolution on the blocked layout (the `conv_nchwc` op with algorithm "winograd"):
 * 3x3 kernels, stride 1, dilation 1, full input blocks. A unit of its own (kernels.py); it shares cuvil_nchwc.h.
 *
 * Each 4x4 tile of output is Y = A^T [U (.) V] A with V = B^T d B the 6x6 input tile d transformed and
 * U = G g G^T the weights transformed once (cuvil_winograd_weight, at load time): 36 multiplies per tile and
 * channel pair instead of 144, so the multiply-adds drop 4x (Lavin and Gray, "Fast Algorithms for
 * Convolutional Neural Networks", 2015; interpolation points 0, +-1, +-2, infinity). The element-wise
 * products over all channels are 36 small GEMMs: (tiles x C) @ (C x O), one per position of the 6x6 tile.
 *
 * Threads take groups of up to WINO_TB tiles. A group transforms its input tiles into V [36][cb][tiles][B],
 * runs the 36 GEMMs into M [36][ob][tiles][B] with the tiles and two output blocks in registers, and
 * transforms M back into output tiles, adding bias and residual and applying the activation on the way out.
 * Lanes hold channels throughout, so every transform is vector arithmetic on whole blocks.
 *
 * Accuracy: the transforms' coefficients (up to 8 on the way out, 1/24 in the weights) cost about two decimal
 * digits against the direct sum; tests/backends/cpu/test_winograd.py states the tolerance.
 */
#include "cuvil_nchwc.h"

#define WINO_TB 12 /* tiles per group: 12 x 2 accumulators + 2 weights + a broadcast in 32 registers */
/* Tiles a GEMM holds in registers at once: the group's, or on wasm32 4 (4 x 2 accumulators + 2 weights + a broadcast
 * within the 15 xmm registers V8 allocates on x86-64; 12 x 2 spilled every accumulator each channel). */
#if defined(__wasm_simd128__) && CUVIL_VL == 4
#define WINO_RB 4
#else
#define WINO_RB WINO_TB
#endif
#define WINO_POS 36

typedef cuvil_vf wvf;

#if CUVIL_VL == 16 && defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>
#define WINO_STREAM 1
#else
#define WINO_STREAM 0
#endif

/* ---- the weight transform: U = G g G^T per (input channel, output channel), output channels in lanes ---- */

static const float wino_g[6][3] = {{1.0f / 4, 0, 0},           {-1.0f / 6, -1.0f / 6, -1.0f / 6},
                                   {-1.0f / 6, 1.0f / 6, -1.0f / 6}, {1.0f / 24, 1.0f / 12, 1.0f / 6},
                                   {1.0f / 24, -1.0f / 12, 1.0f / 6}, {0, 0, 1}};

int64_t cuvil_winograd_weight_size(int64_t ob, int64_t cb) { return WINO_POS * ob * cb * CUVIL_VL * CUVIL_VL; }

/* w packed [ob, cb, 3, 3, B, B] (conv_nchwc's weight) -> u [36, ob, cb * B, B]. Runs when a model loads (every
 * warm start): vectorised over the B output channels; ResNet-18's 30 MB take about 10 ms of CPU into pages already
 * in memory (the C runtime faults them in first), twice that where its writes fault them. */
typedef struct {
    const float *w;
    int64_t ob, cb;
    float *u;
    int stream; /* u is 64-byte aligned, so each vector a whole line: wino_weight_store */
} wino_weight_job_t;

/* One vector of u. With 16 lanes on an aligned u a vector is a whole 64-byte line: stored past the caches, as the
 * 36 rows a pair writes are as many streams of fresh memory, each line written once and read only by later calls;
 * a cached store would first read each line and keep the fill buffers waiting on it (ResNet-18: 30 MB). */
static inline void wino_weight_store(float *p, wvf v, int stream)
{
#if WINO_STREAM
    if (stream) { _mm512_stream_ps(p, (__m512)v); return; }
#endif
    (void)stream;
    cuvil_store(p, v);
}

/* Pairs (output block, input channel) [lo, hi). */
static int wino_weight_part(void *job, int64_t lo, int64_t hi)
{
    const wino_weight_job_t *j = job;
    const int64_t cb = j->cb, ob = j->ob, C = cb * CUVIL_VL;
    for (int64_t q = lo; q < hi; q++) {
        const int64_t o = q / C, c = q % C;
        const float *g = j->w + ((o * cb + c / CUVIL_VL) * 9 * CUVIL_VL + c % CUVIL_VL) * CUVIL_VL;
        wvf k[9], t[6][3];
        for (int i = 0; i < 9; i++) k[i] = cuvil_load(g + i * CUVIL_VL * CUVIL_VL);
        for (int i = 0; i < 6; i++)
            for (int jj = 0; jj < 3; jj++)
                t[i][jj] = wino_g[i][0] * k[jj] + wino_g[i][1] * k[3 + jj] + wino_g[i][2] * k[6 + jj];
        for (int i = 0; i < 6; i++)
            for (int jj = 0; jj < 6; jj++)
                wino_weight_store(j->u + (((i * 6 + jj) * ob + o) * C + c) * CUVIL_VL,
                                  t[i][0] * wino_g[jj][0] + t[i][1] * wino_g[jj][1] + t[i][2] * wino_g[jj][2], j->stream);
    }
#if WINO_STREAM
    if (j->stream) _mm_sfence(); /* the stores above are weakly ordered: visible before this part reports done */
#endif
    return 0;
}

void cuvil_winograd_weight(const float *w, int64_t ob, int64_t cb, float *u)
{
    const int64_t C = cb * CUVIL_VL;
    wino_weight_job_t job = {w, ob, cb, u, WINO_STREAM && (uintptr_t)u % 64 == 0};
    cuvil_parallel_team(ob * C, threads_for(ob * C * CUVIL_VL * 64), wino_weight_part, &job);
}

/* ---- the input transform: one 6x6 tile of one channel block into V ---- */

/* r = B^T d over six vectors d[0], d[s], ..., d[5s]. */
#define WINO_BT(r, d, s)                                                         \
    do {                                                                         \
        r[0] = 4.0f * d[0] - 5.0f * d[2 * (s)] + d[4 * (s)];                     \
        r[1] = d[3 * (s)] + d[4 * (s)] - 4.0f * (d[(s)] + d[2 * (s)]);           \
        r[2] = d[4 * (s)] - d[3 * (s)] + 4.0f * (d[(s)] - d[2 * (s)]);           \
        r[3] = d[4 * (s)] - d[2 * (s)] + 2.0f * (d[3 * (s)] - d[(s)]);           \
        r[4] = d[4 * (s)] - d[2 * (s)] - 2.0f * (d[3 * (s)] - d[(s)]);           \
        r[5] = 4.0f * d[(s)] - 5.0f * d[3 * (s)] + d[5 * (s)];                   \
    } while (0)

/* The 6x6 input tile at (iy, ix) of one channel plane x[h][w][B], zeros outside it, transformed into
 * v[pos * vs]. */
static void wino_input_tile(const float *restrict x, int64_t h, int64_t w, int64_t iy, int64_t ix,
                            float *restrict v, int64_t vs)
{
    wvf d[36], t[36];
    if (iy >= 0 && ix >= 0 && iy + 6 <= h && ix + 6 <= w) {
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 6; j++) d[i * 6 + j] = cuvil_load(x + ((iy + i) * w + ix + j) * CUVIL_VL);
    } else {
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 6; j++) {
                const int64_t y = iy + i, xx = ix + j;
                d[i * 6 + j] = y >= 0 && y < h && xx >= 0 && xx < w ? cuvil_load(x + (y * w + xx) * CUVIL_VL)
                                                                     : (wvf){0};
            }
    }
    for (int j = 0; j < 6; j++) { /* columns: t[:, j] = B^T d[:, j] */
        wvf r[6];
        WINO_BT(r, (d + j), 6);
        for (int i = 0; i < 6; i++) t[i * 6 + j] = r[i];
    }
    for (int i = 0; i < 6; i++) { /* rows: V[i, :] = t[i, :] B */
        wvf r[6];
        WINO_BT(r, (t + i * 6), 1);
        for (int j = 0; j < 6; j++) cuvil_store(v + (i * 6 + j) * vs, r[j]);
    }
}

/* ---- the 36 GEMMs: M[pos][o][t] = sum_c V[pos][c][t] U[pos][c][o], R tiles x NB output blocks ---- */

/* vp: V at this position ([cb][tiles][B]; tb tiles per block of channels), up: U at this position and output
 * block ([C][B], the next block `us` floats on), mp: M at this position and output block ([tb][B], the next
 * block `ms` on). R and NB are constants at every call. */
CUVIL_INLINE void wino_gemm(const float *restrict vp, int64_t tb, int64_t cb, const float *restrict up, int64_t us,
                            float *restrict mp, int64_t ms, const int R, const int NB)
{
    wvf acc[WINO_TB][2];
#pragma GCC unroll 12
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NB; j++) acc[r][j] = (wvf){0};
    for (int64_t c = 0; c < cb; c++) {
        const float *a = vp + c * tb * CUVIL_VL, *b = up + c * CUVIL_VL * CUVIL_VL;
#pragma GCC unroll 16
        for (int l = 0; l < CUVIL_VL; l++) {
            wvf bv[2];
            for (int j = 0; j < NB; j++) bv[j] = cuvil_load(b + j * us + l * CUVIL_VL);
#pragma GCC unroll 12
            for (int r = 0; r < R; r++) {
                const float s = a[r * CUVIL_VL + l];
                for (int j = 0; j < NB; j++) acc[r][j] += s * bv[j];
            }
        }
    }
    for (int j = 0; j < NB; j++)
#pragma GCC unroll 12
        for (int r = 0; r < R; r++) cuvil_store(mp + j * ms + r * CUVIL_VL, acc[r][j]);
}

typedef void (*wino_gemm_fn)(const float *, int64_t, int64_t, const float *, int64_t, float *, int64_t);
#define WINO_GEMM_FN(R)                                                                                             \
    static __attribute__((noinline)) void wino_gemm_1x##R(const float *vp, int64_t tb, int64_t cb, const float *up, \
                                                          int64_t us, float *mp, int64_t ms)                       \
    {                                                                                                               \
        wino_gemm(vp, tb, cb, up, us, mp, ms, R, 1);                                                                \
    }                                                                                                               \
    static __attribute__((noinline)) void wino_gemm_2x##R(const float *vp, int64_t tb, int64_t cb, const float *up, \
                                                          int64_t us, float *mp, int64_t ms)                       \
    {                                                                                                               \
        wino_gemm(vp, tb, cb, up, us, mp, ms, R, 2);                                                                \
    }
WINO_GEMM_FN(1) WINO_GEMM_FN(2) WINO_GEMM_FN(3) WINO_GEMM_FN(4) WINO_GEMM_FN(5) WINO_GEMM_FN(6)
WINO_GEMM_FN(7) WINO_GEMM_FN(8) WINO_GEMM_FN(9) WINO_GEMM_FN(10) WINO_GEMM_FN(11) WINO_GEMM_FN(12)
static const wino_gemm_fn wino_gemms[2][WINO_TB] = {
    {wino_gemm_1x1, wino_gemm_1x2, wino_gemm_1x3, wino_gemm_1x4, wino_gemm_1x5, wino_gemm_1x6, wino_gemm_1x7,
     wino_gemm_1x8, wino_gemm_1x9, wino_gemm_1x10, wino_gemm_1x11, wino_gemm_1x12},
    {wino_gemm_2x1, wino_gemm_2x2, wino_gemm_2x3, wino_gemm_2x4, wino_gemm_2x5, wino_gemm_2x6, wino_gemm_2x7,
     wino_gemm_2x8, wino_gemm_2x9, wino_gemm_2x10, wino_gemm_2x11, wino_gemm_2x12}};

/* ---- the output transform: one tile of one output block from M, with the epilogue ---- */

/* r = A^T m over six vectors m[0], m[s], ..., m[5s]. */
#define WINO_AT(r, m, s)                                                                  \
    do {                                                                                  \
        const wvf p1 = m[(s)] + m[2 * (s)], q1 = m[(s)] - m[2 * (s)];                     \
        const wvf p3 = m[3 * (s)] + m[4 * (s)], q3 = m[3 * (s)] - m[4 * (s)];             \
        r[0] = m[0] + p1 + p3;                                                            \
        r[1] = q1 + 2.0f * q3;                                                            \
        r[2] = p1 + 4.0f * p3;                                                            \
        r[3] = q1 + 8.0f * q3 + m[5 * (s)];                                               \
    } while (0)

typedef struct {
    const nchwc_geom *g;
    const float *bias, *res;
    float *y;
    int act;
} wino_out;

/* Output tile (oy, ox) of block o of image n from m[pos * ms]: the pixels inside the output are stored. */
static void wino_output_tile(const wino_out *out, const float *restrict m, int64_t ms, int64_t n, int64_t o,
                             int64_t oy, int64_t ox)
{
    const nchwc_geom *g = out->g;
    wvf d[36], t[24];
    for (int i = 0; i < 36; i++) d[i] = cuvil_load(m + i * ms);
    for (int j = 0; j < 6; j++) { /* columns: t[:, j] = A^T d[:, j] */
        wvf r[4];
        WINO_AT(r, (d + j), 6);
        for (int i = 0; i < 4; i++) t[i * 6 + j] = r[i];
    }
    const wvf b = cuvil_load(out->bias + o * CUVIL_VL);
    const int64_t rows = min64(4, g->oh - oy), cols = min64(4, g->ow - ox);
    for (int i = 0; i < rows; i++) { /* rows: Y[i, :] = t[i, :] A */
        wvf r[4];
        WINO_AT(r, (t + i * 6), 1);
        for (int j = 0; j < cols; j++) {
            const int64_t at = ((n * g->ob + o) * g->oh + oy + i) * g->ow + ox + j;
            wvf v = r[j] + b;
            if (out->res) v += cuvil_load(out->res + at * CUVIL_VL);
            v = nchwc_activate(v, out->act);
            if (!g->oc) {
                cuvil_store(out->y + at * CUVIL_VL, v);
            } else {
                float *yp = out->y + ((n * g->oc + o * CUVIL_VL) * g->oh + oy + i) * g->ow + ox + j;
                for (int e = 0; e < CUVIL_VL && o * CUVIL_VL + e < g->oc; e++) yp[e * g->oh * g->ow] = v[e];
            }
        }
    }
}

/* ---- the driver ---- */

/* Tiles [t0, t1) (numbered image by image, row by row) through all three steps. */
static void wino_group(const float *x, const float *u, const wino_out *out, int64_t t0, int64_t t1)
{
    const nchwc_geom *g = out->g;
    const int64_t th = (g->oh + 3) / 4, tw = (g->ow + 3) / 4, tb = t1 - t0, C = g->cb * CUVIL_VL;
    float *v = thread_scratch(SCRATCH_WINOGRAD, WINO_POS * tb * (C + g->ob * CUVIL_VL)), *m = v + WINO_POS * tb * C;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t n = t / (th * tw), ty = t / tw % th, tx = t % tw;
        for (int64_t c = 0; c < g->cb; c++)
            wino_input_tile(x + (n * g->cb + c) * g->h * g->w * CUVIL_VL, g->h, g->w, ty * 4 - g->ph,
                            tx * 4 - g->pw, v + (c * tb + t - t0) * CUVIL_VL, g->cb * tb * CUVIL_VL);
    }
    const int64_t us = C * CUVIL_VL, ms = tb * CUVIL_VL;
    for (int p = 0; p < WINO_POS; p++)
        for (int64_t o = 0; o < g->ob; o += 2) {
            const int nb = o + 1 < g->ob ? 2 : 1;
            for (int64_t q = 0, nq = ceil_div(tb, WINO_RB); q < nq; q++) { /* near-equal register blocks */
                const int64_t r0 = split_at(tb, nq, q), rows = split_at(tb, nq, q + 1) - r0;
                wino_gemms[nb - 1][rows - 1](v + (p * g->cb * tb + r0) * CUVIL_VL, tb, g->cb, u + (p * g->ob + o) * us,
                                             us, m + (p * g->ob + o) * ms + r0 * CUVIL_VL, ms);
            }
        }
    for (int64_t t = t0; t < t1; t++) {
        const int64_t n = t / (th * tw), ty = t / tw % th, tx = t % tw;
        for (int64_t o = 0; o < g->ob; o++)
            wino_output_tile(out, m + (o * tb + t - t0) * CUVIL_VL, g->ob * ms, n, o, ty * 4, tx * 4);
    }
}

/* geom as for cuvil_conv_nchwc; kh = kw = 3, strides and dilations 1, c = B (not checked here: the emitter
 * chooses this kernel only then). u from cuvil_winograd_weight. */
typedef struct {
    const float *x, *u;
    wino_out out;
    int64_t tiles, groups;
} wino_job_t;

static int wino_groups(void *job, int64_t lo, int64_t hi)
{
    const wino_job_t *j = job;
    for (int64_t k = lo; k < hi; k++)
        wino_group(j->x, j->u, &j->out, split_at(j->tiles, j->groups, k), split_at(j->tiles, j->groups, k + 1));
    return 0;
}

void cuvil_conv_winograd(const float *x, const float *u, const float *bias, const float *res, float *y,
                         const int64_t *geom, int act)
{
    const nchwc_geom *g = (const nchwc_geom *)geom;
    if (g->n <= 0 || g->ob <= 0 || g->oh <= 0 || g->ow <= 0) return;
    const int64_t tiles = g->n * ((g->oh + 3) / 4) * ((g->ow + 3) / 4);
    const int64_t work = tiles * WINO_POS * g->cb * g->ob * CUVIL_VL * CUVIL_VL;
    const int nt = (int)min64(threads_for(work), tiles);
    /* Groups of at most WINO_TB tiles, as many per thread (every thread one, of at least 4 tiles, if few). */
    int64_t groups = ceil_div(ceil_div(tiles, WINO_TB), nt) * nt;
    if (groups > tiles / 4 && groups > ceil_div(tiles, WINO_TB)) groups = ceil_div(tiles, WINO_TB);
    if (groups < nt) groups = min64(nt, ceil_div(tiles, 4));
    wino_job_t job = {x, u, {g, bias, res, y, act}, tiles, groups};
    cuvil_parallel_team(groups, nt, wino_groups, &job);
}
