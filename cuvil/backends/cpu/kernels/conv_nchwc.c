/* Blocked direct convolution (the `conv_nchwc` op): compiled once per machine into the kernel library, since
 * its register-blocked strips cost gcc seconds that a model's own C should not pay again.
 *
 * One output row of one or two blocks of B output channels (B = CUVIL_VL) is computed in strips of up to
 * NCHWC_W0 output pixels whose B-wide accumulators stay in registers. The inner loop runs over (input channel
 * block, kernel row, kernel column, input lane): it broadcasts one input value and adds its product with one
 * weight vector into every accumulator (weights packed [ob, cb, kh, kw, c, B] at compile time, so the vector
 * is contiguous). A padded convolution first copies x into a zero-bordered buffer, so that no strip needs to
 * clip its taps (per-tap bounds checks cost a third of the time at 7x7). Bias, residual and the activation (a
 * CUVIL_ACT_* code) are applied while the strip is in registers. A unit of its own (kernels.py), after cuvil_internal.h.
 */
#if defined(CUVIL_NCHWC_W0) /* the target's (targets.py: wasm32's is measured) */
#define NCHWC_W0 CUVIL_NCHWC_W0
#elif CUVIL_VL == 16
#define NCHWC_W0 12 /* 2 x 12 accumulators + 2 weights + a broadcast fit the 32 registers */
#elif CUVIL_VL == 8
#define NCHWC_W0 6
#else
#define NCHWC_W0 4
#endif

#include "cuvil_nchwc.h"

/* The distances between two pixels of a strip, in floats: in x, in y and in the residual. A strip runs along an
 * output row, or, on maps narrower than a strip, across images at one output pixel. */
typedef struct { int64_t x, y, res; } nchwc_steps;

#define STRIP_PARAMS const float *restrict xn, const float *restrict wo, int64_t ws, const float *restrict bo, \
    const float *restrict rr, float *restrict yr, int64_t ys, int64_t left, const nchwc_geom *g, int64_t ih0, \
    int64_t iw0, int act, const nchwc_steps *st
#define STRIP_ARGS xn, wo, ws, bo, rr, yr, ys, left, g, ih0, iw0, act, st

/* Every accumulator of a strip, pixel r of output block j, as `stmt` names it: acc[j][r]. */
#define STRIP_EACH(stmt) \
    _Pragma("GCC unroll 2") for (int j = 0; j < NB; j++) _Pragma("GCC unroll 16") for (int r = 0; r < RW; r++) { stmt; }

/* A transcendental activation over n vectors, out of line: one call per strip with the switch outside the loop,
 * so the vectors' exps overlap (a call per vector ran them one after another, spilling every accumulator). */
#define NCHWC_EACH(fn) for (int i = 0; i < n; i++) v[i] = fn(v[i]); break;
static __attribute__((noinline)) void nchwc_activate_all(cuvil_vf *v, int n, int act)
{
    switch (act) {
    case CUVIL_ACT_SILU: NCHWC_EACH(cuvil_v_silu)
    case CUVIL_ACT_SIGMOID: NCHWC_EACH(cuvil_v_sigmoid)
    case CUVIL_ACT_TANH: NCHWC_EACH(cuvil_v_tanh)
    case CUVIL_ACT_GELU_TANH: NCHWC_EACH(cuvil_v_gelu_tanh)
    case CUVIL_ACT_GELU_ERF: NCHWC_EACH(cuvil_v_gelu_erf)
    default: for (int i = 0; i < n; i++) v[i] = cuvil_activate(v[i], act);
    }
}
#undef NCHWC_EACH

/* A strip's residual, activation and store, each branch taken once per strip rather than once per vector (a
 * K = 16 strip spent as long here as in its FMAs). relu, relu6 and hardswish are a few instructions, inline; the
 * transcendental ones are a call per block of the strip (nchwc_activate_all), which their own cost dwarfs. */
