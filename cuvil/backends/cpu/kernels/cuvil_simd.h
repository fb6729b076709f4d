/* Portable SIMD for Cuvil's kernels: GCC/Clang vector extensions sized by the target's features, and
 * vectorised exp, tanh, erf, sigmoid and the activations built on them.
 *
 * Lanes: 16 with AVX-512, 8 with AVX/AVX2, 4 otherwise: NEON on aarch64 (every kernel's vectors are 4-lane
 * NEON registers there: fmla/fmul/bsl, checked by tests/backends/cpu/test_targets_aarch64.py), SSE, and SIMD128 on
 * wasm32. The target's flags (backends/cpu/targets.py) decide which of these macros the compiler defines.
 * The transcendentals and their accuracy: cuvil_math.inc, shared with the scalar forms of generated code.
 */
#ifndef CUVIL_SIMD_H
#define CUVIL_SIMD_H

#include <stdint.h>

#if defined(__wasm_simd128__) && defined(CUVIL_WASM_VL)
/* wasm32 (backends/cpu/wasm.py): 4 lanes, one v128; or the blocked layout's width of the host the IR was laid out
 * for (its weights come in blocks of that many channels), a vector of several v128. */
#define CUVIL_VL CUVIL_WASM_VL
#elif defined(__AVX512F__)
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
#if defined(__wasm_simd128__) && CUVIL_VL == 4
#include <wasm_simd128.h>
/* SIMD128's pseudo-min/max are these selects in one instruction: pmax(b, a) = b < a ? a : b, NaN as below. */
CUVIL_INLINE cuvil_vf cuvil_max(cuvil_vf a, cuvil_vf b) { return (cuvil_vf)wasm_f32x4_pmax((v128_t)b, (v128_t)a); }
CUVIL_INLINE cuvil_vf cuvil_min(cuvil_vf a, cuvil_vf b) { return (cuvil_vf)wasm_f32x4_pmin((v128_t)b, (v128_t)a); }
#else
CUVIL_INLINE cuvil_vf cuvil_max(cuvil_vf a, cuvil_vf b) { return cuvil_select(a > b, a, b); }
CUVIL_INLINE cuvil_vf cuvil_min(cuvil_vf a, cuvil_vf b) { return cuvil_select(a < b, a, b); }
#endif
CUVIL_INLINE cuvil_vf cuvil_abs(cuvil_vf a) { return (cuvil_vf)((cuvil_vi)a & 0x7fffffff); }
/* Copy the sign of s onto the magnitude of m (m >= 0). */
CUVIL_INLINE cuvil_vf cuvil_with_sign(cuvil_vf m, cuvil_vf s)
{
    return (cuvil_vf)((cuvil_vi)m | ((cuvil_vi)s & (int32_t)0x80000000u));
}

/* exp, exp_normal, sigmoid, tanh, erf, gelu_tanh, gelu_erf on vectors: cuvil_v_exp, cuvil_v_sigmoid, ... (the source
 * generated code's scalar forms share). */
typedef uint32_t cuvil_vu __attribute__((vector_size(CUVIL_VL * 4)));
#define CM_F cuvil_vf
#define CM_I cuvil_vi
#define CM_NAME(base) cuvil_v_##base
#define CM_SEL(m, a, b) cuvil_select(m, a, b)
#define CM_ABS(x) cuvil_abs(x)
#define CM_WITH_SIGN(m, s) cuvil_with_sign(m, s)
#define CM_TO_I(f) __builtin_convertvector(f, cuvil_vi)
#define CM_FIELD(e) ((cuvil_vf)((cuvil_vu)(e) << 23))
#define CM_SPLAT(c) cuvil_splat(c)
#define CM_INLINE CUVIL_INLINE
#if defined(__AVX512F__) && CUVIL_VL == 16
#include <immintrin.h>
/* One vmaxps and one vminps (GCC makes a compare and two logic ops of each select, a third of an exp). The
 * constant is their first operand: vmin/vmax return the second when either is NaN, so a NaN x passes. */
#define CM_CLAMP(x, lo, hi) \
    ((cuvil_vf)_mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), (__m512)(x))))
/* vscalefps: one instruction for the conversion, shifts and multiplies of the exponent fields. */
#define CM_LDEXP(p, n) ((cuvil_vf)_mm512_scalef_ps((__m512)(p), (__m512)(n)))
#endif
#include "cuvil_math.inc" /* it #undefs the CM_ macros */

/* act is one of the CUVIL_ACT_* codes of cuvil_kernels.h. */
CUVIL_INLINE cuvil_vf cuvil_activate(cuvil_vf x, int act)
{
    switch (act) {
    case 1: return cuvil_select(x < cuvil_splat(0.0f), cuvil_splat(0.0f), x); /* NaN stays NaN, as in the IR */
    case 2: return cuvil_v_gelu_tanh(x);
    case 3: return cuvil_v_gelu_erf(x);
    case 4: return cuvil_v_sigmoid(x);
    case 5: return cuvil_v_tanh(x);
    case 7: return cuvil_v_silu(x);
    case 8: return cuvil_v_hardswish(x);
    case 6: return cuvil_select(x > cuvil_splat(6.0f), cuvil_splat(6.0f), cuvil_select(x < cuvil_splat(0.0f), cuvil_splat(0.0f), x));
    default: return x;
    }
}

#endif
