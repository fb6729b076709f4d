/* GEMM against a constant weight stored in 16 bits (bf16 or fp16), with fp32 accumulation (docs/precision.md).
 * Included after gemm.c (one unit): it uses gemm.c's threads_for and alloc_or_die.
 *
 * The packed layout serves every path: 16-column panels, K padded to a multiple of 32 with zeros, and within a
 * panel the rows of K in pairs, each pair of a column one 32-bit lane: (k, j) sits at
 *     panel * Kp * 16 + (k / 2) * 32 + j * 2 + k % 2.
 * That is the B operand of `vdpbf16ps` (a zmm per pair of rows) and of AMX's `tdpbf16ps` (16 pairs of rows
 * make a tile of 16 rows x 64 bytes). The path is chosen by the CPU's features (CPUID) at the first call, so that
 * an exported artifact chooses on the machine that runs it: AMX-BF16 (M >= 16), AVX512_BF16 (M >= 8), and a
 * portable one that widens each block of the weight to fp32 once per block of rows. Below 8 rows every path reads
 * the 16-bit panels once and widens them in registers (lp_gemv_rows): half the weight bytes of fp32, which is what
 * bounds a matrix-vector product (W2's 784 x 1024 at one row: 0.27x the fp32 GEMV's time on the Xeon, one thread;
 * vdpbf16ps's register block there would compute padding rows). The two bf16
 * dot-product paths round A to bf16 first, as every bf16 GEMM does; fp16 weights always take the widening path
 * (F16C conversions). CUVIL_DISABLE_CPU_FEATURES=amx_bf16,avx512_bf16 masks features from the choice. */
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <unistd.h>
#include <sys/syscall.h>
#endif

#define LP_NR 16                /* columns per panel */
#define LP_KB 256               /* rows of K widened at once on the portable path (16 KB of fp32) */
#define LP_MB 64                /* rows of A per work item */
#define LP_NC 32                /* columns per work item: two panels (more accumulators per load of A) */
enum { LP_GENERIC = 0, LP_AVX512BF16 = 1, LP_AMX = 2 };

static int lp_path = -1; /* not chosen yet */

static int64_t lp_kpad(int64_t K) { return (K + 31) / 32 * 32; }
static int64_t lp_panels(int64_t N) { return (N + LP_NC - 1) / LP_NC * 2; } /* an even count: work items pair them */

#define LP_HEADER 32 /* uint16_t before the panels (64 bytes): [0] = 1 when an fp32 copy follows them */
static int64_t lp_panel_elems(int64_t K, int64_t N) { return lp_kpad(K) * lp_panels(N) * LP_NR; }
static float lp_bf16_to_f32(uint16_t h);
static float lp_f16_to_f32(uint16_t h);
int cuvil_lowp_path(void);

/* Where no dot-product path runs this weight (fp16 always, bf16 on the portable path), the packing also keeps an
 * fp32 copy packed for gemm.c: from 8 rows on, the GEMM is bound by arithmetic and runs on it at fp32 speed, so no
 * fallback is slower than fp32 (memory: 1.5 times the fp32 weight); below 8 rows the 16-bit panels are read. */
static int lp_keeps_f32(int is_f16) { return is_f16 || cuvil_lowp_path() == LP_GENERIC; }

int64_t cuvil_lowp_packed_size(int64_t K, int64_t N, int is_f16)
{
    if (K <= 0 || N <= 0) return LP_HEADER;
    return LP_HEADER + lp_panel_elems(K, N) + (lp_keeps_f32(is_f16) ? 2 * cuvil_sgemm_packed_size(K, N) : 0);
}

void cuvil_lowp_pack_b(int64_t K, int64_t N, int is_f16, const uint16_t *B, int64_t rsb, int64_t csb,
                       uint16_t *packed)
{
    memset(packed, 0, sizeof(uint16_t) * LP_HEADER);
    if (K <= 0 || N <= 0) return;
    int64_t kp = lp_kpad(K), panels = lp_panels(N);
    uint16_t *out = packed + LP_HEADER;
    memset(out, 0, sizeof(uint16_t) * (size_t)lp_panel_elems(K, N));
    for (int64_t p = 0; p < panels; p++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = p * LP_NR; j < N && j < (p + 1) * LP_NR; j++)
                out[p * kp * LP_NR + (k / 2) * 32 + (j - p * LP_NR) * 2 + k % 2] = B[k * rsb + j * csb];
    if (!lp_keeps_f32(is_f16)) return;
    float *wide = alloc_or_die(sizeof(float) * (size_t)(K * N));
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) {
            uint16_t h = B[k * rsb + j * csb];
            wide[k * N + j] = is_f16 ? lp_f16_to_f32(h) : lp_bf16_to_f32(h);
        }
    cuvil_sgemm_pack_b(K, N, wide, N, 1, (float *)(out + lp_panel_elems(K, N)));
    free(wide);
    packed[0] = 1;
}