CUVIL_INLINE void nchwc_epilogue(cuvil_vf acc[2][NCHWC_W0], const float *restrict rr, float *restrict yr, int64_t ys,
                                 int64_t left, const nchwc_geom *g, int act, const nchwc_steps *st, const int NB,
                                 const int RW)
{
    const cuvil_vf zero = cuvil_splat(0.0f), six = cuvil_splat(6.0f);
    if (rr) {
        const int64_t res = st->res;
        STRIP_EACH(acc[j][r] += cuvil_load(rr + j * ys + r * res))
    }
    switch (act) {
    case CUVIL_ACT_NONE: break;
    case CUVIL_ACT_RELU: STRIP_EACH(acc[j][r] = nchwc_activate(acc[j][r], CUVIL_ACT_RELU)) break;
    case CUVIL_ACT_RELU6:
        STRIP_EACH(acc[j][r] = cuvil_select(acc[j][r] > six, six, cuvil_select(acc[j][r] < zero, zero, acc[j][r])))
        break;
    case CUVIL_ACT_HARDSWISH: STRIP_EACH(acc[j][r] = cuvil_v_hardswish(acc[j][r])) break;
    default:
        _Pragma("GCC unroll 2") for (int j = 0; j < NB; j++) nchwc_activate_all(acc[j], RW, act);
        break;
    }
    const int64_t y = st->y;
    if (!g->oc) {
        STRIP_EACH(cuvil_store(yr + j * ys + r * y, acc[j][r]))
    } else {
        const int64_t plane = g->oh * g->ow;
        STRIP_EACH(for (int e = 0; e < CUVIL_VL && j * CUVIL_VL + e < left; e++) yr[j * ys + e * plane + r * y] =
                       acc[j][r][e])
    }
}

/* RW output pixels of NB output blocks from input row ih0, column iw0 (every tap inside x), pixel r's input
 * st->x * r floats on. NB, RW and C are constants at every call, so the loops over them unroll and acc lives
 * in registers. `ws` is the distance between two output blocks' weights, `ys` between their outputs; a plain
 * output (g->oc > 0) is written lane by lane, `left` being the channels from this block on. */
CUVIL_INLINE void nchwc_strip(STRIP_PARAMS, const int NB, const int RW, const int64_t C)
{
    cuvil_vf acc[2][NCHWC_W0];
#pragma GCC unroll 2
    for (int j = 0; j < NB; j++) {
        const cuvil_vf b0 = cuvil_load(bo + j * CUVIL_VL);
#pragma GCC unroll 16
        for (int r = 0; r < RW; r++) acc[j][r] = b0;
    }
    const int64_t step = st->x;
    /* A narrow input (C < B, a count known at run time) at dw = 1: a kernel row's taps (kx, l) lie one after another
     * in x and in the weights, so they run as one loop of kw * C (9 for RGB at 3x3) instead of kw loops of C, whose
     * set-up cost more than their 3 multiply-adds each (wasm32 profiles: the stem was 30% of a small CNN). */
    const int merged = C != CUVIL_VL && g->dw == 1;
    const int64_t kw = merged ? 1 : g->kw, lanes = merged ? g->kw * C : C;
    for (int64_t c = 0; c < g->cb; c++)
        for (int64_t ky = 0; ky < g->kh; ky++) {
            const float *xrow = xn + ((c * g->h) + ih0 + ky * g->dh) * g->w * C;
            const float *wk = wo + (c * g->kh + ky) * g->kw * C * CUVIL_VL;
            for (int64_t kx = 0; kx < kw; kx++) {
                const float *xp = xrow + (iw0 + kx * g->dw) * C;
                const float *wl = wk + kx * C * CUVIL_VL;
                for (int64_t l = 0; l < lanes; l++) {
                    cuvil_vf wv[2];
                    for (int j = 0; j < NB; j++) wv[j] = cuvil_load(wl + j * ws + l * CUVIL_VL);
#pragma GCC unroll 16
                    for (int r = 0; r < RW; r++) {
                        const float v = xp[r * step + l];
                        for (int j = 0; j < NB; j++) acc[j][r] += v * wv[j];
                    }
                }
            }
        }
    nchwc_epilogue(acc, rr, yr, ys, left, g, act, st, NB, RW);
}

