/* The standalone runtime's CUDA half: a `.cuv` for target cuda (triple nvptx64-nvidia-cuda,
 * backends/cuda/artifact.py) run through the driver API.
 *
 * At open, after cuvil_format.c's checks: the `cuda_steps` section (backends/cuda/host_steps.py) is parsed and
 * checked against the entries (every buffer, kernel and value index in range, the value program verified as a
 * check program). At the first run: libcuda.so.1 is opened with dlopen (no link-time dependency; CUVIL_ERR_DEVICE
 * when there is no driver or no device), the primary context of device 0 made current, each entry's module loaded
 * (the cubin of the device's architecture, section sm_XY, else the PTX of `native`, which the driver compiles),
 * a stream created (priority CUVIL_CUDA_STREAM_PRIORITY, clamped to the device's range) and the constants
 * uploaded. Each run: its sizes evaluated, the arena (slots, error word, cuBLASLt's workspace) and the input and
 * output buffers allocated (kept and grown across runs), the inputs copied in, the steps launched in order
 * (kernels, cuBLASLt GEMMs through a dlopen'd libcublasLt, device copies), the outputs copied out and the error word
 * read. Runs of one model are serialised by its lock. Built as libcuvilcuda.so, which libcuvilrt opens at the first
 * CUDA file (cuvil_cuda_load.c), so the CPU runtime stays small.
 */
#define _GNU_SOURCE
#include "cuvil_internal.h"

#include "cuvil_checks.h"

/* libcuvilcuda.so: the runtime's helpers come from libcuvilrt through the table it passes (cuvil_cuda_load.c). */
static const cuvil_cuda_host *host;
#define cuvil_fail (*host->fail)
#define cuvil_take (*host->take)
#define cuvil_find_section (*host->find_section)
#define cuvil_last_message (*host->last_message)
#define cuvil_dtype_size (*host->dtype_size)

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEPARATOR "\0\0CUVIL-NEXT-MODULE\0\0"
#define SEPARATOR_BYTES 22
#define ALIGN 256
#define ERROR_BYTES 256
#define WORKSPACE_BYTES ((size_t)32 << 20) /* cublaslt.py WORKSPACE_BYTES */
#define MAX_ARGS 64
#define GRAPHS 8 /* shapes whose graph an entry keeps (the oldest is replaced) */

typedef unsigned long long cu_ptr;
typedef int cu_result;

/* --- the host program (cuda_steps) ----------------------------------------------------------------------------- */

typedef struct { char kind; int64_t v; } cu_arg; /* kind: i o c s (buffers: v its index) e (error word) n (null)
                                                  * q (i64: value v) f (f32 bits v) d (i32 v) */
typedef struct {
    char op; /* L launch, G gemm, C copy */
    int kernel, work, per_block, threads, shared, n_args;
    cu_arg *args;                    /* launch: its parameters; gemm: A B C BIAS; copy: DST SRC */
    int dtype, ta, tb, epilogue;     /* gemm */
    int dims[6];                     /* gemm: M N K BATCH SA SB; copy: NBYTES (value indices) */
} cu_step;

typedef struct { const char *name, *loc; int axis, size; } cu_error;

typedef struct { int64_t *values; void *graph, *exec; } cu_graph; /* a shape's captured run: its values are the key */

typedef struct {
    int64_t *code;
    int n_code, n_values, n_slots, n_kernels, n_steps, n_errors, gemm;
    int *slot_n, **slot_values;
    const char **kernels;
    cu_step *steps;
    cu_error *errors;
    int64_t *values, *offsets; /* per run: every value, each slot's offset in the arena */
    /* on the device */
    void *module;
    void **functions;
    cu_ptr *consts, arena, *ins, *outs;
    size_t arena_cap, *in_cap, *out_cap;
    void **in_host, **out_host; /* pinned staging: the graph copies between these and the device */
    size_t *in_host_cap, *out_host_cap;
    int64_t *word;              /* pinned: the error word, copied back by the graph */
    cu_graph graphs[GRAPHS];
    int n_graphs, next_graph;
} cu_entry;

typedef cu_result (*cu_fn)();

/* Driver API entry points, by name, in the order of `driver_names`. */
enum { CU_INIT, CU_DEVICE_GET, CU_DEVICE_ATTRIBUTE, CU_CTX_RETAIN, CU_CTX_SET, CU_PRIORITY_RANGE, CU_STREAM_CREATE,
       CU_STREAM_SYNC, CU_STREAM_DESTROY, CU_MODULE_LOAD, CU_MODULE_FUNCTION, CU_MODULE_UNLOAD, CU_ALLOC, CU_FREE,
       CU_HTOD, CU_DTOH, CU_DTOD, CU_MEMSET, CU_LAUNCH, CU_ERROR_NAME, CU_CTX_RELEASE, CU_BEGIN_CAPTURE,
       CU_END_CAPTURE, CU_GRAPH_INSTANTIATE, CU_GRAPH_LAUNCH, CU_GRAPH_EXEC_DESTROY, CU_GRAPH_DESTROY, CU_HOST_ALLOC,
       CU_HOST_FREE, CU_N };
static const char *const driver_names[CU_N] = {
    "cuInit", "cuDeviceGet", "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent",
    "cuCtxGetStreamPriorityRange", "cuStreamCreateWithPriority", "cuStreamSynchronize", "cuStreamDestroy_v2",
    "cuModuleLoadData", "cuModuleGetFunction", "cuModuleUnload", "cuMemAlloc_v2", "cuMemFree_v2",
    "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2", "cuMemsetD32Async", "cuLaunchKernel",
    "cuGetErrorName", "cuDevicePrimaryCtxRelease_v2", "cuStreamBeginCapture_v2", "cuStreamEndCapture",
    "cuGraphInstantiateWithFlags", "cuGraphLaunch", "cuGraphExecDestroy", "cuGraphDestroy", "cuMemAllocHost_v2",
    "cuMemFreeHost"};