static float lp_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float lp_f16_to_f32(uint16_t h)
{
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) u = sign | 0x7f800000 | (man << 13);
    else if (exp) u = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man) u = sign;
    else {
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

static uint16_t lp_f32_to_bf16(float f) /* round to nearest even, NaN stays NaN */
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* Bias, activation and the store of one work item: tile is rows x 32 fp32. */
static void lp_store(const float *tile, int rows, int64_t i0, int64_t j0, int64_t N, float *C, int64_t ldc,
                     const float *bias, int act)
{
    int cols = (int)(N - j0 < LP_NC ? N - j0 : LP_NC);
    for (int r = 0; r < rows; r++) {
        float *c = C + (i0 + r) * ldc + j0;
        for (int j = 0; j < cols; j++) c[j] = tile[r * LP_NC + j] + (bias ? bias[j0 + j] : 0.0f);
        if (act) cuvil_activation(act, cols, c, c);
    }
}

/* -- portable: widen a block of both panels to fp32 (LP_KB x 32), then 4 x 32 register blocks ---------------- */
typedef uint32_t lp_vu __attribute__((vector_size(CUVIL_VL * 4), aligned(4), may_alias));

/* Rows k and k + 1 of one panel from their pair row `src`: bf16 by shifts (any vector ISA), fp16 by F16C. */
static void lp_widen_pair(const uint16_t *src, int is_f16, float *lo, float *hi)
{
    if (!is_f16) {
        for (int v = 0; v < LP_NR / VL; v++) {
            lp_vu lanes = *(const lp_vu *)(src + 2 * v * VL);
            cuvil_store(lo + v * VL, (vf)(lanes << 16));
            cuvil_store(hi + v * VL, (vf)(lanes & 0xffff0000u));
        }
        return;
    }
#if defined(__AVX512F__)
    __m512i lanes = _mm512_loadu_si512((const void *)src);
    _mm512_storeu_ps(lo, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(lanes)));
    _mm512_storeu_ps(hi, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(lanes, 16))));
#else
    for (int j = 0; j < LP_NR; j++) {
        lo[j] = lp_f16_to_f32(src[2 * j]);
        hi[j] = lp_f16_to_f32(src[2 * j + 1]);
    }
#endif
}

/* Rows k0 .. k0 + kc of both panels (k0 even; an odd kc also writes the zero row after the last). */
static void lp_widen(const uint16_t *panels, int64_t kp, int64_t k0, int64_t kc, int is_f16, float *w)
{
    for (int64_t k = k0; k < k0 + kc; k += 2)
        for (int h = 0; h < 2; h++)
            lp_widen_pair(panels + h * kp * LP_NR + (k / 2) * 32, is_f16, w + (k - k0) * LP_NC + h * LP_NR,
                          w + (k + 1 - k0) * LP_NC + h * LP_NR);
}

#define LP_GR 4 /* rows of the portable register block */
#define LP_GV (LP_NC / VL)
static void lp_block_generic(const float *A, int64_t rsa, int64_t csa, int64_t i0, int rows, int64_t K,
                             int64_t kp, const uint16_t *panels, int is_f16, float *tile)
{
    float w[LP_KB * LP_NC] __attribute__((aligned(64)));
    memset(tile, 0, sizeof(float) * LP_MB * LP_NC);
    for (int64_t k0 = 0; k0 < K; k0 += LP_KB) {
        int64_t kc = K - k0 < LP_KB ? K - k0 : LP_KB;
        lp_widen(panels, kp, k0, kc, is_f16, w);
        for (int r = 0; r < rows; r += LP_GR) {
            int nr = rows - r < LP_GR ? rows - r : LP_GR;
            const float *a[LP_GR]; /* rows past the end read the first one again; their sums are dropped */
            for (int q = 0; q < LP_GR; q++) a[q] = A + (i0 + r + (q < nr ? q : 0)) * rsa + k0 * csa;
            vf acc[LP_GR][LP_GV];
            for (int q = 0; q < LP_GR; q++)
                for (int v = 0; v < LP_GV; v++) acc[q][v] = cuvil_splat(0.0f);
            for (int64_t k = 0; k < kc; k++) {
                const float *wk = w + k * LP_NC;
                for (int q = 0; q < LP_GR; q++) {
                    float x = a[q][k * csa]; /* scalar * vector broadcasts once (cuvil_splat would per lane) */
                    for (int v = 0; v < LP_GV; v++) acc[q][v] += x * cuvil_load(wk + v * VL);
                }
            }
            for (int q = 0; q < nr; q++)
                for (int v = 0; v < LP_GV; v++) {
                    float *t = tile + (r + q) * LP_NC + v * VL;
                    cuvil_store(t, cuvil_load(t) + acc[q][v]);
                }
        }
    }
}

