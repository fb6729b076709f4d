/* Blocked direct convolution (the `conv_nchwc` op): compiled once per machine into the kernel library, since
 * its register-blocked strips cost gcc seconds that a model's own C should not pay again.
 *
 * One output row of one or two blocks of B output channels (B = CUVIL_VL) is computed in strips of up to
 * NCHWC_W0 output pixels whose B-wide accumulators stay in registers. The inner loop runs over (input channel
 * block, kernel row, kernel column, input lane): it broadcasts one input value and adds its product with one
 * weight vector into every accumulator (weights packed [ob, cb, kh, kw, c, B] at compile time, so the vector
 * is contiguous). Strips that a pad reaches clip their taps, so no read leaves x. Bias, residual and relu are
 * applied while the strip is in registers. Compiled in one unit after gemm.c (it uses its thread count).
 */
#if CUVIL_VL == 16
#define NCHWC_W0 12 /* 2 x 12 accumulators + 2 weights + a broadcast fit the 32 registers */
#elif CUVIL_VL == 8
#define NCHWC_W0 6
#else
#define NCHWC_W0 4
#endif

typedef struct { int64_t n, cb, h, w, c, ob, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, oc; } nchwc_geom;

/* The steps t in [*lo, *hi) of `start + t * step` (0 <= t < count) that land in [0, n). */
static inline void nchwc_taps(int64_t start, int64_t step, int64_t count, int64_t n, int64_t *lo, int64_t *hi)
{
    int64_t a = start < 0 ? (-start + step - 1) / step : 0;
    int64_t b = n - start <= 0 ? 0 : (n - start + step - 1) / step;
    *lo = a < count ? a : count;
    *hi = b < count ? b : count;
    if (*hi < *lo) *hi = *lo;
}

#define STRIP_PARAMS const float *restrict xn, const float *restrict wo, int64_t ws, const float *restrict bo, \
    const float *restrict rr, float *restrict yr, int64_t ys, int64_t left, const nchwc_geom *g, int64_t ih0, \
    int64_t kh0, int64_t kh1, int64_t iw0, int act
#define STRIP_ARGS xn, wo, ws, bo, rr, yr, ys, left, g, ih0, kh0, kh1, iw0, act

/* RW output pixels of NB output blocks from input column iw0; kernel rows [kh0, kh1) lie inside x. NB, RW, C
 * and clip are constants at every call, so the loops over them unroll and acc lives in registers. `ws` is the
 * distance between two output blocks' weights, `ys` between their outputs; a plain output (g->oc > 0) is
 * written lane by lane, `left` being the channels from this block on. */
CUVIL_INLINE void nchwc_strip(STRIP_PARAMS, const int NB, const int RW, const int64_t C, const int clip)
{
    cuvil_vf acc[2][NCHWC_W0];
    for (int j = 0; j < NB; j++) {
        const cuvil_vf b0 = cuvil_load(bo + j * CUVIL_VL);
#pragma GCC unroll 16
        for (int r = 0; r < RW; r++) acc[j][r] = b0;
    }
    const int64_t step = g->sw * C;
    for (int64_t c = 0; c < g->cb; c++)
        for (int64_t ky = kh0; ky < kh1; ky++) {
            const float *xrow = xn + ((c * g->h) + ih0 + ky * g->dh) * g->w * C;
            const float *wk = wo + (c * g->kh + ky) * g->kw * C * CUVIL_VL;
            for (int64_t kx = 0; kx < g->kw; kx++) {
                int64_t r0 = 0, r1 = RW;
                if (clip) nchwc_taps(iw0 + kx * g->dw, g->sw, RW, g->w, &r0, &r1);
                const float *xp = xrow + (iw0 + kx * g->dw) * C; /* read only at pixels [r0, r1) */
                const float *wl = wk + kx * C * CUVIL_VL;
                for (int64_t l = 0; l < C; l++) {
                    cuvil_vf wv[2];
                    for (int j = 0; j < NB; j++) wv[j] = cuvil_load(wl + j * ws + l * CUVIL_VL);
#pragma GCC unroll 16
                    for (int r = 0; r < RW; r++) {
                        if (clip && (r < r0 || r >= r1)) continue;
                        const float v = xp[r * step + l];
                        for (int j = 0; j < NB; j++) acc[j][r] += v * wv[j];
                    }
                }
            }
        }
    for (int j = 0; j < NB; j++) {
#pragma GCC unroll 16
        for (int r = 0; r < RW; r++) {
            cuvil_vf v = acc[j][r];
            if (rr) v += cuvil_load(rr + j * ys + r * CUVIL_VL);
            if (act) v = (cuvil_vf)((cuvil_vi)v & ~(v < 0)); /* relu that keeps NaN, like its reference */
            if (!g->oc)
                cuvil_store(yr + j * ys + r * CUVIL_VL, v);
            else
                for (int e = 0; e < CUVIL_VL && j * CUVIL_VL + e < left; e++) yr[j * ys + e * g->oh * g->ow + r] = v[e];
        }
    }
}

