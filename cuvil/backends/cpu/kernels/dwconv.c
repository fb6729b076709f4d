/* Cuvil's depthwise 2-D convolution (one input channel per group, NCHW, fp32), any kernel, stride, dilation and
 * pads. A unit of its own (kernels.py), after cuvil_internal.h (its thread count and allocator).
 *
 * Each plane is first copied, zero-padded, into sh x sw phase planes of one thread's scratch: phase (a, b)
 * holds the padded input's rows a, a + sh, ... and columns b, b + sw, .... Every tap then reads a contiguous
 * run of one phase at a fixed offset, whatever the stride: an output laid out with the phases' pitch Q (the
 * row width plus a few junk columns) is a flat 1-D filter, vectorised over whole rows at once (7-wide rows
 * fill vectors too), with no bounds checks. Bands of rows go through an L1 buffer, whose valid columns take
 * the epilogue (clamp to [lo, hi]: relu, relu6) on their way out. */

enum { DW_H, DW_W, DW_OH, DW_OW, DW_KH, DW_KW, DW_SH, DW_SW, DW_DH, DW_DW, DW_PT, DW_PL, DW_FIELDS };
#define DW_BAND 2048 /* floats of output per band: 8 KB stays in L1 with the input rows it reads */

typedef struct {
    int64_t H, W, OH, OW, kh, kw, sh, sw, dh, dw, pt, pl;
    int64_t Q, rows, phase; /* pitch, rows and size (with slack for the last vector) of one phase plane */
    int64_t *off, *lo, *hi; /* each tap's offset in the phases; each column phase's columns inside x */
} dw_geom;

static pthread_key_t dw_key;
static pthread_once_t dw_key_once = PTHREAD_ONCE_INIT;

static void make_dw_key(void) { pthread_key_create(&dw_key, free); }

/* A thread's scratch of at least `floats`, kept (and grown) for the thread's life. */
static float *dw_scratch(int64_t floats)
{
    pthread_once(&dw_key_once, make_dw_key);
    int64_t *block = pthread_getspecific(dw_key);
    if (!block || block[0] < floats) {
        free(block);
        block = alloc_or_die(64 + sizeof(float) * floats);
        block[0] = floats;
        pthread_setspecific(dw_key, block);
    }
    return (float *)((char *)block + 64);
}

/* The [lo, hi) of c where c * step + start lies in [0, n), within [0, count). */
static void dw_inside(int64_t start, int64_t step, int64_t count, int64_t n, int64_t *lo, int64_t *hi)
{
    int64_t a = start < 0 ? (-start + step - 1) / step : 0, b = n - start <= 0 ? 0 : (n - start + step - 1) / step;
    *lo = min64(a, count);
    *hi = b < *lo ? *lo : min64(b, count);
}

/* The columns of row R inside x, into the phases of its column parity classes: dst_b[c] = src[c * sw + b - pl].
 * The pads around them were zeroed once per call and are never written. sw is a constant. */
CUVIL_INLINE void dw_fill_phases(const dw_geom *g, const float *restrict x, float *restrict buf, const int64_t sw)
{
    for (int64_t r = 0; r < g->rows; r++)
        for (int64_t a = 0; a < g->sh; a++) {
            const int64_t R = r * g->sh + a - g->pt;
            if (R < 0 || R >= g->H) continue;
            for (int64_t b = 0; b < sw; b++) {
                float *dst = buf + (a * sw + b) * g->phase + r * g->Q;
                const float *src = x + R * g->W + b - g->pl;
                if (sw == 1) {
                    memcpy(dst + g->lo[0], src + g->lo[0], sizeof(float) * (g->hi[0] - g->lo[0]));
                    continue;
                }
#pragma omp simd
                for (int64_t c = g->lo[b]; c < g->hi[b]; c++) dst[c] = src[c * sw];
            }
        }
}