enum { LT_CREATE, LT_DESTROY, LT_DESC_CREATE, LT_DESC_SET, LT_DESC_DESTROY, LT_LAYOUT_CREATE, LT_LAYOUT_SET,
       LT_LAYOUT_DESTROY, LT_MATMUL, LT_N };
static const char *const blas_names[LT_N] = {
    "cublasLtCreate", "cublasLtDestroy", "cublasLtMatmulDescCreate", "cublasLtMatmulDescSetAttribute",
    "cublasLtMatmulDescDestroy", "cublasLtMatrixLayoutCreate", "cublasLtMatrixLayoutSetAttribute",
    "cublasLtMatrixLayoutDestroy", "cublasLtMatmul"};

struct cuvil_cuda {
    cu_entry *entries;
    pthread_mutex_t lock;
    int opened; /* 0: not yet, 1: ready, -1: failed (`why`, `why_code`) */
    cuvil_status why_code;
    char why[512];
    void *lib, *blas_lib, *blas;
    cu_fn cu[CU_N], lt[LT_N];
    int device;
    void *ctx, *stream;
};

static const char *dtype_names_lt[] = {"f32", "f16", "bf16"};
static const int dtype_codes_lt[] = {0, 2, 14}; /* cudaDataType: CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF */

/* A line reader over one section's text. */
typedef struct { const char *p, *end, *line, *line_end; int line_no; } text;

static int next_line(text *t)
{
    if (t->p >= t->end) return 0;
    const char *nl = memchr(t->p, '\n', (size_t)(t->end - t->p));
    t->line = t->p, t->line_end = nl ? nl : t->end;
    t->p = nl ? nl + 1 : t->end;
    t->line_no++;
    return 1;
}

/* The next space-separated word into `out`; 0 if none or longer than `cap` - 1. */
static int word(text *t, char *out, size_t cap)
{
    while (t->line < t->line_end && *t->line == ' ') t->line++;
    const char *s = t->line;
    while (t->line < t->line_end && *t->line != ' ') t->line++;
    size_t n = (size_t)(t->line - s);
    if (!n || n >= cap) return 0;
    memcpy(out, s, n);
    out[n] = 0;
    return 1;
}

static int number(text *t, int64_t lo, int64_t hi, int64_t *v)
{
    char buf[24], *end;
    if (!word(t, buf, sizeof buf)) return 0;
    long long x = strtoll(buf, &end, 10);
    if (*end || x < lo || x > hi) return 0;
    *v = x;
    return 1;
}

static int small(text *t, int64_t hi, int *v)
{
    int64_t x;
    if (!number(t, 0, hi, &x)) return 0;
    *v = (int)x;
    return 1;
}

static char *keep_text(cuvil_model *m, const char *s, size_t n)
{
    char *out = cuvil_take(m, n + 1);
    if (out) memcpy(out, s, n);
    return out;
}

static cuvil_status bad(cuvil_model *m, text *t, const char *what)
{
    return cuvil_fail(CUVIL_ERR_FORMAT, "%s: section 'cuda_steps' line %d: %s", m->where, t->line_no, what);
}

/* A buffer word (in3 out0 const2 slot1 err) of entry `e` into `a`; 0 if malformed or out of range. */
static int buffer_word(const char *w, const cuvil_entry *me, const cu_entry *e, cu_arg *a)
{
    static const char *const kinds[] = {"in", "out", "const", "slot"};
    const int limits[] = {me->n_in, me->n_out, me->n_const, e->n_slots};
    if (strcmp(w, "err") == 0) { a->kind = 'e', a->v = 0; return 1; }
    for (int k = 0; k < 4; k++) {
        size_t n = strlen(kinds[k]);
        char *end;
        if (strncmp(w, kinds[k], n) != 0 || w[n] < '0' || w[n] > '9') continue;
        long v = strtol(w + n, &end, 10);
        if (*end || v < 0 || v >= limits[k]) return 0;
        a->kind = "iocs"[k], a->v = v;
        return 1;
    }
    return 0;
}

static int arg_word(const char *w, const cuvil_entry *me, const cu_entry *e, cu_arg *a)
{
    char *end;
    if (strcmp(w, "null") == 0) { a->kind = 'n', a->v = 0; return 1; }
    if (w[0] && w[1] && w[2] && w[3] == ':' && strchr("ifd", w[0]) && (!strncmp(w, "i64", 3) || !strncmp(w, "f32", 3)
                                                                        || !strncmp(w, "i32", 3))) {
        long long v = strtoll(w + 4, &end, w[0] == 'f' ? 16 : 10);
        if (*end || !w[4]) return 0;
        a->kind = w[0] == 'f' ? 'f' : w[1] == '6' ? 'q' : 'd', a->v = v;
        return a->kind != 'q' || (v >= 0 && v < e->n_values);
    }
    return buffer_word(w, me, e, a);
}