/* One out-of-line function per (blocks, width, full or narrow input block, clipping): C = CUVIL_VL (a blocked
 * input) unrolls the lane loop; the narrow input of a first layer (cb = 1, c < B lanes) reads g->c. */
typedef void (*nchwc_strip_fn)(STRIP_PARAMS);
#define STRIP_FN(NB, RW) \
    static __attribute__((noinline)) void nchwc_##NB##x##RW##_full(STRIP_PARAMS) { nchwc_strip(STRIP_ARGS, NB, RW, CUVIL_VL, 0); } \
    static __attribute__((noinline)) void nchwc_##NB##x##RW##_fullc(STRIP_PARAMS) { nchwc_strip(STRIP_ARGS, NB, RW, CUVIL_VL, 1); } \
    static __attribute__((noinline)) void nchwc_##NB##x##RW##_narrow(STRIP_PARAMS) { nchwc_strip(STRIP_ARGS, NB, RW, g->c, 0); } \
    static __attribute__((noinline)) void nchwc_##NB##x##RW##_narrowc(STRIP_PARAMS) { nchwc_strip(STRIP_ARGS, NB, RW, g->c, 1); }
#define STRIP_ROW(NB, RW) {nchwc_##NB##x##RW##_full, nchwc_##NB##x##RW##_fullc, nchwc_##NB##x##RW##_narrow, \
                           nchwc_##NB##x##RW##_narrowc}

#if CUVIL_VL == 16
#define NCHWC_WIDTHS 4
static const int nchwc_widths[NCHWC_WIDTHS] = {12, 7, 4, 1}; /* 7: the rows of a 7x7 map in one strip */
STRIP_FN(1, 12) STRIP_FN(1, 7) STRIP_FN(1, 4) STRIP_FN(1, 1) STRIP_FN(2, 12) STRIP_FN(2, 7) STRIP_FN(2, 4) STRIP_FN(2, 1)
static const nchwc_strip_fn nchwc_strips[2][NCHWC_WIDTHS][4] = {
    {STRIP_ROW(1, 12), STRIP_ROW(1, 7), STRIP_ROW(1, 4), STRIP_ROW(1, 1)},
    {STRIP_ROW(2, 12), STRIP_ROW(2, 7), STRIP_ROW(2, 4), STRIP_ROW(2, 1)}};
#else
#define NCHWC_WIDTHS 3
static const int nchwc_widths[NCHWC_WIDTHS] = {NCHWC_W0, NCHWC_W0 > 4 ? 4 : 2, 1};
#if NCHWC_W0 > 4
STRIP_FN(1, NCHWC_W0) STRIP_FN(1, 4) STRIP_FN(1, 1) STRIP_FN(2, NCHWC_W0) STRIP_FN(2, 4) STRIP_FN(2, 1)
static const nchwc_strip_fn nchwc_strips[2][NCHWC_WIDTHS][4] = {
    {STRIP_ROW(1, NCHWC_W0), STRIP_ROW(1, 4), STRIP_ROW(1, 1)}, {STRIP_ROW(2, NCHWC_W0), STRIP_ROW(2, 4), STRIP_ROW(2, 1)}};
