/* bf16 convolution (the conv_bf16 op): weights stored in bf16, activations rounded to bf16 as they are copied,
 * fp32 accumulation, the epilogue (bias, residual, activation) in fp32; NCHW f32 in and out (docs/precision.md).
 *
 * It runs on conv_int8.c's driver: the image copied once into channel groups by stride phase, each tap reading
 * it shifted, pixels along the lanes. Here a group is a pair of channels (two bf16, 4 bytes a pixel), and a block
 * is 16 output channels x 48 pixels. The packed weight is [O/16][tap][G/16][16 channels][16 pairs][2] bf16
 * (G = pairs of input channels, padded to a multiple of 16 with zeros), which is:
 *   - AMX-BF16: the A tile (16 channels x 32 bf16) of tdpbf16ps; the B tile is 16 pairs x 16 pixels, read from
 *     the copied image with a row stride of one plane; C is 16 channels x 16 pixels, so three C tiles a block;
 *   - AVX512_BF16: one channel's pair, broadcast, for vdpbf16ps against 16 pixels x 1 pair (as vpdpbusd in int8);
 *   - portable: the same loops in C with the bf16 widened to fp32 (no rounding of the products).
 * The path is gemm_lowp.c's (cuvil_lowp_path: CPUID less CUVIL_DISABLE_CPU_FEATURES; cuvil_lowp_set_path). */

#define CL_OB 16 /* output channels per block */

static int64_t cl_groups(int64_t c) { return ((c + 1) / 2 + 15) / 16 * 16; }
static int64_t cl_blocks(int64_t o) { return (o + CL_OB - 1) / CL_OB; }

/* Few input channels (the 3-channel 7x7 stem: 96 pairs of kx against 49 taps of 16 pairs) run unfolded, on every
 * path (conv_int8.c's qc_unfold_*: a 1x1 conv over pairs of kx), where that is fewer pairs. */
static int cl_unfolds(int64_t C, int64_t KH, int64_t KW)
{
    return qc_unfolds(C, KH, KW) && qc_unfold_groups(C, KH, KW, 2) < KH * KW * cl_groups(C);
}

int64_t cuvil_conv_bf16_packed_bytes(int64_t O, int64_t C, int64_t KH, int64_t KW)
{
    if (cl_unfolds(C, KH, KW)) return cl_blocks(O) * qc_unfold_groups(C, KH, KW, 2) * CL_OB * 4;
    return cl_blocks(O) * KH * KW * cl_groups(C) * CL_OB * 4;
}

void cuvil_conv_bf16_pack(int64_t O, int64_t C, int64_t KH, int64_t KW, const uint16_t *W, void *packed)
{
    int unfold = cl_unfolds(C, KH, KW), runs = (int)((KW + 1) / 2);
    int64_t taps = unfold ? 1 : KH * KW, groups = unfold ? qc_unfold_groups(C, KH, KW, 2) : cl_groups(C);
    uint16_t *p = (uint16_t *)packed;
    memset(p, 0, (size_t)cuvil_conv_bf16_packed_bytes(O, C, KH, KW));
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t t = 0; t < KH * KW; t++) { /* unfolded: channel k of one tap, pairs of kx of (c, ky) */
                int64_t k = unfold ? ((c * KH + t / KW) * runs + t % KW / 2) * 2 + t % KW % 2 : c, tt = unfold ? 0 : t;
                int64_t g = k / 2, at = (((o / CL_OB) * taps + tt) * (groups / 16) + g / 16) * CL_OB * 32;
                p[at + (o % CL_OB) * 32 + (g % 16) * 2 + k % 2] = W[(o * C + c) * KH * KW + t];
            }
}

int64_t cuvil_conv_bf16_scratch_bytes(const int64_t *g)
{
    qconv_geom q = qc_geom(g);
    qconv_layout l;
    if (cl_unfolds(q.c, q.kh, q.kw))
        return q.oh > 0 && q.ow > 0 ? qc_unfold_scratch(&q, qc_unfold_groups(q.c, q.kh, q.kw, 2), 2) : 0;
    qc_shape(&q, cl_groups(q.c), &l);
    return (l.taps * 8 + 63) / 64 * 64 + l.phases * l.c4 * l.plane * 4;
}

