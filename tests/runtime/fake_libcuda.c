/* A fake of the CUDA driver API and of cuBLASLt for the C runtime's tests (test_c_runtime_cuda.py): device memory
 * is host memory (cuMemAlloc is malloc, copies are memcpy), every call is appended to the file $FAKE_CUDA_LOG as
 * one line, and a kernel launch runs the kernel's host build ($FAKE_CUDA_KERNELS: the generated CUDA C compiled
 * with CUVIL_CUDA_EMULATION, tests/backends/cuda/emulator.py) when the loaded image is PTX and every parameter is
 * 8 bytes (pointers and int64 sizes). cuBLASLt's f32 matmul is computed here (column-major, batched, bias, relu).
 * $FAKE_CUDA_CC is the device's compute capability (default 75), $FAKE_CUDA_NO_DEVICE makes cuInit fail and
 * $FAKE_CUDA_BAD_IMAGE cuModuleLoadData. Between cuStreamBeginCapture and cuStreamEndCapture the stream's work
 * (copies, memsets, launches with their parameters' values, matmuls with their descriptors) is logged and kept in
 * the graph instead of done; cuGraphLaunch does it. Pinned host memory (cuMemAllocHost) is counted: a pointer a copy
 * reads or writes on the host side that is not pinned is logged as "pageable". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long cu_ptr;

static int replaying; /* a graph's work is logged when captured, not again when replayed */