#else
STRIP_FN(1, NCHWC_W0) STRIP_FN(1, 2) STRIP_FN(1, 1) STRIP_FN(2, NCHWC_W0) STRIP_FN(2, 2) STRIP_FN(2, 1)
static const nchwc_strip_fn nchwc_strips[2][NCHWC_WIDTHS][4] = {
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

/* One output row of NB output blocks; strips that reach a padded edge ([0, lo) or [hi, ow)) clip their taps. */
static void nchwc_row(STRIP_PARAMS, int NB, int64_t px, int64_t lo, int64_t hi)
{
    const int narrow = g->c != CUVIL_VL ? 2 : 0;
    for (int64_t ow = 0; ow < g->ow;) {
        int64_t at = ow;
        const int i = nchwc_choose(g->ow - ow, g->ow, &at), w = nchwc_widths[i];
        const int clip = at < lo || at + w > hi;
        nchwc_strips[NB - 1][i][narrow + clip](xn, wo, ws, bo, rr ? rr + at * CUVIL_VL : NULL, yr + at * px, ys,
                                               left, g, ih0, kh0, kh1, at * g->sw - g->pw, act);
        ow = at + w;
    }
}

int cuvil_conv_nchwc_block(void) { return CUVIL_VL; }

void cuvil_conv_nchwc(const float *x, const float *w, const float *bias, const float *res, float *y,
                      const int64_t *geom, int act)
{
    const nchwc_geom *g = (const nchwc_geom *)geom;
    if (g->n <= 0 || g->ob <= 0 || g->oh <= 0 || g->ow <= 0) return;
    int64_t lo, hi, unused; /* output columns whose every tap lies inside x */
    nchwc_taps(-g->pw, g->sw, g->ow, g->w, &lo, &unused);
    nchwc_taps((g->kw - 1) * g->dw - g->pw, g->sw, g->ow, g->w, &unused, &hi);
    if (hi < lo) hi = lo;
    const int64_t pairs = (g->ob + 1) / 2, ws = g->cb * g->kh * g->kw * g->c * CUVIL_VL;
    const int64_t ys = g->oh * g->ow * CUVIL_VL, rows = g->n * pairs * g->oh;
    const int nt = (int)min64(threads_for(rows * 2 * g->ow * ws), rows);
    /* Threads split (image, pair of output blocks, output row); an odd last block runs alone. */
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t p = 0; p < rows; p++) {
        const int64_t oh = p % g->oh, o = p / g->oh % pairs * 2, n = p / g->oh / pairs;
        const int64_t ih0 = oh * g->sh - g->ph, row = (n * g->ob + o) * g->oh + oh;
        int64_t kh0, kh1;
        nchwc_taps(ih0, g->dh, g->kh, g->h, &kh0, &kh1);
        const float *xn = x + n * g->cb * g->h * g->w * g->c, *wo = w + o * ws, *bo = bias + o * CUVIL_VL;
        const float *rr = res ? res + row * g->ow * CUVIL_VL : NULL;
        float *yr = g->oc ? y + (n * g->oc + o * CUVIL_VL) * g->oh * g->ow + oh * g->ow : y + row * g->ow * CUVIL_VL;
        const int64_t left = g->oc - o * CUVIL_VL, px = g->oc ? 1 : CUVIL_VL; /* plain output: channels left, step */
        nchwc_row(xn, wo, ws, bo, rr, yr, ys, left, g, ih0, kh0, kh1, 0, act, o + 1 < g->ob ? 2 : 1, px, lo, hi);
    }
}
