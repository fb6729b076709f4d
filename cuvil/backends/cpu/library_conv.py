"""Library emitters for window ops: conv, conv_transpose, max_pool, avg_pool (NCHW, 1 to 3 spatial dims).

Every window op sees its spatial dims as three (missing leading dims have size 1), so one C helper per op
and dtype serves 1-D, 2-D and 3-D and stays shared by all layers of a model. Convolutions:
- f32 runs on the kernel library's GEMM: a 1x1 stride-1 unpadded conv is W[O,C] @ X[C,H*W] straight on the
  NCHW buffers; any other conv copies each image's windows into an im2col scratch buffer first. Rows are output
  channels here, so the bias goes in `cuvil_sgemm_row_bias`'s epilogue (f64 writes it into the output first and
  accumulates onto it: 10-31% slower on MobileNetV2's 1x1 convs, one more pass over the output).
- convs with one input channel per group (depthwise) beat a GEMM whose K is only the kernel's taps: 1-D and 2-D
  ones in f32 (and f16/bf16) run on the kernel library's `cuvil_dwconv2d` (kernels/dwconv.c: vectorised for
  every stride, with a clamp epilogue for relu/relu6); f64 and 3-D ones on a direct loop here that threads over
  channel planes and vectorises along output rows.
- f64 takes the same paths with a plain double GEMM; f16 and bf16 convert to f32 scratch and back.
conv_transpose is the adjoint: cols = W^T @ X per image and group, then col2im adds them into the output.
"""
from __future__ import annotations

from ...ir.core import Op
from ...ir.dtypes import DType
from ...passes.fuse import CONV_GEMM_CLAMPS
from . import library_quant
from .c_exprs import CType, load, store_value
from .kernels import ACTIVATIONS, activation_code
from .library_util import c_dim, compute, open_block, par_if, prod, scratch_parts, storage, tag

WIN_STRUCT = """/* Window geometry over three spatial dims: in/out sizes, kernel, stride, dilation, begin/end pads. */
typedef struct { int64_t in[3], out[3], k[3], s[3], d[3], p[3], pe[3]; } cuvil_win;

/* The steps t in [*lo, *hi) of `start + t * step` (0 <= t < count) that land in [0, n). */
static inline void cuvil_taps(int64_t start, int64_t step, int64_t count, int64_t n, int64_t *lo, int64_t *hi)
{
    int64_t a = start < 0 ? (-start + step - 1) / step : 0;
    int64_t b = n - start <= 0 ? 0 : (n - start + step - 1) / step;
    *lo = a < count ? a : count;
    *hi = b < count ? b : count;
    if (*hi < *lo) *hi = *lo;
}
"""

# im2col: row (c, tz, ty, tx) of col holds, for every output position, the input it multiplies (0 in pads).
IM2COL = """static void cuvil_im2col_{T}(const {T} *restrict x, {T} *restrict col, int64_t channels, const cuvil_win *g)
{{
    const int64_t taps = g->k[0] * g->k[1] * g->k[2];
    const int64_t in_plane = g->in[0] * g->in[1] * g->in[2], out_plane = g->out[0] * g->out[1] * g->out[2];
    #pragma omp parallel for {par}
    for (int64_t r = 0; r < channels * taps; r++) {{
        const int64_t c = r / taps, t = r % taps;
        const int64_t tz = t / (g->k[1] * g->k[2]), ty = t / g->k[2] % g->k[1], tx = t % g->k[2];
        const int64_t off = tx * g->d[2] - g->p[2];
        int64_t lo, hi;
        cuvil_taps(off, g->s[2], g->out[2], g->in[2], &lo, &hi);
        {T} *dst = col + r * out_plane;
        for (int64_t oz = 0; oz < g->out[0]; oz++) {{
            const int64_t iz = oz * g->s[0] - g->p[0] + tz * g->d[0];
            for (int64_t oy = 0; oy < g->out[1]; oy++, dst += g->out[2]) {{
                const int64_t iy = oy * g->s[1] - g->p[1] + ty * g->d[1];
                if (iz < 0 || iz >= g->in[0] || iy < 0 || iy >= g->in[1]) {{
                    memset(dst, 0, sizeof({T}) * g->out[2]);
                    continue;
                }}
                const {T} *src = x + c * in_plane + (iz * g->in[1] + iy) * g->in[2];
                for (int64_t ox = 0; ox < lo; ox++) dst[ox] = 0;
                if (g->s[2] == 1)
                    memcpy(dst + lo, src + lo + off, sizeof({T}) * (hi - lo));
                else
                    for (int64_t ox = lo; ox < hi; ox++) dst[ox] = src[ox * g->s[2] + off];
                for (int64_t ox = hi; ox < g->out[2]; ox++) dst[ox] = 0;
            }}
        }}
    }}
}}
"""