static cuvil_status values_line(cuvil_model *m, text *t, const cuvil_entry *me, cu_entry *e)
{
    char key[16];
    int64_t n;
    if (!next_line(t) || !word(t, key, sizeof key) || strcmp(key, "values") || !number(t, 0, 1 << 24, &n))
        return bad(m, t, "expected `values N c0 ...`");
    e->code = cuvil_take(m, (size_t)(n + 1) * sizeof(int64_t));
    if (!e->code) return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    e->n_code = (int)n;
    for (int64_t k = 0; k < n; k++)
        if (!number(t, INT64_MIN, INT64_MAX, &e->code[k])) return bad(m, t, "a malformed value program");
    for (int pc = 0; pc < e->n_code;) { /* how many values: one past the largest `out` operand */
        int64_t op = e->code[pc];
        if (op < 0 || op >= CUVIL_OP_COUNT) return bad(m, t, "a malformed value program");
        if (op == CUVIL_OP_OUT && pc + 1 < e->n_code && e->code[pc + 1] >= e->n_values && e->code[pc + 1] < (1 << 24))
            e->n_values = (int)e->code[pc + 1] + 1;
        pc += 1 + cuvil_check_ops[op].operands;
    }
    uint8_t *bound = cuvil_take(m, (size_t)me->n_sym + 1), *written = cuvil_take(m, (size_t)e->n_values + 1);
    e->values = cuvil_take(m, ((size_t)e->n_values + 1) * sizeof(int64_t));
    if (!bound || !written || !e->values) return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    if (cuvil_checks_verify(e->code, e->n_code, me->n_in, me->ranks, me->n_sym, e->n_values, bound, written))
        return bad(m, t, "the value program does not verify");
    return CUVIL_OK;
}

static cuvil_status step_line(cuvil_model *m, text *t, const char *key, const cuvil_entry *me, cu_entry *e)
{
    cu_step *s = &e->steps[e->n_steps];
    char w[64];
    int ok = 1;
    if (strcmp(key, "launch") == 0) {
        s->op = 'L';
        ok = small(t, e->n_kernels - 1, &s->kernel) && small(t, e->n_values - 1, &s->work)
             && small(t, 1 << 30, &s->per_block) && small(t, 1024, &s->threads) && small(t, 1 << 20, &s->shared)
             && small(t, MAX_ARGS, &s->n_args) && s->per_block > 0 && s->threads > 0;
        s->args = ok ? cuvil_take(m, ((size_t)s->n_args + 1) * sizeof(cu_arg)) : NULL;
        for (int k = 0; ok && k < s->n_args; k++) ok = word(t, w, sizeof w) && arg_word(w, me, e, &s->args[k]);
    } else if (strcmp(key, "gemm") == 0) {
        s->op = 'G', s->dtype = -1;
        if ((ok = word(t, w, sizeof w)))
            for (int k = 0; k < 3; k++)
                if (strcmp(w, dtype_names_lt[k]) == 0) s->dtype = k;
        ok = ok && s->dtype >= 0 && small(t, 1, &s->ta) && small(t, 1, &s->tb) && small(t, 1 << 10, &s->epilogue);
        for (int k = 0; ok && k < 6; k++) ok = small(t, e->n_values - 1, &s->dims[k]);
        s->n_args = 4;
        s->args = ok ? cuvil_take(m, 4 * sizeof(cu_arg)) : NULL;
        for (int k = 0; ok && k < 4; k++)
            ok = word(t, w, sizeof w) && ((k == 3 && strcmp(w, "-") == 0 && (s->args[3].kind = 'n'))
                                          || buffer_word(w, me, e, &s->args[k]));
        e->gemm = 1;
    } else if (strcmp(key, "copy") == 0) {
        s->op = 'C', s->n_args = 2;
        s->args = cuvil_take(m, 2 * sizeof(cu_arg));
        ok = s->args && word(t, w, sizeof w) && buffer_word(w, me, e, &s->args[0]) && word(t, w, sizeof w)
             && buffer_word(w, me, e, &s->args[1]) && small(t, e->n_values - 1, &s->dims[0]);
    } else
        return bad(m, t, "expected `launch`, `gemm`, `copy`, `error` or `end`");
    if (!ok || t->line != t->line_end) return bad(m, t, "a malformed step");
    e->n_steps++;
    return CUVIL_OK;
}