#define LP_DR 8 /* rows of the AVX512_BF16 register block: 16 accumulators, 2 loads of B and 8 of A per 16; fewer
                 * rows take the widening path on every CPU */
/* -- AVX512_BF16: A rounded to bf16 pairs, vdpbf16ps into fp32, 8 rows x 32 columns ------------------------- */
#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
#define LP_HAVE_X86_BF16 1
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static void lp_round_rows(const float *A, int64_t rsa, int64_t csa, int64_t i0, int rows, int rows_pad, int64_t K,
                          int64_t kp, uint16_t *out)
{
    for (int r = 0; r < rows_pad; r++) {
        uint16_t *o = out + (int64_t)r * kp;
        if (r >= rows) { memset(o, 0, sizeof(uint16_t) * (size_t)kp); continue; }
        const float *a = A + (i0 + r) * rsa;
        int64_t k = 0;
        if (csa == 1)
            for (; k + 32 <= K; k += 32) {
                __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(a + k + 16), _mm512_loadu_ps(a + k));
                _mm512_storeu_si512((void *)(o + k), (__m512i)v);
            }
        for (; k < K; k++) o[k] = lp_f32_to_bf16(a[k * csa]);
        for (; k < kp; k++) o[k] = 0;
    }
}

typedef float lp_f32_alias __attribute__((may_alias, aligned(4)));
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static void lp_block_dpbf16(const uint16_t *a, int rows, int64_t kp, const uint16_t *panels, float *tile)
{
    const uint16_t *p0 = panels, *p1 = panels + kp * LP_NR;
    for (int r = 0; r < rows; r += LP_DR) {
        __m512 acc[LP_DR][2];
        for (int q = 0; q < LP_DR; q++) acc[q][0] = acc[q][1] = _mm512_setzero_ps();
        const uint16_t *ar = a + (int64_t)r * kp;
        for (int64_t i = 0; i < kp / 2; i++) {
            __m512bh w0 = (__m512bh)_mm512_loadu_si512((const void *)(p0 + i * 32));
            __m512bh w1 = (__m512bh)_mm512_loadu_si512((const void *)(p1 + i * 32));
            for (int q = 0; q < LP_DR; q++) {
                /* a broadcast from memory (a load port), not through a general register (the port vdpbf16ps uses) */
                __m512bh xb = (__m512bh)_mm512_set1_ps(*(const lp_f32_alias *)(ar + q * kp + 2 * i));
                acc[q][0] = _mm512_dpbf16_ps(acc[q][0], xb, w0);
                acc[q][1] = _mm512_dpbf16_ps(acc[q][1], xb, w1);
            }
        }
        for (int q = 0; q < LP_DR; q++) {
            _mm512_storeu_ps(tile + (r + q) * LP_NC, acc[q][0]);
            _mm512_storeu_ps(tile + (r + q) * LP_NC + LP_NR, acc[q][1]);
        }
    }
}

/* -- AMX-BF16: a 16 x 32 tile of A against 16 pairs x 16 columns of each panel, two 16 x 16 fp32 tiles of C ---- */
struct lp_tilecfg { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; };

