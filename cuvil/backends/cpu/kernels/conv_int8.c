/* Cuvil's direct int8 convolution (the qconv_i8 op): uint8 activations x int8 weights, int32 accumulation, the
 * epilogue of gemm_int8.c (dequantise or requantise, bias, residual, activation), NCHW in and out.
 *
 * An implicit GEMM with pixels along the vector lanes, so there is no im2col matrix and the result of a block is
 * 16 consecutive pixels of one output channel, stored as they are into NCHW:
 *   - the image is copied once, quantised if it is f32, into groups of 4 channels, [C/4][pixel][4] bytes, the
 *     zero point around it as padding, split into its SH x SW phases (padded row u * SH + a, column v * SW + b):
 *     a tap (ky, kx) reads one phase shifted by (ky / SH) * Wp + kx / SW (dilations included), so every output
 *     pixel is a "virtual" pixel oy * Wp + ox of a phase, those with ox >= OW dropped. At stride 1 the one phase
 *     is the padded image;
 *   - the weight is packed once (cuvil_qconv_pack) into blocks of 8 output channels, [O/8][tap][C/4][8][4], so
 *     one 4-byte group of a channel is the broadcast operand of vpdpbusd against 16 pixels x 4 channels;
 *   - a register block is 8 channels x 48 pixels (24 accumulators); blocks run on Cuvil's pool;
 *   - on AMX, few input channels (C * KH * KW <= 256, ResNet's 3-channel 7x7 stem) run unfolded instead, as a 1x1
 *     conv over groups of 4 kx (qc_unfold_*): 48 groups of the stem in 3 tiles against 49 taps of one group.
 * The paths (cuvil_int8_isa: 3 VNNI, 2 AVX-512BW, 1 AVX2, 0 C) share these layouts and are exact: the 16-bit ones
 * split each 4-byte group into its even and odd bytes for vpmaddwd, so every path gives the same answer.
 */

#define QC_OB 8                         /* output channels per block (int8) */
#define QC_OB_MAX 16                    /* ... the most of any kernel sharing this driver (conv_lowp.c) */
#define QC_LANES 16                     /* pixels per 512-bit vector */
#define QC_NV 3                         /* vectors per register block */
#define QC_PIX (QC_LANES * QC_NV)       /* pixels per register block */

typedef struct {
    int64_t n, c, h, w, o, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
} qconv_geom;

/* Where the copied image lives and how a tap reads it: buf[phase][channel group][plane pixels][4 bytes]. */
typedef struct {
    int64_t c4, taps, wp, pv, rows, plane, phases; /* c4: channel groups; wp: virtual row width; pv: oh * wp */
    int64_t *toff;                                 /* per tap: the pixel offset of what it reads */
    uint8_t *buf;
} qconv_layout;

static int64_t qc_c4(int64_t c) { return (c + 3) / 4; }
static int64_t qc_blocks(int64_t o) { return (o + QC_OB - 1) / QC_OB; }

static qconv_geom qc_geom(const int64_t *g)
{
    qconv_geom q = {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14]};
    return q;
}

/* `groups` of channels (4 bytes per pixel each); the rest follows from the geometry. */
static void qc_shape(const qconv_geom *g, int64_t groups, qconv_layout *l)
{
    l->c4 = groups, l->taps = g->kh * g->kw, l->phases = g->sh * g->sw;
    l->wp = g->ow + (g->kw - 1) * g->dw / g->sw;
    l->rows = g->oh + (g->kh - 1) * g->dh / g->sh;
    l->plane = l->rows * l->wp + (l->wp - g->ow) + QC_LANES; /* a block's last vector reads past the rows */
    l->pv = g->oh * l->wp;
}

/* AMX-INT8 (path 4) where C is whole tiles of 16 groups; its weight layout follows the others' in the packing,
 * [O/16][tap][C/64][16 channels][16 groups][4]: a block's A tile per tap and 64 channels is 1 KB in a row. */
#define QC_AMX_OB 16
static int qc_amx_layout(int64_t C) { return QGEMM_AMX && C % 64 == 0 && amx_int8_usable(); }

/* Few input channels (ResNet's stem: 3 channels, 7x7): the image unfolded (see "unfolded" below) into a 1x1 conv
 * over C * KH * ceil(KW / 4) groups of 4 kx, whole AMX tiles of them, instead of KH * KW taps of one group each. */
static int64_t qc_unfold_groups(int64_t C, int64_t KH, int64_t KW, int64_t per)
{
    return (C * KH * ((KW + per - 1) / per) + 15) / 16 * 16;
}
static int qc_unfolds(int64_t C, int64_t KH, int64_t KW) { return C * KH * KW <= 256 && KH * KW > 1; }
static int qc_amx_unfolded(int64_t C, int64_t KH, int64_t KW)
{
    return QGEMM_AMX && C % 64 && qc_unfolds(C, KH, KW) && amx_int8_usable();
}
static int64_t qc_amx_at(int64_t O, int64_t C, int64_t KH, int64_t KW) /* where its layout starts */
{
    return qc_blocks(O) * KH * KW * qc_c4(C) * QC_OB * 4 + qc_blocks(O) * QC_OB * 4;
}

int64_t cuvil_qconv_packed_bytes(int64_t O, int64_t C, int64_t KH, int64_t KW)
{
    int64_t ob = (O + QC_AMX_OB - 1) / QC_AMX_OB * QC_AMX_OB;
    int64_t amx = qc_amx_layout(C) ? ob * KH * KW * C
                  : qc_amx_unfolded(C, KH, KW) ? ob * qc_unfold_groups(C, KH, KW, 4) * 4 : 0;
    return qc_amx_at(O, C, KH, KW) + amx;
}

static void qc_pack_amx(int64_t O, int64_t C, int64_t taps, const int8_t *W, int8_t *p)
{
    int64_t chunks = C / 64;
    memset(p, 0, (size_t)((O + QC_AMX_OB - 1) / QC_AMX_OB * QC_AMX_OB * taps * C));
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t t = 0; t < taps; t++)
                p[(((o / QC_AMX_OB) * taps + t) * chunks + c / 64) * 1024 + (o % QC_AMX_OB) * 64 + c % 64] =
                    W[(o * C + c) * taps + t];
}

/* The unfolded weight, [O][group][4 kx] (kx past KW and groups past C * KH * runs 0), in qc_pack_amx's layout
 * with one tap. */
static void qc_pack_unfolded(int64_t O, int64_t C, int64_t KH, int64_t KW, const int8_t *W, int8_t *p)
{
    int64_t chunks = qc_unfold_groups(C, KH, KW, 4) / 16, runs = (KW + 3) / 4;
    memset(p, 0, (size_t)((O + QC_AMX_OB - 1) / QC_AMX_OB * QC_AMX_OB * chunks * 64));
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t ky = 0; ky < KH; ky++)
                for (int64_t kx = 0; kx < KW; kx++) {
                    int64_t k = ((c * KH + ky) * runs + kx / 4) * 4 + kx % 4;
                    p[((o / QC_AMX_OB) * chunks + k / 64) * 1024 + (o % QC_AMX_OB) * 64 + k % 64] =
                        W[((o * C + c) * KH + ky) * KW + kx];
                }
}

