"""Library emitter for `conv_nchwc`: a register-blocked direct convolution on the blocked layout.

One output row of one block of B output channels (B = 16 on AVX-512, one vector; 8 on AVX2) is computed in
strips of up to STRIP output pixels whose B-wide accumulators stay in registers. The inner loop runs over
(input channel block, kernel row, kernel column, input lane): it broadcasts one input value and adds its
product with one weight vector into every accumulator (the weights were packed [O/B, C/B, kh, kw, B, B] at
compile time, so the vector is contiguous). Columns whose whole window lies inside x run in strips; the few
edge columns that a pad reaches take the same loop with their taps clipped, so no read leaves x. Bias,
residual and relu are applied while the strip is in registers. Threads split (image, output block, row).
"""
from __future__ import annotations

from .library_conv import WIN_STRUCT
from .library_util import c_dim, open_block, par_if

STRIPS = {16: 12, 8: 6}  # output pixels per strip: 2 x STRIP accumulators + 2 weights + a broadcast fit the registers

GEOMETRY = """/* A blocked convolution's sizes: x [n, cb, h, w, C], y [n, ob, oh, ow, B], kernel kh x kw. */
typedef struct { int64_t n, cb, h, w, ob, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw; } cuvil_nchwc;
"""

VECTORS = """typedef float cuvil_vf{B} __attribute__((vector_size({B} * 4)));
typedef float cuvil_vf{B}u __attribute__((vector_size({B} * 4), aligned(4)));  /* for unaligned loads */
typedef int32_t cuvil_vi{B} __attribute__((vector_size({B} * 4)));
"""

# RW output pixels of NB output blocks from input column iw0 (step sw); kernel rows [kh0, kh1) and columns
# [kw0, kw1) lie inside x. `ws` is the distance between two output blocks' weights, `ys` between their outputs.
STRIP_FN = """static inline __attribute__((always_inline)) void cuvil_nchwc{B}x{C}_{NB}x{RW}(const float *restrict xn,
        const float *restrict wo, int64_t ws, const float *restrict bo, const float *restrict rr, float *restrict yr,
        int64_t ys, const cuvil_nchwc *g, int64_t ih0, int64_t kh0, int64_t kh1, int64_t iw0, int64_t kw0,
        int64_t kw1, int act)
{{
    cuvil_vf{B} acc[{NB}][{RW}];
    for (int j = 0; j < {NB}; j++) {{
        const cuvil_vf{B} b0 = *(const cuvil_vf{B}u *)(bo + j * {B});
        #pragma GCC unroll {RW}
        for (int r = 0; r < {RW}; r++) acc[j][r] = b0;
    }}
    const int64_t step = g->sw * {C};
    for (int64_t c = 0; c < g->cb; c++)
        for (int64_t ky = kh0; ky < kh1; ky++) {{
            const float *xrow = xn + ((c * g->h) + ih0 + ky * g->dh) * g->w * {C};
            const float *wk = wo + (c * g->kh + ky) * g->kw * {C} * {B};
            for (int64_t kx = kw0; kx < kw1; kx++) {{
                const float *xp = xrow + (iw0 + kx * g->dw) * {C};
                const float *wl = wk + kx * {C} * {B};
                for (int l = 0; l < {C}; l++) {{
                    cuvil_vf{B} wv[{NB}];
                    #pragma GCC unroll 2
                    for (int j = 0; j < {NB}; j++) wv[j] = *(const cuvil_vf{B}u *)(wl + j * ws + l * {B});
                    #pragma GCC unroll {RW}
                    for (int r = 0; r < {RW}; r++) {{
                        const float v = xp[r * step + l];
                        #pragma GCC unroll 2
                        for (int j = 0; j < {NB}; j++) acc[j][r] += v * wv[j];
                    }}
                }}
            }}
        }}
    for (int j = 0; j < {NB}; j++) {{
        #pragma GCC unroll {RW}
        for (int r = 0; r < {RW}; r++) {{
            cuvil_vf{B} v = acc[j][r];
            if (rr) v += *(const cuvil_vf{B}u *)(rr + j * ys + r * {B});
            if (act) v = (cuvil_vf{B})((cuvil_vi{B})v & ~(v < 0));  /* relu that keeps NaN, like its reference */
            *(cuvil_vf{B}u *)(yr + j * ys + r * {B}) = v;
        }}
    }}
}}
"""

# One output row of NB output blocks: interior columns in strips, edge columns one by one with taps clipped.
ROW_FN = """static inline __attribute__((always_inline)) void cuvil_nchwc{B}x{C}_row{NB}(const float *restrict xn,
        const float *restrict wo, int64_t ws, const float *restrict bo, const float *restrict rr, float *restrict yr,
        int64_t ys, const cuvil_nchwc *g, int64_t ih0, int64_t kh0, int64_t kh1, int64_t lo, int64_t hi, int act)
{{
#define CUVIL_AT(RW, K0, K1) cuvil_nchwc{B}x{C}_{NB}x##RW(xn, wo, ws, bo, rr ? rr + ow * {B} : NULL, yr + ow * {B}, \
            ys, g, ih0, kh0, kh1, ow * g->sw - g->pw, K0, K1, act)
    for (int64_t ow = 0; ow < g->ow; ow++) {{
        if (ow == lo) {{
{strips}
            if (ow == g->ow) break;
        }}
        int64_t kw0, kw1;
        cuvil_taps(ow * g->sw - g->pw, g->dw, g->kw, g->w, &kw0, &kw1);
        CUVIL_AT(1, kw0, kw1);
    }}
#undef CUVIL_AT
}}
"""