/* out[0, n) (rounded up to vectors) = bias + sum over taps of w[t] * in[off[t] + i]. taps is a constant. */
CUVIL_INLINE void dw_band(float *restrict out, const float *restrict in, const int64_t *off, const float *w,
                          float bias, int64_t n, const int taps)
{
    for (int64_t i = 0; i < n; i += VL) {
        vf acc = cuvil_splat(bias);
#pragma GCC unroll 32
        for (int t = 0; t < taps; t++) acc += w[t] * cuvil_load(in + off[t] + i);
        cuvil_store(out + i, acc);
    }
}

CUVIL_INLINE float dw_clamp(float v, float lo, float hi)
{
    v = v < lo ? lo : v; /* NaN stays NaN, as in the references of relu and clip */
    return v > hi ? hi : v;
}

static void dw_plane(const dw_geom *g, const float *x, const float *w, float bias, float *y, float lo, float hi,
                     float *buf)
{
    const int taps = (int)(g->kh * g->kw);
    const int64_t *off = g->off;
    float band[DW_BAND + VL] __attribute__((aligned(64)));
    if (g->sw == 1) dw_fill_phases(g, x, buf, 1);
    else if (g->sw == 2) dw_fill_phases(g, x, buf, 2);
    else dw_fill_phases(g, x, buf, g->sw);
    const int64_t band_rows = g->Q >= DW_BAND ? 1 : DW_BAND / g->Q;
    for (int64_t oy = 0; oy < g->OH; oy += band_rows) {
        const int64_t nrows = min64(band_rows, g->OH - oy), n = nrows * g->Q;
        const float *in = buf + oy * g->Q;
        for (int64_t j = 0; j < n; j += DW_BAND) { /* one pass unless a row alone outgrows the band */
            const int64_t m = min64(DW_BAND, n - j);
            if (taps == 9) dw_band(band, in + j, off, w, bias, m, 9);
            else if (taps == 25) dw_band(band, in + j, off, w, bias, m, 25);
            else dw_band(band, in + j, off, w, bias, m, taps);
            for (int64_t r = 0; r < nrows; r++) { /* the valid columns of each row in this pass */
                const int64_t a = j > r * g->Q ? j : r * g->Q, b = min64(j + m, r * g->Q + g->OW);
                float *dst = y + (oy + r) * g->OW;
#pragma omp simd
                for (int64_t i = a; i < b; i++) dst[i - r * g->Q] = dw_clamp(band[i - j], lo, hi);
            }
        }
    }
}

/* The geometry of a call: phase sizes, tap offsets and column ranges, computed once for all planes. */
static dw_geom dw_plan(const int64_t *p)
{
    dw_geom g = {p[DW_H], p[DW_W], p[DW_OH], p[DW_OW], p[DW_KH], p[DW_KW], p[DW_SH], p[DW_SW], p[DW_DH],
                 p[DW_DW], p[DW_PT], p[DW_PL], 0, 0, 0, NULL, NULL, NULL};
    g.Q = g.OW + (g.kw - 1) * g.dw / g.sw;
    g.rows = g.OH + (g.kh - 1) * g.dh / g.sh;
    g.phase = (g.rows * g.Q + g.Q + VL + 15) / 16 * 16;
    g.off = alloc_or_die(sizeof(int64_t) * (g.kh * g.kw + 2 * g.sw));
    g.lo = g.off + g.kh * g.kw, g.hi = g.lo + g.sw;
    for (int64_t t = 0; t < g.kh * g.kw; t++) {
        int64_t ty = t / g.kw * g.dh, tx = t % g.kw * g.dw;
        g.off[t] = (ty % g.sh * g.sw + tx % g.sw) * g.phase + ty / g.sh * g.Q + tx / g.sw;
    }
    for (int64_t b = 0; b < g.sw; b++) dw_inside(b - g.pl, g.sw, g.Q, g.W, &g.lo[b], &g.hi[b]);
    return g;
}

/* Whether the sizes make a convolution this kernel can run in bounds: something to write (no output size <= 0),
 * a whole multiplier of outputs per input channel, windows of at least one tap and steps of at least one. Callers
 * check the relations of the conv's shape rule first; this is the kernel's own guard under them. */