void cuvil_qconv_pack(int64_t O, int64_t C, int64_t KH, int64_t KW, const int8_t *W, void *packed)
{
    int64_t taps = KH * KW, c4 = qc_c4(C), nob = qc_blocks(O);
    int8_t *p = (int8_t *)packed;
    int32_t *sums = (int32_t *)(p + nob * taps * c4 * QC_OB * 4);
    memset(p, 0, (size_t)(nob * taps * c4 * QC_OB * 4));
    for (int64_t o = 0; o < nob * QC_OB; o++) {
        int32_t s = 0;
        for (int64_t c = 0; o < O && c < C; c++)
            for (int64_t t = 0; t < taps; t++) {
                int8_t w = W[(o * C + c) * taps + t];
                p[(((o / QC_OB) * taps + t) * c4 + c / 4) * QC_OB * 4 + (o % QC_OB) * 4 + c % 4] = w;
                s += w;
            }
        sums[o] = s;
    }
    if (qc_amx_layout(C)) qc_pack_amx(O, C, taps, W, p + qc_amx_at(O, C, KH, KW));
    if (qc_amx_unfolded(C, KH, KW)) qc_pack_unfolded(O, C, KH, KW, W, p + qc_amx_at(O, C, KH, KW));
}

static int64_t qc_unfold_scratch(const qconv_geom *g, int64_t groups, int64_t es);

int64_t cuvil_qconv_scratch_bytes(const int64_t *g)
{
    qconv_geom q = qc_geom(g);
    qconv_layout l;
    qc_shape(&q, qc_c4(q.c), &l);
    int64_t direct = (l.taps * 8 + 63) / 64 * 64 + l.phases * l.c4 * l.plane * 4;
    if (!qc_amx_unfolded(q.c, q.kh, q.kw) || q.oh <= 0 || q.ow <= 0) return direct;
    int64_t unfolded = qc_unfold_scratch(&q, qc_unfold_groups(q.c, q.kh, q.kw, 4), 1);
    return direct > unfolded ? direct : unfolded;
}

/* -- the image, quantised, in groups of 4 channels --------------------------------------------------------- */
typedef struct {
    const qconv_geom *g;
    const qconv_layout *l;
    const void *x; /* one image, [C, H, W] */
    int kind;      /* QC_FROM_U8 (copied), QC_FROM_F32 (quantised), QC_TO_BF16 (f32 rounded to bf16, 2 per group) */
    float inv;
    int32_t zero;
} qc_fill_job;

enum { QC_FROM_U8 = 0, QC_FROM_F32 = 1, QC_TO_BF16 = 2 };

static inline uint8_t qc_quantize(float v, float inv, int32_t zero)
{
    float q = rintf(v * inv) + (float)zero;
    return (uint8_t)(q < 0.0f ? 0.0f : q > 255.0f ? 255.0f : q);
}

/* bf16: one channel's row of a plane, columns q in [q0, q1) read src[q * cs], into every other 16 bits of dst. */
static void qc_fill_row_bf16(const float *src, int64_t cs, int64_t q0, int64_t q1, uint8_t *dst)
{
    uint16_t *d = (uint16_t *)dst;
    for (int64_t q = q0; q < q1; q++) d[q * 2] = lp_f32_to_bf16(src[q * cs]);
}

/* int8: a group of 4 channels' row, quantised or copied; each pixel's 4 bytes one 32-bit store, vectorised. */
static void qc_fill_group_row(const qc_fill_job *j, const void *const src[4], int64_t cs, int64_t q0, int64_t q1,
                              uint8_t *dst)
{
    uint32_t *d = (uint32_t *)dst;
    if (j->kind == QC_FROM_U8) {
        const uint8_t *s0 = src[0], *s1 = src[1], *s2 = src[2], *s3 = src[3];
#pragma omp simd
        for (int64_t q = q0; q < q1; q++)
            d[q] = (uint32_t)s0[q * cs] | (uint32_t)s1[q * cs] << 8 | (uint32_t)s2[q * cs] << 16 |
                   (uint32_t)s3[q * cs] << 24;
    } else {
        const float *s0 = src[0], *s1 = src[1], *s2 = src[2], *s3 = src[3];
        float inv = j->inv;
        int32_t z = j->zero;
#pragma omp simd
        for (int64_t q = q0; q < q1; q++)
            d[q] = (uint32_t)qc_quantize(s0[q * cs], inv, z) | (uint32_t)qc_quantize(s1[q * cs], inv, z) << 8 |
                   (uint32_t)qc_quantize(s2[q * cs], inv, z) << 16 | (uint32_t)qc_quantize(s3[q * cs], inv, z) << 24;
    }
}

static int64_t qc_ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

/* Whether a tap k < n (dilation d, stride s) reads phase a. */
static int qc_phase_read(int64_t n, int64_t d, int64_t s, int64_t a)
{
    for (int64_t k = 0; k < n; k++)
        if (k * d % s == a) return 1;
    return 0;
}

/* Plane i = (phase (a, b), channel group): rows u of width wp read input row u * SH + a - pt, column
 * v * SW + b - pl. A phase no tap reads is left as it is. */
static int qc_fill_planes(void *ctx, int64_t lo, int64_t hi)
{
    const qc_fill_job *j = (const qc_fill_job *)ctx;
    const qconv_geom *g = j->g;
    const qconv_layout *l = j->l;
    int64_t hw = g->h * g->w, size = j->kind == QC_FROM_U8 ? 1 : 4, per = j->kind == QC_TO_BF16 ? 2 : 4;
    for (int64_t i = lo; i < hi; i++) {
        int64_t ph = i / l->c4, c0 = (i % l->c4) * per, a = ph / g->sw, b = ph % g->sw;
        if (!qc_phase_read(g->kh, g->dh, g->sh, a) || !qc_phase_read(g->kw, g->dw, g->sw, b)) continue;
        int64_t y0 = a - g->pt, x0 = b - g->pl;
        int64_t q0 = qc_ceil_div(-x0, g->sw), q1 = qc_ceil_div(g->w - x0, g->sw);
        q0 = q0 < 0 ? 0 : q0, q1 = q1 > l->wp ? l->wp : q1;
        uint8_t *dst = l->buf + i * l->plane * 4;
        memset(dst, (int)j->zero, (size_t)(l->plane * 4));
        for (int64_t u = 0; u < l->rows && q0 < q1; u++) {
            int64_t iy = u * g->sh + y0;
            if (iy < 0 || iy >= g->h) continue;
            const void *src[4]; /* int8: a group's channels past C repeat its first (their weights are 0) */
            for (int64_t c = c0; c < c0 + per; c++)
                src[c - c0] = (const uint8_t *)j->x + ((c < g->c ? c : c0) * hw + iy * g->w + x0) * size;
            if (per == 4) {
                qc_fill_group_row(j, src, g->sw, q0, q1, dst + u * l->wp * 4);
                continue;
            }
            /* bf16: channels past C stay 0 (a copy times a 0 weight would give NaN for an infinite input) */
            for (int64_t c = c0; c < c0 + per && c < g->c; c++)
                qc_fill_row_bf16(src[c - c0], g->sw, q0, q1, dst + u * l->wp * 4 + (c - c0) * 2);
        }
    }
    return 0;
}