/* One out-of-line function per (blocks, width, full or narrow input block): C = CUVIL_VL (a blocked input)
 * unrolls the lane loop; the narrow input of a first layer (cb = 1, c < B lanes) reads g->c. */
typedef void (*nchwc_strip_fn)(STRIP_PARAMS);
#define STRIP_FN(NB, RW) \
    static __attribute__((noinline)) void nchwc_##NB##x##RW##_full(STRIP_PARAMS) { nchwc_strip(STRIP_ARGS, NB, RW, CUVIL_VL); } \
    static __attribute__((noinline)) void nchwc_##NB##x##RW##_narrow(STRIP_PARAMS) { nchwc_strip(STRIP_ARGS, NB, RW, g->c); }
#define STRIP_ROW(NB, RW) {nchwc_##NB##x##RW##_full, nchwc_##NB##x##RW##_narrow}

#if CUVIL_VL == 16
#define NCHWC_WIDTHS 4
static const int nchwc_widths[NCHWC_WIDTHS] = {12, 7, 4, 1}; /* 7: the rows of a 7x7 map in one strip */
STRIP_FN(1, 12) STRIP_FN(1, 7) STRIP_FN(1, 4) STRIP_FN(1, 1) STRIP_FN(2, 12) STRIP_FN(2, 7) STRIP_FN(2, 4) STRIP_FN(2, 1)
static const nchwc_strip_fn nchwc_strips[2][NCHWC_WIDTHS][2] = {
    {STRIP_ROW(1, 12), STRIP_ROW(1, 7), STRIP_ROW(1, 4), STRIP_ROW(1, 1)},
    {STRIP_ROW(2, 12), STRIP_ROW(2, 7), STRIP_ROW(2, 4), STRIP_ROW(2, 1)}};
#else
#define NCHWC_WIDTHS 3
static const int nchwc_widths[NCHWC_WIDTHS] = {NCHWC_W0, NCHWC_W0 > 4 ? 4 : 2, 1};
#if NCHWC_W0 > 4
STRIP_FN(1, NCHWC_W0) STRIP_FN(1, 4) STRIP_FN(1, 1) STRIP_FN(2, NCHWC_W0) STRIP_FN(2, 4) STRIP_FN(2, 1)
static const nchwc_strip_fn nchwc_strips[2][NCHWC_WIDTHS][2] = {
    {STRIP_ROW(1, NCHWC_W0), STRIP_ROW(1, 4), STRIP_ROW(1, 1)}, {STRIP_ROW(2, NCHWC_W0), STRIP_ROW(2, 4), STRIP_ROW(2, 1)}};
#else
STRIP_FN(1, NCHWC_W0) STRIP_FN(1, 2) STRIP_FN(1, 1) STRIP_FN(2, NCHWC_W0) STRIP_FN(2, 2) STRIP_FN(2, 1)
static const nchwc_strip_fn nchwc_strips[2][NCHWC_WIDTHS][2] = {
    {STRIP_ROW(1, NCHWC_W0), STRIP_ROW(1, 2), STRIP_ROW(1, 1)}, {STRIP_ROW(2, NCHWC_W0), STRIP_ROW(2, 2), STRIP_ROW(2, 1)}};
#endif
#endif

/* Which strip covers the r pixels left of a row: the widest while it fits, then the narrowest that covers
 * the rest and fits the row (ending at its end: overlapping pixels are computed twice, alike), else the widest
 * that fits in the rest. Returns the width's index; *at is where the strip starts. */
static int nchwc_choose(int64_t r, int64_t ow, int64_t *at)
{
    if (r >= nchwc_widths[0]) return 0;
    for (int i = NCHWC_WIDTHS - 1; i >= 0; i--)
        if (r <= nchwc_widths[i] && ow >= nchwc_widths[i]) {
            *at = ow - nchwc_widths[i];
            return i;
        }
    for (int i = 1; i < NCHWC_WIDTHS; i++)
        if (r >= nchwc_widths[i]) return i;
    return NCHWC_WIDTHS - 1;
}

