/* The GEMM's micro-kernel, inlined once per row count and B source into run_kernel (cuvil_gemm.h). */
#include "cuvil_gemm.h"

/* ---- the micro-kernel: acc = A[0:mr, 0:kc] @ Bpanel[0:kc, 0:NR] ----
 * B comes from a packed panel (ldb = NR) or straight from B's rows (ldb = rsb); `pack`, when not NULL,
 * receives the panel as it streams by (fused packing); `fetch`, when not NULL, is the packed panel the next tile
 * reads, asked into L2 a row per k (a whole panel ahead: pre-packed weights come from memory, and the hardware
 * prefetcher stops at each 4 KB page, 16 rows of a panel). mr is a constant in every instance. */
CUVIL_INLINE void micro_kernel(const int mr, int64_t kc, const float *restrict a, int64_t lda,
                               const float *restrict b, int64_t ldb, float *restrict pack, const int ahead,
                               const float *fetch, vf acc[MR][NV])
{
    vf c[MR][NV];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) c[r][v] = (vf){0};
    for (int64_t k = 0; k < kc; k++) {
        vf bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = cuvil_load(b + k * ldb + v * VL);
        if (ahead) /* B's rows lie far apart: no hardware prefetcher follows them across pages */
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) __builtin_prefetch(b + (k + ahead) * ldb + v * VL, 0, 3);
        if (fetch)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v += 16 / VL) /* a line (16 floats) a prefetch */
                __builtin_prefetch(fetch + k * NR + v * VL, 0, 2);
        if (pack)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) cuvil_store(pack + k * NR + v * VL, bv[v]);
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++)
            if (r < mr)
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) c[r][v] += a[r * lda + k] * bv[v];
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = c[r][v];
}


#define KERNEL_CASE(m)                                                                                 \
    case m:                                                                                            \
        if (mode == FROM_PACKED) micro_kernel(m, kc, a, lda, b, NR, NULL, 0, NULL, acc);                     \
        else if (mode == FROM_PACKED_FETCHING) micro_kernel(m, kc, a, lda, b, NR, NULL, 0, aux, acc);         \
        else if (mode == FROM_B) micro_kernel(m, kc, a, lda, b, ldb, NULL, CUVIL_PREFETCH_DIRECT, NULL, acc); \
        else micro_kernel(m, kc, a, lda, b, ldb, aux, CUVIL_PREFETCH_PACKING, NULL, acc);                   \
        break;

CUVIL_GEMM_PART void run_kernel(int mode, int mr, int64_t kc, const float *a, int64_t lda, const float *b, int64_t ldb,
                       float *aux, vf acc[MR][NV])
{
    switch (mr) {
        KERNEL_CASE(1) KERNEL_CASE(2) KERNEL_CASE(3) KERNEL_CASE(4)
#if MR >= 5
        KERNEL_CASE(5)
#endif
#if MR >= 6
        KERNEL_CASE(6)
#endif
#if MR >= 7
        KERNEL_CASE(7)
#endif
#if MR >= 8
        KERNEL_CASE(8)
#endif
#if MR >= 9
        KERNEL_CASE(9)
#endif
#if MR >= 10
        KERNEL_CASE(10)
#endif
#if MR >= 11
        KERNEL_CASE(11)
#endif
#if MR >= 12
        KERNEL_CASE(12)
#endif
    default: break;
    }
}

