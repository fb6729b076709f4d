/* Scalar helpers for Cuvil's generated C: math that GCC vectorises inside `omp simd` loops (no libm calls
 * in hot loops), IEEE special cases kept (inf, NaN, signed zero), and the integer semantics of the IR.
 *
 * Accuracy over finite inputs, checked against float64 by tests/backends/cpu/test_runtime_math.py: the exp family's
 * in kernels/cuvil_math.inc; cuvil_logf: relative <= 3 ulp (normal inputs).
 */
#ifndef CUVIL_RT_H
#define CUVIL_RT_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define CUVIL_RT_INLINE static inline __attribute__((always_inline))

CUVIL_RT_INLINE float cuvil_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
CUVIL_RT_INLINE uint32_t cuvil_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* bf16 is stored as the upper half of an f32; conversion rounds to nearest even, NaN stays NaN. */
CUVIL_RT_INLINE float cuvil_bf16_to_f32(uint16_t h) { return cuvil_bits_to_f32((uint32_t)h << 16); }
CUVIL_RT_INLINE uint16_t cuvil_f32_to_bf16(float f)
{
    uint32_t u = cuvil_f32_to_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)(f != f ? ((u >> 16) | 0x40u) : rounded);
}

/* exp, exp_normal, sigmoid, tanh, erf, gelu_tanh, gelu_erf on floats: cuvil_expf, cuvil_sigmoidf, ... (the source
 * the kernel library's vector forms share). */
#define CM_F float
#define CM_I int32_t
#define CM_NAME(base) cuvil_##base##f
#define CM_SEL(m, a, b) ((m) ? (a) : (b))
#define CM_ABS(x) fabsf(x)
#define CM_WITH_SIGN(m, s) copysignf(m, s)
#define CM_TO_I(f) ((int32_t)(f))
#define CM_FIELD(e) cuvil_bits_to_f32((uint32_t)(e) << 23)
#define CM_SPLAT(c) (c)
#define CM_INLINE CUVIL_RT_INLINE
#include "cuvil_math.inc" /* it #undefs the CM_ macros */

CUVIL_RT_INLINE double cuvil_exp(double x) { return exp(x); }

/* log: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by the atanh series in s = (m-1)/(m+1). */
CUVIL_RT_INLINE float cuvil_logf(float x)
{
    uint32_t u = cuvil_f32_to_bits(x);
    int32_t e = (int32_t)((u >> 23) & 0xff) - 127;
    float m = cuvil_bits_to_f32((u & 0x007fffffu) | 0x3f800000u);
    int big = m > 1.41421356f;
    m = big ? m * 0.5f : m;
    e = big ? e + 1 : e;
    float s = (m - 1.0f) / (m + 1.0f);
    float z = s * s;
    float p = z * 0.2222222222f + 0.2857142857f;
    p = p * z + 0.4f;
    p = p * z + 0.6666666667f;
    p = p * z + 2.0f;
    float y = s * p + (float)e * 0.693147180559945f;
    y = x == 0.0f ? -INFINITY : y;
    y = x < 0.0f ? NAN : y;
    y = x == INFINITY ? INFINITY : y;
    int subnormal = x > 0.0f && x < 1.17549435e-38f;
    return (x != x || subnormal) ? logf(x) : y;
}

#define CUVIL_SCALAR CUVIL_RT_INLINE
#include "cuvil_scalar.inc" /* integer division, modulo, ipow, NaN-propagating max/min */

CUVIL_RT_INLINE int64_t cuvil_imax(int64_t a, int64_t b) { return a > b ? a : b; }

/* The error channel of generated code: cuvil_main returns 0, or a nonzero code with a message for the failing
 * thread in cuvil_error_text, which the model library exports as `const char *cuvil_last_error(void)`. */
#define CUVIL_ERROR_INDEX 1 /* an index input outside the axis it indexes */
/* Weak, not static: a library of several entries (one translation unit each) links one buffer and one
 * cuvil_last_error, which every entry's failures write and read. */
__attribute__((weak)) _Thread_local char cuvil_error_text[512];

/* Returns from the enclosing function with `call`'s code when it is nonzero. */
#define CUVIL_TRY(call) do { int cuvil_rc_ = (call); if (cuvil_rc_ != 0) return cuvil_rc_; } while (0)

/* Records an index outside [0, size) of `axis` (after negative indices counted from the end) in NumPy's words, as the
 * interpreter reports it: "'gather': index 5000 is out of bounds for axis 0 with size 1000 (at model.onnx:Gather_3)". */
static inline __attribute__((cold, noinline)) int cuvil_index_error(const char *op, const char *loc, int64_t index,
                                                                    int64_t axis, int64_t size)
{
    int n = snprintf(cuvil_error_text, sizeof cuvil_error_text, "'%s': index %lld is out of bounds for axis %lld with "
                     "size %lld", op, (long long)index, (long long)axis, (long long)size);
    if (*loc && n >= 0 && (size_t)n < sizeof cuvil_error_text)
        snprintf(cuvil_error_text + n, sizeof cuvil_error_text - n, " (at %s)", loc);
    return CUVIL_ERROR_INDEX;
}

/* 0 when every one of `count` indices is inside [-size, size) (negative ones count from the end; with `wrap` 0, inside
 * [0, size)), else the first that is not, recorded: one vectorised pass, and a second only on failure. */
#define CUVIL_CHECK_INDICES(name, T) \
static inline int name(const T *idx, int64_t count, int64_t size, int wrap, const char *op, const char *loc, \
                       int64_t axis) \
{ \
    int bad = 0; \
    _Pragma("omp simd reduction(|:bad)") \
    for (int64_t i = 0; i < count; i++) bad |= (uint64_t)(wrap && idx[i] < 0 ? idx[i] + size : idx[i]) >= (uint64_t)size; \
    for (int64_t i = 0; bad && i < count; i++) \
        if ((uint64_t)(wrap && idx[i] < 0 ? idx[i] + size : idx[i]) >= (uint64_t)size) \
            return cuvil_index_error(op, loc, idx[i], axis, size); \
    return 0; \
}
CUVIL_CHECK_INDICES(cuvil_check_indices_i64, int64_t)
CUVIL_CHECK_INDICES(cuvil_check_indices_i32, int32_t)

#endif