static cuvil_status entry_steps(cuvil_model *m, text *t, const cuvil_entry *me, cu_entry *e)
{
    char key[16], name[CUVIL_MAX_NAME + 2];
    if (!next_line(t) || !word(t, key, sizeof key) || strcmp(key, "entry") || !word(t, name, sizeof name)
        || strcmp(name, me->name))
        return bad(m, t, "expected `entry NAME` of the next entry of section 'entries'");
    cuvil_status rc = values_line(m, t, me, e);
    if (rc) return rc;
    int64_t lines = (t->end - t->p) / 4 + 1;
    e->slot_n = cuvil_take(m, (size_t)lines * sizeof(int));
    e->slot_values = cuvil_take(m, (size_t)lines * sizeof(int *));
    e->kernels = cuvil_take(m, (size_t)lines * sizeof(char *));
    e->steps = cuvil_take(m, (size_t)lines * sizeof(cu_step));
    e->errors = cuvil_take(m, (size_t)lines * sizeof(cu_error));
    if (!e->slot_n || !e->slot_values || !e->kernels || !e->steps || !e->errors)
        return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    while (next_line(t) && word(t, key, sizeof key) && strcmp(key, "end")) {
        if (strcmp(key, "slot") == 0) {
            int *v = e->slot_values[e->n_slots] = cuvil_take(m, (size_t)(t->line_end - t->line + 1) * sizeof(int));
            int n = 0;
            if (!v) return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
            while (t->line < t->line_end)
                if (!small(t, e->n_values - 1, &v[n++])) return bad(m, t, "a malformed slot");
            if (!n) return bad(m, t, "a slot without sizes");
            e->slot_n[e->n_slots++] = n;
        } else if (strcmp(key, "kernel") == 0) {
            char kname[128];
            if (e->n_steps || !word(t, kname, sizeof kname) || t->line != t->line_end) return bad(m, t, "a malformed kernel");
            if (!(e->kernels[e->n_kernels++] = keep_text(m, kname, strlen(kname))))
                return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
        } else if (strcmp(key, "error") == 0) {
            cu_error *x = &e->errors[e->n_errors];
            char op[64];
            if (!word(t, op, sizeof op) || !small(t, 64, &x->axis) || !small(t, e->n_values - 1, &x->size))
                return bad(m, t, "expected `error NAME AXIS SIZE LOC`");
            while (t->line < t->line_end && *t->line == ' ') t->line++;
            x->name = keep_text(m, op, strlen(op));
            x->loc = keep_text(m, t->line, (size_t)(t->line_end - t->line));
            if (!x->name || !x->loc) return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
            e->n_errors++;
        } else if ((rc = step_line(m, t, key, me, e)))
            return rc;
    }
    if (strcmp(key, "end") != 0) return bad(m, t, "expected `end`");
    e->offsets = cuvil_take(m, ((size_t)e->n_slots + 1) * sizeof(int64_t));
    e->functions = cuvil_take(m, ((size_t)e->n_kernels + 1) * sizeof(void *));
    e->consts = cuvil_take(m, ((size_t)me->n_const + 1) * sizeof(cu_ptr));
    e->ins = cuvil_take(m, ((size_t)me->n_in + 1) * sizeof(cu_ptr));
    e->outs = cuvil_take(m, ((size_t)me->n_out + 1) * sizeof(cu_ptr));
    e->in_cap = cuvil_take(m, ((size_t)me->n_in + 1) * sizeof(size_t));
    e->out_cap = cuvil_take(m, ((size_t)me->n_out + 1) * sizeof(size_t));
    e->in_host = cuvil_take(m, ((size_t)me->n_in + 1) * sizeof(void *));
    e->out_host = cuvil_take(m, ((size_t)me->n_out + 1) * sizeof(void *));
    e->in_host_cap = cuvil_take(m, ((size_t)me->n_in + 1) * sizeof(size_t));
    e->out_host_cap = cuvil_take(m, ((size_t)me->n_out + 1) * sizeof(size_t));
    int graphs_ok = 1;
    for (int g = 0; g < GRAPHS; g++)
        graphs_ok &= !!(e->graphs[g].values = cuvil_take(m, ((size_t)e->n_values + 1) * sizeof(int64_t)));
    if (!e->offsets || !e->functions || !e->consts || !e->ins || !e->outs || !e->in_cap || !e->out_cap ||
        !e->in_host || !e->out_host || !e->in_host_cap || !e->out_host_cap || !graphs_ok)
        return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    return CUVIL_OK;
}

static cuvil_status cuda_load(cuvil_model *m)
{
    const cuvil_section *s = cuvil_find_section(m, "cuda_steps");
    if (!s) return cuvil_fail(CUVIL_ERR_FORMAT, "%s: a .cuv for CUDA without its section 'cuda_steps'", m->where);
    struct cuvil_cuda *c = m->cuda = cuvil_take(m, sizeof *c);
    if (!c || !(c->entries = cuvil_take(m, ((size_t)m->n_entries + 1) * sizeof(cu_entry))))
        return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    pthread_mutex_init(&c->lock, NULL);
    text t = {(const char *)m->data + s->offset, (const char *)m->data + s->offset + s->size, NULL, NULL, 0};
    char head[16];
    int64_t version;
    if (!next_line(&t) || !word(&t, head, sizeof head) || strcmp(head, "cuda-steps") || !number(&t, 1, 1, &version))
        return bad(m, &t, "expected `cuda-steps 1`");
    for (int k = 0; k < m->n_entries; k++) {
        cuvil_status rc = entry_steps(m, &t, &m->entries[k], &c->entries[k]);
        if (rc) return rc;
    }
    return CUVIL_OK;
}

/* --- the device ------------------------------------------------------------------------------------------------ */

static cuvil_status driver_fail(struct cuvil_cuda *c, cuvil_status code, const char *call, cu_result r)
{
    const char *name = NULL;
    if (c->cu[CU_ERROR_NAME]) c->cu[CU_ERROR_NAME](r, &name);
    return cuvil_fail(code, "CUDA: %s failed: %s (%d)", call, name ? name : "an unknown error", r);
}

#define CU(call, ...) do { cu_result r_ = c->cu[call](__VA_ARGS__); \
                           if (r_) return driver_fail(c, CUVIL_ERR_EXEC, driver_names[call], r_); } while (0)

/* Image number `k` of section `name` (the images of the entries, separated). */
static int image(const cuvil_model *m, const char *name, int k, const uint8_t **at, size_t *n)
{
    const cuvil_section *s = cuvil_find_section(m, name);
    if (!s) return 0;
    const uint8_t *p = m->data + s->offset, *end = p + s->size;
    for (;; k--) {
        const uint8_t *next = memmem(p, (size_t)(end - p), SEPARATOR, SEPARATOR_BYTES);
        if (!k) { *at = p, *n = (size_t)((next ? next : end) - p); return *n > 0; }
        if (!next) return 0;
        p = next + SEPARATOR_BYTES;
    }
}