/* -- unfolded: few input channels as a 1x1 conv ------------------------------------------------------------ */
/* Group (c, ky, r) of output pixel p is the `per` elements (4 uint8 or 2 bf16) at kx = r * per + i of its window's
 * row ky in channel c: C * KH * ceil(KW / per) groups (then whole tiles of 16 with padding), one tap, one phase.
 * The image is first copied, quantised or rounded, into a padded copy xq (element size es, the zero point or 0
 * around it), each of whose rows the groups then gather, 16 pixels per byte permutation where AVX512_VBMI is. */
typedef struct {
    const qconv_geom *g;  /* the conv's own geometry */
    const qconv_layout *l; /* the 1x1 layout the groups fill */
    const void *x;
    int kind;
    float inv;
    int32_t zero;
    int64_t es, per, runs, hq, wq; /* xq: [C][hq][wq] elements of es bytes */
    uint8_t *xq;
} qc_unfold_job;

static qc_unfold_job qc_unfold_shape(const qconv_geom *g, int64_t es)
{
    qc_unfold_job u = {0};
    u.g = g, u.es = es, u.per = 4 / es, u.runs = (g->kw + u.per - 1) / u.per;
    u.hq = (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    u.wq = (g->ow - 1) * g->sw + (u.runs * u.per - 1) * g->dw + 1 + 64; /* 64: a vector read past the last pixel */
    return u;
}

/* The 1x1 geometry the blocks run on: the conv's output, groups * per channels. */
static qconv_geom qc_unfolded_geom(const qconv_geom *g, int64_t groups, int64_t per)
{
    qconv_geom q = {g->n, groups * per, g->oh, g->ow, g->o, g->oh, g->ow, 1, 1, 1, 1, 1, 1, 0, 0};
    return q;
}

static int64_t qc_unfold_scratch(const qconv_geom *g, int64_t groups, int64_t es)
{
    qconv_geom q = qc_unfolded_geom(g, groups, 4 / es);
    qconv_layout l;
    qc_shape(&q, groups, &l);
    qc_unfold_job u = qc_unfold_shape(g, es);
    return 64 + groups * l.plane * 4 + g->c * u.hq * u.wq * es;
}

/* Rows [lo, hi) of xq (row i: channel i / hq, padded row i % hq): columns [pl, pl + W) the image's row, if any. */
static int qc_unfold_pad(void *ctx, int64_t lo, int64_t hi)
{
    const qc_unfold_job *u = (const qc_unfold_job *)ctx;
    const qconv_geom *g = u->g;
    for (int64_t i = lo; i < hi; i++) {
        int64_t c = i / u->hq, iy = i % u->hq - g->pt, x0 = g->pl;
        int64_t x1 = iy >= 0 && iy < g->h ? min64(x0 + g->w, u->wq) : x0;
        uint8_t *d = u->xq + i * u->wq * u->es;
        memset(d, u->es == 2 ? 0 : (int)u->zero, (size_t)(u->wq * u->es)); /* bf16: padded with 0 */
        if (x1 <= x0) continue;
        int64_t at = (c * g->h + iy) * g->w;
        if (u->es == 2) {
            uint16_t *d16 = (uint16_t *)d + x0;
            const float *src = (const float *)u->x + at;
            for (int64_t q = 0; q < x1 - x0; q++) d16[q] = lp_f32_to_bf16(src[q]);
        } else if (u->kind == QC_FROM_U8) {
            memcpy(d + x0, (const uint8_t *)u->x + at, (size_t)(x1 - x0));
        } else {
            const float *src = (const float *)u->x + at;
            float inv = u->inv;
            int32_t z = u->zero;
#pragma omp simd
            for (int64_t q = 0; q < x1 - x0; q++) d[x0 + q] = qc_quantize(src[q], inv, z);
        }
    }
    return 0;
}

#ifdef CUVIL_X86
/* qc_unfold_row's pixels 16 at a time, each 64-byte read permuted into 16 pixels' groups; returns how many. */
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static int64_t
qc_unfold_row_vbmi(const qc_unfold_job *u, const uint8_t *idx, uint64_t live, const uint8_t *src, uint8_t *dst)
{
    const qconv_geom *g = u->g;
    int64_t es = u->es;
    const __m512i perm = _mm512_loadu_si512(idx);
    int64_t ox = 0;
    for (; ox < g->ow; ox += 16) {
        __m512i v = _mm512_maskz_permutexvar_epi8((__mmask64)live, perm, _mm512_loadu_si512(src + ox * g->sw * es));
        int64_t n = g->ow - ox < 16 ? g->ow - ox : 16;
        _mm512_mask_storeu_epi8(dst + ox * 4, n == 16 ? ~(__mmask64)0 : (((__mmask64)1 << (n * 4)) - 1), v);
    }
    return ox;
}
#endif

/* One output row of a group: pixel ox's 4 bytes are the elements at (ox * sw + i * dw), i < n, of src, then 0
 * (kx past KW: a bf16 copy there times its 0 weight would give NaN for an infinite input). idx, live: the
 * permutation and the bytes it keeps (idx NULL: no VBMI). */
static void qc_unfold_row(const qc_unfold_job *u, const uint8_t *idx, uint64_t live, int64_t n, const uint8_t *src,
                          uint8_t *dst)
{
    const qconv_geom *g = u->g;
    int64_t ox = 0, es = u->es;
#ifdef CUVIL_X86
    if (idx) ox = qc_unfold_row_vbmi(u, idx, live, src, dst);
#else
    (void)idx, (void)live;
#endif
    for (; ox < g->ow; ox++)
        for (int64_t i = 0; i < u->per; i++) {
            if (i < n) memcpy(dst + ox * 4 + i * es, src + (ox * g->sw + i * g->dw) * es, (size_t)es);
            else memset(dst + ox * 4 + i * es, 0, (size_t)es);
        }
}

/* Whether 16 pixels' groups lie within one 64-byte read, and AVX512_VBMI is there and not masked. */
static int qc_unfold_vbmi(const qc_unfold_job *u)
{
#ifdef CUVIL_X86
    __builtin_cpu_init();
    return (15 * u->g->sw + (u->per - 1) * u->g->dw) * u->es + u->es - 1 < 64 &&
           __builtin_cpu_supports("avx512vbmi") && !lp_masked("avx512vbmi");
#else
    (void)u;
    return 0;
#endif
}

/* Planes [lo, hi) of the layout: group i, or padding (the zero point: its weights are 0) past the real ones. */
static int qc_unfold_fill(void *ctx, int64_t lo, int64_t hi)
{
    const qc_unfold_job *u = (const qc_unfold_job *)ctx;
    const qconv_geom *g = u->g;
    const qconv_layout *l = u->l;
    int64_t real = g->c * g->kh * u->runs, row = u->wq * u->es;
    uint8_t idx[64], pad = u->es == 2 ? 0 : (uint8_t)u->zero; /* idx: the permutation of 16 pixels' groups */
    for (int64_t b = 0; b < 64; b++)
        idx[b] = (uint8_t)(((b / 4) * g->sw + (b % 4) / u->es * g->dw) * u->es + b % u->es);
    const uint8_t *perm = qc_unfold_vbmi(u) ? idx : NULL;
    for (int64_t i = lo; i < hi; i++) {
        uint8_t *dst = l->buf + i * l->plane * 4;
        if (i >= real) {
            memset(dst, pad, (size_t)(l->plane * 4));
            continue;
        }
        int64_t c = i / (g->kh * u->runs), ky = i / u->runs % g->kh, r = i % u->runs;
        const uint8_t *src = u->xq + (c * u->hq + ky * g->dh) * row + r * u->per * g->dw * u->es;
        int64_t n = min64(u->per, g->kw - r * u->per);
        uint64_t live = 0;
        for (int64_t b = 0; b < 64; b++) live |= (uint64_t)((b % 4) / u->es < n) << b;
        for (int64_t oy = 0; oy < g->oh; oy++)
            qc_unfold_row(u, perm, live, n, src + oy * g->sh * row, dst + oy * g->ow * 4);
        memset(dst + l->pv * 4, pad, (size_t)((l->plane - l->pv) * 4));
    }
    return 0;
}

/* -- register blocks: acc[j][p] = sum over taps and channel groups of A[p, 4 bytes] . W[j, 4 bytes] ---------- */
typedef union {
    int32_t i[QC_OB_MAX][QC_PIX];
    float f[QC_OB_MAX][QC_PIX];
} qc_acc;

/* acc = the block of channels at w (the packed weight of one block) x virtual pixels [vp0, vp0 + 16 nv). */
typedef void (*qc_tile_fn)(int nv, const qconv_layout *l, int64_t vp0, const void *w, qc_acc *acc);

typedef struct {
    const qconv_geom *g;
    const qconv_layout *l;
    qc_tile_fn tile;
    int ob, lowp;    /* channels per block; lowp: acc is f32 (conv_lowp.c), else int32 with the int8 epilogue */
    int64_t wblock;  /* bytes of packed weight per block */
    const uint8_t *w;
    const int32_t *sums;
    float sa;
    int32_t za;
    const float *w_scale, *bias, *res;
    int act;
    void *y; /* one image's output, [O, OH, OW] */
    float out_scale;
    int32_t out_zero;
    const uint8_t *res_u8; /* a uint8 residual instead of res: (r - res_zero) * res_scale is added */
    float res_scale;
    int32_t res_zero;
    int isa; /* cuvil_int8_isa (AVX-512BW from 2 on): the epilogue in 512-bit registers (qc_channel512) */
} qc_job;

static void qc_tile_scalar(int nv, const qconv_layout *l, int64_t vp0, const void *w, qc_acc *acc)
{
    int64_t np = nv * QC_LANES;
    for (int jo = 0; jo < QC_OB; jo++)
        for (int64_t p = 0; p < np; p++) acc->i[jo][p] = 0;
    for (int64_t t = 0; t < l->taps; t++)
        for (int64_t c = 0; c < l->c4; c++) {
            const uint8_t *a = l->buf + (l->toff[t] + c * l->plane + vp0) * 4;
            const int8_t *wc = (const int8_t *)w + (t * l->c4 + c) * QC_OB * 4;
            for (int jo = 0; jo < QC_OB; jo++)
                for (int64_t p = 0; p < np; p++)
                    for (int i = 0; i < 4; i++) acc->i[jo][p] += (int32_t)a[p * 4 + i] * wc[jo * 4 + i];
        }
}

#ifdef CUVIL_X86
#define QC_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define QC_BW_TARGET __attribute__((target("avx512f,avx512bw")))

static inline __attribute__((always_inline)) QC_VNNI_TARGET void
qc_vnni_body(const int nv, const qconv_layout *l, int64_t vp0, const void *w, qc_acc *acc)
{
    __m512i c[QC_OB][QC_NV];
    for (int jo = 0; jo < QC_OB; jo++)
        for (int v = 0; v < nv; v++) c[jo][v] = _mm512_setzero_si512();
    for (int64_t t = 0; t < l->taps; t++) {
        const uint8_t *a = l->buf + (l->toff[t] + vp0) * 4;
        const int8_t *wc = (const int8_t *)w + t * l->c4 * QC_OB * 4;
        for (int64_t g = 0; g < l->c4; g++, a += l->plane * 4, wc += QC_OB * 4) {
            __m512i av[QC_NV];
            for (int v = 0; v < nv; v++) av[v] = _mm512_loadu_si512(a + v * 64);
            for (int jo = 0; jo < QC_OB; jo++) {
                __m512i b = _mm512_set1_epi32(load4((const uint8_t *)wc + jo * 4));
                for (int v = 0; v < nv; v++) c[jo][v] = _mm512_dpbusd_epi32(c[jo][v], av[v], b);
            }
        }
    }
    for (int jo = 0; jo < QC_OB; jo++)
        for (int v = 0; v < nv; v++) _mm512_storeu_si512(acc->i[jo] + v * QC_LANES, c[jo][v]);
}

QC_VNNI_TARGET static void qc_tile_vnni(int nv, const qconv_layout *l, int64_t vp0, const void *w,
                                        qc_acc *acc)
{
    if (nv == 3) qc_vnni_body(3, l, vp0, w, acc);
    else if (nv == 2) qc_vnni_body(2, l, vp0, w, acc);
    else qc_vnni_body(1, l, vp0, w, acc);
}

static inline __attribute__((always_inline)) QC_BW_TARGET void
qc_bw_body(const int nv, const qconv_layout *l, int64_t vp0, const void *w, qc_acc *acc)
{
    const __m512i low = _mm512_set1_epi16(0xff);
    __m512i c[QC_OB][QC_NV];
    for (int jo = 0; jo < QC_OB; jo++)
        for (int v = 0; v < nv; v++) c[jo][v] = _mm512_setzero_si512();
    for (int64_t t = 0; t < l->taps; t++) {
        const uint8_t *a = l->buf + (l->toff[t] + vp0) * 4;
        const int8_t *wc = (const int8_t *)w + t * l->c4 * QC_OB * 4;
        for (int64_t g = 0; g < l->c4; g++, a += l->plane * 4, wc += QC_OB * 4) {
            __m512i ae[QC_NV], ao[QC_NV];
            for (int v = 0; v < nv; v++) {
                __m512i av = _mm512_loadu_si512(a + v * 64);
                ae[v] = _mm512_and_si512(av, low), ao[v] = _mm512_srli_epi16(av, 8);
            }
            for (int jo = 0; jo < QC_OB; jo++) {
                __m512i b = _mm512_set1_epi32(load4((const uint8_t *)wc + jo * 4));
                __m512i be = _mm512_srai_epi16(_mm512_slli_epi16(b, 8), 8), bo = _mm512_srai_epi16(b, 8);
                for (int v = 0; v < nv; v++)
                    c[jo][v] = _mm512_add_epi32(c[jo][v], _mm512_add_epi32(_mm512_madd_epi16(ae[v], be),
                                                                           _mm512_madd_epi16(ao[v], bo)));
            }
        }
    }
    for (int jo = 0; jo < QC_OB; jo++)
        for (int v = 0; v < nv; v++) _mm512_storeu_si512(acc->i[jo] + v * QC_LANES, c[jo][v]);
}

QC_BW_TARGET static void qc_tile_bw(int nv, const qconv_layout *l, int64_t vp0, const void *w,
                                    qc_acc *acc)
{
    if (nv == 3) qc_bw_body(3, l, vp0, w, acc);
    else if (nv == 2) qc_bw_body(2, l, vp0, w, acc);
    else qc_bw_body(1, l, vp0, w, acc);
}

/* AVX2: one vector of 8 pixels at a time against all 8 channels (8 accumulators). */
__attribute__((target("avx2"))) static void qc_tile_avx2(int nv, const qconv_layout *l, int64_t vp0,
                                                         const void *w, qc_acc *acc)
{
    const __m256i low = _mm256_set1_epi16(0xff);
    for (int64_t u = 0; u < 2 * nv; u++) {
        __m256i c[QC_OB];
        for (int jo = 0; jo < QC_OB; jo++) c[jo] = _mm256_setzero_si256();
        for (int64_t t = 0; t < l->taps; t++) {
            const uint8_t *a = l->buf + (l->toff[t] + vp0 + u * 8) * 4;
            const int8_t *wc = (const int8_t *)w + t * l->c4 * QC_OB * 4;
            for (int64_t g = 0; g < l->c4; g++, a += l->plane * 4, wc += QC_OB * 4) {
                __m256i av = _mm256_loadu_si256((const __m256i *)a);
                __m256i ae = _mm256_and_si256(av, low), ao = _mm256_srli_epi16(av, 8);
                for (int jo = 0; jo < QC_OB; jo++) {
                    __m256i b = _mm256_set1_epi32(load4((const uint8_t *)wc + jo * 4));
                    __m256i be = _mm256_srai_epi16(_mm256_slli_epi16(b, 8), 8), bo = _mm256_srai_epi16(b, 8);
                    c[jo] = _mm256_add_epi32(c[jo], _mm256_add_epi32(_mm256_madd_epi16(ae, be),
                                                                     _mm256_madd_epi16(ao, bo)));
                }
            }
        }
        for (int jo = 0; jo < QC_OB; jo++) _mm256_storeu_si256((__m256i *)(acc->i[jo] + u * 8), c[jo]);
    }
}
#endif

static qc_tile_fn qc_tile_for(int isa)
{
#ifdef CUVIL_X86
    if (isa >= 3) return qc_tile_vnni;
    if (isa == 2) return qc_tile_bw;
    if (isa == 1) return qc_tile_avx2;
#endif
    (void)isa;
    return qc_tile_scalar;
}

/* -- epilogue: the lanes of one channel, computed whole (vectorised), then stored run by run ----------------- */
/* A run of a virtual row: lanes [i, i + n) are output pixels [p, p + n). */
typedef struct {
    int64_t i, n, p;
} qc_run;

static int qc_runs(const qc_job *j, int64_t vp0, int64_t nvp, qc_run *runs)
{
    int64_t wp = j->l->wp, ow = j->g->ow;
    int count = 0;
    for (int64_t i = 0; i < nvp;) {
        int64_t vp = vp0 + i, oy = vp / wp, ox = vp % wp, left = nvp - i < wp - ox ? nvp - i : wp - ox;
        if (ox < ow) runs[count++] = (qc_run){i, left < ow - ox ? left : ow - ox, oy * ow + ox};
        i += left;
    }
    return count;
}

#ifdef __FMA__ /* fused where the 512-bit epilogue below is, so that every path gives the same bits at every -O */
#define QC_FMA(a, b, c) fmaf(a, b, c)
#else
#define QC_FMA(a, b, c) ((a) * (b) + (c))
#endif

#ifdef CUVIL_X86
/* The generic epilogue below in 512-bit registers, operation for operation (its bits), for the AVX-512 paths: the
 * generic one went through y[] in memory, and GCC's 256-bit stores of it stalled the 512-bit loads after them (the
 * uint8-writing 3x3 conv's epilogue took longer than its AMX tiles). Residuals and results move run by run as
 * masked loads and stores; lanes outside every run (ox >= OW) compute garbage that is never stored. */
#define QC_X512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

static inline QC_X512 __m512 qc_fmadd512(__m512 a, __m512 b, __m512 c)
{
#ifdef __FMA__
    return _mm512_fmadd_ps(a, b, c);
#else
    return _mm512_add_ps(_mm512_mul_ps(a, b), c);
#endif
}

/* The lanes of vector v that run r covers, and (at) the plane offset of the vector's lane 0. */
static inline __mmask16 qc_run_mask(const qc_run *r, int v, int64_t *at)
{
    int64_t v0 = v * QC_LANES, end = r->i + r->n, lo = r->i > v0 ? r->i : v0;
    int64_t hi = end < v0 + QC_LANES ? end : v0 + QC_LANES;
    *at = r->p - r->i + v0;
    return lo < hi ? (__mmask16)(((1u << (hi - lo)) - 1) << (lo - v0)) : 0;
}

static inline QC_X512 void qc_residual512(const qc_job *j, int64_t base, const qc_run *runs, int nruns, __m512 *y)
{
    for (int v = 0; v < QC_NV; v++) {
        __m512 rf = _mm512_setzero_ps();
        __m128i rq = _mm_setzero_si128();
        for (int r = 0; r < nruns; r++) {
            int64_t at;
            __mmask16 m = qc_run_mask(&runs[r], v, &at);
            if (m && j->res) rf = _mm512_mask_loadu_ps(rf, m, j->res + base + at);
            if (m && j->res_u8) rq = _mm_mask_loadu_epi8(rq, m, j->res_u8 + base + at);
        }
        if (j->res) y[v] = _mm512_add_ps(y[v], rf);
        if (j->res_u8) {
            __m512i d = _mm512_sub_epi32(_mm512_cvtepu8_epi32(rq), _mm512_set1_epi32(j->res_zero));
            y[v] = qc_fmadd512(_mm512_cvtepi32_ps(d), _mm512_set1_ps(j->res_scale), y[v]);
        }
    }
}

/* The requantisation's constants, computed once per channel: the uint8 stores may alias the job, so the compiler
 * reloaded out_scale and divided again for every vector. */
typedef struct {
    __m512 d, inv, lim;
    __m512i zero;
} qc_requant512;

static inline QC_X512 qc_requant512 qc_requant_of(const qc_job *j)
{
    qc_requant512 r = {_mm512_set1_ps(j->out_scale), _mm512_set1_ps(1.0f / j->out_scale),
                       _mm512_set1_ps(512.0f * j->out_scale), _mm512_set1_epi32(j->out_zero)};
    return r;
}

static inline QC_X512 __m128i qc_requantize512(const qc_requant512 *k, __m512 y)
{
    __m512 c = _mm512_min_ps(_mm512_max_ps(y, _mm512_sub_ps(_mm512_setzero_ps(), k->lim)), k->lim);
#ifdef __FMA__
    __m512 q = _mm512_mul_ps(c, k->inv);
    q = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, k->d, c), k->inv, q);
