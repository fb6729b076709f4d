/* A recording fake of cuDNN's legacy convolution API for the CUDA runtime's tests (tests/backends/cuda/test_cudnn.py):
 * device memory is host memory (the fake driver's), so cudnnConvolutionForward and
 * cudnnConvolutionBiasActivationForward compute the f32 convolution here with a naive loop (other types are only
 * checked). Every forward call is logged as one line (fake_cudnn_log; fake_cudnn_reset clears it) with its shapes,
 * padding, strides, dilations, groups, algorithm, workspace and activation. Checked, with CUDNN_STATUS_BAD_PARAM
 * (2000) on a failure: descriptors set before use, the shapes agree (channels, groups, the output size), NCHW and
 * cross-correlation, a workspace at least what the algorithm needs, a bias of [1, K, 1, 1]; an IDENTITY activation
 * with any algorithm but IMPLICIT_PRECOMP_GEMM is CUDNN_STATUS_NOT_SUPPORTED (3000), as in cuDNN.
 * cudnnGetConvolutionForwardAlgorithm_v7 ranks WINOGRAD_NONFUSED (not supported), GEMM, IMPLICIT_PRECOMP_GEMM and
 * IMPLICIT_GEMM, in that order; each needs the workspace WORKSPACE[algo]. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD_PARAM 2000
#define NOT_SUPPORTED 3000

static const size_t WORKSPACE[8] = {0, 4096, 1 << 16, 0, 0, 0, 0, 1 << 20};

typedef struct { char kind; int set, format, type, n, c, h, w; } tensor;            /* 'T' and 'F' (filter) */
typedef struct { char kind; int set, pad[2], stride[2], dil[2], mode, compute, groups, math; } conv;
typedef struct { char kind; int set, mode, nan; double coef; } activation;
typedef struct { char kind; void *stream; } handle;
typedef struct { int algo, status; float time; size_t memory; int determinism, math, reserved[3]; } algo_perf;

static char log_text[1 << 16];

__attribute__((format(printf, 1, 2))) static void note(const char *fmt, ...)
{
    size_t used = strlen(log_text);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(log_text + used, sizeof log_text - used, fmt, ap);
    va_end(ap);
    used = strlen(log_text);
    if (used + 1 < sizeof log_text) strcpy(log_text + used, "\n");
}

const char *fake_cudnn_log(void) { return log_text; }
void fake_cudnn_reset(void) { log_text[0] = 0; }

int cudnnCreate(void **h)
{
    handle *x = calloc(1, sizeof *x);
    x->kind = 'H';
    *h = x;
    return 0;
}
int cudnnDestroy(void *h) { free(h); return 0; }
int cudnnSetStream(void *h, void *stream)
{
    if (!h || ((handle *)h)->kind != 'H') return BAD_PARAM;
    ((handle *)h)->stream = stream;
    return 0;
}
const char *cudnnGetErrorString(int status) { return status ? "CUDNN_STATUS_FAKE_ERROR" : "CUDNN_STATUS_SUCCESS"; }

static int create(void **d, size_t size, char kind)
{
    *d = calloc(1, size);
    *(char *)*d = kind;
    return 0;
}
int cudnnCreateTensorDescriptor(void **d) { return create(d, sizeof(tensor), 'T'); }
int cudnnCreateFilterDescriptor(void **d) { return create(d, sizeof(tensor), 'F'); }
int cudnnCreateConvolutionDescriptor(void **d) { return create(d, sizeof(conv), 'C'); }
int cudnnCreateActivationDescriptor(void **d) { return create(d, sizeof(activation), 'A'); }