__attribute__((target("amx-tile,amx-bf16")))
static void lp_block_amx(const uint16_t *a, int rows, int64_t kp, const uint16_t *panels, float *tile)
{
    struct lp_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 5; t++) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
    _tile_loadconfig(&cfg);
    const uint16_t *p0 = panels, *p1 = panels + kp * LP_NR;
    for (int r = 0; r < rows; r += 16) {
        _tile_zero(0);
        _tile_zero(1);
        for (int64_t k = 0; k < kp; k += 32) {
            _tile_loadd(2, a + (int64_t)r * kp + k, kp * 2);
            _tile_loadd(3, p0 + k * LP_NR, 64);
            _tile_loadd(4, p1 + k * LP_NR, 64);
            _tile_dpbf16ps(0, 2, 3);
            _tile_dpbf16ps(1, 2, 4);
        }
        _tile_stored(0, tile + r * LP_NC, LP_NC * 4);
        _tile_stored(1, tile + r * LP_NC + LP_NR, LP_NC * 4);
    }
    _tile_release();
}

static int lp_amx_permitted(void) /* Linux hands out the 8 KB tile state only on request */
{
#if defined(__linux__)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return 0;
#endif
}
#else
#define LP_HAVE_X86_BF16 0
#endif

#if LP_HAVE_X86_BF16
#include <cpuid.h>
static int lp_capable(void) /* the best path this CPU and OS run: CPUID leaf 7 and the OS-enabled state (XCR0) */
{
    unsigned a, b, c, d, lo, hi;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return LP_GENERIC; /* no OSXSAVE */
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0xe6) != 0xe6 || !__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a & (1u << 5))) return LP_GENERIC;
    __get_cpuid_count(7, 0, &a, &b, &c, &d);
    int amx = (d & (1u << 22)) && (d & (1u << 24)); /* amx_bf16, amx_tile */
    return amx && lp_amx_permitted() ? LP_AMX : LP_AVX512BF16;
}
#else
static int lp_capable(void) { return LP_GENERIC; }
#endif

/* Whether CUVIL_DISABLE_CPU_FEATURES (comma-separated /proc/cpuinfo names) masks `feature`. */
static int lp_masked(const char *feature)
{
    const char *s = getenv("CUVIL_DISABLE_CPU_FEATURES");
    size_t n = strlen(feature);
    for (; s && *s; s += strcspn(s, ",") + (s[strcspn(s, ",")] == ',')) {
        while (*s == ' ') s++;
        if (strncmp(s, feature, n) == 0 && (s[n] == ',' || s[n] == ' ' || s[n] == 0)) return 1;
    }
    return 0;
}

static int lp_auto(void)
{
    int path = lp_capable();
    if (path == LP_AMX && lp_masked("amx_bf16")) path = LP_AVX512BF16;
    if (path == LP_AVX512BF16 && lp_masked("avx512_bf16")) path = LP_GENERIC;
    return path;
}

/* The bf16 path: -1 chooses by the CPU (the first GEMM does it too), 0 portable, 1 AVX512_BF16, 2 AMX-BF16; a path
 * the CPU cannot run gives the best it can. Returns the path now in use. */
int cuvil_lowp_set_path(int path)
{
    int cap = lp_capable();
    path = path < 0 ? lp_auto() : path > cap ? cap : path;
    __atomic_store_n(&lp_path, path, __ATOMIC_RELAXED);
    return path;
}

int cuvil_lowp_path(void)
{
    int path = __atomic_load_n(&lp_path, __ATOMIC_RELAXED);
    return path >= 0 ? path : cuvil_lowp_set_path(-1);
}

/* -- below 8 rows: the 16-bit panels read once, each pair row widened in registers (two shifts for bf16, F16C for
 * fp16) and multiplied into every row of A in fp32. Accumulators split by even and odd k, so that one row keeps four
 * FMA chains in flight (one chain's latency would bound the loop at a quarter of the load rate). ------------- */
#define LP_SR 4 /* rows per pass over the panels */
#define LP_SV (LP_NR / VL)

CUVIL_INLINE void lp_widen_regs(const uint16_t *src, int is_f16, vf *lo, vf *hi)
{
#if defined(__AVX512F__) && defined(__F16C__)
    if (is_f16) {
        __m512i lanes = _mm512_loadu_si512((const void *)src);
        lo[0] = (vf)_mm512_cvtph_ps(_mm512_cvtepi32_epi16(lanes));
        hi[0] = (vf)_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(lanes, 16)));
        return;
    }
