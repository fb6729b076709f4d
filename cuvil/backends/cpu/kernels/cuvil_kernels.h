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
 * Threads: cuvil_get_num_threads() threads of Cuvil's pool (CUVIL_NUM_THREADS, else the processor count; the Python
 * loader sets the physical core count), fewer for small problems.
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
    CUVIL_ACT_SILU = 7,      /* x sigmoid(x) */
    CUVIL_ACT_HARDSWISH = 8, /* x clip(x / 6 + 1/2, 0, 1) */
    CUVIL_ACT_COUNT = 9
};

int cuvil_kernels_abi_version(void);
/* A static string describing the compiled configuration, e.g. "vl=16 mr=6 nr=4x16 kc=256 nc=512". */
const char *cuvil_kernels_config(void);
void cuvil_set_num_threads(int n);
/* The calling thread's count for the function it runs (cuvil_swap_call_threads), else the process's. */
int cuvil_get_num_threads(void);

/* The thread pool (cuvil_pool.c). cuvil_parallel_for runs fn(ctx, lo, hi) over chunks of [0, n) that together cover
 * it once, on up to cuvil_threads_for(n * work) threads (work: the elements one of the n items touches), the calling
 * thread among them, and returns the OR of fn's results. */
#define CUVIL_MIN_WORK (1 << 14) /* elements of work per thread below which one more thread costs more than it saves */
typedef int (*cuvil_range_fn)(void *ctx, int64_t lo, int64_t hi);
int cuvil_parallel_for(int64_t n, int64_t work, cuvil_range_fn fn, void *ctx);
/* The same on a team of `team` threads (at most n). */
int cuvil_parallel_team(int64_t n, int team, cuvil_range_fn fn, void *ctx);
int cuvil_threads_for(int64_t work);
/* Sets this thread's count for the compiled function it is about to run (0: the process's); returns the old one. */
int cuvil_swap_call_threads(int n);
/* The team size of this thread's last parallel loop (1: it ran on this thread alone), for tests and benchmarks. */
int cuvil_last_team(void);
/* The pool's workers started, those asleep, the times a worker left its sleep and the wake-ups without a job that
 * small loops sent (out[0..3]), for tests. */
void cuvil_pool_state(int64_t *out);
/* Counters since the process started, for benchmarks (out[0..6]): threaded loops run, their chunks, the chunks workers
 * ran, the loops whose caller waited for a worker's chunk after running out of its own, the nanoseconds it waited,
 * the times a worker joined a loop (ran a chunk of it), and the nanoseconds from each loop's start to those joins. */
void cuvil_pool_waits(int64_t *out);
/* The times a caller slept for a worker's chunk after spinning for it, and the nanoseconds workers spun waiting for a
 * job (out[0..1]), for benchmarks. */
void cuvil_pool_idle(int64_t *out);

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

/* cuvil_sgemm, cuvil_sgemm_pack_b and cuvil_sgemm_packed on the calling thread alone, for kernels that share their
 * own work out over the pool (cuvil_attention packs each batch item's K and V once for its blocks of rows). */
void cuvil_sgemm_pack_b_serial(int64_t K, int64_t N, const float *B, int64_t rsb, int64_t csb, float *packed);
void cuvil_sgemm_packed_serial(int64_t M, int64_t N, int64_t K, float alpha,
                               const float *A, int64_t rsa, int64_t csa, const float *packed_b,
                               float beta, float *C, int64_t ldc,
                               const float *bias, int act);
void cuvil_sgemm_serial(int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t rsa, int64_t csa,
                        const float *B, int64_t rsb, int64_t csb,
                        float beta, float *C, int64_t ldc,
                        const float *bias, int act);

/* Fused attention, for each batch item b: O[b] = softmax(scale Q[b] K[b]^T + mask[b]) V[b], rows of the softmax over
 * the keys. q[batch, rows, d]; k[batch, keys, d], or k[batch, d, keys] when k_transposed; v[batch, keys, dv];
 * o[batch, rows, dv]; mask NULL, or [batch, rows, keys] of f32 added to the scores (CUVIL_ATTENTION_ADD) or of uint8
 * keeping the keys where it is nonzero (CUVIL_ATTENTION_KEEP). A row with no key left is NaN, or 0 when guarded is 1
 * or 2; guarded 2 also gives 0 for a row whose softmax is NaN (where(isnan(p), 0, p)). */