#else
    __m512 q = _mm512_div_ps(c, k->d);
#endif
    __m512i i = _mm512_add_epi32(_mm512_cvt_roundps_epi32(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), k->zero);
    return _mm512_cvtepi32_epi8(_mm512_min_epi32(_mm512_max_epi32(i, _mm512_setzero_si512()), _mm512_set1_epi32(255)));
}

QC_X512 static void qc_channel512(const qc_job *j, int64_t o, const qc_acc *acc, int jo, const qc_run *runs,
                                  int nruns)
{
    int64_t base = o * j->g->oh * j->g->ow;
    const __m512 b = _mm512_set1_ps(j->bias ? j->bias[o] : 0.0f);
    __m512 y[QC_NV];
    if (j->lowp) { /* conv_lowp.c: f32 sums */
        for (int v = 0; v < QC_NV; v++) y[v] = _mm512_add_ps(_mm512_loadu_ps(acc->f[jo] + v * QC_LANES), b);
    } else {
        const __m512 s = _mm512_set1_ps(j->sa * j->w_scale[o]);
        const __m512i zs = _mm512_set1_epi32(j->za * j->sums[o]);
        for (int v = 0; v < QC_NV; v++)
            y[v] = qc_fmadd512(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_loadu_si512(acc->i[jo] + v * QC_LANES),
                                                                   zs)), s, b);
    }
    if (j->res || j->res_u8) qc_residual512(j, base, runs, nruns, y);
    if (j->act == CUVIL_ACT_RELU || j->act == CUVIL_ACT_RELU6) { /* max(0, y): NaN passes, as in relu_act */
        for (int v = 0; v < QC_NV; v++) {
            y[v] = _mm512_max_ps(_mm512_setzero_ps(), y[v]);
            if (j->act == CUVIL_ACT_RELU6) y[v] = _mm512_min_ps(_mm512_set1_ps(6.0f), y[v]);
        }
    } else if (j->act) {
        float t[QC_PIX];
        for (int v = 0; v < QC_NV; v++) _mm512_storeu_ps(t + v * QC_LANES, y[v]);
        cuvil_activation(j->act, QC_PIX, t, t);
        for (int v = 0; v < QC_NV; v++) y[v] = _mm512_loadu_ps(t + v * QC_LANES);
    }
    const int quantized = j->out_scale > 0.0f;
    const qc_requant512 k = qc_requant_of(j);
    uint8_t *yq = (uint8_t *)j->y + base;
    float *yf = (float *)j->y + base;
    for (int v = 0; v < QC_NV; v++) {
        __m128i q = quantized ? qc_requantize512(&k, y[v]) : _mm_setzero_si128();
        for (int r = 0; r < nruns; r++) {
            int64_t at;
            __mmask16 m = qc_run_mask(&runs[r], v, &at);
            if (m && quantized) _mm_mask_storeu_epi8(yq + at, m, q);
            else if (m) _mm512_mask_storeu_ps(yf + at, m, y[v]);
        }
    }
}
#endif