/* -- register blocks: acc[j][p] (f32) for 16 channels j and the block's pixels ------------------------------ */
static void cl_tile_generic(int nv, const qconv_layout *l, int64_t vp0, const void *w, qc_acc *acc)
{
    int64_t np = nv * QC_LANES, chunks = l->c4 / 16;
    for (int jo = 0; jo < CL_OB; jo++)
        for (int64_t p = 0; p < np; p++) acc->f[jo][p] = 0.0f;
    for (int64_t t = 0; t < l->taps; t++)
        for (int64_t g = 0; g < l->c4; g++) {
            const uint16_t *a = (const uint16_t *)(l->buf + (l->toff[t] + g * l->plane + vp0) * 4);
            const uint16_t *wg = (const uint16_t *)w + ((t * chunks + g / 16) * CL_OB * 16 + g % 16) * 2;
            for (int jo = 0; jo < CL_OB; jo++) {
                float w0 = lp_bf16_to_f32(wg[jo * 32]), w1 = lp_bf16_to_f32(wg[jo * 32 + 1]);
                for (int64_t p = 0; p < np; p++)
                    acc->f[jo][p] += lp_bf16_to_f32(a[p * 2]) * w0 + lp_bf16_to_f32(a[p * 2 + 1]) * w1;
            }
        }
}

#if LP_HAVE_X86_BF16
#define CL_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

/* Half the block's channels at a time (8 x 3 accumulators). */
static inline __attribute__((always_inline)) CL_BF16_TARGET void
cl_dpbf16_body(const int nv, const qconv_layout *l, int64_t vp0, const void *w, qc_acc *acc)
{
    int64_t chunks = l->c4 / 16;
    for (int half = 0; half < 2; half++) {
        __m512 c[8][QC_NV];
        for (int jo = 0; jo < 8; jo++)
            for (int v = 0; v < nv; v++) c[jo][v] = _mm512_setzero_ps();
        for (int64_t t = 0; t < l->taps; t++) {
            const uint8_t *a = l->buf + (l->toff[t] + vp0) * 4;
            for (int64_t g = 0; g < l->c4; g++, a += l->plane * 4) {
                const uint16_t *wg = (const uint16_t *)w + ((t * chunks + g / 16) * CL_OB * 16 + g % 16) * 2 +
                                     half * 8 * 32;
                __m512i av[QC_NV];
                for (int v = 0; v < nv; v++) av[v] = _mm512_loadu_si512(a + v * 64);
                for (int jo = 0; jo < 8; jo++) {
                    __m512i b = _mm512_set1_epi32(load4((const uint8_t *)(wg + jo * 32)));
                    for (int v = 0; v < nv; v++)
                        c[jo][v] = _mm512_dpbf16_ps(c[jo][v], (__m512bh)av[v], (__m512bh)b);
                }
            }
        }
        for (int jo = 0; jo < 8; jo++)
            for (int v = 0; v < nv; v++) _mm512_storeu_ps(acc->f[half * 8 + jo] + v * QC_LANES, c[jo][v]);
    }
}

CL_BF16_TARGET static void cl_tile_dpbf16(int nv, const qconv_layout *l, int64_t vp0, const void *w, qc_acc *acc)
{
    if (nv == 3) cl_dpbf16_body(3, l, vp0, w, acc);
    else if (nv == 2) cl_dpbf16_body(2, l, vp0, w, acc);
    else cl_dpbf16_body(1, l, vp0, w, acc);
}