# col2im, the adjoint: adds col's rows into y; here g->in is y's spatial size and g->out the positions'.
COL2IM = """static void cuvil_col2im_{T}(const {T} *restrict col, {T} *restrict y, int64_t channels, const cuvil_win *g)
{{
    const int64_t taps = g->k[0] * g->k[1] * g->k[2];
    const int64_t y_plane = g->in[0] * g->in[1] * g->in[2], out_plane = g->out[0] * g->out[1] * g->out[2];
    /* a thread owns whole channels: no two write one element */
    #pragma omp parallel for {par}
    for (int64_t c = 0; c < channels; c++) {{
        for (int64_t t = 0; t < taps; t++) {{
            const int64_t tz = t / (g->k[1] * g->k[2]), ty = t / g->k[2] % g->k[1], tx = t % g->k[2];
            const int64_t off = tx * g->d[2] - g->p[2];
            int64_t lo, hi;
            cuvil_taps(off, g->s[2], g->out[2], g->in[2], &lo, &hi);
            const {T} *src = col + (c * taps + t) * out_plane;
            for (int64_t oz = 0; oz < g->out[0]; oz++) {{
                const int64_t iz = oz * g->s[0] - g->p[0] + tz * g->d[0];
                for (int64_t oy = 0; oy < g->out[1]; oy++, src += g->out[2]) {{
                    const int64_t iy = oy * g->s[1] - g->p[1] + ty * g->d[1];
                    if (iz < 0 || iz >= g->in[0] || iy < 0 || iy >= g->in[1]) continue;
                    {T} *dst = y + c * y_plane + (iz * g->in[1] + iy) * g->in[2];
                    #pragma omp simd
                    for (int64_t ox = lo; ox < hi; ox++) dst[ox * g->s[2] + off] += src[ox];
                }}
            }}
        }}
    }}
}}
"""

# col2im when the windows tile y exactly (kernel == stride, no pads or dilation: a 2x2 stride-2 upsampling):
# every element of y comes from one row of col, so each output row is written once, bias added, nothing filled.
COL2IM_TILES = """static void cuvil_col2im_tiles_{T}(const {T} *restrict col, const {T} *restrict bias, {T} *restrict y,
                                  int64_t channels, const cuvil_win *g)
{{
    const int64_t rows = g->in[0] * g->in[1], y_plane = rows * g->in[2];
    const int64_t out_plane = g->out[0] * g->out[1] * g->out[2], taps = g->k[0] * g->k[1] * g->k[2];
    #pragma omp parallel for {par}
    for (int64_t r = 0; r < channels * rows; r++) {{
        const int64_t c = r / rows, iz = r % rows / g->in[1], iy = r % g->in[1];
        const int64_t t = (iz % g->k[0] * g->k[1] + iy % g->k[1]) * g->k[2];
        const {T} *src = col + (c * taps + t) * out_plane + (iz / g->k[0] * g->out[1] + iy / g->k[1]) * g->out[2];
        {T} *dst = y + c * y_plane + r % rows * g->in[2];
        const {T} b0 = bias ? bias[c] : 0;
        for (int64_t tx = 0; tx < g->k[2]; tx++)
            for (int64_t ox = 0; ox < g->out[2]; ox++) dst[ox * g->k[2] + tx] = src[tx * out_plane + ox] + b0;
    }}
}}
"""

# Direct conv for one input channel per group: output channel o reads input channel o / (O / C). Each kernel
# row adds into an output row: its interior columns (every tap inside x) in one vectorised pass with the taps
# unrolled for the common widths, the edge columns tap by tap with bounds checks.
DWCONV = """static inline __attribute__((always_inline)) void cuvil_dwrows_{T}({T} *restrict yr, const {T} *restrict xr,
        const {T} *restrict wr, int64_t lo, int64_t hi, const int64_t rows, const int64_t kw, const int64_t s,
        int64_t rs, int64_t dw, int64_t pw)
{{
    #pragma omp simd
    for (int64_t ox = lo; ox < hi; ox++) {{
        {T} acc = yr[ox];
        for (int64_t r = 0; r < rows; r++)
            for (int64_t tx = 0; tx < kw; tx++) acc += wr[r * kw + tx] * xr[r * rs + ox * s + tx * dw - pw];
        yr[ox] = acc;
    }}
}}

static inline void cuvil_dwedge_{T}({T} *restrict yr, const {T} *restrict xr, const {T} *restrict wr, int64_t from,
                                   int64_t to, int64_t kw, int64_t s, int64_t dw, int64_t pw, int64_t W)
{{
    for (int64_t ox = from; ox < to; ox++)
        for (int64_t tx = 0; tx < kw; tx++) {{
            const int64_t ix = ox * s + tx * dw - pw;
            if (ix >= 0 && ix < W) yr[ox] += wr[tx] * xr[ix];
        }}
}}

/* The interior columns of `rows` kernel rows: square kernels unrolled whole (one load and store of the
 * output row), other widths one row at a time with the row unrolled. */
#define CUVIL_DW_SQUARE_{T}(K) if (rows == K && kw == K) {{ \\
        if (s == 1) cuvil_dwrows_{T}(yr, xr, wr, lo, hi, K, K, 1, rs, dw, pw); \\
        else cuvil_dwrows_{T}(yr, xr, wr, lo, hi, K, K, s, rs, dw, pw); \\
    }} else
#define CUVIL_DW_ROW_{T}(K) case K: \\
    if (s == 1) cuvil_dwrows_{T}(yr, xr + r * rs, wr + r * kw, lo, hi, 1, K, 1, rs, dw, pw); \\
    else cuvil_dwrows_{T}(yr, xr + r * rs, wr + r * kw, lo, hi, 1, K, s, rs, dw, pw); \\
    break;

static void cuvil_dwconv_{T}(const {T} *restrict x, const {T} *restrict w, const {T} *restrict bias,
                             {T} *restrict y, int64_t batch, int64_t C, int64_t O, const cuvil_win *g)
{{
    const int64_t taps = g->k[0] * g->k[1] * g->k[2], mult = O / C;
    const int64_t in_plane = g->in[0] * g->in[1] * g->in[2], out_plane = g->out[0] * g->out[1] * g->out[2];
    const int64_t kw = g->k[2], s = g->s[2], dw = g->d[2], pw = g->p[2], W = g->in[2], OW = g->out[2];
    const int64_t rs = g->d[1] * W;
    int64_t lo, hi, unused, last;  /* interior columns: the first tap's lower bound, the last tap's upper */
    cuvil_taps(-pw, s, OW, W, &lo, &unused);
    cuvil_taps((kw - 1) * dw - pw, s, OW, W, &unused, &last);
    hi = last > lo ? last : lo;
    #pragma omp parallel for {par}
    for (int64_t p = 0; p < batch * O; p++) {{
        const int64_t o = p % O;
        const {T} *xp = x + (p / O * C + o / mult) * in_plane, *wp = w + o * taps;
        {T} *yp = y + p * out_plane;
        const {T} b0 = bias ? bias[o] : 0;
        for (int64_t i = 0; i < out_plane; i++) yp[i] = b0;
        for (int64_t oz = 0; oz < g->out[0]; oz++) {{
            int64_t z0, z1;
            cuvil_taps(oz * g->s[0] - g->p[0], g->d[0], g->k[0], g->in[0], &z0, &z1);
            for (int64_t oy = 0; oy < g->out[1]; oy++) {{
                int64_t y0, y1;
                cuvil_taps(oy * g->s[1] - g->p[1], g->d[1], g->k[1], g->in[1], &y0, &y1);
                {T} *yr = yp + (oz * g->out[1] + oy) * OW;
                const int64_t rows = y1 - y0, iy = oy * g->s[1] - g->p[1] + y0 * g->d[1];
                for (int64_t tz = z0; tz < z1 && rows > 0; tz++) {{
                    const int64_t iz = oz * g->s[0] - g->p[0] + tz * g->d[0];
                    const {T} *xr = xp + (iz * g->in[1] + iy) * W, *wr = wp + (tz * g->k[1] + y0) * kw;
                    CUVIL_DW_SQUARE_{T}(3) CUVIL_DW_SQUARE_{T}(5) CUVIL_DW_SQUARE_{T}(7)
                    for (int64_t r = 0; r < rows; r++)
                        switch (kw) {{
                            CUVIL_DW_ROW_{T}(1) CUVIL_DW_ROW_{T}(3) CUVIL_DW_ROW_{T}(5) CUVIL_DW_ROW_{T}(7)
                            default: cuvil_dwrows_{T}(yr, xr + r * rs, wr + r * kw, lo, hi, 1, kw, s, rs, dw, pw);
                        }}
                    for (int64_t r = 0; r < rows; r++) {{
                        cuvil_dwedge_{T}(yr, xr + r * rs, wr + r * kw, 0, lo, kw, s, dw, pw, W);
                        cuvil_dwedge_{T}(yr, xr + r * rs, wr + r * kw, hi, OW, kw, s, dw, pw, W);
                    }}
                }}
            }}
        }}
    }}
}}
"""