static void qc_channel(const qc_job *j, int64_t o, const qc_acc *acc, int jo, const qc_run *runs, int nruns)
{
#ifdef CUVIL_X86
    if (j->isa >= 2) {
        qc_channel512(j, o, acc, jo, runs, nruns);
        return;
    }
#endif
    int64_t plane = j->g->oh * j->g->ow;
    float b = j->bias ? j->bias[o] : 0.0f, y[QC_PIX];
    if (j->lowp) {
#pragma omp simd
        for (int i = 0; i < QC_PIX; i++) y[i] = acc->f[jo][i] + b;
    } else {
        float scale = j->sa * j->w_scale[o];
        int32_t zs = j->za * j->sums[o];
#pragma omp simd
        for (int i = 0; i < QC_PIX; i++) y[i] = QC_FMA((float)(acc->i[jo][i] - zs), scale, b);
    }
    for (int r = 0; j->res && r < nruns; r++)
        for (int64_t i = 0; i < runs[r].n; i++) y[runs[r].i + i] += j->res[o * plane + runs[r].p + i];
    for (int r = 0; j->res_u8 && r < nruns; r++) {
        const uint8_t *rq = j->res_u8 + o * plane + runs[r].p;
        float *yr = y + runs[r].i, rs = j->res_scale;
        int32_t rz = j->res_zero;
        for (int64_t i = 0; i < runs[r].n; i++) yr[i] = QC_FMA((float)((int32_t)rq[i] - rz), rs, yr[i]);
    }
    if (j->act == CUVIL_ACT_RELU || j->act == CUVIL_ACT_RELU6) {
#pragma omp simd
        for (int i = 0; i < QC_PIX; i++) y[i] = relu_act(j->act, y[i]);
    } else if (j->act) {
        cuvil_activation(j->act, QC_PIX, y, y);
    }
    if (j->out_scale > 0.0f) {
        uint8_t q[QC_PIX], *out = (uint8_t *)j->y + o * plane;
        float div = j->out_scale, inv = 1.0f / div;
        int32_t zero = j->out_zero;
#pragma omp simd
        for (int i = 0; i < QC_PIX; i++) q[i] = requantize_u8(y[i], div, inv, zero);
        /* memcpy: a byte loop's stores may alias runs[], so it ran a byte at a time, reloading them */
        for (int r = 0; r < nruns; r++) memcpy(out + runs[r].p, q + runs[r].i, (size_t)runs[r].n);
    } else {
        float *out = (float *)j->y + o * plane;
        for (int r = 0; r < nruns; r++) memcpy(out + runs[r].p, y + runs[r].i, (size_t)runs[r].n * 4);
    }
}