enum { CUVIL_ATTENTION_ADD = 1, CUVIL_ATTENTION_KEEP = 2 };
typedef struct {
    int64_t batch, rows, keys, d, dv;
    const float *q, *k, *v;
    const void *mask;
    int mask_kind, k_transposed, guarded;
    float scale;
    float *o;
} cuvil_attention_t;
void cuvil_attention(const cuvil_attention_t *a);

/* Depthwise 2-D convolution, NCHW: x[batch, C, H, W], w[O, 1, KH, KW] (O a multiple of C; output channel o
 * reads input channel o / (O / C)), bias[O] or NULL, y[batch, O, OH, OW] = clamp(conv + bias, lo, hi) (lo = 0,
 * hi = INFINITY: relu; -INFINITY, INFINITY: none; NaN passes). geom: H, W, OH, OW, KH, KW, stride h, w,
 * dilation h, w, pad top, pad left (the bottom and right pads follow from OH and OW). */
void cuvil_dwconv2d(int64_t batch, int64_t C, int64_t O, const float *x, const float *w, const float *bias,
                    float *y, const int64_t *geom, float lo, float hi);

/* Depthwise convolution in the blocked layout (the dwconv_nchwc op), B = cuvil_conv_nchwc_block() channels per block:
 * x[n, cb, h, w, B], w[cb, kh, kw, B], bias NULL or [cb * B], y[n, cb, oh, ow, B]. geom: n, cb, h, w, oh, ow, kh, kw,
 * stride h, w, pad top, left, dilation h, w (the bottom and right pads follow from oh and ow). act: a CUVIL_ACT_* code. */
void cuvil_dwconv_nchwc(const float *x, const float *w, const float *bias, float *y, const int64_t *geom, int act);
/* y[planes, B] = the sum of x[planes, pixels, B] over its pixels (the spatial_sum_nchwc op: planes = n * cb, pixels
 * = h * w of the blocked layout). */
void cuvil_spatial_sum_nchwc(const float *x, float *y, int64_t planes, int64_t pixels);

/* Blocked direct convolution (the conv_nchwc op), B = cuvil_conv_nchwc_block() channels per block:
 * x[n, cb, h, w, c] (c = B, or c < B channels of a narrow input with cb = 1), w packed [ob, cb, kh, kw, c, B],
 * bias[ob * B], res NULL or shaped like a blocked y, y[n, ob, oh, ow, B] or, when oc > 0, plain [n, oc, oh, ow].
 * geom: n, cb, h, w, c, ob, oh, ow, kh, kw, stride h, w, pad top, left, dilation h, w, oc. act: a CUVIL_ACT_* code. */
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

/* bf16 2-D convolution, NCHW, groups 1 (conv_lowp.c): W[O, C, KH, KW] bf16 bits packed by cuvil_conv_bf16_pack into
 * cuvil_conv_bf16_packed_bytes(O, C, KH, KW) bytes; x f32 (rounded to bf16), fp32 accumulation; y = act(conv + bias
 * + res) f32 (bias, res NULL or as in cuvil_qconv); the same geom as cuvil_qconv; the path is cuvil_lowp_path's. */
int64_t cuvil_conv_bf16_packed_bytes(int64_t O, int64_t C, int64_t KH, int64_t KW);
void cuvil_conv_bf16_pack(int64_t O, int64_t C, int64_t KH, int64_t KW, const uint16_t *W, void *packed);
int64_t cuvil_conv_bf16_scratch_bytes(const int64_t *geom);
void cuvil_conv_bf16(const float *x, const void *packed, const float *bias, const float *res, int act, float *y,
                     const int64_t *geom, void *scratch);

/* y[i] = act(x[i]) with the epilogue's vector math (x == y allowed). */
void cuvil_activation(int act, int64_t n, const float *x, float *y);

/* int8 (gemm_int8.c): uint8 activations (a scale and zero point per tensor or per row) times int8 weights
 * (per output column scale), int32 accumulation, epilogue C = act((acc - za * colsum) * sa * w_scale + bias),
 * stored as f32, or as uint8 round(C / out_scale) + out_zero when out_scale > 0. C[i, j] is C[i * rsc + j * csc].
 * packed: cuvil_qgemm_pack(N, K, W[N, K]) into cuvil_qgemm_packed_bytes(N, K) bytes. A's rows hold a multiple of
 * 4 bytes (lda % 4 == 0, bytes past K any value). cuvil_int8_isa: 3 VNNI, 2 AVX-512BW, 1 AVX2, 0 C. */