static cuvil_status load_entry(cuvil_model *m, struct cuvil_cuda *c, int k, const char *arch)
{
    const cuvil_entry *me = &m->entries[k];
    cu_entry *e = &c->entries[k];
    const uint8_t *at;
    size_t n;
    if (!image(m, arch, k, &at, &n) && !image(m, "native", k, &at, &n))
        return cuvil_fail(CUVIL_ERR_FORMAT, "%s: entry '%s' has neither a %s cubin nor PTX", m->where, me->name, arch);
    char *copy = malloc(n + 1); /* NUL-terminated: PTX text needs it, a cubin ignores it */
    if (!copy) return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    memcpy(copy, at, n);
    copy[n] = 0;
    cu_result r = c->cu[CU_MODULE_LOAD](&e->module, copy);
    free(copy);
    if (r) return driver_fail(c, CUVIL_ERR_LOAD, "cuModuleLoadData", r);
    for (int j = 0; j < e->n_kernels; j++)
        if ((r = c->cu[CU_MODULE_FUNCTION](&e->functions[j], e->module, e->kernels[j])))
            return driver_fail(c, CUVIL_ERR_LOAD, e->kernels[j], r);
    const cuvil_section *consts = cuvil_find_section(m, "consts");
    for (int j = 0; j < me->n_const; j++) {
        size_t bytes = (size_t)me->const_bytes[j];
        CU(CU_ALLOC, &e->consts[j], bytes ? bytes : 1);
        if (bytes) CU(CU_HTOD, e->consts[j], m->data + consts->offset + me->const_at[j], bytes, c->stream);
    }
    CU(CU_STREAM_SYNC, c->stream);
    return CUVIL_OK;
}

static void *open_library(const char *env, const char *const *names)
{
    const char *path = getenv(env);
    if (path && *path) return dlopen(path, RTLD_NOW | RTLD_LOCAL);
    void *lib = NULL;
    for (; *names && !lib; names++) lib = dlopen(*names, RTLD_NOW | RTLD_LOCAL);
    return lib;
}

static cuvil_status open_driver(cuvil_model *m, struct cuvil_cuda *c)
{
    static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
    if (!(c->lib = open_library("CUVIL_LIBCUDA", names)))
        return cuvil_fail(CUVIL_ERR_DEVICE, "%s: a .cuv for CUDA needs an NVIDIA driver (libcuda.so.1), and this "
                          "machine has none (%s)", m->where, dlerror());
    for (int k = 0; k < CU_N; k++)
        if (!(c->cu[k] = (cu_fn)dlsym(c->lib, driver_names[k])))
            return cuvil_fail(CUVIL_ERR_DEVICE, "%s: the CUDA driver lacks %s (too old?)", m->where, driver_names[k]);
    cu_result r = c->cu[CU_INIT](0u);
    if (!r) r = c->cu[CU_DEVICE_GET](&c->device, 0);
    if (r) return driver_fail(c, CUVIL_ERR_DEVICE, "opening CUDA device 0 (cuInit, cuDeviceGet)", r);
    int major = 0, minor = 0, least = 0, greatest = 0;
    CU(CU_CTX_RETAIN, &c->ctx, c->device);
    CU(CU_CTX_SET, c->ctx);
    CU(CU_DEVICE_ATTRIBUTE, &major, 75, c->device); /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
    CU(CU_DEVICE_ATTRIBUTE, &minor, 76, c->device);
    CU(CU_PRIORITY_RANGE, &least, &greatest);
    const char *p = getenv("CUVIL_CUDA_STREAM_PRIORITY");
    int priority = p && *p ? atoi(p) : 0; /* lower numbers are higher priorities: greatest <= priority <= least */
    priority = priority < greatest ? greatest : priority > least ? least : priority;
    CU(CU_STREAM_CREATE, &c->stream, 1u /* CU_STREAM_NON_BLOCKING */, priority);
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
    int gemm = 0;
    for (int k = 0; k < m->n_entries; k++) {
        cuvil_status rc = load_entry(m, c, k, arch);
        if (rc) return rc;
        gemm |= c->entries[k].gemm;
    }
    if (!gemm) return CUVIL_OK;
    static const char *const blas[] = {"libcublasLt.so.12", "libcublasLt.so.13", "libcublasLt.so", NULL};
    if (!(c->blas_lib = open_library("CUVIL_CUBLASLT", blas)))
        return cuvil_fail(CUVIL_ERR_DEVICE, "%s: the model's GEMMs need cuBLASLt (libcublasLt.so.12: pip install "
                          "nvidia-cublas-cu12 and set CUVIL_CUBLASLT to its path): %s", m->where, dlerror());
    for (int k = 0; k < LT_N; k++)
        if (!(c->lt[k] = (cu_fn)dlsym(c->blas_lib, blas_names[k])))
            return cuvil_fail(CUVIL_ERR_DEVICE, "%s: cuBLASLt lacks %s", m->where, blas_names[k]);
    if ((r = c->lt[LT_CREATE](&c->blas)))
        return cuvil_fail(CUVIL_ERR_DEVICE, "%s: cublasLtCreate failed: cublasStatus %d", m->where, r);
    return CUVIL_OK;
}

/* --- a run ----------------------------------------------------------------------------------------------------- */

static int64_t in_dim(const void *inputs, int64_t i, int64_t axis) { return ((const cuvil_tensor *)inputs)[i].shape[axis]; }

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static size_t bytes_of(const cuvil_tensor *t)
{
    size_t n = cuvil_dtype_size(t->dtype);
    for (int k = 0; k < t->rank; k++) n *= (size_t)t->shape[k];
    return n;
}