static void qc_epilogue(const qc_job *j, int64_t b, int64_t vp0, int64_t nvp, const qc_acc *acc)
{
    qc_run runs[QC_PIX];
    int nruns = qc_runs(j, vp0, nvp, runs);
    for (int jo = 0; jo < j->ob && b * j->ob + jo < j->g->o; jo++) qc_channel(j, b * j->ob + jo, acc, jo, runs, nruns);
}

/* Items [lo, hi): pixel block i / blocks of output channels, channel block i % blocks. */
static int qc_blocks_run(void *ctx, int64_t lo, int64_t hi)
{
    const qc_job *j = (const qc_job *)ctx;
    const qconv_layout *l = j->l;
    int64_t nob = (j->g->o + j->ob - 1) / j->ob;
    qc_acc acc;
    memset(&acc, 0, sizeof(acc)); /* lanes past a short block's vectors are read by the epilogue, then dropped */
    for (int64_t i = lo; i < hi; i++) {
        int64_t b = i % nob, vp0 = (i / nob) * QC_PIX;
        int64_t nvp = l->pv - vp0 < QC_PIX ? l->pv - vp0 : QC_PIX;
        j->tile((int)((nvp + QC_LANES - 1) / QC_LANES), l, vp0, j->w + b * j->wblock, &acc);
        qc_epilogue(j, b, vp0, nvp, &acc);
    }
    return 0;
}

