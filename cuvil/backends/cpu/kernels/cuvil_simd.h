/* Portable SIMD for Cuvil's kernels: GCC/Clang vector extensions sized by the target's features, and
 * vectorised exp, tanh, erf, sigmoid and the activations built on them.
 *
 * Lanes: 16 with AVX-512, 8 with AVX/AVX2, 4 otherwise: NEON on aarch64 (every kernel's vectors are 4-lane
 * NEON registers there: fmla/fmul/bsl, checked by tests/backends/cpu/test_targets_aarch64.py), SSE, and SIMD128 on
 * wasm32. The target's flags (backends/cpu/targets.py) decide which of these macros the compiler defines.
 * Accuracy over finite inputs, measured against float64 by tests/backends/cpu/test_gemm.py:
 *   exp, sigmoid, tanh: relative error < 2e-7 (tests allow 3e-7);
 *   erf: absolute < 2e-7 (Abramowitz-Stegun 7.1.26); gelu: absolute < 2e-7 * max(1, |x|).
 */
#ifndef CUVIL_SIMD_H
#define CUVIL_SIMD_H

#include <stdint.h>

#if defined(__AVX512F__)
#define CUVIL_VL 16
#elif defined(__AVX__)
#define CUVIL_VL 8
#else
#define CUVIL_VL 4
#endif

typedef float cuvil_vf __attribute__((vector_size(CUVIL_VL * 4)));
typedef int32_t cuvil_vi __attribute__((vector_size(CUVIL_VL * 4)));
/* For memory access: unaligned, and allowed to alias floats (memcpy would go through the stack in halves). */
typedef float cuvil_vf_mem __attribute__((vector_size(CUVIL_VL * 4), aligned(4), may_alias));

#define CUVIL_INLINE static inline __attribute__((always_inline))

CUVIL_INLINE cuvil_vf cuvil_load(const float *p) { return *(const cuvil_vf_mem *)p; }
CUVIL_INLINE void cuvil_store(float *p, cuvil_vf v) { *(cuvil_vf_mem *)p = v; }
/* A broadcast. In arithmetic, write the scalar operand directly (`s * v`): GCC widens it for free, while
 * `(cuvil_vf){0} + s` costs an add (signed zeros). */
CUVIL_INLINE cuvil_vf cuvil_splat(float s)
{
    cuvil_vf v;
    for (int i = 0; i < CUVIL_VL; i++) v[i] = s;
    return v;
}
CUVIL_INLINE cuvil_vf cuvil_select(cuvil_vi mask, cuvil_vf a, cuvil_vf b)
{
    return (cuvil_vf)(((cuvil_vi)a & mask) | ((cuvil_vi)b & ~mask));
}
CUVIL_INLINE cuvil_vf cuvil_max(cuvil_vf a, cuvil_vf b) { return cuvil_select(a > b, a, b); }
CUVIL_INLINE cuvil_vf cuvil_min(cuvil_vf a, cuvil_vf b) { return cuvil_select(a < b, a, b); }
CUVIL_INLINE cuvil_vf cuvil_abs(cuvil_vf a) { return (cuvil_vf)((cuvil_vi)a & 0x7fffffff); }
/* Copy the sign of s onto the magnitude of m (m >= 0). */
CUVIL_INLINE cuvil_vf cuvil_with_sign(cuvil_vf m, cuvil_vf s)
{
    return (cuvil_vf)((cuvil_vi)m | ((cuvil_vi)s & (int32_t)0x80000000u));
}

/* exp: 2^n * p(r) with r = x - n ln2 in [-ln2/2, ln2/2], degree-6 minimax polynomial; clamped so that
 * results stay finite and normal (exp(x > 88.37) = 2.4e38, exp(x < -87.3) = 1.2e-38, never inf or 0). */
CUVIL_INLINE cuvil_vf cuvil_exp(cuvil_vf x)
{
    x = cuvil_min(cuvil_max(x, cuvil_splat(-87.3f)), cuvil_splat(88.37f));
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    cuvil_vf n = (x * 1.44269504088896341f + magic) - magic;
    cuvil_vf r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
    cuvil_vf p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = (p * r) * r + r + 1.0f;
    cuvil_vi e = (__builtin_convertvector(n, cuvil_vi) + 127) << 23;
    return p * (cuvil_vf)e;
}

CUVIL_INLINE cuvil_vf cuvil_sigmoid(cuvil_vf x) { return 1.0f / (1.0f + cuvil_exp(-x)); }

/* tanh: odd Taylor polynomial below |x| = 0.55 (where 1 - 2/(e^2x + 1) would cancel), that formula above. */
CUVIL_INLINE cuvil_vf cuvil_tanh(cuvil_vf x)
{
    cuvil_vf a = cuvil_abs(x);
    cuvil_vf big = 1.0f - 2.0f / (cuvil_exp(a + a) + 1.0f);
    cuvil_vf z = x * x;
    cuvil_vf p = z * 1.4558344e-3f - 3.5921280e-3f; /* Taylor: 929569/638512875 z^6 ... + 1/3 */
    p = p * z + 8.8632355e-3f;
    p = p * z - 2.1869489e-2f;
    p = p * z + 5.3968254e-2f;
    p = p * z - 1.3333334e-1f;
    p = p * z + 3.3333334e-1f;
    cuvil_vf small = a - a * z * p;
    return cuvil_with_sign(cuvil_select(a < 0.55f, small, big), x);
}

/* erf: Abramowitz-Stegun 7.1.26, absolute error < 1.5e-7 (plus rounding). */
CUVIL_INLINE cuvil_vf cuvil_erf(cuvil_vf x)
{
    cuvil_vf a = cuvil_abs(x);
    cuvil_vf t = 1.0f / (1.0f + 0.3275911f * a);
    cuvil_vf p = t * 1.061405429f - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    cuvil_vf y = 1.0f - p * t * cuvil_exp(-a * a);
    return cuvil_with_sign(y, x);
}

CUVIL_INLINE cuvil_vf cuvil_gelu_tanh(cuvil_vf x)
{
    cuvil_vf inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + cuvil_tanh(inner));
}

CUVIL_INLINE cuvil_vf cuvil_gelu_erf(cuvil_vf x) { return 0.5f * x * (1.0f + cuvil_erf(x * 0.7071067811865476f)); }

/* act is one of the CUVIL_ACT_* codes of cuvil_kernels.h. */
CUVIL_INLINE cuvil_vf cuvil_activate(cuvil_vf x, int act)
{
    switch (act) {
    case 1: return cuvil_select(x < cuvil_splat(0.0f), cuvil_splat(0.0f), x); /* NaN stays NaN, as in the IR */
    case 2: return cuvil_gelu_tanh(x);
    case 3: return cuvil_gelu_erf(x);
    case 4: return cuvil_sigmoid(x);
    case 5: return cuvil_tanh(x);
    case 6: return cuvil_select(x > cuvil_splat(6.0f), cuvil_splat(6.0f), cuvil_select(x < cuvil_splat(0.0f), cuvil_splat(0.0f), x));
    default: return x;
    }
}

#endif