/* `count` output pixels of NB output blocks, in strips along st (along a row, or across images). */
static void nchwc_run(STRIP_PARAMS, int NB, int64_t count)
{
    const int narrow = g->c != CUVIL_VL;
    for (int64_t k = 0; k < count;) {
        int64_t at = k;
        const int i = nchwc_choose(count - k, count, &at), w = nchwc_widths[i];
        nchwc_strips[NB - 1][i][narrow](xn + at * st->x, wo, ws, bo, rr ? rr + at * st->res : NULL, yr + at * st->y,
                                        ys, left, g, ih0, iw0, act, st);
        k = at + w;
    }
}

typedef struct {
    const float *x;
    float *xp;
    const nchwc_geom *g;
    int64_t hp, wp;
} pad_job_t;

/* Planes [p0, p1) of x copied into the zero-bordered buffer. */
static int pad_planes(void *job, int64_t p0, int64_t p1)
{
    const pad_job_t *j = job;
    const nchwc_geom *g = j->g;
    const int64_t hp = j->hp, wp = j->wp, row = g->w * g->c;
    for (int64_t p = p0; p < p1; p++)
        for (int64_t yy = 0; yy < hp; yy++) {
            float *dst = j->xp + (p * hp + yy) * wp * g->c;
            const int64_t y = yy - g->ph;
            if (y < 0 || y >= g->h) {
                memset(dst, 0, sizeof(float) * wp * g->c);
                continue;
            }
            memset(dst, 0, sizeof(float) * g->pw * g->c);
            memcpy(dst + g->pw * g->c, j->x + (p * g->h + y) * row, sizeof(float) * row);
            memset(dst + g->pw * g->c + row, 0, sizeof(float) * (wp - g->pw - g->w) * g->c);
        }
    return 0;
}

/* x with its pads made explicit, [n, cb, hp, wp, c] with zeros around, and the geometry that reads it unpadded.
 * Returns x itself when the convolution has no pads. */