/* `*p` holding at least `n` bytes (kept, grown when smaller: `*moved` is set, the captured graphs are stale). */
static cuvil_status device_buffer(struct cuvil_cuda *c, cu_ptr *p, size_t *cap, size_t n, int *moved)
{
    if (*p && *cap >= n) return CUVIL_OK;
    if (*p) CU(CU_FREE, *p);
    *p = 0, *cap = 0, *moved = 1;
    cu_result r = c->cu[CU_ALLOC](p, n ? n : 1);
    if (r) return driver_fail(c, CUVIL_ERR_MEMORY, "cuMemAlloc", r);
    *cap = n;
    return CUVIL_OK;
}

/* Likewise for pinned host memory (the staging of the graph's copies). */
static cuvil_status host_buffer(struct cuvil_cuda *c, void **p, size_t *cap, size_t n, int *moved)
{
    if (*p && *cap >= n) return CUVIL_OK;
    if (*p) CU(CU_HOST_FREE, *p);
    *p = NULL, *cap = 0, *moved = 1;
    cu_result r = c->cu[CU_HOST_ALLOC](p, n ? n : 1);
    if (r) return driver_fail(c, CUVIL_ERR_MEMORY, "cuMemAllocHost", r);
    *cap = n;
    return CUVIL_OK;
}

static void drop_graphs(struct cuvil_cuda *c, cu_entry *e)
{
    for (int g = 0; g < e->n_graphs; g++) {
        if (e->graphs[g].exec) c->cu[CU_GRAPH_EXEC_DESTROY](e->graphs[g].exec);
        if (e->graphs[g].graph) c->cu[CU_GRAPH_DESTROY](e->graphs[g].graph);
        e->graphs[g].exec = e->graphs[g].graph = NULL;
    }
    e->n_graphs = e->next_graph = 0;
}

typedef struct { const cu_entry *e; const int64_t *offset; cu_ptr err; } frame;

static cu_ptr address(const frame *f, const cu_arg *a)
{
    switch (a->kind) {
    case 'i': return f->e->ins[a->v];
    case 'o': return f->e->outs[a->v];
    case 'c': return f->e->consts[a->v];
    case 's': return f->e->arena + (cu_ptr)f->offset[a->v];
    case 'e': return f->err;
    default: return 0;
    }
}

static cuvil_status launch(struct cuvil_cuda *c, const frame *f, const cu_step *s)
{
    const cu_entry *e = f->e;
    int64_t work = e->values[s->work], blocks = (work + s->per_block - 1) / s->per_block;
    if (work <= 0) return CUVIL_OK;
    union { cu_ptr p; int64_t q; float f; int32_t d; } store[MAX_ARGS];
    void *params[MAX_ARGS];
    for (int k = 0; k < s->n_args; k++) {
        const cu_arg *a = &s->args[k];
        if (a->kind == 'q') store[k].q = e->values[a->v];
        else if (a->kind == 'f') { uint32_t bits = (uint32_t)a->v; memcpy(&store[k].f, &bits, 4); }
        else if (a->kind == 'd') store[k].d = (int32_t)a->v;
        else store[k].p = address(f, a);
        params[k] = &store[k];
    }
    unsigned grid = (unsigned)(blocks < 1 ? 1 : blocks > 65536 ? 65536 : blocks); /* kernels.py MAX_GRID */
    CU(CU_LAUNCH, e->functions[s->kernel], grid, 1u, 1u, (unsigned)s->threads, 1u, 1u, (unsigned)s->shared, c->stream,
       params, (void **)NULL);
    return CUVIL_OK;
}

#define LT(call, ...) do { int r_ = c->lt[call](__VA_ARGS__); if (r_) { \
    rc = cuvil_fail(CUVIL_ERR_EXEC, "cuBLASLt: %s failed: cublasStatus %d", blas_names[call], r_); goto done; } } while (0)

/* C = A B as the column-major C^T = B^T A^T (cublaslt.py gemm_layouts): D (n x m) = op(B') op(A'). */
static cuvil_status gemm(struct cuvil_cuda *c, const frame *f, const cu_step *s)
{
    const int64_t *v = f->e->values;
    int64_t m = v[s->dims[0]], n = v[s->dims[1]], k = v[s->dims[2]], batch = v[s->dims[3]];
    int64_t sa = v[s->dims[4]], sb = v[s->dims[5]];
    int64_t shape[3][4] = {{s->tb ? k : n, s->tb ? n : k, s->tb ? k : n, sb},
                           {s->ta ? m : k, s->ta ? k : m, s->ta ? m : k, sa}, {n, m, n, m * n}};
    void *desc = NULL, *lay[3] = {NULL, NULL, NULL};
    cuvil_status rc = CUVIL_OK;
    int type = dtype_codes_lt[s->dtype], trans_a = s->tb, trans_b = s->ta;
    int32_t count = (int32_t)batch;
    uint32_t epilogue = (uint32_t)s->epilogue;
    LT(LT_DESC_CREATE, &desc, 68 /* CUBLAS_COMPUTE_32F */, 0 /* CUDA_R_32F */);
    LT(LT_DESC_SET, desc, 3, &trans_a, sizeof trans_a);
    LT(LT_DESC_SET, desc, 4, &trans_b, sizeof trans_b);
    LT(LT_DESC_SET, desc, 7, &epilogue, sizeof epilogue);
    if (s->args[3].kind != 'n') {
        cu_ptr bias = address(f, &s->args[3]);
        LT(LT_DESC_SET, desc, 8, &bias, sizeof bias);
    }
    for (int j = 0; j < 3; j++) {
        LT(LT_LAYOUT_CREATE, &lay[j], type, (uint64_t)shape[j][0], (uint64_t)shape[j][1], shape[j][2]);
        if (batch > 1) {
            LT(LT_LAYOUT_SET, lay[j], 5, &count, sizeof count);
            LT(LT_LAYOUT_SET, lay[j], 6, &shape[j][3], sizeof shape[j][3]);
        }
    }
    float one = 1.0f, zero = 0.0f;
    cu_ptr a = address(f, &s->args[0]), b = address(f, &s->args[1]), out = address(f, &s->args[2]);
    LT(LT_MATMUL, c->blas, desc, &one, b, lay[0], a, lay[1], &zero, out, lay[2], out, lay[2], (void *)NULL,
       f->err + ERROR_BYTES, WORKSPACE_BYTES, c->stream);
done:
    for (int j = 0; j < 3; j++)
        if (lay[j]) c->lt[LT_LAYOUT_DESTROY](lay[j]);
    if (desc) c->lt[LT_DESC_DESTROY](desc);
    return rc;
}

