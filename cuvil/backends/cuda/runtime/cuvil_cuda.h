/* Device helpers for Cuvil's generated CUDA C: the names the shared elementwise table (backends/common/c_exprs.py)
 * uses, with the semantics of the CPU runtime's cuvil_rt.h (NaN-propagating max/min, Python modulo, integer
 * division by 0 giving 0), plus f16/bf16 storage and warp/block reductions. Builds with NVRTC (no system headers)
 * and with nvcc. */
#ifndef CUVIL_CUDA_H
#define CUVIL_CUDA_H

#if defined(CUVIL_CUDA_EMULATION)
/* Host emulation for the tests (tests/backends/cuda/emulator.py): each kernel runs as ONE thread of ONE block, so
 * its grid-stride loops cover all the work in order, __syncthreads is nothing and a "warp" is one lane
 * (CUVIL_WARP 1: the shuffle loops do not run; the attention kernel, written for any warp width, runs with one). */
#include <stdint.h>
#include <string.h>
#include <math.h>
struct cuvil_dim3 { unsigned x, y, z; };
static const cuvil_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define __restrict__
#define CUVIL_WARP 1
static inline void __syncthreads(void) {}
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(uint32_t i) { float f; memcpy(&f, &i, 4); return f; }
static inline uint32_t __float_as_uint(float f) { uint32_t i; memcpy(&i, &f, 4); return i; }
static inline int atomicCAS(int *p, int cmp, int v) { int old = *p; if (old == cmp) *p = v; return old; }
template <typename T> static inline T __shfl_down_sync(unsigned, T v, int) { return v; }
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int) { return v; }
template <typename T> static inline T __shfl_sync(unsigned, T v, int) { return v; } /* lane 0 of a one-lane warp */
#define CUVIL_HALF_BY_COMPILER 1
#elif defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define __typeof__(x) decltype(x) /* GNU C's, used by ops' own C expressions (the bitwise ops) */
#else
#include <stdint.h>
#endif
#ifndef CUVIL_WARP
#define CUVIL_WARP 32
#endif

#define CUVIL_D static __device__ __forceinline__
#undef INFINITY
#undef NAN
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fc00000)
#ifndef INT64_MIN /* NVRTC has no <stdint.h> */
#define INT64_MIN (-9223372036854775807LL - 1)
#define INT64_MAX 9223372036854775807LL
#define INT32_MIN (-2147483647 - 1)
#define INT32_MAX 2147483647
#define INT16_MIN (-32768)
#define INT16_MAX 32767
#define INT8_MIN (-128)
#define INT8_MAX 127
#define UINT8_MAX 255
#endif
#define UINT8_MIN 0

/* bf16: the upper half of an f32, rounded to nearest even, NaN stays NaN (as cuvil_rt.h). */
CUVIL_D float cuvil_bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
CUVIL_D uint16_t cuvil_f32_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)(f != f ? ((u >> 16) | 0x40u) : rounded);
}
/* f16: IEEE binary16 bits, converted by the hardware (round to nearest even). */
#ifdef CUVIL_HALF_BY_COMPILER
CUVIL_D float cuvil_f16_to_f32(uint16_t h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
CUVIL_D uint16_t cuvil_f32_to_f16(float f) { _Float16 x = (_Float16)f; uint16_t h; memcpy(&h, &x, 2); return h; }
#else
CUVIL_D float cuvil_f16_to_f32(uint16_t h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
CUVIL_D uint16_t cuvil_f32_to_f16(float f) { uint16_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#endif

CUVIL_D float cuvil_expf(float x) { return expf(x); }
CUVIL_D double cuvil_exp(double x) { return exp(x); }
CUVIL_D float cuvil_logf(float x) { return logf(x); }
CUVIL_D float cuvil_tanhf(float x) { return tanhf(x); }
CUVIL_D float cuvil_erff(float x) { return erff(x); }
CUVIL_D float cuvil_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

#define CUVIL_SCALAR CUVIL_D
#include "cuvil_scalar.inc" /* the CPU runtime's integer division, modulo, ipow, max/min */

/* The first failing check of a run: its code (1 + the check's number in the program) in err[0] and the index it
 * met in err[2..3], read back by the host. */
#define CUVIL_NO_INDEX INT64_MIN /* an empty axis: no index was read */
CUVIL_D void cuvil_fail(int *err, int code, int64_t index)
{
    if (atomicCAS(err, 0, code) == 0) *(int64_t *)(err + 2) = index;
}

/* Warp shuffles for every accumulator type (sub-word integers travel as int). */
template <typename T> CUVIL_D T cuvil_shfl_down(T v, int d) { return __shfl_down_sync(0xffffffffu, v, d); }
template <> __device__ __forceinline__ int8_t cuvil_shfl_down(int8_t v, int d)
{ return (int8_t)__shfl_down_sync(0xffffffffu, (int)v, d); }
template <> __device__ __forceinline__ uint8_t cuvil_shfl_down(uint8_t v, int d)
{ return (uint8_t)__shfl_down_sync(0xffffffffu, (int)v, d); }
template <> __device__ __forceinline__ int16_t cuvil_shfl_down(int16_t v, int d)
{ return (int16_t)__shfl_down_sync(0xffffffffu, (int)v, d); }

#endif
