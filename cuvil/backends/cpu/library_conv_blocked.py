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

GEOMETRY = """/* A blocked convolution's sizes: x [n, cb, h, w, C], y [n, ob, oh, ow, B] (or, with oc > 0, the plain
 * [n, oc, oh, ow]), kernel kh x kw. */
typedef struct { int64_t n, cb, h, w, ob, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, oc; } cuvil_nchwc;
"""

VECTORS = """typedef float cuvil_vf{B} __attribute__((vector_size({B} * 4)));
typedef float cuvil_vf{B}u __attribute__((vector_size({B} * 4), aligned(4)));  /* for unaligned loads */
typedef int32_t cuvil_vi{B} __attribute__((vector_size({B} * 4)));
"""

# RW output pixels of NB output blocks from input column iw0 (step sw); kernel rows [kh0, kh1) lie inside x.
# With `clip` (a constant after inlining) each kernel column only feeds the pixels whose tap lies inside x.
# `ws` is the distance between two output blocks' weights, `ys` between their outputs; a plain output (g->oc)
# is written lane by lane, `left` being the channels from this block on.
STRIP_FN = """static inline __attribute__((always_inline)) void cuvil_nchwc{B}x{C}_{NB}x{RW}(const float *restrict xn,
        const float *restrict wo, int64_t ws, const float *restrict bo, const float *restrict rr, float *restrict yr,
        int64_t ys, int64_t left, const cuvil_nchwc *g, int64_t ih0, int64_t kh0, int64_t kh1, int64_t iw0,
        const int clip, int act)
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
            for (int64_t kx = 0; kx < g->kw; kx++) {{
                int64_t r0 = 0, r1 = {RW};
                if (clip) cuvil_taps(iw0 + kx * g->dw, g->sw, {RW}, g->w, &r0, &r1);
                const float *xp = xrow + (iw0 + kx * g->dw) * {C};  /* read only at pixels [r0, r1) */
                const float *wl = wk + kx * {C} * {B};
                for (int l = 0; l < {C}; l++) {{
                    cuvil_vf{B} wv[{NB}];
                    #pragma GCC unroll 2
                    for (int j = 0; j < {NB}; j++) wv[j] = *(const cuvil_vf{B}u *)(wl + j * ws + l * {B});
                    #pragma GCC unroll {RW}
                    for (int r = 0; r < {RW}; r++) {{
                        if (clip && (r < r0 || r >= r1)) continue;
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
            if (!g->oc)
                *(cuvil_vf{B}u *)(yr + j * ys + r * {B}) = v;
            else
                for (int e = 0; e < {B} && j * {B} + e < left; e++) yr[j * ys + e * g->oh * g->ow + r] = v[e];
        }}
    }}
}}
"""

# One output row of NB output blocks in strips; a row's tail takes the narrowest strip that covers it, ending at
# the row's end (overlapping pixels are computed twice, alike). Strips that reach a padded edge clip their taps.
# One call site per strip width and clipping keeps the inlined code small.
ROW_FN = """static inline __attribute__((always_inline)) void cuvil_nchwc{B}x{C}_row{NB}(const float *restrict xn,
        const float *restrict wo, int64_t ws, const float *restrict bo, const float *restrict rr, float *restrict yr,
        int64_t ys, int64_t left, int64_t px, const cuvil_nchwc *g, int64_t ih0, int64_t kh0, int64_t kh1,
        int64_t lo, int64_t hi, int act)
{{
    for (int64_t ow = 0; ow < g->ow;) {{
        const int64_t r = g->ow - ow;
        int64_t w, at = ow;
{choose}
        const int clip = at < lo || at + w > hi;
        const float *ra = rr ? rr + at * {B} : NULL;
        switch (w * 2 + clip) {{
{cases}
        }}
        ow = at + w;
    }}
}}
"""


def _choose(widths) -> str:
    """C setting the strip width w (and start `at`) for the r pixels left of a row: the widest strip while
    it fits, then the narrowest that covers the rest and fits the row (ending at its end), else the widest
    that fits in the rest."""
    widest = max(widths)
    lines = [f"if (r >= {widest}) w = {widest};"]
    lines += [f"else if (r <= {w} && g->ow >= {w}) w = {w}, at = g->ow - {w};" for w in sorted(widths)]
    lines += [f"else if (r >= {w}) w = {w};" for w in sorted(widths, reverse=True)[1:] if w > 1]
    return "\n".join(f"        {line}" for line in lines + ["else w = 1;"])


def _cases(block: int, in_block: int, nb: int, widths) -> str:
    call = (f"cuvil_nchwc{block}x{in_block}_{nb}x{{w}}(xn, wo, ws, bo, ra, yr + at * px, ys, left, g, ih0, kh0, "
            f"kh1, at * g->sw - g->pw, {{clip}}, act); break;")
    return "\n".join(f"            case {2 * w + clip}: " + call.format(w=w, clip=clip)
                     for w in widths for clip in (0, 1))


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
        float *yr = g->oc ? y + (n * g->oc + o * {B}) * g->oh * g->ow + oh * g->ow : y + row * g->ow * {B};
        const int64_t left = g->oc - o * {B}, px = g->oc ? 1 : {B};  /* plain output: channels left, pixel step */
        if (o + 1 < g->ob)
            cuvil_nchwc{B}x{C}_row2(xn, wo, ws, bo, rr, yr, ys, left, px, g, ih0, kh0, kh1, lo, hi, act);
        else
            cuvil_nchwc{B}x{C}_row1(xn, wo, ws, bo, rr, yr, ys, left, px, g, ih0, kh0, kh1, lo, hi, act);
    }}
}}
"""


def _helper(gen, block: int, in_block: int) -> str:
    """Register the kernel for `block`-wide output and `in_block`-wide input channel blocks (and what it
    needs); returns its name."""
    name = f"cuvil_conv_nchwc{block}x{in_block}"
    strip = STRIPS.get(block, 4)
    widths = tuple(dict.fromkeys(w for w in (strip, 7, 4, 1) if w <= strip))
    gen.helpers.setdefault("cuvil_win", WIN_STRUCT)
    gen.helpers.setdefault("cuvil_nchwc", GEOMETRY)
    gen.helpers.setdefault(f"cuvil_vf{block}", VECTORS.format(B=block))
    for nb in (1, 2):
        for rw in widths:
            gen.helpers.setdefault(f"{name}_{nb}x{rw}", STRIP_FN.format(B=block, C=in_block, NB=nb, RW=rw))
        gen.helpers.setdefault(f"{name}_row{nb}", ROW_FN.format(B=block, C=in_block, NB=nb, choose=_choose(widths),
                                                                cases=_cases(block, in_block, nb, widths)))
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
    sizes = (*x.type.shape[:4], w.type.shape[0], *y.type.shape[2:4], *w.type.shape[2:4], *a["strides"],
             *a["pads"][:2], *a["dilations"], a["channels"])
    gen.line(d, f"const cuvil_nchwc g = {{{', '.join(c_dim(s) for s in sizes)}}};")
    res = "res" if "res" in names else "NULL"
    kernel = _helper(gen, w.type.shape[5], x.type.shape[4])
    gen.line(d, f"{kernel}(x, w, bias, {res}, y, &g, {int(a['activation'] == 'relu')});")
    gen.line(depth, "}")


EMITTERS = {"conv_nchwc": _conv_nchwc}