#endif
    if (is_f16) {
        for (int v = 0; v < LP_SV; v++)
            for (int l = 0; l < VL; l++) {
                lo[v][l] = lp_f16_to_f32(src[2 * (v * VL + l)]);
                hi[v][l] = lp_f16_to_f32(src[2 * (v * VL + l) + 1]);
            }
        return;
    }
    for (int v = 0; v < LP_SV; v++) {
        lp_vu lanes = *(const lp_vu *)(src + 2 * v * VL);
        lo[v] = (vf)(lanes << 16);
        hi[v] = (vf)(lanes & 0xffff0000u);
    }
}

/* Rows i0 .. i0 + R of A against both panels of a work item into tile (R x LP_NC); R and is_f16 are constants
 * where it is inlined. */
CUVIL_INLINE void lp_gemv_rows(const float *A, int64_t rsa, int64_t csa, int64_t i0, const int R, int64_t K,
                               int64_t kp, const uint16_t *panels, const int is_f16, float *tile)
{
    vf even[LP_SR][2][LP_SV], odd[LP_SR][2][LP_SV];
    const float *a[LP_SR];
    for (int q = 0; q < R; q++) {
        a[q] = A + (i0 + q) * rsa;
        for (int h = 0; h < 2; h++)
            for (int v = 0; v < LP_SV; v++) even[q][h][v] = odd[q][h][v] = cuvil_splat(0.0f);
    }
    int64_t pairs = K / 2;
    for (int64_t i = 0; i < pairs; i++)
        for (int h = 0; h < 2; h++) {
            vf lo[LP_SV], hi[LP_SV];
            lp_widen_regs(panels + h * kp * LP_NR + i * 32, is_f16, lo, hi);
            for (int q = 0; q < R; q++) {
                float x0 = a[q][2 * i * csa], x1 = a[q][(2 * i + 1) * csa];
                for (int v = 0; v < LP_SV; v++) {
                    even[q][h][v] += x0 * lo[v];
                    odd[q][h][v] += x1 * hi[v];
                }
            }
        }
    if (K % 2) /* the last k alone: its pair's second row is padding */
        for (int h = 0; h < 2; h++) {
            vf lo[LP_SV], hi[LP_SV];
            lp_widen_regs(panels + h * kp * LP_NR + pairs * 32, is_f16, lo, hi);
            for (int q = 0; q < R; q++)
                for (int v = 0; v < LP_SV; v++) even[q][h][v] += a[q][(K - 1) * csa] * lo[v];
        }
    for (int q = 0; q < R; q++)
        for (int h = 0; h < 2; h++)
            for (int v = 0; v < LP_SV; v++)
                cuvil_store(tile + q * LP_NC + h * LP_NR + v * VL, even[q][h][v] + odd[q][h][v]);
}

typedef struct {
    int64_t M, N, K, rsa, csa, ldc, kp;
    const float *A, *bias;
    const uint16_t *panels;
    float *C;
    int is_f16, act;
} lp_gemv_t;

/* Work items [lo, hi): pairs of panels, every row of A. */
static int lp_gemv_items(void *job, int64_t lo, int64_t hi)
{
    const lp_gemv_t *g = job;
    float tile[LP_SR * LP_NC] __attribute__((aligned(64)));
    for (int64_t p = lo; p < hi; p++) {
        const uint16_t *panels = g->panels + 2 * p * g->kp * LP_NR;
        for (int64_t i0 = 0; i0 < g->M; i0 += LP_SR) {
            int rows = (int)(g->M - i0 < LP_SR ? g->M - i0 : LP_SR);
#define LP_ROWS(R, F16) lp_gemv_rows(g->A, g->rsa, g->csa, i0, R, g->K, g->kp, panels, F16, tile)
            if (g->is_f16) {
                if (rows == 1) LP_ROWS(1, 1); else if (rows == 2) LP_ROWS(2, 1); else if (rows == 3) LP_ROWS(3, 1);
                else LP_ROWS(4, 1);
            } else {
                if (rows == 1) LP_ROWS(1, 0); else if (rows == 2) LP_ROWS(2, 0); else if (rows == 3) LP_ROWS(3, 0);
                else LP_ROWS(4, 0);
            }
#undef LP_ROWS
            lp_store(tile, rows, i0, p * LP_NC, g->N, g->C, g->ldc, g->bias, g->act);
        }
    }
    return 0;
}