/* Every buffer of a run of these sizes (device arena, inputs, outputs, pinned staging); `*moved` when one moved. */
static cuvil_status buffers(struct cuvil_cuda *c, const cuvil_entry *me, cu_entry *e, size_t arena,
                            const cuvil_tensor *in, const cuvil_tensor *out, int *moved)
{
    cuvil_status rc = device_buffer(c, &e->arena, &e->arena_cap, arena, moved);
    for (int i = 0; i < me->n_in && !rc; i++) {
        rc = device_buffer(c, &e->ins[i], &e->in_cap[i], bytes_of(&in[i]), moved);
        if (!rc) rc = host_buffer(c, &e->in_host[i], &e->in_host_cap[i], bytes_of(&in[i]), moved);
    }
    for (int j = 0; j < me->n_out && !rc; j++) {
        rc = device_buffer(c, &e->outs[j], &e->out_cap[j], bytes_of(&out[j]), moved);
        if (!rc) rc = host_buffer(c, &e->out_host[j], &e->out_host_cap[j], bytes_of(&out[j]), moved);
    }
    size_t word_cap = e->word ? sizeof(int64_t[2]) : 0;
    if (!rc) rc = host_buffer(c, (void **)&e->word, &word_cap, sizeof(int64_t[2]), moved);
    return rc;
}

/* The run as the stream sees it (what a graph captures): clear the error word, inputs in from the staging, the
 * steps, outputs and the error word out to the staging. */
static cuvil_status issue(struct cuvil_cuda *c, const cuvil_entry *me, const cu_entry *e, const frame *f,
                          const cuvil_tensor *in, const cuvil_tensor *out)
{
    cuvil_status rc = CUVIL_OK;
    CU(CU_MEMSET, f->err, 0u, (size_t)4, c->stream);
    for (int i = 0; i < me->n_in; i++)
        if (bytes_of(&in[i])) CU(CU_HTOD, e->ins[i], e->in_host[i], bytes_of(&in[i]), c->stream);
    for (int k = 0; k < e->n_steps && !rc; k++) {
        const cu_step *s = &e->steps[k];
        if (s->op == 'L') rc = launch(c, f, s);
        else if (s->op == 'G') rc = gemm(c, f, s);
        else if (e->values[s->dims[0]] > 0)
            CU(CU_DTOD, address(f, &s->args[0]), address(f, &s->args[1]), (size_t)e->values[s->dims[0]], c->stream);
    }
    if (rc) return rc;
    for (int j = 0; j < me->n_out; j++)
        if (bytes_of(&out[j])) CU(CU_DTOH, e->out_host[j], e->outs[j], bytes_of(&out[j]), c->stream);
    if (e->n_errors) CU(CU_DTOH, e->word, f->err, sizeof(int64_t[2]), c->stream);
    return CUVIL_OK;
}

/* The graph of this run's sizes: found among those kept, else captured now (replacing the oldest). */
static cuvil_status graph_for(struct cuvil_cuda *c, const cuvil_entry *me, cu_entry *e, const frame *f,
                              const cuvil_tensor *in, const cuvil_tensor *out, void **exec)
{
    size_t key = (size_t)e->n_values * sizeof(int64_t);
    for (int g = 0; g < e->n_graphs; g++)
        if (memcmp(e->graphs[g].values, e->values, key) == 0) return *exec = e->graphs[g].exec, CUVIL_OK;
    cu_graph *g = &e->graphs[e->next_graph];
    if (g->exec) c->cu[CU_GRAPH_EXEC_DESTROY](g->exec);
    if (g->graph) c->cu[CU_GRAPH_DESTROY](g->graph);
    g->exec = g->graph = NULL;
    CU(CU_BEGIN_CAPTURE, c->stream, 1 /* CU_STREAM_CAPTURE_MODE_THREAD_LOCAL */);
    cuvil_status rc = issue(c, me, e, f, in, out);
    cu_result r = c->cu[CU_END_CAPTURE](c->stream, &g->graph); /* ends a capture a failed step left open too */
    if (!rc && r) rc = driver_fail(c, CUVIL_ERR_EXEC, "cuStreamEndCapture", r);
    if (!rc && (r = c->cu[CU_GRAPH_INSTANTIATE](&g->exec, g->graph, 0ull)))
        rc = driver_fail(c, CUVIL_ERR_EXEC, "cuGraphInstantiateWithFlags", r);
    if (rc) {
        if (g->graph) c->cu[CU_GRAPH_DESTROY](g->graph);
        g->exec = g->graph = NULL;
        return rc;
    }
    memcpy(g->values, e->values, key);
    if (e->n_graphs < GRAPHS) e->n_graphs++;
    e->next_graph = (e->next_graph + 1) % GRAPHS;
    *exec = g->exec;
    return CUVIL_OK;
}