/* AMX: tiles 0-2 accumulate the block's three 16-pixel columns, 3 holds the weight, 4-6 the image. */
__attribute__((target("amx-tile,amx-bf16"))) static void cl_tile_amx(int nv, const qconv_layout *l, int64_t vp0,
                                                                     const void *w, qc_acc *acc)
{
    int64_t chunks = l->c4 / 16;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    for (int64_t t = 0; t < l->taps; t++)
        for (int64_t k = 0; k < chunks; k++) {
            const uint8_t *a = l->buf + (l->toff[t] + k * 16 * l->plane + vp0) * 4;
            _tile_loadd(3, (const uint16_t *)w + (t * chunks + k) * CL_OB * 32, 64);
            _tile_loadd(4, a, l->plane * 4);
            _tile_dpbf16ps(0, 3, 4);
            if (nv > 1) {
                _tile_loadd(5, a + 64, l->plane * 4);
                _tile_dpbf16ps(1, 3, 5);
            }
            if (nv > 2) {
                _tile_loadd(6, a + 128, l->plane * 4);
                _tile_dpbf16ps(2, 3, 6);
            }
        }
    _tile_stored(0, acc->f[0], QC_PIX * 4);
    if (nv > 1) _tile_stored(1, acc->f[0] + QC_LANES, QC_PIX * 4);
    if (nv > 2) _tile_stored(2, acc->f[0] + 2 * QC_LANES, QC_PIX * 4);
}

#endif

static qc_tile_fn cl_tile_for(int path)
{
#if LP_HAVE_X86_BF16
    if (path == LP_AMX) return cl_tile_amx;
    if (path == LP_AVX512BF16) return cl_tile_dpbf16;
#endif
    (void)path;
    return cl_tile_generic;
}

static cuvil_range_fn cl_run(int path)
{
#if LP_HAVE_X86_BF16
    return path == LP_AMX ? qc_amx_blocks : qc_blocks_run; /* AMX: conv_int8.c's tile config */
#else
    (void)path;
    return qc_blocks_run;
#endif
}

/* cuvil_conv_bf16 unfolded (cl_unfolds): each image rounded into a padded copy, its pairs of kx gathered. */
static void cl_unfolded(const float *x, const void *packed, const float *bias, const float *res, int act, float *y,
                        const qconv_geom *g, void *scratch)
{
    if (g->oh <= 0 || g->ow <= 0) return;
    qconv_geom g1 = qc_unfolded_geom(g, qc_unfold_groups(g->c, g->kh, g->kw, 2), 2);
    qconv_layout l;
    qc_layout_in(&g1, g1.c / 2, scratch, &l);
    int64_t image = g->c * g->h * g->w, out_plane = g->o * g->oh * g->ow;
    int path = cuvil_lowp_path();
    for (int64_t n = 0; n < g->n; n++) {
        qc_unfold_job u = qc_unfold_shape(g, 2);
        u.l = &l, u.x = x + n * image, u.kind = QC_TO_BF16, u.inv = 1.0f, u.xq = l.buf + l.c4 * l.plane * 4;
        qc_job job = {&g1, &l, cl_tile_for(path), CL_OB, 1, l.c4 * CL_OB * 4, (const uint8_t *)packed, NULL, 1.0f,
                      0, NULL, bias, res ? res + n * out_plane : NULL, act, y + n * out_plane, 0.0f, 0, NULL, 0.0f,
                      0, cuvil_int8_isa()};
        qc_unfolded_image(&u, &job, cl_run(path));
    }
}

void cuvil_conv_bf16(const float *x, const void *packed, const float *bias, const float *res, int act, float *y,
                     const int64_t *geom, void *scratch)
{
    qconv_geom g = qc_geom(geom);
    if (cl_unfolds(g.c, g.kh, g.kw)) {
        cl_unfolded(x, packed, bias, res, act, y, &g, scratch);
        return;
    }
    qconv_layout l;
    qc_layout_in(&g, cl_groups(g.c), scratch, &l);
    int64_t image = g.c * g.h * g.w, out_plane = g.o * g.oh * g.ow;
    int path = cuvil_lowp_path();
    cuvil_range_fn run = cl_run(path);
    for (int64_t n = 0; n < g.n; n++) {
        qc_fill_job fill = {&g, &l, x + n * image, QC_TO_BF16, 1.0f, 0};
        qc_job job = {&g, &l, cl_tile_for(path), CL_OB, 1, l.taps * l.c4 * CL_OB * 4, (const uint8_t *)packed,
                      NULL, 1.0f, 0, NULL, bias, res ? res + n * out_plane : NULL, act, y + n * out_plane, 0.0f, 0,
                      NULL, 0.0f, 0, cuvil_int8_isa()};
        qc_image(&fill, &job, run);
    }
}
