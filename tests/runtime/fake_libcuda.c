/* A fake of the CUDA driver API and of cuBLASLt for the C runtime's tests (test_c_runtime_cuda.py): device memory
 * is host memory (cuMemAlloc is malloc, copies are memcpy), every call is appended to the file $FAKE_CUDA_LOG as
 * one line, and a kernel launch runs the kernel's host build ($FAKE_CUDA_KERNELS: the generated CUDA C compiled
 * with CUVIL_CUDA_EMULATION, tests/backends/cuda/emulator.py) when the loaded image is PTX and every parameter is
 * 8 bytes (pointers and int64 sizes). cuBLASLt's f32 matmul is computed here (column-major, batched, bias, relu).
 * $FAKE_CUDA_CC is the device's compute capability (default 75), $FAKE_CUDA_NO_DEVICE makes cuInit fail and
 * $FAKE_CUDA_BAD_IMAGE cuModuleLoadData. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long cu_ptr;

__attribute__((format(printf, 1, 2))) static void note(const char *fmt, ...)
{
    const char *path = getenv("FAKE_CUDA_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
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
int cuMemcpyHtoDAsync_v2(cu_ptr d, const void *h, size_t n, void *s)
{
    memcpy((void *)(uintptr_t)d, h, n);
    note("cuMemcpyHtoDAsync %zu", n);
    (void)s;
    return 0;
}
int cuMemcpyDtoHAsync_v2(void *h, cu_ptr d, size_t n, void *s)
{
    memcpy(h, (void *)(uintptr_t)d, n);
    note("cuMemcpyDtoHAsync %zu", n);
    (void)s;
    return 0;
}
int cuMemcpyDtoDAsync_v2(cu_ptr d, cu_ptr src, size_t n, void *s)
{
    memmove((void *)(uintptr_t)d, (void *)(uintptr_t)src, n);
    note("cuMemcpyDtoDAsync %zu", n);
    (void)s;
    return 0;
}
int cuMemsetD32Async(cu_ptr d, unsigned v, size_t n, void *s)
{
    for (size_t k = 0; k < n; k++) ((unsigned *)(uintptr_t)d)[k] = v;
    note("cuMemsetD32Async %zu", n);
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
    note("cuLaunchKernel %s grid %u %u %u block %u %u %u shared %u params %d %s", f->name, gx, gy, gz, bx, by, bz,
         shared, f->n_params, run ? "run" : "recorded");
    if (run) { /* SysV and AAPCS64 pass 8-byte integers in order: extra zero arguments are ignored */
        uint64_t a[16] = {0};
        for (int k = 0; k < f->n_params; k++) memcpy(&a[k], params[k], 8);
        ((wide)f->host)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14],
                        a[15]);
    }
    (void)stream, (void)extra;
    return 0;
}

/* --- cuBLASLt ---------------------------------------------------------------------------------------------------- */

typedef struct { int32_t ta, tb; uint32_t epilogue; cu_ptr bias; } desc;
typedef struct { int type; uint64_t rows, cols; int64_t ld, stride; int32_t batch; } layout;

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
    note("cublasLtMatmul type %d D %llux%llu batch %d trans %d %d epilogue %u bias %d", A->type,
         (unsigned long long)D->rows, (unsigned long long)D->cols, D->batch, x->ta, x->tb, x->epilogue, x->bias != 0);
    if (A->type != 0) return 0; /* f32 only: the others are recorded */
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