int cudnnSetTensor4dDescriptor(tensor *t, int format, int type, int n, int c, int h, int w)
{
    if (t->kind != 'T' || n <= 0 || c <= 0 || h <= 0 || w <= 0) return BAD_PARAM;
    *t = (tensor){'T', 1, format, type, n, c, h, w};
    return 0;
}
int cudnnSetFilter4dDescriptor(tensor *t, int type, int format, int k, int c, int h, int w)
{
    if (t->kind != 'F' || k <= 0 || c <= 0 || h <= 0 || w <= 0) return BAD_PARAM;
    *t = (tensor){'F', 1, format, type, k, c, h, w};
    return 0;
}
int cudnnSetConvolution2dDescriptor(conv *c, int ph, int pw, int u, int v, int dh, int dw, int mode, int compute)
{
    if (c->kind != 'C' || ph < 0 || pw < 0 || u <= 0 || v <= 0 || dh <= 0 || dw <= 0) return BAD_PARAM;
    *c = (conv){'C', 1, {ph, pw}, {u, v}, {dh, dw}, mode, compute, 1, 0};
    return 0;
}
int cudnnSetConvolutionGroupCount(conv *c, int groups)
{
    if (c->kind != 'C' || !c->set || groups <= 0) return BAD_PARAM;
    c->groups = groups;
    return 0;
}
int cudnnSetConvolutionMathType(conv *c, int math)
{
    if (c->kind != 'C' || !c->set) return BAD_PARAM;
    c->math = math;
    return 0;
}
int cudnnSetActivationDescriptor(activation *a, int mode, int nan, double coef)
{
    if (a->kind != 'A') return BAD_PARAM;
    *a = (activation){'A', 1, mode, nan, coef};
    return 0;
}

static int out_size(int in, int k, int pad, int stride, int dil) { return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1; }

static int agree(const tensor *x, const tensor *w, const conv *c, const tensor *y)
{
    if (!x || !w || !c || !y || x->kind != 'T' || w->kind != 'F' || c->kind != 'C' || y->kind != 'T') return 0;
    if (!x->set || !w->set || !c->set || !y->set || x->format || w->format || y->format) return 0;
    if (x->type != w->type || x->type != y->type || c->mode != 1 /* CUDNN_CROSS_CORRELATION */) return 0;
    return x->c == w->c * c->groups && w->n % c->groups == 0 && y->c == w->n && y->n == x->n &&
           y->h == out_size(x->h, w->h, c->pad[0], c->stride[0], c->dil[0]) &&
           y->w == out_size(x->w, w->w, c->pad[1], c->stride[1], c->dil[1]);
}

int cudnnGetConvolutionForwardAlgorithm_v7(void *h, const tensor *x, const tensor *w, const conv *c,
                                           const tensor *y, int requested, int *returned, algo_perf *perf)
{
    static const int ranked[4] = {7, 2, 1, 0};
    if (!h || !agree(x, w, c, y) || requested <= 0) return BAD_PARAM;
    *returned = requested < 4 ? requested : 4;
    for (int i = 0; i < *returned; i++)
        perf[i] = (algo_perf){ranked[i], ranked[i] == 7 ? NOT_SUPPORTED : 0, (float)i, WORKSPACE[ranked[i]], 1,
                              c->math, {0, 0, 0}};
    return 0;
}

int cudnnGetConvolutionForwardWorkspaceSize(void *h, const tensor *x, const tensor *w, const conv *c,
                                            const tensor *y, int algo, size_t *size)
{
    if (!h || !agree(x, w, c, y) || algo < 0 || algo > 7) return BAD_PARAM;
    *size = WORKSPACE[algo];
    return 0;
}