# C[M,N] (+)= A[M,K] @ B[K,N] in double: the f64 path's GEMM (row-major B and C, A with any strides).
DGEMM = """static void cuvil_dgemm(int64_t M, int64_t N, int64_t K, const double *restrict A, int64_t rsa, int64_t csa,
                        const double *restrict B, int64_t rsb, int accumulate, double *restrict C, int64_t ldc)
{{
    #pragma omp parallel for {par}
    for (int64_t i = 0; i < M; i++) {{
        double *restrict c = C + i * ldc;
        if (!accumulate)
            for (int64_t j = 0; j < N; j++) c[j] = 0;
        for (int64_t k = 0; k < K; k++) {{
            const double a = A[i * rsa + k * csa];
            #pragma omp simd
            for (int64_t j = 0; j < N; j++) c[j] += a * B[k * rsb + j];
        }}
    }}
}}
"""

# y[n, o, :] = bias[o] (or 0): the starting value the GEMMs accumulate onto.
FILL = """static void cuvil_fill_planes_{T}({T} *restrict y, const {T} *restrict bias, int64_t batch, int64_t O,
                                int64_t plane)
{{
    #pragma omp parallel for {par}
    for (int64_t p = 0; p < batch * O; p++) {{
        const {T} b0 = bias ? bias[p % O] : 0;
        #pragma omp simd
        for (int64_t i = 0; i < plane; i++) y[p * plane + i] = b0;
    }}
}}
"""