#if QGEMM_AMX
/* AMX: 16 channels x 48 pixels, tiles 0-2 the three 16-pixel columns of C, 3 the weight, 4-6 the image (16 groups
 * x 16 pixels x 4 bytes, a row per group: one plane apart); tdpbsud, as the weight (signed) is the A tile. */
__attribute__((target("amx-tile,amx-int8"))) static void qc_tile_amx(int nv, const qconv_layout *l, int64_t vp0,
                                                                     const void *w, qc_acc *acc)
{
    int64_t chunks = l->c4 / 16;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    for (int64_t t = 0; t < l->taps; t++)
        for (int64_t k = 0; k < chunks; k++) {
            const uint8_t *a = l->buf + (l->toff[t] + k * 16 * l->plane + vp0) * 4;
            _tile_loadd(3, (const int8_t *)w + (t * chunks + k) * 1024, 64);
            _tile_loadd(4, a, l->plane * 4);
            _tile_dpbsud(0, 3, 4);
            if (nv > 1) {
                _tile_loadd(5, a + 64, l->plane * 4);
                _tile_dpbsud(1, 3, 5);
            }
            if (nv > 2) {
                _tile_loadd(6, a + 128, l->plane * 4);
                _tile_dpbsud(2, 3, 6);
            }
        }
    _tile_stored(0, acc->i[0], QC_PIX * 4);
    if (nv > 1) _tile_stored(1, acc->i[0] + QC_LANES, QC_PIX * 4);
    if (nv > 2) _tile_stored(2, acc->i[0] + 2 * QC_LANES, QC_PIX * 4);
}

__attribute__((target("amx-tile"))) static int qc_amx_blocks(void *ctx, int64_t lo, int64_t hi)
{
    struct lp_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 7; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
    qc_blocks_run(ctx, lo, hi);
    _tile_release();
    return 0;
}
#endif

/* -- the driver, shared with conv_lowp.c ------------------------------------------------------------------------ */
static void qc_layout_in(const qconv_geom *g, int64_t groups, void *scratch, qconv_layout *l)
{
    qc_shape(g, groups, l);
    l->toff = (int64_t *)scratch;
    l->buf = (uint8_t *)scratch + (l->taps * 8 + 63) / 64 * 64;
    for (int64_t t = 0; t < l->taps; t++) {
        int64_t ry = (t / g->kw) * g->dh, rx = (t % g->kw) * g->dw;
        l->toff[t] = ((ry % g->sh) * g->sw + rx % g->sw) * l->c4 * l->plane + (ry / g->sh) * l->wp + rx / g->sw;
    }
}

/* Every block of one image (job) by `run` (qc_blocks_run, or a wrapper), its layout filled. */
static void qc_run_blocks(qc_job *job, cuvil_range_fn run)
{
    const qconv_layout *l = job->l;
    int64_t nob = (job->g->o + job->ob - 1) / job->ob;
    int64_t items = nob * ((l->pv + QC_PIX - 1) / QC_PIX), macs = l->pv * job->g->o * l->taps * l->c4 * 4;
    cuvil_parallel_team(items, (int)min64(threads_for(macs), items), run, job);
}

/* One image: its copy into the layout (fill), then its blocks. */
static void qc_image(qc_fill_job *fill, qc_job *job, cuvil_range_fn run)
{
    const qconv_layout *l = job->l;
    int64_t planes = l->phases * l->c4;
    cuvil_parallel_team(planes, (int)min64(threads_for(planes * l->plane * 16), planes), qc_fill_planes, fill);
    qc_run_blocks(job, run);
}

/* One image unfolded (u: its padded copy, then the groups into job's 1x1 layout), then its blocks. */
static void qc_unfolded_image(qc_unfold_job *u, qc_job *job, cuvil_range_fn run)
{
    const qconv_layout *l = job->l;
    int64_t rows = u->g->c * u->hq;
    cuvil_parallel_team(rows, (int)min64(threads_for(rows * u->wq * 16), rows), qc_unfold_pad, u);
    cuvil_parallel_team(l->c4, (int)min64(threads_for(l->c4 * l->plane * 16), l->c4), qc_unfold_fill, u);
    qc_run_blocks(job, run);
}

void cuvil_qconv(const void *x, int x_is_u8, float x_scale, int32_t x_zero, const void *packed,
                 const float *w_scale, const float *bias, const void *res, float res_scale, int32_t res_zero, int act,
                 void *y, float out_scale, int32_t out_zero, const int64_t *geom, void *scratch)
{
    qconv_geom g = qc_geom(geom);
    qconv_layout l;
    qc_layout_in(&g, qc_c4(g.c), scratch, &l);
    int64_t image = g.c * g.h * g.w, out_plane = g.o * g.oh * g.ow, wblock = l.taps * l.c4 * QC_OB * 4;
    const uint8_t *w = (const uint8_t *)packed;
    size_t out_bytes = out_scale > 0.0f ? 1 : 4;
    for (int64_t n = 0; n < g.n; n++) {
        float s = x_scale;
        int32_t z = x_zero;
        const void *xn = x_is_u8 ? (const void *)((const uint8_t *)x + n * image)
                                 : (const void *)((const float *)x + n * image);
        if (!x_is_u8 && !(s > 0.0f)) s = tensor_range_u8(image, (const float *)xn, &z);
        qc_fill_job fill = {&g, &l, xn, x_is_u8 ? QC_FROM_U8 : QC_FROM_F32, 1.0f / s, z};
        const float *res_f32 = res && !(res_scale > 0.0f) ? (const float *)res + n * out_plane : NULL;
        const uint8_t *res_u8 = res && res_scale > 0.0f ? (const uint8_t *)res + n * out_plane : NULL;
        qc_job job = {&g, &l, qc_tile_for(cuvil_int8_isa()), QC_OB, 0, wblock, w,
                      (const int32_t *)(w + qc_blocks(g.o) * wblock), s, z, w_scale, bias, res_f32, act,
                      (uint8_t *)y + n * out_plane * out_bytes, out_scale, out_zero, res_u8, res_scale, res_zero,
                      cuvil_int8_isa()};
        cuvil_range_fn run = qc_blocks_run;
#if QGEMM_AMX
        if (cuvil_int8_isa() >= 4 && qc_amx_layout(g.c)) { /* a tile configuration per thread */
            job.tile = qc_tile_amx, job.ob = QC_AMX_OB, job.wblock = l.taps * g.c * QC_AMX_OB;
            job.w = w + qc_amx_at(g.o, g.c, g.kh, g.kw), run = qc_amx_blocks;
        }
        if (cuvil_int8_isa() >= 4 && qc_amx_unfolded(g.c, g.kh, g.kw) && g.oh > 0 && g.ow > 0) {
            qconv_geom g1 = qc_unfolded_geom(&g, qc_unfold_groups(g.c, g.kh, g.kw, 4), 4);
            qconv_layout l1;
            qc_layout_in(&g1, g1.c / 4, scratch, &l1);
            qc_unfold_job u = qc_unfold_shape(&g, 1);
            u.l = &l1, u.x = xn, u.kind = fill.kind, u.inv = fill.inv, u.zero = z;
            u.xq = l1.buf + l1.c4 * l1.plane * 4;
            job.g = &g1, job.l = &l1, job.tile = qc_tile_amx, job.ob = QC_AMX_OB, job.wblock = g1.c * QC_AMX_OB;
            job.w = w + qc_amx_at(g.o, g.c, g.kh, g.kw), run = qc_amx_blocks;
            qc_unfolded_image(&u, &job, run);
            continue;
        }
#endif
        qc_image(&fill, &job, run);
    }
}