__attribute__((format(printf, 1, 2))) static void note(const char *fmt, ...)
{
    const char *path = replaying ? NULL : getenv("FAKE_CUDA_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

/* --- capture: work kept for a graph ------------------------------------------------------------------------ */

typedef struct { int32_t ta, tb; uint32_t epilogue; cu_ptr bias; } desc;
typedef struct { int type; uint64_t rows, cols; int64_t ld, stride; int32_t batch; } layout;
typedef struct {
    char kind; /* h: HtoD, d: DtoH, D: DtoD, m: memset, k: launch, g: matmul */
    cu_ptr dst, src;
    void *host;
    size_t n;
    unsigned value;
    void *fn;
    uint64_t params[16];
    desc x;
    layout la, lb, ld;
    const void *a, *b;
    void *d;
} work;
typedef struct { work *items; int n, cap; } graph;
static graph *capturing;

static int keep(work w)
{
    if (capturing->n == capturing->cap) {
        capturing->cap = capturing->cap ? 2 * capturing->cap : 16;
        capturing->items = realloc(capturing->items, (size_t)capturing->cap * sizeof(work));
    }
    capturing->items[capturing->n++] = w;
    return 0;
}

static void *pinned[64];
static int is_pinned(const void *p)
{
    for (int k = 0; k < 64; k++) if (pinned[k] && pinned[k] == p) return 1;
    return 0;
}

typedef struct { char *image; size_t size; int ptx; } module;
typedef struct { char name[128]; int n_params, all_8; void *host; } function;

int cuInit(unsigned flags)
{
    note("cuInit %u", flags);
    return getenv("FAKE_CUDA_NO_DEVICE") ? 100 /* CUDA_ERROR_NO_DEVICE */ : 0;
}
int cuGetErrorName(int r, const char **name) { *name = r == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_FAKE"; return 0; }
int cuDeviceGet(int *d, int ordinal) { note("cuDeviceGet %d", ordinal); *d = ordinal; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev)
{
    const char *cc = getenv("FAKE_CUDA_CC");
    int n = cc ? atoi(cc) : 75;
    *v = attr == 75 ? n / 10 : n % 10;
    note("cuDeviceGetAttribute %d %d", attr, dev);
    return 0;
}
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)0x100; note("cuDevicePrimaryCtxRetain %d", dev); return 0; }
int cuDevicePrimaryCtxRelease_v2(int dev) { note("cuDevicePrimaryCtxRelease %d", dev); return 0; }
int cuCtxSetCurrent(void *ctx) { note("cuCtxSetCurrent %p", ctx); return 0; }
int cuCtxGetStreamPriorityRange(int *least, int *greatest) { *least = 0, *greatest = -5; return 0; }
int cuStreamCreateWithPriority(void **s, unsigned flags, int priority)
{
    *s = (void *)0x200;
    note("cuStreamCreateWithPriority %u %d", flags, priority);
    return 0;
}
int cuStreamSynchronize(void *s) { note("cuStreamSynchronize"); (void)s; return 0; }
int cuStreamDestroy_v2(void *s) { note("cuStreamDestroy"); (void)s; return 0; }

int cuModuleLoadData(void **out, const void *image)
{
    if (getenv("FAKE_CUDA_BAD_IMAGE")) {
        note("cuModuleLoadData failed");
        return 200; /* CUDA_ERROR_INVALID_IMAGE */
    }
    module *m = calloc(1, sizeof *m);
    const char *p = image;
    m->ptx = strstr(p, ".version") != NULL && strncmp(p, "\x7f" "ELF", 4) != 0;
    m->size = m->ptx ? strlen(p) : 0;
    m->image = m->ptx ? strdup(p) : NULL;
    note("cuModuleLoadData %s", m->ptx ? "ptx" : strncmp(p, "\x7f" "ELF", 4) == 0 ? "cubin" : "unknown");
    *out = m;
    return 0;
}
int cuModuleUnload(void *m) { note("cuModuleUnload"); free(((module *)m)->image); free(m); return 0; }

/* The kernel's parameters from its PTX `.entry NAME(.param .TYPE ..., ...)`. */
int cuModuleGetFunction(void **out, void *mod, const char *name)
{
    module *m = mod;
    function *f = calloc(1, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    char head[160];
    snprintf(head, sizeof head, ".entry %s(", name);
    const char *at = m->image ? strstr(m->image, head) : NULL, *end = at ? strchr(at, ')') : NULL;
    f->all_8 = at != NULL;
    for (const char *p = at; p && (p = strstr(p, ".param .")) && p < end; p += 8) {
        f->n_params++;
        if (!strchr("usbf", p[8]) || strncmp(p + 9, "64", 2) != 0) f->all_8 = 0;
    }
    static void *kernels;
    const char *lib = getenv("FAKE_CUDA_KERNELS");
    if (!kernels && lib) kernels = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    f->host = kernels ? dlsym(kernels, name) : NULL;
    note("cuModuleGetFunction %s", name);
    *out = f;
    return 0;
}

int cuMemAlloc_v2(cu_ptr *p, size_t n) { *p = (cu_ptr)(uintptr_t)calloc(1, n); note("cuMemAlloc %zu", n); return *p ? 0 : 2; }
int cuMemFree_v2(cu_ptr p) { free((void *)(uintptr_t)p); note("cuMemFree"); return 0; }
int cuMemAllocHost_v2(void **p, size_t n)
{
    *p = calloc(1, n);
    for (int k = 0; k < 64 && *p; k++) if (!pinned[k]) { pinned[k] = *p; break; }
    note("cuMemAllocHost %zu", n);
    return *p ? 0 : 2;
}
int cuMemFreeHost(void *p)
{
    for (int k = 0; k < 64; k++) if (pinned[k] == p) pinned[k] = NULL;
    free(p);
    note("cuMemFreeHost");
    return 0;
}
int cuMemcpyHtoDAsync_v2(cu_ptr d, const void *h, size_t n, void *s)
{
    note("cuMemcpyHtoDAsync %zu%s%s", n, is_pinned(h) ? "" : " pageable", capturing ? " captured" : "");
    if (capturing) return keep((work){.kind = 'h', .dst = d, .host = (void *)h, .n = n});
    memcpy((void *)(uintptr_t)d, h, n);
    (void)s;
    return 0;
}
int cuMemcpyDtoHAsync_v2(void *h, cu_ptr d, size_t n, void *s)
{
    note("cuMemcpyDtoHAsync %zu%s%s", n, is_pinned(h) ? "" : " pageable", capturing ? " captured" : "");
    if (capturing) return keep((work){.kind = 'd', .src = d, .host = h, .n = n});
    memcpy(h, (void *)(uintptr_t)d, n);
    (void)s;
    return 0;
}
int cuMemcpyDtoDAsync_v2(cu_ptr d, cu_ptr src, size_t n, void *s)
{
    note("cuMemcpyDtoDAsync %zu%s", n, capturing ? " captured" : "");
    if (capturing) return keep((work){.kind = 'D', .dst = d, .src = src, .n = n});
    memmove((void *)(uintptr_t)d, (void *)(uintptr_t)src, n);
    (void)s;
    return 0;
}
int cuMemsetD32Async(cu_ptr d, unsigned v, size_t n, void *s)
{
    note("cuMemsetD32Async %zu%s", n, capturing ? " captured" : "");
    if (capturing) return keep((work){.kind = 'm', .dst = d, .value = v, .n = n});
    for (size_t k = 0; k < n; k++) ((unsigned *)(uintptr_t)d)[k] = v;
    (void)s;
    return 0;
}

typedef void (*wide)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                     uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);

int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra)
{
    function *f = fn;
    int run = f->host && f->all_8 && f->n_params <= 16;
    note("cuLaunchKernel %s grid %u %u %u block %u %u %u shared %u params %d %s%s", f->name, gx, gy, gz, bx, by, bz,
         shared, f->n_params, run ? "run" : "recorded", capturing ? " captured" : "");
    if (run) { /* SysV and AAPCS64 pass 8-byte integers in order: extra zero arguments are ignored */
        uint64_t a[16] = {0};
        for (int k = 0; k < f->n_params; k++) memcpy(&a[k], params[k], 8); /* by value, as a capture keeps them */
        if (capturing) {
            work w = {.kind = 'k', .fn = f->host};
            memcpy(w.params, a, sizeof a);
            return keep(w);
        }
        ((wide)f->host)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14],
                        a[15]);
    }
    (void)stream, (void)extra;
    return 0;
}

