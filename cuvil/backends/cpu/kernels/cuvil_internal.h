/* What the kernel library's sources share beyond the ABI: the vector type's short names, integer helpers, the team
 * size of a GEMM-like loop and the allocator. Every unit of the library (kernels.py's UNITS, each compiled to its own
 * object) includes it first; gemm.c includes it too, so the one-unit build (wasm32, the sanitizer test) still works.
 */
#ifndef CUVIL_INTERNAL_H
#define CUVIL_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuvil_kernels.h"
#include "cuvil_simd.h"

#define VL CUVIL_VL
typedef cuvil_vf vf;

#define MIN_WORK_PER_THREAD (1 << 17) /* multiply-adds: below this an extra thread costs more than it gives */

static inline int64_t ceil_div(int64_t n, int64_t d) { return n <= 0 ? 0 : (n + d - 1) / d; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
/* Start of part p when n is split into `parts` parts whose sizes differ by at most one. */
static inline int64_t split_at(int64_t n, int64_t parts, int64_t p)
{
    return n / parts * p + min64(p, n % parts);
}

static inline int threads_for(int64_t multiply_adds)
{
    return cuvil_threads_for(multiply_adds / (MIN_WORK_PER_THREAD / CUVIL_MIN_WORK));
}

static inline void *alloc_or_die(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "cuvil kernels: out of memory allocating %zu bytes\n", bytes);
        abort();
    }
    return p;
}

#endif