/* -- max_pool on uint8 (a quantized tensor between layers, ResNet's after the stem), NCHW, 2-D ---------------- */
/* g: H, W, OH, OW, KH, KW, SH, SW, DH, DW, PT, PL. A position outside the image counts as 0, uint8's least value,
 * so a window's max is that of its part inside (and 0 for a window wholly outside, as in the generic pool). Each
 * output row is the max of its KH input rows into a row buffer, then the max over KW columns of that, in chunks of
 * MP_CHUNK outputs; 512-bit for strides 1 and 2 (2: even and odd bytes split by vpmovwb), else scalar. */
#define MP_CHUNK 256
#define MP_ROW 4096 /* the longest buffered row; a wider window (huge strides or dilations) is done pixel by pixel */

typedef struct {
    const uint8_t *x;
    uint8_t *y;
    const int64_t *g;
    int wide; /* the 512-bit columns (cuvil_int8_isa >= 2) */
} mp_job;

static uint8_t mp_pixel(const mp_job *j, const uint8_t *xp, int64_t oy, int64_t ox)
{
    const int64_t *g = j->g;
    uint8_t m = 0;
    for (int64_t ky = 0; ky < g[4]; ky++) {
        int64_t iy = oy * g[6] - g[10] + ky * g[8];
        for (int64_t kx = 0; iy >= 0 && iy < g[0] && kx < g[5]; kx++) {
            int64_t ix = ox * g[7] - g[11] + kx * g[9];
            if (ix >= 0 && ix < g[1] && xp[iy * g[1] + ix] > m) m = xp[iy * g[1] + ix];
        }
    }
    return m;
}

#ifdef CUVIL_X86
/* y[o] = max over kx < KW of r[o * s + kx * d], o < n, for s 1 (any d) or 2 (d 1); returns the outputs done. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static int64_t mp_cols512(const uint8_t *r, uint8_t *y, int64_t n,
                                                                      int64_t kw, int64_t s, int64_t d)
{
    if (s == 1) {
        for (int64_t o = 0; o < n; o += 64) {
            __m512i m = _mm512_setzero_si512();
            for (int64_t kx = 0; kx < kw; kx++) m = _mm512_max_epu8(m, _mm512_loadu_si512(r + o + kx * d));
            _mm512_mask_storeu_epi8(y + o, n - o >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (n - o)) - 1, m);
        }
        return n;
    }
    if (s != 2 || d != 1) return 0;
    for (int64_t o = 0; o < n; o += 32) {
        __m256i m = _mm256_setzero_si256();
        for (int64_t kx = 0; kx < kw; kx += 2) { /* columns 2o + kx (even bytes) and 2o + kx + 1 (odd) */
            __m512i v = _mm512_loadu_si512(r + 2 * o + kx);
            m = _mm256_max_epu8(m, _mm512_cvtepi16_epi8(v));
            if (kx + 1 < kw) m = _mm256_max_epu8(m, _mm512_cvtepi16_epi8(_mm512_srli_epi16(v, 8)));
        }
        _mm256_mask_storeu_epi8(y + o, n - o >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << (n - o)) - 1, m);
    }
    return n;
}
#endif

static int mp_rows(void *ctx, int64_t lo, int64_t hi)
{
    const mp_job *j = (const mp_job *)ctx;
    const int64_t *g = j->g;
    int64_t H = g[0], W = g[1], OH = g[2], OW = g[3];
    uint8_t r[MP_ROW + 192]; /* 192: the 512-bit columns read up to 130 bytes past a chunk's last window */
    for (int64_t i = lo; i < hi; i++) {
        const uint8_t *xp = j->x + (i / OH) * H * W;
        uint8_t *yr = j->y + i * OW;
        int64_t oy = i % OH;
        for (int64_t o0 = 0; o0 < OW; o0 += MP_CHUNK) {
            int64_t n = min64(MP_CHUNK, OW - o0), c0 = o0 * g[7] - g[11];
            int64_t width = (n - 1) * g[7] + (g[5] - 1) * g[9] + 1;
            if (width > MP_ROW) {
                for (int64_t o = 0; o < n; o++) yr[o0 + o] = mp_pixel(j, xp, oy, o0 + o);
                continue;
            }
            memset(r, 0, (size_t)(width + 192));
            int64_t qa = c0 < 0 ? -c0 : 0, qb = min64(width, W - c0);
            for (int64_t ky = 0; ky < g[4] && qa < qb; ky++) {
                int64_t iy = oy * g[6] - g[10] + ky * g[8];
                if (iy < 0 || iy >= H) continue;
                const uint8_t *s = xp + iy * W + c0 + qa;
                uint8_t *rq = r + qa;
#pragma omp simd
                for (int64_t q = 0; q < qb - qa; q++) rq[q] = rq[q] > s[q] ? rq[q] : s[q];
            }
            int64_t done = 0;
#ifdef CUVIL_X86
            if (j->wide) done = mp_cols512(r, yr + o0, n, g[5], g[7], g[9]);
#endif
            for (int64_t o = done; o < n; o++) {
                uint8_t m = 0;
                for (int64_t kx = 0; kx < g[5]; kx++) m = r[o * g[7] + kx * g[9]] > m ? r[o * g[7] + kx * g[9]] : m;
                yr[o0 + o] = m;
            }
        }
    }
    return 0;
}

void cuvil_max_pool_u8(const uint8_t *x, uint8_t *y, int64_t planes, const int64_t *geom)
{
    mp_job j = {x, y, geom, cuvil_int8_isa() >= 2};
    int64_t rows = planes * geom[2];
    if (rows <= 0 || geom[3] <= 0) return;
    cuvil_parallel_team(rows, (int)min64(threads_for(rows * geom[3] * geom[4] * geom[5]), rows), mp_rows, &j);
}