/* --- cuBLASLt ---------------------------------------------------------------------------------------------------- */

int cublasLtCreate(void **h) { *h = (void *)0x300; note("cublasLtCreate"); return 0; }
int cublasLtDestroy(void *h) { (void)h; note("cublasLtDestroy"); return 0; }
int cublasLtMatmulDescCreate(void **d, int compute, int scale)
{
    *d = calloc(1, sizeof(desc));
    note("cublasLtMatmulDescCreate %d %d", compute, scale);
    return 0;
}
int cublasLtMatmulDescDestroy(void *d) { free(d); return 0; }
int cublasLtMatmulDescSetAttribute(void *d, int attr, const void *v, size_t n)
{
    desc *x = d;
    void *field = attr == 3 ? (void *)&x->ta : attr == 4 ? (void *)&x->tb : attr == 7 ? (void *)&x->epilogue
                  : attr == 8 ? (void *)&x->bias : NULL;
    if (!field) return 7;
    memcpy(field, v, n);
    return 0;
}
int cublasLtMatrixLayoutCreate(void **l, int type, uint64_t rows, uint64_t cols, int64_t ld)
{
    layout *x = calloc(1, sizeof *x);
    *x = (layout){type, rows, cols, ld, 0, 1};
    *l = x;
    return 0;
}
int cublasLtMatrixLayoutDestroy(void *l) { free(l); return 0; }
int cublasLtMatrixLayoutSetAttribute(void *l, int attr, const void *v, size_t n)
{
    layout *x = l;
    if (attr == 5) memcpy(&x->batch, v, n);
    else if (attr == 6) memcpy(&x->stride, v, n);
    else return 7;
    return 0;
}

static float at(const float *p, const layout *l, int trans, uint64_t i, uint64_t j)
{
    return trans ? p[j + i * (uint64_t)l->ld] : p[i + j * (uint64_t)l->ld];
}

