/* Cuvil's CPU kernel library: the C ABI that generated model code and the Python bindings call.
 *
 * All matrices are fp32. A matrix is a base pointer plus a row stride and a column stride in elements
 * (row-major contiguous: rs = leading dimension, cs = 1; a transposed view: rs = 1, cs = leading dimension).
 * The output C is always row-major with unit column stride and leading dimension ldc.
 *
 * Every GEMM computes, for 0 <= i < M, 0 <= j < N:
 *     C[i,j] = act(alpha * sum_k A[i,k] * B[k,j] + bias[j] + beta * C[i,j])
 * bias may be NULL (no bias); beta == 0 never reads C (it may hold garbage or NaN). Any size may be 0.
 * Operands need no alignment; 64-byte alignment is the fast case. A, B and C must not overlap.
 * Threads: an OpenMP team of cuvil_get_num_threads() threads (CUVIL_NUM_THREADS, else the processor count;
 * the Python loader sets the physical core count), fewer for small problems.
 */
#ifndef CUVIL_KERNELS_H
#define CUVIL_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUVIL_KERNELS_ABI_VERSION 1

/* Activations of the epilogue (and of cuvil_activation). */
enum { /* relu and relu6 keep NaN */
    CUVIL_ACT_NONE = 0,
    CUVIL_ACT_RELU = 1,
    CUVIL_ACT_GELU_TANH = 2, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    CUVIL_ACT_GELU_ERF = 3,  /* 0.5 x (1 + erf(x / sqrt(2))) */
    CUVIL_ACT_SIGMOID = 4,
    CUVIL_ACT_TANH = 5,
    CUVIL_ACT_RELU6 = 6, /* clip(x, 0, 6) */
    CUVIL_ACT_COUNT = 7
};

int cuvil_kernels_abi_version(void);
/* A static string describing the compiled configuration, e.g. "vl=16 mr=6 nr=4x16 kc=256 nc=512". */
const char *cuvil_kernels_config(void);
void cuvil_set_num_threads(int n);
int cuvil_get_num_threads(void);

void cuvil_sgemm(int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t rsa, int64_t csa,
                 const float *B, int64_t rsb, int64_t csb,
                 float beta, float *C, int64_t ldc,
                 const float *bias, int act);
/* The same with a bias per row of C instead of per column: C[i,j] = act(alpha * sum_k A[i,k] * B[k,j] + row_bias[i]
 * + beta * C[i,j]). An NCHW convolution as W[O, C*taps] @ X[C*taps, pixels] adds its bias this way, with no
 * pass that fills C with the bias first. */
void cuvil_sgemm_row_bias(int64_t M, int64_t N, int64_t K, float alpha,
                          const float *A, int64_t rsa, int64_t csa,
                          const float *B, int64_t rsb, int64_t csb,
                          float beta, float *C, int64_t ldc,
                          const float *row_bias, int act);

/* Constant weights: pack B (K x N) once into a buffer of cuvil_sgemm_packed_size(K, N) floats (64-byte
 * aligned is best), then multiply by it any number of times. The layout is private to this build of the
 * library (it depends on the block sizes): pack at run time, never ship packed buffers. */
int64_t cuvil_sgemm_packed_size(int64_t K, int64_t N);
void cuvil_sgemm_pack_b(int64_t K, int64_t N, const float *B, int64_t rsb, int64_t csb, float *packed);
void cuvil_sgemm_packed(int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t rsa, int64_t csa, const float *packed_b,
                        float beta, float *C, int64_t ldc,
                        const float *bias, int act);

/* batch independent GEMMs; the operands of batch item t start at A + t*sa, B + t*sb, C + t*sc.
 * A stride of 0 shares an operand across the batch (sc must not be 0 when batch > 1). */
void cuvil_sgemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t rsa, int64_t csa, int64_t sa,
                         const float *B, int64_t rsb, int64_t csb, int64_t sb,
                         float beta, float *C, int64_t ldc, int64_t sc,
                         const float *bias, int act);

/* Depthwise 2-D convolution, NCHW: x[batch, C, H, W], w[O, 1, KH, KW] (O a multiple of C; output channel o
 * reads input channel o / (O / C)), bias[O] or NULL, y[batch, O, OH, OW] = clamp(conv + bias, lo, hi) (lo = 0,
 * hi = INFINITY: relu; -INFINITY, INFINITY: none; NaN passes). geom: H, W, OH, OW, KH, KW, stride h, w,
 * dilation h, w, pad top, pad left (the bottom and right pads follow from OH and OW). */
void cuvil_dwconv2d(int64_t batch, int64_t C, int64_t O, const float *x, const float *w, const float *bias,
                    float *y, const int64_t *geom, float lo, float hi);

/* Blocked direct convolution (the conv_nchwc op), B = cuvil_conv_nchwc_block() channels per block:
 * x[n, cb, h, w, c] (c = B, or c < B channels of a narrow input with cb = 1), w packed [ob, cb, kh, kw, c, B],
 * bias[ob * B], res NULL or shaped like a blocked y, y[n, ob, oh, ow, B] or, when oc > 0, plain [n, oc, oh, ow].
 * geom: n, cb, h, w, c, ob, oh, ow, kh, kw, stride h, w, pad top, left, dilation h, w, oc. act: none or relu. */
int cuvil_conv_nchwc_block(void);
void cuvil_conv_nchwc(const float *x, const float *w, const float *bias, const float *res, float *y,
                      const int64_t *geom, int act);

/* Winograd F(4x4, 3x3) for the blocked convolution with 3x3 kernels, stride 1, dilation 1 and full input blocks
 * (c = B): the same x, bias, res, y, geom and act as cuvil_conv_nchwc, the weight transformed once by
 * cuvil_winograd_weight from its packed form [ob, cb, 3, 3, B, B] into cuvil_winograd_weight_size(ob, cb) floats. */
int64_t cuvil_winograd_weight_size(int64_t ob, int64_t cb);
void cuvil_winograd_weight(const float *w, int64_t ob, int64_t cb, float *u);
void cuvil_conv_winograd(const float *x, const float *u, const float *bias, const float *res, float *y,
                         const int64_t *geom, int act);

/* Constant weights in 16 bits (gemm_lowp.c): B (K x N) of bf16 or fp16 bits packed once into
 * cuvil_lowp_packed_size(K, N, is_f16) uint16_t (64-byte aligned), then C = act(A @ B + bias) with fp32
 * accumulation (alpha 1, beta 0). Pack and multiply on the same machine: the size depends on the CPU's path.
 * The bf16 kernel (0 portable, 1 AVX512_BF16, 2 AMX-BF16) is chosen by CPUID at the first call, less the features
 * CUVIL_DISABLE_CPU_FEATURES names; cuvil_lowp_set_path forces one (-1: choose again) and returns the one in use. */
int64_t cuvil_lowp_packed_size(int64_t K, int64_t N, int is_f16);
void cuvil_lowp_pack_b(int64_t K, int64_t N, int is_f16, const uint16_t *B, int64_t rsb, int64_t csb,
                       uint16_t *packed);
int cuvil_lowp_path(void);
int cuvil_lowp_set_path(int path);
void cuvil_lowp_gemm_packed(int64_t M, int64_t N, int64_t K, const float *A, int64_t rsa, int64_t csa,
                            const uint16_t *packed_b, int is_f16, float *C, int64_t ldc, const float *bias, int act);

/* y[i] = act(x[i]) with the epilogue's vector math (x == y allowed). */
void cuvil_activation(int act, int64_t n, const float *x, float *y);

#ifdef __cplusplus
}
#endif
#endif