static cuvil_status steps(cuvil_model *m, struct cuvil_cuda *c, int index, const cuvil_tensor *in, cuvil_tensor *out)
{
    const cuvil_entry *me = &m->entries[index];
    cu_entry *e = &c->entries[index];
    int64_t sym[CUVIL_MAX_SYMBOLS + 1], why[2] = {0, 0}, *offset = e->offsets;
    if (cuvil_run_checks(e->code, e->n_code, in_dim, in, sym, e->values, why))
        return cuvil_fail(CUVIL_ERR_SHAPE, "entry '%s': a size of its steps is negative or divides by zero (%lld)",
                          me->name, (long long)why[0]);
    size_t slots = 0;
    for (int k = 0; k < e->n_slots; k++) {
        int64_t size = 0;
        for (int j = 0; j < e->slot_n[k]; j++)
            if (e->values[e->slot_values[k][j]] > size) size = e->values[e->slot_values[k][j]];
        offset[k] = (int64_t)slots;
        slots += (size_t)size;
    }
    size_t arena = align_up(slots) + ERROR_BYTES + (e->gemm ? WORKSPACE_BYTES : 0);
    int moved = 0;
    cuvil_status rc = buffers(c, me, e, arena, in, out, &moved);
    if (moved) drop_graphs(c, e); /* a graph holds the addresses it was captured with */
    if (rc) return rc;
    frame f = {e, offset, e->arena + align_up(slots)};
    void *exec = NULL;
    if ((rc = graph_for(c, me, e, &f, in, out, &exec))) return rc;
    for (int i = 0; i < me->n_in; i++)
        if (bytes_of(&in[i])) memcpy(e->in_host[i], in[i].data, bytes_of(&in[i]));
    e->word[0] = e->word[1] = 0;
    CU(CU_GRAPH_LAUNCH, exec, c->stream);
    CU(CU_STREAM_SYNC, c->stream);
    for (int j = 0; j < me->n_out; j++)
        if (bytes_of(&out[j])) memcpy(out[j].data, e->out_host[j], bytes_of(&out[j]));
    int64_t code = e->word[0] & 0xFFFFFFFF;
    if (code > 0 && code <= e->n_errors) {
        const cu_error *x = &e->errors[code - 1];
        char at[48] = "";
        if (e->word[1] != INT64_MIN) snprintf(at, sizeof at, " %lld", (long long)e->word[1]);
        return cuvil_fail(CUVIL_ERR_EXEC, "entry '%s': '%s': index%s is out of bounds for axis %d with size %lld%s%s",
                          me->name, x->name, at, x->axis, (long long)e->values[x->size], strcmp(x->loc, "-") ? " at " : "",
                          strcmp(x->loc, "-") ? x->loc : "");
    }
    return code ? cuvil_fail(CUVIL_ERR_EXEC, "entry '%s': the kernels recorded error %lld", me->name, (long long)code)
                : CUVIL_OK;
}

static cuvil_status cuda_run(const cuvil_model *model, int index, const cuvil_tensor *in, cuvil_tensor *out)
{
    cuvil_model *m = (cuvil_model *)model; /* the device state is the model's, behind its lock */
    struct cuvil_cuda *c = m->cuda;
    pthread_mutex_lock(&c->lock);
    cuvil_status rc = CUVIL_OK;
    if (!c->opened) {
        rc = open_driver(m, c);
        c->opened = rc ? -1 : 1;
        if (rc) snprintf(c->why, sizeof c->why, "%s", cuvil_last_message()), c->why_code = rc;
    } else if (c->opened < 0)
        rc = cuvil_fail(c->why_code, "%s", c->why);
    if (!rc) rc = steps(m, c, index, in, out);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* Releases what the open made, however far it got (an open that failed at a module keeps its stream and context
 * until here): everything is zero until made. */
static void cuda_close(cuvil_model *m)
{
    struct cuvil_cuda *c = m->cuda;
    if (!c) return;
    if (c->ctx) {
        for (int k = 0; k < m->n_entries; k++) {
            cu_entry *e = &c->entries[k];
            for (int j = 0; j < m->entries[k].n_const; j++) if (e->consts[j]) c->cu[CU_FREE](e->consts[j]);
            for (int j = 0; j < m->entries[k].n_in; j++) if (e->ins[j]) c->cu[CU_FREE](e->ins[j]);
            for (int j = 0; j < m->entries[k].n_out; j++) if (e->outs[j]) c->cu[CU_FREE](e->outs[j]);
            for (int j = 0; j < m->entries[k].n_in; j++) if (e->in_host[j]) c->cu[CU_HOST_FREE](e->in_host[j]);
            for (int j = 0; j < m->entries[k].n_out; j++) if (e->out_host[j]) c->cu[CU_HOST_FREE](e->out_host[j]);
            if (e->word) c->cu[CU_HOST_FREE](e->word);
            drop_graphs(c, e);
            if (e->arena) c->cu[CU_FREE](e->arena);
            if (e->module) c->cu[CU_MODULE_UNLOAD](e->module);
        }
        if (c->blas) c->lt[LT_DESTROY](c->blas);
        if (c->stream) c->cu[CU_STREAM_DESTROY](c->stream);
        c->cu[CU_CTX_RELEASE](c->device);
    }
    pthread_mutex_destroy(&c->lock);
}

__attribute__((visibility("default"))) int cuvil_cuda_library_v1(const cuvil_cuda_host *h, cuvil_cuda_library *out)
{
    host = h;
    out->load = cuda_load;
    out->run = cuda_run;
    out->close = cuda_close;
    return 0;
}