/* y = act(alpha * conv(x, w) + bias) in f32 (beta is 0 here: y is not read) */
static void compute(const tensor *x, const float *xs, const tensor *w, const float *ws, const conv *c,
                    const tensor *y, float *ys, const float *bias, int relu)
{
    int kg = w->n / c->groups;
    for (int n = 0; n < y->n; n++)
        for (int k = 0; k < y->c; k++)
            for (int oh = 0; oh < y->h; oh++)
                for (int ow = 0; ow < y->w; ow++) {
                    double acc = bias ? bias[k] : 0.0;
                    int g = k / kg;
                    for (int ci = 0; ci < w->c; ci++)
                        for (int r = 0; r < w->h; r++)
                            for (int s = 0; s < w->w; s++) {
                                int ih = oh * c->stride[0] + r * c->dil[0] - c->pad[0];
                                int iw = ow * c->stride[1] + s * c->dil[1] - c->pad[1];
                                if (ih < 0 || ih >= x->h || iw < 0 || iw >= x->w) continue;
                                acc += (double)xs[((size_t)(n * x->c + g * w->c + ci) * x->h + ih) * x->w + iw] *
                                       ws[((size_t)(k * w->c + ci) * w->h + r) * w->w + s];
                            }
                    if (relu && acc < 0) acc = 0;
                    ys[((size_t)(n * y->c + k) * y->h + oh) * y->w + ow] = (float)acc;
                }
}

static int forward(const char *name, handle *h, const float *alpha, const tensor *x, const void *xs,
                   const tensor *w, const void *ws, const conv *c, int algo, void *work, size_t work_size,
                   const float *beta, const tensor *y, void *ys, const tensor *b, const void *bias,
                   const activation *a)
{
    if (!h || h->kind != 'H' || !agree(x, w, c, y) || !xs || !ws || !ys || algo < 0 || algo > 7) return BAD_PARAM;
    if (work_size < WORKSPACE[algo] || (WORKSPACE[algo] && !work) || *alpha != 1.0f || *beta != 0.0f)
        return BAD_PARAM;
    if (b && (!b->set || b->kind != 'T' || b->n != 1 || b->c != y->c || b->h != 1 || b->w != 1 || !bias))
        return BAD_PARAM;
    if (a && (!a->set || a->kind != 'A' || (a->mode != 1 && a->mode != 5))) return BAD_PARAM;
    if (a && a->mode == 5 /* IDENTITY */ && algo != 1 /* IMPLICIT_PRECOMP_GEMM */) return NOT_SUPPORTED;
    note("%s type %d x %dx%dx%dx%d w %dx%dx%dx%d y %dx%dx%dx%d pad %d %d stride %d %d dil %d %d groups %d math %d "
         "algo %d workspace %zu act %s stream %s", name, x->type, x->n, x->c, x->h, x->w, w->n, w->c, w->h, w->w,
         y->n, y->c, y->h, y->w, c->pad[0], c->pad[1], c->stride[0], c->stride[1], c->dil[0], c->dil[1], c->groups,
         c->math, algo, work_size, !a ? "-" : a->mode == 1 ? "relu" : "identity", h->stream ? "set" : "default");
    if (x->type == 0) compute(x, xs, w, ws, c, y, ys, bias, a && a->mode == 1);
    return 0;
}

int cudnnConvolutionForward(handle *h, const float *alpha, const tensor *x, const void *xs, const tensor *w,
                            const void *ws, const conv *c, int algo, void *work, size_t work_size, const float *beta,
                            const tensor *y, void *ys)
{
    return forward("cudnnConvolutionForward", h, alpha, x, xs, w, ws, c, algo, work, work_size, beta, y, ys, NULL,
                   NULL, NULL);
}

int cudnnConvolutionBiasActivationForward(handle *h, const float *alpha1, const tensor *x, const void *xs,
                                          const tensor *w, const void *ws, const conv *c, int algo, void *work,
                                          size_t work_size, const float *alpha2, const tensor *z, const void *zs,
                                          const tensor *b, const void *bias, const activation *a, const tensor *y,
                                          void *ys)
{
    if (!z || z->kind != 'T' || !zs || z->n != y->n || z->c != y->c || z->h != y->h || z->w != y->w) return BAD_PARAM;
    return forward("cudnnConvolutionBiasActivationForward", h, alpha1, x, xs, w, ws, c, algo, work, work_size,
                   alpha2, y, ys, b, bias, a);
}