# Pools: max over the taps inside the input (pads and ceil-mode overhang never win); the average divides by
# the taps inside the input, or with count_include_pad by those inside the explicitly padded input. A row's
# interior columns (every tap inside x, one z tap) run vectorised with square kernels unrolled; the edge
# columns, and 3-D windows, take the per-element path.
POOL = """static {T} {name}_at(const {S} *restrict xp, const cuvil_win *g, int64_t oz, int64_t oy, int64_t ox,
                        int include_pad)
{{
    int64_t z0, z1, y0, y1, x0, x1;
    const int64_t sz = oz * g->s[0] - g->p[0], sy = oy * g->s[1] - g->p[1], sx = ox * g->s[2] - g->p[2];
    cuvil_taps(sz, g->d[0], g->k[0], g->in[0], &z0, &z1);
    cuvil_taps(sy, g->d[1], g->k[1], g->in[1], &y0, &y1);
    cuvil_taps(sx, g->d[2], g->k[2], g->in[2], &x0, &x1);
    {T} acc = {init};
    for (int64_t tz = z0; tz < z1; tz++)
        for (int64_t ty = y0; ty < y1; ty++) {{
            const int64_t at = ((sz + tz * g->d[0]) * g->in[1] + sy + ty * g->d[1]) * g->in[2] + sx;
            for (int64_t tx = x0; tx < x1; tx++) {{
                const {T} v = {value};
                acc = {combine};
            }}
        }}
    {finish}
    (void)include_pad;
    return acc;
}}

static inline __attribute__((always_inline)) void {name}_cols(const {S} *restrict xr, {S} *restrict yr, int64_t lo,
        int64_t hi, const int64_t rows, const int64_t kw, const int64_t s, int64_t rs, int64_t dw, int64_t start,
        {T} count)
{{
    (void)count;
    #pragma omp simd
    for (int64_t ox = lo; ox < hi; ox++) {{
        {T} acc = {init};
        for (int64_t r = 0; r < rows; r++)
            for (int64_t tx = 0; tx < kw; tx++) {{
                const {T} v = {value_cols};
                acc = {combine};
            }}
        yr[ox] = {store_cols};
    }}
}}

"""
# The threaded loop over planes of a pool on a plain tensor (one helper per loop, so that codegen runs it on
# Cuvil's pool rather than OpenMP's, whose late workers stalled a ResNet-18 call).
POOL_PLAIN = """static void {name}_plain(const {S} *restrict x, {S} *restrict y, int64_t planes, const cuvil_win *g,
                   int include_pad)
{{
    const int64_t in_plane = g->in[0] * g->in[1] * g->in[2], out_plane = g->out[0] * g->out[1] * g->out[2];
    const int64_t kw = g->k[2], s = g->s[2], dw = g->d[2], pw = g->p[2], W = g->in[2], OW = g->out[2];
    const int64_t rs = g->d[1] * W;
    int64_t lo, hi, unused, last;  /* interior columns: the first tap's lower bound, the last tap's upper */
    cuvil_taps(-pw, s, OW, W, &lo, &unused);
    cuvil_taps((kw - 1) * dw - pw, s, OW, W, &unused, &last);
    hi = last > lo ? last : lo;
    #pragma omp parallel for {par}
    for (int64_t p = 0; p < planes; p++) {{
        const {S} *xp = x + p * in_plane;
        for (int64_t oz = 0; oz < g->out[0]; oz++) {{
            int64_t z0, z1;
            cuvil_taps(oz * g->s[0] - g->p[0], g->d[0], g->k[0], g->in[0], &z0, &z1);
            for (int64_t oy = 0; oy < g->out[1]; oy++) {{
                {S} *yr = y + p * out_plane + (oz * g->out[1] + oy) * OW;
                const int64_t sy = oy * g->s[1] - g->p[1];
                int64_t y0, y1, a = 0, b = 0;
                cuvil_taps(sy, g->d[1], g->k[1], g->in[1], &y0, &y1);
                if (g->k[0] == 1 && z1 > z0 && y1 > y0) {{
                    const int64_t rows = y1 - y0;
                    const {S} *xr = xp + ((oz * g->s[0] - g->p[0]) * g->in[1] + sy + y0 * g->d[1]) * W;
                    int64_t pad0 = y0, pad1 = y1;
                    if (include_pad) cuvil_taps(sy + g->p[1], g->d[1], g->k[1], g->in[1] + g->p[1] + g->pe[1],
                                                &pad0, &pad1);
                    const {T} count = ({T})((pad1 - pad0) * kw);
                    {squares}{name}_cols(xr, yr, lo, hi, rows, kw, s, rs, dw, -pw, count);
                    a = lo, b = hi;
                }}
                for (int64_t ox = 0; ox < a; ox++) yr[ox] = {store};
                for (int64_t ox = b; ox < OW; ox++) yr[ox] = {store};
            }}
        }}
    }}
}}
"""
# Max over a 2-D window of a blocked [N, C/B, H, W, B] tensor, seen as 3-D with a 1-wide window over B (the
# layout pass's max_pool): every window vectorised over the B channels of its pixels. A thread takes whole output
# rows (plane, oz): one division a row, not three a pixel, and the columns whose windows lie inside the input (all but
# the edges) skip the clipping's divisions too (wasm32's B = 4 spent 20-25% of a small CNN there, bench.wasm_profile).
POOL_LANES = """static void {name}_blocked(const {S} *restrict x, {S} *restrict y, int64_t planes, const cuvil_win *g)
{{
    const int64_t in_plane = g->in[0] * g->in[1] * g->in[2], out_plane = g->out[0] * g->out[1] * g->out[2];
    const int64_t W = g->in[2], rows = planes * g->out[0];
    int64_t a, b, unused;  /* interior columns: the first tap's lower bound, the last tap's upper */
    cuvil_taps(-g->p[1], g->s[1], g->out[1], g->in[1], &a, &unused);
    cuvil_taps((g->k[1] - 1) * g->d[1] - g->p[1], g->s[1], g->out[1], g->in[1], &unused, &b);
    b = b > a ? b : a;
    #pragma omp parallel for {par}
    for (int64_t r = 0; r < rows; r++) {{
        const int64_t p = r / g->out[0], oz = r % g->out[0];
        const {S} *xp = x + p * in_plane;
        {S} *yr = y + p * out_plane + oz * g->out[1] * W;
        if (W == 16) {name}_row(xp, yr, g, oz, a, b, 16);  /* a vector width: acc in registers */
        else if (W == 8) {name}_row(xp, yr, g, oz, a, b, 8);
        else if (W == 4) {name}_row(xp, yr, g, oz, a, b, 4);
        else for (int64_t o0 = 0; o0 < W; o0 += 64)
            {name}_row(xp + o0, yr + o0, g, oz, a, b, W - o0 < 64 ? W - o0 : 64);
    }}
}}
"""
# A pool: the blocked form (a 1-wide window over the lanes of a blocked tensor) or the plain one.
POOL_DISPATCH = """static void {name}(const {S} *restrict x, {S} *restrict y, int64_t planes, const cuvil_win *g,
                   int include_pad)
{{
    {lanes}{name}_plain(x, y, planes, g, include_pad);
}}
"""
# One output row's pixels, n <= 64 channels each (x and y point at their first channel, W apart per pixel): the
# columns in [a, b) take their whole window, the others clip it.
POOL_LANES_HELPER = """static inline __attribute__((always_inline)) void {name}_row(const {S} *restrict xp,
        {S} *restrict yr, const cuvil_win *g, int64_t oz, int64_t a, int64_t b, const int64_t n)
{{
    int64_t z0, z1;
    const int64_t sz = oz * g->s[0] - g->p[0], W = g->in[2];
    cuvil_taps(sz, g->d[0], g->k[0], g->in[0], &z0, &z1);
    for (int64_t oy = 0; oy < g->out[1]; oy++) {{
        const int64_t sy = oy * g->s[1] - g->p[1];
        int64_t y0 = 0, y1 = g->k[1];
        if (oy < a || oy >= b) cuvil_taps(sy, g->d[1], g->k[1], g->in[1], &y0, &y1);
        {T} acc[64];
        for (int64_t ox = 0; ox < n; ox++) acc[ox] = {init};
        for (int64_t tz = z0; tz < z1; tz++)
            for (int64_t ty = y0; ty < y1; ty++) {{
                const {S} *xr = xp + ((sz + tz * g->d[0]) * g->in[1] + sy + ty * g->d[1]) * W;
                #pragma omp simd
                for (int64_t ox = 0; ox < n; ox++) {{
                    const {T} v = {value_lanes};
                    acc[ox] = {combine_lanes};
                }}
            }}
        for (int64_t ox = 0; ox < n; ox++) yr[oy * W + ox] = {store_lanes};
    }}
}}

"""
_AVG_FINISH = """int64_t count = (z1 - z0) * (y1 - y0) * (x1 - x0);
    if (include_pad) {{
        int64_t a0, a1, b0, b1, c0, c1;
        cuvil_taps(sz + g->p[0], g->d[0], g->k[0], g->in[0] + g->p[0] + g->pe[0], &a0, &a1);
        cuvil_taps(sy + g->p[1], g->d[1], g->k[1], g->in[1] + g->p[1] + g->pe[1], &b0, &b1);
        cuvil_taps(sx + g->p[2], g->d[2], g->k[2], g->in[2] + g->p[2] + g->pe[2], &c0, &c1);
        count = (a1 - a0) * (b1 - b0) * (c1 - c0);
    }}
    acc = acc / ({T})count;"""
