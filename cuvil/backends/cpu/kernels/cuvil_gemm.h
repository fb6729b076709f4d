/* What gemm.c's parts share: the block sizes, the problem, and the two functions one part calls in another. The
 * GEMM is three units (kernels.py's UNITS) that compile at once on a new machine: gemm.c (packing and the drivers),
 * gemm_kernel.c (the micro-kernel's instances, one per row count and B source) and gemm_epilogue.c (the tile's
 * store and activations). The functions between them are hidden: calls within the library, not through the PLT.
 */
#ifndef CUVIL_GEMM_H
#define CUVIL_GEMM_H

#include "cuvil_internal.h"

/* Block sizes; -D overrides them for experiments (bench/gemm.py --variant).
 * AVX-512: 6 x 64 (24 accumulators; 4 loads of B and 6 broadcasts per 24 FMAs). On Ice Lake it ran 10-25%
 * faster than 8 x 32, whose 10 loads per 16 FMAs saturate the two load ports; shared/PEERS.md found 8 x 32 and
 * 4 x 64 equal on Zen 5. AVX2 (16 ymm registers): 6 x 16. NEON (32 registers): 8 x 8. */
#ifndef CUVIL_MR
#if VL == 16 || VL == 8
#define CUVIL_MR 6
#elif defined(__aarch64__)
#define CUVIL_MR 8
#else
#define CUVIL_MR 4
#endif
#endif
#ifndef CUVIL_NV /* vectors per row of the register block */
#if VL == 16
#define CUVIL_NV 4
#else
#define CUVIL_NV 2
#endif
#endif
/* KC x NC is the B block kept in L2 (576 KB with AVX-512, 512 KB otherwise). With AVX-512 (1 MB or more of L2
 * per core), 768 x 192 rather than 256 x 512: a third of the round trips of C through the K blocks and longer
 * runs of the micro-kernel. Interleaved on the 2-core Xeon (tools: bench/gemm.py --variant): 1-9% faster on
 * the shapes of W1, W2, BERT and ResNet's im2col convolutions, 13% at (49, 4608, 512), never slower. */
#ifndef CUVIL_KC
#if VL == 16
#define CUVIL_KC 768
#else
#define CUVIL_KC 256
#endif
#endif
#ifndef CUVIL_NC
#if VL == 16
#define CUVIL_NC 192
#else
#define CUVIL_NC 512
#endif
#endif
/* Rows of B to prefetch ahead when a micro-kernel reads B in place, packing it (16) or not (8). Measured on
 * Ice Lake at M = 64 and 128: +15-25% over none; longer distances hurt the unpacked case (M <= MR). */
#ifndef CUVIL_PREFETCH_PACKING
#define CUVIL_PREFETCH_PACKING 16
#endif
#ifndef CUVIL_PREFETCH_DIRECT
#define CUVIL_PREFETCH_DIRECT 8
#endif
#ifndef CUVIL_PREFETCH_C
#define CUVIL_PREFETCH_C 1
#endif
/* Pre-packed B: the first row block of a thread's rectangle asks the next panel into L2 while it reads this one (a
 * model's weights come from memory, not cache: GPT-2's are 340 MB). 0 turns it off (bench/gemm_ab.py --cold). */
#ifndef CUVIL_PREFETCH_PANEL
#define CUVIL_PREFETCH_PANEL 1
#endif
#if CUVIL_MR < 1 || CUVIL_MR > 12
#error "CUVIL_MR must be in 1..12"
#endif

#define MR CUVIL_MR
#define NV CUVIL_NV
#define NR (NV * VL)
#define KC CUVIL_KC
#define NC_PANELS ((CUVIL_NC + NR - 1) / NR)
#define GEMV_COLS 512                 /* columns a thread accumulates at once on the M = 1 path */

#define STR2(x) #x
#define STR(x) STR2(x)

typedef struct {
    int64_t M, N, K;
    float alpha, beta;
    const float *A;
    int64_t rsa; /* A's column stride is 1 here: the entry points copy other layouts */
    const float *B;
    int64_t rsb, csb;
    const float *packed; /* pre-packed B, or NULL */
    float *C;
    int64_t ldc;
    const float *bias;     /* per column of C, or NULL */
    const float *row_bias; /* per row of C (an NCHW convolution's output channels), or NULL */
    int act;
} gemm_t;

/* Where a micro-kernel reads B; run_kernel's `aux` is the panel it packs into (FROM_B_PACKING) or the packed panel
 * it asks into L2 for the next tile (FROM_PACKED_FETCHING), else unused. */
enum { FROM_PACKED, FROM_PACKED_FETCHING, FROM_B, FROM_B_PACKING };

#define CUVIL_GEMM_PART __attribute__((visibility("hidden"))) /* called across the units, not exported */
CUVIL_GEMM_PART void run_kernel(int mode, int mr, int64_t kc, const float *a, int64_t lda, const float *b,
                                int64_t ldb, float *aux, vf acc[MR][NV]);
CUVIL_GEMM_PART void store_tile(const gemm_t *g, vf acc[MR][NV], int mr, int nr, int64_t i, int64_t j, int first,
                                int last);

#endif