typedef struct {
    int64_t M, N, K;
    const uint8_t *A;
    int64_t lda;
    const float *a_scale;
    const int32_t *a_zero;
    int64_t a_step; /* 0: one scale and zero point for A, 1: one per row */
    const void *packed;
    const float *w_scale, *bias;
    int act;
    void *C;
    int64_t rsc, csc;
    float out_scale;
    int32_t out_zero;
} cuvil_qgemm_args;
int cuvil_int8_isa(void);
void cuvil_int8_set_isa(int cap); /* cap the path (tests); -1: CUVIL_INT8_ISA, else the best the CPU has */
int64_t cuvil_qgemm_packed_bytes(int64_t N, int64_t K);
void cuvil_qgemm_pack(int64_t N, int64_t K, const int8_t *W, void *packed);
void cuvil_qgemm(const cuvil_qgemm_args *q);
/* Rows of x to uint8 (row length ldq, padded with the zero point): static_scale > 0 uses it and static_zero,
 * else each row's range (holding 0) maps onto 0..255 and its scale and zero point go to scale[i], zero[i]. */
void cuvil_quantize_rows_u8(int64_t M, int64_t K, const float *x, int64_t ldx, uint8_t *q, int64_t ldq,
                            float *scale, int32_t *zero, float static_scale, int32_t static_zero);
/* q's M, N, K, packed, w_scale, bias, act and C fields set; x is f32 [M, K] (quantised with x_scale, x_zero, or per
 * row when x_scale is 0) or uint8 [M, K] (x_is_u8, with x_scale, x_zero); scratch of cuvil_qlinear_scratch_bytes. */
int64_t cuvil_qlinear_scratch_bytes(int64_t M, int64_t K);
void cuvil_qlinear(cuvil_qgemm_args *q, const void *x, int x_is_u8, float x_scale, int32_t x_zero, void *scratch);
/* NCHW 2-D convolution, groups 1 (conv_int8.c): W[O, C, KH, KW] packed by cuvil_qconv_pack into
 * cuvil_qconv_packed_bytes(O, C, KH, KW) bytes; x f32 or uint8 as in cuvil_qlinear (x_scale 0: each image's range);
 * res NULL, f32 [n, O, OH, OW] or, when res_scale > 0, uint8 ((r - res_zero) * res_scale), added before the
 * activation; y[n, O, OH, OW] f32 or uint8 (out_scale > 0).
 * geom: n, c, h, w, o, oh, ow, kh, kw, stride h, w, dilation h, w, pad top, left. */
int64_t cuvil_qconv_packed_bytes(int64_t O, int64_t C, int64_t KH, int64_t KW);
void cuvil_qconv_pack(int64_t O, int64_t C, int64_t KH, int64_t KW, const int8_t *W, void *packed);
int64_t cuvil_qconv_scratch_bytes(const int64_t *geom);
void cuvil_qconv(const void *x, int x_is_u8, float x_scale, int32_t x_zero, const void *packed,
                 const float *w_scale, const float *bias, const void *res, float res_scale, int32_t res_zero, int act,
                 void *y, float out_scale, int32_t out_zero, const int64_t *geom, void *scratch);
/* max_pool of uint8 NCHW planes (conv_int8.c), positions outside the image 0 (uint8's least value): x [planes, H, W],
 * y [planes, OH, OW]; geom: H, W, OH, OW, KH, KW, stride h, w, dilation h, w, pad top, left. */
void cuvil_max_pool_u8(const uint8_t *x, uint8_t *y, int64_t planes, const int64_t *geom);

/* int4 weight-only (gemm_int4.c): y[M, N] = act(x[M, K] @ W^T + bias), W[n, k] = (q - zero[n, k / G]) *
 * scale[n, k / G] with q 4-bit, K / 2 bytes per row (layout in gemm_int4.c), G a multiple of 32 dividing K. */
int64_t cuvil_gemm_int4_scratch_bytes(int64_t M, int64_t K, int64_t G);
void cuvil_gemm_int4(int64_t M, int64_t N, int64_t K, int64_t G, const float *x, const uint8_t *w,
                     const float *scale, const uint8_t *zero, const float *bias, int act, float *y, void *scratch);

#ifdef __cplusplus
}
#endif
#endif