static int dw_sizes_ok(int64_t batch, int64_t C, int64_t O, const int64_t *p)
{
    if (batch <= 0 || C <= 0 || O <= 0 || O % C != 0 || p[DW_H] < 0 || p[DW_W] < 0 || p[DW_PT] < 0 || p[DW_PL] < 0)
        return 0;
    for (int k = DW_OH; k <= DW_DW; k++)
        if (p[k] <= 0) return 0;
    return 1;
}

typedef struct {
    const dw_geom *g;
    int64_t C, O;
    const float *x, *w, *bias;
    float *y;
    float lo, hi;
} dw_job_t;

/* Planes [q0, q1) of batch x O, through this thread's scratch (pads, and slack that junk lanes read, zeroed). */
static int dw_planes(void *job, int64_t q0, int64_t q1)
{
    const dw_job_t *j = job;
    const dw_geom *g = j->g;
    const int64_t mult = j->O / j->C, in_plane = g->H * g->W, out_plane = g->OH * g->OW, taps = g->kh * g->kw;
    float *buf = dw_scratch(g->sh * g->sw * g->phase);
    memset(buf, 0, sizeof(float) * g->sh * g->sw * g->phase);
    for (int64_t q = q0; q < q1; q++) {
        const int64_t o = q % j->O;
        dw_plane(g, j->x + (q / j->O * j->C + o / mult) * in_plane, j->w + o * taps, j->bias ? j->bias[o] : 0.0f,
                 j->y + q * out_plane, j->lo, j->hi, buf);
    }
    return 0;
}

void cuvil_dwconv2d(int64_t batch, int64_t C, int64_t O, const float *x, const float *w, const float *bias,
                    float *y, const int64_t *geom, float lo, float hi)
{
    if (!dw_sizes_ok(batch, C, O, geom)) return;
    dw_geom g = dw_plan(geom);
    const int64_t out_plane = g.OH * g.OW, taps = g.kh * g.kw;
    dw_job_t job = {&g, C, O, x, w, bias, y, lo, hi};
    cuvil_parallel_team(batch * O, threads_for(batch * O * out_plane * taps), dw_planes, &job);
    free(g.off);
}

/* -- The blocked layout (the dwconv_nchwc op): x [n, cb, h, w, VL], w [cb, kh, kw, VL], bias [cb * VL], y [n, cb, oh,
 * ow, VL]. Each vector holds one pixel of VL channels, so every tap is one multiply-add of whole vectors whatever the
 * stride or the map's width: no phase planes, and a 7x7 map fills vectors as a 112x112 one does. A strip of DWB_W0
 * output pixels keeps its accumulators in registers over all taps; strips whose taps all fall inside the row skip
 * the bounds checks (all but the first and last of a row). */
enum { DWB_N, DWB_CB, DWB_H, DWB_W, DWB_OH, DWB_OW, DWB_KH, DWB_KW, DWB_SH, DWB_SW, DWB_PT, DWB_PL, DWB_DH, DWB_DW,
       DWB_FIELDS };
#define DWB_W0 8

typedef struct {
    const int64_t *g;
    const float *x, *w, *bias;
    float *y;
    int act;
} dwb_job_t;

/* RW output pixels from column ox0 of output row oy, channel block xc (its plane) with weights wc. RW, `checked`
 * and KW (the kernel's width; 0: g's) are constants at every call, so the loops over them unroll, acc lives in
 * registers and a stride-1 row's overlapping taps share their loads; `checked` strips test each tap's column. */