static const float *nchwc_unpadded(const float *x, const nchwc_geom *g, nchwc_geom *pg)
{
    *pg = *g;
    const int64_t hp = max64(g->ph + g->h, (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1);
    const int64_t wp = max64(g->pw + g->w, (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1);
    if (!g->ph && !g->pw && hp == g->h && wp == g->w) return x;
    float *xp = thread_scratch(SCRATCH_PADDED, g->n * g->cb * hp * wp * g->c);
    pad_job_t job = {x, xp, g, hp, wp};
    const int64_t planes = g->n * g->cb;
    cuvil_parallel_team(planes, (int)min64(threads_for(planes * hp * wp * g->c * 8), planes), pad_planes, &job);
    pg->h = hp, pg->w = wp, pg->ph = pg->pw = 0;
    return xp;
}

typedef struct {
    const float *x, *w, *bias, *res;
    float *y;
    const nchwc_geom *g;
    int act;
    int64_t part; /* output pixels per item along a row (g->ow: whole rows) */
} nchwc_job_t;

/* Whether strips run across images: on maps narrower than the widest strip but one, whose rows would leave
 * most of the registers idle and stream a pair's weights for a pixel or two. */
static int nchwc_across_images(const nchwc_geom *g) { return g->n > 1 && g->ow < nchwc_widths[1]; }

/* Items [p0, p1) of the output, numbered (pair of output blocks, image, row, part of the row), or (pair, row,
 * column) when strips run across images: one pair's weights stay in cache over consecutive items. */
static int nchwc_items(void *job, int64_t p0, int64_t p1)
{
    const nchwc_job_t *j = job;
    const nchwc_geom *g = j->g;
    const int64_t ws = g->cb * g->kh * g->kw * g->c * CUVIL_VL, ys = g->oh * g->ow * CUVIL_VL;
    const int64_t image = g->cb * g->h * g->w * g->c, out_image = g->oc ? g->oc * g->oh * g->ow : g->ob * ys;
    const int64_t parts = (g->ow + j->part - 1) / j->part;
    const int across = nchwc_across_images(g), inner = across ? g->oh * g->ow : g->n * g->oh * parts;
    const nchwc_steps st = across ? (nchwc_steps){image, out_image, g->ob * ys}
                                  : (nchwc_steps){g->sw * g->c, g->oc ? 1 : CUVIL_VL, CUVIL_VL};
    for (int64_t p = p0; p < p1; p++) {
        const int64_t o = p / inner * 2, q = p % inner, row = q / parts;
        const int64_t n = across ? 0 : row / g->oh, oh = across ? q / g->ow : row % g->oh;
        const int64_t ow = across ? q % g->ow : q % parts * j->part;
        const int64_t at = (n * g->ob + o) * ys + (oh * g->ow + ow) * CUVIL_VL; /* in the blocked output */
        const float *xn = j->x + n * image, *wo = j->w + o * ws, *bo = j->bias + o * CUVIL_VL;
        const float *rr = j->res ? j->res + at : NULL;
        float *yr = g->oc ? j->y + (n * g->oc + o * CUVIL_VL) * g->oh * g->ow + oh * g->ow + ow : j->y + at;
        const int64_t left = g->oc - o * CUVIL_VL; /* a plain output's channels from this block on */
        nchwc_run(xn, wo, ws, bo, rr, yr, ys, left, g, oh * g->sh, ow * g->sw, j->act, &st, o + 1 < g->ob ? 2 : 1,
                  across ? g->n : min64(j->part, g->ow - ow));
    }
    return 0;
}

/* A 1x1, stride-1, unpadded convolution whose rows would run one by one: each plane read and written as one row
 * (in the blocked layout its pixels are contiguous), so that 7x7 and 14x14 maps run in strips of the widest width
 * instead of a 7-wide strip and a 12 + 4 pair per row. */
static void nchwc_flatten_pointwise(nchwc_geom *g)
{
    if (g->kh != 1 || g->kw != 1 || g->sh != 1 || g->sw != 1 || g->ph || g->pw || g->oh != g->h || g->ow != g->w ||
        nchwc_across_images(g))
        return;
    g->w = g->ow = g->h * g->w;
    g->h = g->oh = 1;
}

/* Output pixels per item along a row: whole rows, unless there are too few items (pairs x images x rows) to
 * share among threads; then parts of a row, each a whole number of the widest strips. */
static int64_t nchwc_part(const nchwc_geom *g, int64_t pairs)
{
    const int64_t rows = pairs * g->n * g->oh, widest = nchwc_widths[0];
    const int64_t parts = min64((32 + rows - 1) / rows, (g->ow + widest - 1) / widest);
    if (parts <= 1) return g->ow;
    return ((g->ow + parts - 1) / parts + widest - 1) / widest * widest;
}

int cuvil_conv_nchwc_block(void) { return CUVIL_VL; }

void cuvil_conv_nchwc(const float *x, const float *w, const float *bias, const float *res, float *y,
                      const int64_t *geom, int act)
{
    const nchwc_geom *given = (const nchwc_geom *)geom;
    if (given->n <= 0 || given->ob <= 0 || given->oh <= 0 || given->ow <= 0) return;
    nchwc_geom unpadded;
    x = nchwc_unpadded(x, given, &unpadded);
    nchwc_flatten_pointwise(&unpadded);
    const nchwc_geom *g = &unpadded;
    const int64_t pairs = (g->ob + 1) / 2, ws = g->cb * g->kh * g->kw * g->c * CUVIL_VL;
    const int across = nchwc_across_images(g);
    const int64_t part = across ? g->ow : nchwc_part(g, pairs);
    const int64_t items = pairs * (across ? g->oh * g->ow : g->n * g->oh * ((g->ow + part - 1) / part));
    const int64_t pixels = across ? g->n : part; /* per item */
    const int nt = (int)min64(threads_for(items * 2 * pixels * ws), items);
    /* Threads split (pair of output blocks, image or column, output row, part); an odd last block runs alone. */
    nchwc_job_t job = {x, w, bias, res, y, g, act, part};
    cuvil_parallel_team(items, nt, nchwc_items, &job);
}