int cublasLtMatmul(void *h, void *dp, const void *alpha, const void *a, void *la, const void *b, void *lb,
                   const void *beta, const void *c, void *lc, void *d, void *ld, const void *algo, void *ws,
                   size_t ws_bytes, void *stream)
{
    desc *x = dp;
    layout *A = la, *B = lb, *D = ld;
    note("cublasLtMatmul type %d D %llux%llu batch %d trans %d %d epilogue %u bias %d%s", A->type,
         (unsigned long long)D->rows, (unsigned long long)D->cols, D->batch, x->ta, x->tb, x->epilogue, x->bias != 0,
         capturing ? " captured" : "");
    if (A->type != 0) return 0; /* f32 only: the others are recorded */
    if (capturing) return keep((work){.kind = 'g', .x = *x, .la = *A, .lb = *B, .ld = *D, .a = a, .b = b, .d = d});
    uint64_t inner = x->ta ? A->rows : A->cols;
    for (int32_t n = 0; n < D->batch; n++) {
        const float *pa = (const float *)a + n * A->stride, *pb = (const float *)b + n * B->stride;
        float *pd = (float *)d + n * D->stride;
        for (uint64_t i = 0; i < D->rows; i++)
            for (uint64_t j = 0; j < D->cols; j++) {
                float s = x->bias ? ((const float *)(uintptr_t)x->bias)[i] : 0.0f;
                for (uint64_t p = 0; p < inner; p++) s += at(pa, A, x->ta, i, p) * at(pb, B, x->tb, p, j);
                pd[i + j * (uint64_t)D->ld] = (x->epilogue == 2 || x->epilogue == 6) && s < 0 ? 0.0f : s;
            }
    }
    (void)h, (void)alpha, (void)beta, (void)c, (void)lc, (void)algo, (void)ws, (void)ws_bytes, (void)stream;
    return 0;
}

/* --- graphs ------------------------------------------------------------------------------------------------- */

int cuStreamBeginCapture_v2(void *s, int mode)
{
    note("cuStreamBeginCapture %d", mode);
    capturing = calloc(1, sizeof(graph));
    (void)s;
    return capturing ? 0 : 2;
}
int cuStreamEndCapture(void *s, void **out)
{
    note("cuStreamEndCapture %d", capturing ? capturing->n : -1);
    *out = capturing;
    capturing = NULL;
    (void)s;
    return *out ? 0 : 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: no capture was begun */
}
int cuGraphInstantiateWithFlags(void **exec, void *g, unsigned long long flags)
{
    note("cuGraphInstantiateWithFlags");
    *exec = g;
    (void)flags;
    return 0;
}
int cuGraphLaunch(void *exec, void *s)
{
    graph *g = exec;
    note("cuGraphLaunch %d", g->n);
    replaying = 1;
    for (int k = 0; k < g->n; k++) {
        work *w = &g->items[k];
        uint64_t *a = w->params;
        if (w->kind == 'h') memcpy((void *)(uintptr_t)w->dst, w->host, w->n);
        else if (w->kind == 'd') memcpy(w->host, (void *)(uintptr_t)w->src, w->n);
        else if (w->kind == 'D') memmove((void *)(uintptr_t)w->dst, (void *)(uintptr_t)w->src, w->n);
        else if (w->kind == 'm') for (size_t j = 0; j < w->n; j++) ((unsigned *)(uintptr_t)w->dst)[j] = w->value;
        else if (w->kind == 'k')
            ((wide)w->fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14],
                          a[15]);
        else if (w->kind == 'g') {
            graph *held = capturing;
            capturing = NULL; /* the matmul itself, now */
            float one = 1.0f, zero = 0.0f;
            cublasLtMatmul(NULL, &w->x, &one, w->a, &w->la, w->b, &w->lb, &zero, w->d, &w->ld, w->d, &w->ld, NULL,
                           NULL, 0, s);
            capturing = held;
        }
    }
    replaying = 0;
    return 0;
}
int cuGraphExecDestroy(void *exec) { note("cuGraphExecDestroy"); (void)exec; return 0; }
int cuGraphDestroy(void *g)
{
    note("cuGraphDestroy");
    free(((graph *)g)->items);
    free(g);
    return 0;
}