# Threads split (image, pair of output blocks, output row); an odd last block runs alone.
CONV_FN = """static void cuvil_conv_nchwc{B}x{C}(const float *restrict x, const float *restrict w,
        const float *restrict bias, const float *restrict res, float *restrict y, const cuvil_nchwc *g, int act)
{{
    int64_t lo, hi, unused;  /* output columns whose every tap lies inside x */
    cuvil_taps(-g->pw, g->sw, g->ow, g->w, &lo, &unused);
    cuvil_taps((g->kw - 1) * g->dw - g->pw, g->sw, g->ow, g->w, &unused, &hi);
    if (hi < lo) hi = lo;
    const int64_t pairs = (g->ob + 1) / 2, ws = g->cb * g->kh * g->kw * {C} * {B}, ys = g->oh * g->ow * {B};
    #pragma omp parallel for {par}
    for (int64_t p = 0; p < g->n * pairs * g->oh; p++) {{
        const int64_t oh = p % g->oh, o = p / g->oh % pairs * 2, n = p / g->oh / pairs;
        const int64_t ih0 = oh * g->sh - g->ph, row = (n * g->ob + o) * g->oh + oh;
        int64_t kh0, kh1;
        cuvil_taps(ih0, g->dh, g->kh, g->h, &kh0, &kh1);
        const float *xn = x + n * g->cb * g->h * g->w * {C}, *wo = w + o * ws, *bo = bias + o * {B};
        const float *rr = res ? res + row * g->ow * {B} : NULL;
        float *yr = y + row * g->ow * {B};
        if (o + 1 < g->ob)
            cuvil_nchwc{B}x{C}_row2(xn, wo, ws, bo, rr, yr, ys, g, ih0, kh0, kh1, lo, hi, act);
        else
            cuvil_nchwc{B}x{C}_row1(xn, wo, ws, bo, rr, yr, ys, g, ih0, kh0, kh1, lo, hi, act);
    }}
}}
"""


def _helper(gen, block: int, in_block: int) -> str:
    """Register the kernel for `block`-wide output and `in_block`-wide input channel blocks (and what it
    needs); returns its name."""
    name = f"cuvil_conv_nchwc{block}x{in_block}"
    widths = tuple(dict.fromkeys((STRIPS.get(block, 4), STRIPS.get(block, 4) // 2, 3, 1)))
    strips = "\n".join(f"            for (; ow + {rw} <= hi; ow += {rw}) CUVIL_AT({rw}, 0, g->kw);" for rw in widths)
    gen.helpers.setdefault("cuvil_win", WIN_STRUCT)
    gen.helpers.setdefault("cuvil_nchwc", GEOMETRY)
    gen.helpers.setdefault(f"cuvil_vf{block}", VECTORS.format(B=block))
    for nb in (1, 2):
        for rw in widths:
            gen.helpers.setdefault(f"{name}_{nb}x{rw}", STRIP_FN.format(B=block, C=in_block, NB=nb, RW=rw))
        gen.helpers.setdefault(f"{name}_row{nb}", ROW_FN.format(B=block, C=in_block, NB=nb, strips=strips))
    work = f"g->n * g->ob * g->oh * g->ow * g->cb * g->kh * g->kw * {in_block * block}"
    gen.helpers.setdefault(name, CONV_FN.format(B=block, C=in_block, par=par_if(work)))
    return name


def _conv_nchwc(gen, op, depth: int) -> None:
    x, w = op.operands[:2]
    y = op.results[0]
    names = {"x": x, "w": w, "bias": op.operands[2], "y": y}
    if len(op.operands) == 4:
        names["res"] = op.operands[3]
    d = open_block(gen, depth, op, names)
    a = op.attrs
    sizes = (x.type.shape[0], x.type.shape[1], *x.type.shape[2:4], *y.type.shape[1:4], *w.type.shape[2:4],
             *a["strides"], *a["pads"][:2], *a["dilations"])
    gen.line(d, f"const cuvil_nchwc g = {{{', '.join(c_dim(s) for s in sizes)}}};")
    res = "res" if "res" in names else "NULL"
    kernel = _helper(gen, w.type.shape[5], x.type.shape[4])
    gen.line(d, f"{kernel}(x, w, bias, {res}, y, &g, {int(a['activation'] == 'relu')});")
    gen.line(depth, "}")


EMITTERS = {"conv_nchwc": _conv_nchwc}