_INT_MIN = {DType.i8: "INT8_MIN", DType.u8: "0"}


def _use(gen, helper: str, template: str, **fmt) -> str:
    """Register helper `helper` (after the window struct it needs); returns its name."""
    gen.helpers.setdefault("cuvil_win", WIN_STRUCT)
    gen.helpers[helper] = template.format(**fmt)
    return helper


def _helper(gen, kind: str, t: str) -> str:
    template = {"im2col": IM2COL, "col2im": COL2IM, "col2im_tiles": COL2IM_TILES, "dwconv": DWCONV,
                "fill_planes": FILL}[kind]
    work = {"im2col": "channels * taps * out_plane", "col2im": "channels * taps * out_plane",
            "col2im_tiles": "channels * y_plane", "dwconv": "batch * O * out_plane * taps",
            "fill_planes": "batch * O * plane"}[kind]
    return _use(gen, f"cuvil_{kind}_{t}", template, T=t, par=par_if(work))


def _window(op, x_shape, kernel, out_shape, transpose: bool = False) -> str:
    """The C initialiser of a cuvil_win for `op`'s attributes, spatial dims padded to three."""
    s = len(kernel)
    a = op.attrs
    ones = (1,) * (3 - s)
    dil = a.get("dilations") or (1,) * s
    fields = [ones + tuple(x_shape[2:]), ones + tuple(out_shape[2:]), ones + tuple(kernel),
              ones + tuple(a["strides"]), ones + tuple(dil), (0,) * (3 - s) + tuple(a["pads"][:s]),
              (0,) * (3 - s) + tuple(a["pads"][s:])]
    if transpose:  # the adjoint walks x's positions and writes y: in and out swap roles
        fields[0], fields[1] = fields[1], fields[0]
    return "{" + ", ".join("{" + ", ".join(c_dim(v) for v in f) + "}" for f in fields) + "}"


# -- scratch and dtype handling ----------------------------------------------------------------------------
def _as_compute(dt: DType, values: dict, parts: list) -> dict:
    """Names of the buffers in the compute type: f16/bf16 operands and results get f32 scratch copies
    (`_convert_in` and `_store_back` fill them); other dtypes use their own buffers."""
    if dt not in (DType.f16, DType.bf16):
        return {name: name for name in values}
    for name, v in values.items():
        parts.append((f"{name}32", "float", c_dim(v.type.numel)))
    return {name: f"{name}32" for name in values}


def _convert_in(gen, depth: int, dt: DType, values: dict, results) -> None:
    if dt not in (DType.f16, DType.bf16):
        return
    for name, v in values.items():
        if v not in results:
            gen.line(depth, f"for (int64_t t = 0; t < {c_dim(v.type.numel)}; t++) {name}32[t] = "
                            f"{load(dt, name, 't')};")