CUVIL_INLINE void dwb_strip(const int64_t *g, const float *restrict xc, const float *restrict wc, vf b,
                            float *restrict yr, int64_t ox0, int64_t oy, int act, const int RW, const int checked,
                            const int64_t KW)
{
    const int64_t kw = KW ? KW : g[DWB_KW];
    vf acc[DWB_W0];
#pragma GCC unroll 8
    for (int r = 0; r < RW; r++) acc[r] = b;
    for (int64_t ky = 0; ky < g[DWB_KH]; ky++) {
        const int64_t iy = oy * g[DWB_SH] - g[DWB_PT] + ky * g[DWB_DH];
        if (iy < 0 || iy >= g[DWB_H]) continue;
        const float *xrow = xc + iy * g[DWB_W] * VL;
#pragma GCC unroll 5
        for (int64_t kx = 0; kx < kw; kx++) {
            const vf wv = cuvil_load(wc + (ky * kw + kx) * VL);
            const int64_t ix0 = ox0 * g[DWB_SW] - g[DWB_PL] + kx * g[DWB_DW];
#pragma GCC unroll 8
            for (int r = 0; r < RW; r++) {
                const int64_t ix = ix0 + r * g[DWB_SW];
                if (!checked || (ix >= 0 && ix < g[DWB_W])) acc[r] += wv * cuvil_load(xrow + ix * VL);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RW; r++) {
        vf v = acc[r];
        if (act == CUVIL_ACT_RELU6) v = cuvil_select(v > cuvil_splat(6.0f), cuvil_splat(6.0f),
                                                     cuvil_select(v < cuvil_splat(0.0f), cuvil_splat(0.0f), v));
        else if (act) v = cuvil_activate(v, act);
        cuvil_store(yr + (ox0 + r) * VL, v);
    }
}

/* A whole strip of DWB_W0 pixels, with the kernel's width as a constant where it is 3 or 5 (MobileNets' kernels). */
static void dwb_full_strip(const int64_t *g, const float *xc, const float *wc, vf b, float *yr, int64_t ox0,
                           int64_t oy, int act, int checked)
{
    if (checked) dwb_strip(g, xc, wc, b, yr, ox0, oy, act, DWB_W0, 1, 0);
    else if (g[DWB_KW] == 3) dwb_strip(g, xc, wc, b, yr, ox0, oy, act, DWB_W0, 0, 3);
    else if (g[DWB_KW] == 5) dwb_strip(g, xc, wc, b, yr, ox0, oy, act, DWB_W0, 0, 5);
    else dwb_strip(g, xc, wc, b, yr, ox0, oy, act, DWB_W0, 0, 0);
}

/* The last `rw` < DWB_W0 pixels of a row, as one strip of that width (7x7 and 14x14 maps are mostly these). */
static void dwb_tail_strip(const int64_t *g, const float *xc, const float *wc, vf b, float *yr, int64_t ox0,
                           int64_t oy, int act, int64_t rw)
{
    switch (rw) {
    case 1: dwb_strip(g, xc, wc, b, yr, ox0, oy, act, 1, 1, 0); break;
    case 2: dwb_strip(g, xc, wc, b, yr, ox0, oy, act, 2, 1, 0); break;
    case 3: dwb_strip(g, xc, wc, b, yr, ox0, oy, act, 3, 1, 0); break;
    case 4: dwb_strip(g, xc, wc, b, yr, ox0, oy, act, 4, 1, 0); break;
    case 5: dwb_strip(g, xc, wc, b, yr, ox0, oy, act, 5, 1, 0); break;
    case 6: dwb_strip(g, xc, wc, b, yr, ox0, oy, act, 6, 1, 0); break;
    default: dwb_strip(g, xc, wc, b, yr, ox0, oy, act, 7, 1, 0); break;
    }
}

/* Whether a strip of `rw` pixels from ox0 reads only columns inside the row, every tap. */
static int dwb_inside(const int64_t *g, int64_t ox0, int64_t rw)
{
    const int64_t first = ox0 * g[DWB_SW] - g[DWB_PL];
    return first >= 0 && first + (rw - 1) * g[DWB_SW] + (g[DWB_KW] - 1) * g[DWB_DW] < g[DWB_W];
}

/* Output rows [q0, q1) of n x cb x oh. */
static int dwb_rows(void *job, int64_t q0, int64_t q1)
{
    const dwb_job_t *j = job;
    const int64_t *g = j->g, cb = g[DWB_CB], oh = g[DWB_OH], ow = g[DWB_OW], taps = g[DWB_KH] * g[DWB_KW];
    for (int64_t q = q0; q < q1; q++) {
        const int64_t oy = q % oh, c = q / oh % cb, plane = q / oh; /* plane: image * cb + c */
        const float *xc = j->x + plane * g[DWB_H] * g[DWB_W] * VL, *wc = j->w + c * taps * VL;
        const vf b = j->bias ? cuvil_load(j->bias + c * VL) : cuvil_splat(0.0f);
        float *yr = j->y + q * ow * VL;
        int64_t ox = 0;
        for (; ox + DWB_W0 <= ow; ox += DWB_W0)
            dwb_full_strip(g, xc, wc, b, yr, ox, oy, j->act, !dwb_inside(g, ox, DWB_W0));
        if (ox < ow) dwb_tail_strip(g, xc, wc, b, yr, ox, oy, j->act, ow - ox);
    }
    return 0;
}

void cuvil_dwconv_nchwc(const float *x, const float *w, const float *bias, float *y, const int64_t *geom, int act)
{
    for (int k = 0; k < DWB_FIELDS; k++)
        if (geom[k] <= 0 && k != DWB_PT && k != DWB_PL) return;
    if (geom[DWB_PT] < 0 || geom[DWB_PL] < 0) return;
    const int64_t rows = geom[DWB_N] * geom[DWB_CB] * geom[DWB_OH];
    dwb_job_t job = {geom, x, w, bias, y, act};
    cuvil_parallel_team(rows, threads_for(rows * geom[DWB_OW] * geom[DWB_KH] * geom[DWB_KW] * VL), dwb_rows, &job);
}

/* ---- the sum over H and W in the blocked layout (the spatial_sum_nchwc op: a global pool, squeeze-excite's mean) */

#define SPATIAL_SUM_RUN 256 /* pixels summed in float before their sum joins the double total */
typedef struct { const float *x; float *y; int64_t pixels; } spatial_sum_t;

/* Planes [p0, p1), each one pass over its pixels in vectors of VL lanes (four chains, so that no add waits on the
 * one before), in float over runs of SPATIAL_SUM_RUN pixels added into double, as the loop kernels' long sums are. */
static int spatial_sum_planes(void *job, int64_t p0, int64_t p1)
{
    const spatial_sum_t *j = job;
    for (int64_t p = p0; p < p1; p++) {
        const float *x = j->x + p * j->pixels * VL;
        double total[VL] = {0};
        for (int64_t r0 = 0; r0 < j->pixels; r0 += SPATIAL_SUM_RUN) {
            const int64_t r1 = min64(r0 + SPATIAL_SUM_RUN, j->pixels);
            vf s[4] = {cuvil_splat(0.0f), cuvil_splat(0.0f), cuvil_splat(0.0f), cuvil_splat(0.0f)};
            int64_t r = r0;
            for (; r + 4 <= r1; r += 4)
                for (int u = 0; u < 4; u++) s[u] += cuvil_load(x + (r + u) * VL);
            for (; r < r1; r++) s[0] += cuvil_load(x + r * VL);
            const vf run = (s[0] + s[1]) + (s[2] + s[3]);
            for (int l = 0; l < VL; l++) total[l] += run[l];
        }
        for (int l = 0; l < VL; l++) j->y[p * VL + l] = (float)total[l];
    }
    return 0;
}

void cuvil_spatial_sum_nchwc(const float *x, float *y, int64_t planes, int64_t pixels)
{
    if (planes <= 0) return;
    if (pixels <= 0) {
        memset(y, 0, sizeof(float) * planes * VL);
        return;
    }
    spatial_sum_t job = {x, y, pixels};
    cuvil_parallel_team(planes, threads_for(planes * pixels * VL), spatial_sum_planes, &job);
}