/* -- from 8 rows: blocks of LP_MB rows x work items of two panels, on the thread pool ------------------------ */
typedef struct {
    int64_t M, N, K, rsa, csa, ldc, kp, items;
    const float *A, *bias;
    const uint16_t *panels;
    float *C;
    uint16_t *abf; /* A rounded to bf16, LP_MB rows per block (the dot-product paths) */
    int is_f16, act, path;
} lp_gemm_t;

static int lp_block_rows(const lp_gemm_t *g, int64_t b)
{
    return (int)(g->M - b * LP_MB < LP_MB ? g->M - b * LP_MB : LP_MB);
}

#if LP_HAVE_X86_BF16
static int lp_round_blocks(void *job, int64_t lo, int64_t hi)
{
    const lp_gemm_t *g = job;
    for (int64_t b = lo; b < hi; b++)
        lp_round_rows(g->A, g->rsa, g->csa, b * LP_MB, lp_block_rows(g, b), LP_MB, g->K, g->kp,
                      g->abf + b * LP_MB * g->kp);
    return 0;
}
#endif

/* Work items [lo, hi): row block w / items x pair of panels w % items. */
static int lp_gemm_items(void *job, int64_t lo, int64_t hi)
{
    const lp_gemm_t *g = job;
    float tile[LP_MB * LP_NC] __attribute__((aligned(64)));
    for (int64_t w = lo; w < hi; w++) {
        int64_t b = w / g->items, p = w % g->items;
        int rows = lp_block_rows(g, b);
        const uint16_t *panels = g->panels + 2 * p * g->kp * LP_NR;
#if LP_HAVE_X86_BF16
        const uint16_t *a = g->abf + b * LP_MB * g->kp;
        if (g->path == LP_AMX) lp_block_amx(a, (rows + 15) / 16 * 16, g->kp, panels, tile);
        else if (g->path == LP_AVX512BF16) lp_block_dpbf16(a, (rows + LP_DR - 1) / LP_DR * LP_DR, g->kp, panels, tile);
        else
#endif
            lp_block_generic(g->A, g->rsa, g->csa, b * LP_MB, rows, g->K, g->kp, panels, g->is_f16, tile);
        lp_store(tile, rows, b * LP_MB, p * LP_NC, g->N, g->C, g->ldc, g->bias, g->act);
    }
    return 0;
}

/* C[M, N] = act(A[M, K] @ B + bias), B packed by cuvil_lowp_pack_b from bf16 (is_f16 = 0) or fp16 bits (the same
 * is_f16 both times; K = 0 gives the bias). */
void cuvil_lowp_gemm_packed(int64_t M, int64_t N, int64_t K, const float *A, int64_t rsa, int64_t csa,
                            const uint16_t *packed_b, int is_f16, float *C, int64_t ldc, const float *bias, int act)
{
    if (M <= 0 || N <= 0) return;
    if (K > 0 && M >= LP_DR && packed_b[0]) { /* the fp32 copy (lp_keeps_f32) */
        cuvil_sgemm_packed(M, N, K, 1.0f, A, rsa, csa, (const float *)(packed_b + LP_HEADER + lp_panel_elems(K, N)),
                           0.0f, C, ldc, bias, act);
        return;
    }
    packed_b += LP_HEADER;
    int64_t kp = lp_kpad(K), items = lp_panels(N) / 2, blocks = (M + LP_MB - 1) / LP_MB;
    if (K > 0 && M < LP_DR) {
        lp_gemv_t g = {M, N, K, rsa, csa, ldc, kp, A, bias, packed_b, C, is_f16, act};
        cuvil_parallel_team(items, threads_for(M * N * K), lp_gemv_items, &g);
        return;
    }
    lp_gemm_t g = {M, N, K, rsa, csa, ldc, kp, items, A, bias, packed_b, C, NULL, is_f16, act, LP_GENERIC};
    g.path = is_f16 || K == 0 ? LP_GENERIC : cuvil_lowp_path();
    if (g.path == LP_AMX && M < 16) g.path = LP_AVX512BF16;
#if LP_HAVE_X86_BF16
    if (g.path != LP_GENERIC) {
        g.abf = alloc_or_die(sizeof(uint16_t) * (size_t)(blocks * LP_MB * kp));
        cuvil_parallel_team(blocks, threads_for(M * K * 4), lp_round_blocks, &g);
    }
#endif
    cuvil_parallel_team(blocks * items, threads_for(M * N * K), lp_gemm_items, &g);
    free(g.abf);
}