def _store_back(gen, depth: int, dt: DType, name: str, v) -> None:
    if dt in (DType.f16, DType.bf16):
        gen.line(depth, f"for (int64_t t = 0; t < {c_dim(v.type.numel)}; t++) {name}[t] = "
                        f"{store_value(dt, f'{name}32[t]')};")


def _gemm(t: str, m, n, k, a, rsa, csa, b, rsb, c, ldc, accumulate: bool, act: int = 0, row_bias=None) -> str:
    if t == "float" and row_bias is not None:
        return f"cuvil_sgemm_row_bias({m}, {n}, {k}, 1.0f, {a}, {rsa}, {csa}, {b}, {rsb}, 1, 0.0f, {c}, {ldc}, " \
               f"{row_bias}, {act});"
    if t == "float":
        beta = "1.0f" if accumulate else "0.0f"
        return f"cuvil_sgemm({m}, {n}, {k}, 1.0f, {a}, {rsa}, {csa}, {b}, {rsb}, 1, {beta}, {c}, {ldc}, NULL, {act});"
    return f"cuvil_dgemm({m}, {n}, {k}, {a}, {rsa}, {csa}, {b}, {rsb}, {int(accumulate)}, {c}, {ldc});"


class _Conv:
    """One conv or conv_transpose being emitted: its sizes (Dims), compute type and C buffer names."""

    def __init__(self, gen, op, depth: int, transpose: bool):
        x, w = op.operands[:2]
        self.op, self.gen, self.depth, self.y, self.transpose = op, gen, depth, op.results[0], transpose
        self.groups, self.kernel = op.attrs["groups"], w.type.shape[2:]
        self.n, self.c, self.o = x.type.shape[0], x.type.shape[1], self.y.type.shape[1]
        self.cg, self.og = (self.c // self.groups, w.type.shape[1]) if transpose else \
            (w.type.shape[1], self.o // self.groups)
        self.taps, self.in_plane, self.out_plane = prod(self.kernel), prod(x.type.shape[2:]), \
            prod(self.y.type.shape[2:])
        self.dt = self.y.type.dtype
        self.t = "double" if self.dt is DType.f64 else "float"
        if self.t == "double":
            gen.helpers["cuvil_dgemm"] = DGEMM.format(par=par_if("M * N * K"))
        self.names = {**dict(zip(("x", "w", "b"), op.operands)), "y": self.y}
        self.d = open_block(gen, depth, op, self.names)
        self.parts: list = []
        self.buf = _as_compute(self.dt, self.names, self.parts)

    def begin(self, scratch: list, window: bool) -> None:
        """Declare scratch (f16/bf16 copies, then `scratch`), convert the inputs, declare the window `g`."""
        scratch_parts(self.gen, self.d, self.parts + scratch)
        _convert_in(self.gen, self.d, self.dt, self.names, self.op.results)
        if window:
            self.gen.helpers.setdefault("cuvil_win", WIN_STRUCT)
            g = _window(self.op, self.op.operands[0].type.shape, self.kernel, self.y.type.shape, self.transpose)
            self.gen.line(self.d, f"const cuvil_win g = {g};")

    def fill(self) -> None:
        """y = bias (or 0) per channel plane: the value the GEMMs accumulate onto."""
        _helper(self.gen, "fill_planes", self.t)
        self.gen.line(self.d, f"cuvil_fill_planes_{self.t}({self.buf['y']}, {self.buf.get('b', 'NULL')}, "
                              f"{c_dim(self.n)}, {c_dim(self.o)}, {c_dim(self.out_plane)});")

    def per_image_and_group(self, lines) -> None:
        """Emit `lines(xs, ws, ys)` (C statements) once per image and group; xs, ws, ys are the C pointers to
        that image's and group's input channels, weights and output channels."""
        w_group = self.og * self.cg * self.taps
        xs = f"{self.buf['x']} + (img * {c_dim(self.c)} + grp * {c_dim(self.cg)}) * {c_dim(self.in_plane)}"
        ys = f"{self.buf['y']} + (img * {c_dim(self.o)} + grp * {c_dim(self.og)}) * {c_dim(self.out_plane)}"
        self.gen.line(self.d, f"for (int64_t img = 0; img < {c_dim(self.n)}; img++)")
        self.gen.line(self.d + 1, f"for (int64_t grp = 0; grp < {self.groups}; grp++) {{")
        for text in lines(xs, f"{self.buf['w']} + grp * {c_dim(w_group)}", ys):
            self.gen.line(self.d + 2, text)
        self.gen.line(self.d + 1, "}")

    def end(self) -> None:
        _store_back(self.gen, self.d, self.dt, "y", self.y)
        self.gen.line(self.depth, "}")


# -- conv ----------------------------------------------------------------------------------------------------
def _conv(gen, op, depth: int, act: int = 0) -> None:
    """`act`: the GEMM epilogue's activation code (a fused relu or relu6; f32 GEMM paths only)."""
    cv = _Conv(gen, op, depth, transpose=False)
    pointwise = all(k == 1 for k in cv.kernel) and all(s == 1 for s in op.attrs["strides"]) \
        and not any(op.attrs["pads"])
    direct = cv.cg == 1
    if direct and cv.t == "float" and len(cv.kernel) <= 2:
        _dwconv2d(gen, cv)
        return
    if pointwise and cv.groups == 1 and cv.out_plane == 1 and cv.t == "float":
        _pixel_gemm(gen, cv, act)
        return
    cols = [] if direct or pointwise else [("col", cv.t, c_dim(cv.cg * cv.taps * cv.out_plane))]
    cv.begin(cols, window=direct or not pointwise)
    if direct:
        gen.line(cv.d, f"{_helper(gen, 'dwconv', cv.t)}({cv.buf['x']}, {cv.buf['w']}, {cv.buf.get('b', 'NULL')}, "
                       f"{cv.buf['y']}, {c_dim(cv.n)}, {c_dim(cv.c)}, {c_dim(cv.o)}, &g);")
    else:
        row_bias = f"{cv.buf['b']} + grp * {c_dim(cv.og)}" if "b" in cv.buf and cv.t == "float" else None
        if "b" in cv.buf and row_bias is None:
            cv.fill()
        k, hw = c_dim(cv.cg * cv.taps), c_dim(cv.out_plane)
        im2col = _helper(gen, "im2col", cv.t) if cols else None

        def lines(xs, ws, ys):  # W[og, cg*taps] @ (x's channels, or their windows)[cg*taps, out pixels]
            gemm = _gemm(cv.t, c_dim(cv.og), hw, k, ws, k, 1, "col" if cols else xs, hw, ys, hw, "b" in cv.buf, act,
                         row_bias)
            return [f"{im2col}({xs}, col, {c_dim(cv.cg)}, &g);", gemm] if cols else [gemm]
        cv.per_image_and_group(lines)
    cv.end()


def _pixel_gemm(gen, cv, act: int) -> None:
    """A 1x1 conv of 1x1 maps (squeeze-excite's): Y[n, O] = X[n, C] W^T + bias in one GEMM over the images, the
    weight packed once at load where it is constant and at least a panel wide (the GEMM per image packed it on
    every call: 0.8 GFLOP/s)."""
    cv.begin([], window=False)
    c, o, w = cv.c, cv.o, cv.op.operands[1]
    packed = gen.packed_weight(w, c, o, "1", str(c)) if isinstance(c, int) and isinstance(o, int) and o >= 64 \
        else None
    x, y, bias = cv.buf["x"], cv.buf["y"], cv.buf.get("b", "NULL")
    if packed is not None:
        gen.line(cv.d, f"cuvil_sgemm_packed({c_dim(cv.n)}, {o}, {c}, 1.0f, {x}, {c}, 1, {packed}, 0.0f, {y}, {o}, "
                       f"{bias}, {act});")
    else:
        k, n = c_dim(c), c_dim(o)
        gen.line(cv.d, f"cuvil_sgemm({c_dim(cv.n)}, {n}, {k}, 1.0f, {x}, {k}, 1, {cv.buf['w']}, 1, {k}, 0.0f, {y}, "
                       f"{n}, {bias}, {act});")
    cv.end()


def _dwconv2d(gen, cv, lo: str = "-INFINITY", hi: str = "INFINITY") -> None:
    """A 1-D or 2-D f32 depthwise conv on the kernel library's `cuvil_dwconv2d`, with its clamp epilogue."""
    a, y = cv.op.attrs, cv.y.type.shape
    x, s = cv.op.operands[0].type.shape, len(cv.kernel)

    def two(v, fill=1):  # 1-D convs are 2-D convs with one row
        return (fill,) * (2 - s) + tuple(v)
    geom = [*two(x[2:]), *two(y[2:]), *two(cv.kernel), *two(a["strides"]), *two(a.get("dilations") or (1,) * s),
            *two(a["pads"][:s], 0)]
    cv.begin([], window=False)
    cv.gen.line(cv.d, f"cuvil_dwconv2d({c_dim(cv.n)}, {c_dim(cv.c)}, {c_dim(cv.o)}, {cv.buf['x']}, {cv.buf['w']}, "
                      f"{cv.buf.get('b', 'NULL')}, {cv.buf['y']}, (const int64_t[]){{{', '.join(map(c_dim, geom))}}}, "
                      f"{lo}, {hi});")
    cv.end()


def emit_fused_conv(gen, op, depth: int) -> None:
    """A `fused` op of kind "library" (passes/fuse.py): an f32 conv and the clip or activation applied on its way
    out, by `cuvil_dwconv2d` (depthwise clips) or the GEMM's epilogue (the others)."""
    conv, clip = op.regions[0].ops[:2]
    source = dict(zip((id(a) for a in op.regions[0].args), op.operands))
    view = Op("conv", [source[id(v)] for v in conv.operands], conv.attrs, [], (), conv.loc)
    view.results = op.results  # the conv writes the fused op's buffer
    if clip.name != "clip":  # sigmoid, tanh, gelu, silu, hardswish
        _conv(gen, view, depth, act=activation_code(clip))
        return
    bounds = (clip.attrs["min"], clip.attrs["max"])
    if not depthwise_on_library(view):
        _conv(gen, view, depth, act=ACTIVATIONS[CONV_GEMM_CLAMPS[bounds]])
        return
    t = CType(DType.f32)
    _dwconv2d(gen, _Conv(gen, view, depth, transpose=False), t.lit(bounds[0]), t.lit(bounds[1]))


def depthwise_on_library(conv) -> bool:
    """Whether `_conv` computes this conv with `cuvil_dwconv2d` (one input channel per group, f32, 1-D/2-D)."""
    w = conv.operands[1].type
    return w.shape[1] == 1 and conv.results[0].type.dtype is DType.f32 and w.rank <= 4


# -- conv_transpose ------------------------------------------------------------------------------------------
def _conv_transpose(gen, op, depth: int) -> None:
    cv = _Conv(gen, op, depth, transpose=True)
    rows, hw = c_dim(cv.og * cv.taps), c_dim(cv.in_plane)
    cv.begin([("col", cv.t, c_dim(cv.og * cv.taps * cv.in_plane))], window=True)
    tiles = _tiles_output(op)
    if tiles:
        bias = f"{cv.buf['b']} + grp * {c_dim(cv.og)}" if "b" in cv.buf else "NULL"
        col2im = f"{_helper(gen, 'col2im_tiles', cv.t)}(col, {bias}, {{ys}}, {c_dim(cv.og)}, &g);"
    else:
        cv.fill()
        col2im = f"{_helper(gen, 'col2im', cv.t)}(col, {{ys}}, {c_dim(cv.og)}, &g);"

    def lines(xs, ws, ys):  # cols[og*taps, x pixels] = W^T @ x's channels, then added into y's windows
        return [_gemm(cv.t, rows, hw, c_dim(cv.cg), ws, 1, rows, xs, hw, "col", hw, False), col2im.format(ys=ys)]
    cv.per_image_and_group(lines)
    cv.end()


def _tiles_output(op) -> bool:
    """Whether a conv_transpose's windows tile its output exactly (kernel == stride, no pads, no dilation, no
    output padding): each output element is one product row plus the bias."""
    a = op.attrs
    return tuple(op.operands[1].type.shape[2:]) == tuple(a["strides"]) and not any(a["pads"]) \
        and set(a.get("dilations") or (1,)) == {1} and not any(a.get("output_padding") or ())


# -- pools ---------------------------------------------------------------------------------------------------
def _pool_helper(gen, op_name: str, dt: DType) -> str:
    """Register the pool helpers of this kind and dtype, each threaded loop a helper of its own; returns the name
    of the one to call."""
    s, t = storage(dt), compute(dt)
    name = f"{op_name}_{tag(dt)}"
    if op_name == "max_pool":
        init = "-INFINITY" if dt.is_float else _INT_MIN[dt]
        fmt = {"init": init, "combine": "CUVIL_MAX(acc, v)", "finish": "", "final": "acc"}
    else:
        fmt = {"init": "0", "combine": "acc + v", "finish": _AVG_FINISH.format(T=t), "final": "acc / count"}
    final = fmt.pop("final")
    squares = "".join(f"if (rows == {k} && kw == {k}{' && s == 1' if unit else ''}) {name}_cols(xr, yr, lo, hi, {k}, "
                      f"{k}, {'1' if unit else 's'}, rs, dw, -pw, count);\n                    else "
                      for k, unit in _square_windows(gen.fn, op_name, dt))
    _use(gen, f"{name}_support", POOL, name=name, S=s, T=t, value=load(dt, "xp", "at + tx * g->d[2]"),
         value_cols=load(dt, "xr", "r * rs + ox * s + tx * dw + start"), store_cols=_store(dt, final), **fmt)
    lanes = ""
    if op_name == "max_pool":
        _use(gen, f"{name}_row", POOL_LANES_HELPER, name=name, S=s, T=t, value_lanes=load(dt, "xr", "ox"),
             store_lanes=_store(dt, "acc[ox]"), combine_lanes="CUVIL_MAX(acc[ox], v)", **fmt)
        _use(gen, f"{name}_blocked", POOL_LANES, name=name, S=s,
             par=par_if("planes * out_plane * g->k[0] * g->k[1]"))
        lanes = (f"if (g->k[2] == 1 && g->s[2] == 1 && g->p[2] == 0 && g->pe[2] == 0 && g->out[2] == g->in[2]) "
                 f"{{\n        {name}_blocked(x, y, planes, g);\n        return;\n    }}\n    ")
    _use(gen, f"{name}_plain", POOL_PLAIN, name=name, S=s, T=t, squares=squares, store=_store(
        dt, f"{name}_at(xp, g, oz, oy, ox, include_pad)"), par=par_if(
        "planes * out_plane * g->k[0] * g->k[1] * g->k[2]"))
    return _use(gen, name, POOL_DISPATCH, name=name, S=s, lanes=lanes)


def _square_windows(fn, op_name: str, dt: DType) -> list:
    """(K, stride 1?) of the 2x2 and 3x3 windows among fn's pools of this kind and dtype: the helper unrolls
    those (up to 9x faster than the generic column loop) and compiles no others (each costs 0.2 s of gcc)."""
    found = set()
    for o in fn.walk():
        if o.name == op_name and o.operands[0].type.dtype is dt:
            kz, ky, kx = (1, 1, *o.attrs["kernel"])[-3:]
            if kz == 1 and ky == kx and kx in (2, 3):
                found.add((kx, o.attrs["strides"][-1] == 1))
    return sorted(found)


def _store(dt: DType, expr: str) -> str:
    return store_value(dt, expr) if dt.is_float else f"({storage(dt)})({expr})"


def _pool(gen, op, depth: int) -> None:
    x, y = op.operands[0], op.results[0]
    if op.name == "max_pool" and x.type.dtype is DType.u8 and len(op.attrs["kernel"]) == 2:
        library_quant.max_pool_u8(gen, op, depth)  # a quantized tensor between layers: conv_int8.c's kernel
        return
    d = open_block(gen, depth, op, {"x": x, "y": y})
    gen.line(d, f"const cuvil_win g = {_window(op, x.type.shape, op.attrs['kernel'], y.type.shape)};")
    name = _pool_helper(gen, op.name, x.type.dtype)
    planes = c_dim(x.type.shape[0] * x.type.shape[1])
    gen.line(d, f"{name}(x, y, {planes}, &g, {int(op.attrs.get('count_include_pad', False))});")
    gen.line(depth, "}")


EMITTERS = {"conv": _conv, "conv_transpose": _conv_transpose, "max_pool": _pool, "avg_pool": _pool}
