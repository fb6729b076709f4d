/* The standalone runtime: open a checked .cuv (cuvil_format.c), load its native code only once every check has
 * passed, and run its entries with the caller's buffers (cuvil_runtime.h). */
#define _GNU_SOURCE
#include "cuvil_internal.h"

#include "cuvil_checks.h"
#include "cuvil_hash.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

/* --- errors --------------------------------------------------------------------------------------------------- */

static __thread char message[1024];

cuvil_status cuvil_fail(cuvil_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return code;
}

const char *cuvil_last_message(void) { return message; }

const char *cuvil_strerror(cuvil_status code)
{
    static const char *const text[] = {"ok", "cannot read the file", "not a well-formed .cuv file",
                                       "a newer format version", "a checksum does not match (corrupt file)",
                                       "made for another machine", "the native code cannot be loaded",
                                       "a call that does not fit the entry", "input sizes that break the signature",
                                       "out of memory", "the model's code reported an error",
                                       "no CUDA driver or device"};
    return (unsigned)code < sizeof text / sizeof text[0] ? text[code] : "unknown error";
}

/* --- dtypes --------------------------------------------------------------------------------------------------- */

static const char *const dtype_names[] = {"f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64",
                                          "u8", "u16", "u32", "u64", "bool"};
static const unsigned char dtype_sizes[] = {2, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8, 1};
#define N_DTYPES (int)(sizeof dtype_sizes)

const char *cuvil_dtype_name(cuvil_dtype d) { return (unsigned)d < N_DTYPES ? dtype_names[d] : "?"; }
size_t cuvil_dtype_size(cuvil_dtype d) { return (unsigned)d < N_DTYPES ? dtype_sizes[d] : 0; }

int cuvil_dtype_from_name(const char *name)
{
    for (int k = 0; k < N_DTYPES; k++)
        if (strcmp(name, dtype_names[k]) == 0) return k;
    return -1;
}

/* --- the model's memory --------------------------------------------------------------------------------------- */

/* Makes `p` (from malloc) the model's, freed at close; 0 (and `p` freed) when out of memory. */
static int own(cuvil_model *m, void *p)
{
    if (p && m->n_blocks == m->cap_blocks) {
        int cap = m->cap_blocks ? 2 * m->cap_blocks : 64;
        void **grown = realloc(m->blocks, (size_t)cap * sizeof(void *));
        if (!grown) { free(p); return 0; }
        m->blocks = grown, m->cap_blocks = cap;
    }
    if (p) m->blocks[m->n_blocks++] = p;
    return p != NULL;
}

void *cuvil_take(cuvil_model *m, size_t n)
{
    void *p = calloc(1, n ? n : 1);
    return own(m, p) ? p : NULL;
}

/* 64-byte aligned; from 2 MiB on (prepared weights, arenas) on transparent huge pages where the kernel offers them:
 * first touching 4 KiB pages costs 3x the time of the memory's writes (a fault each). Such a block is rounded up
 * to whole huge pages, so its last part is not left on 4 KiB pages (what is never touched costs nothing). */
static void *aligned(size_t n)
{
    const size_t huge = (size_t)2 << 20;
    void *p = NULL;
    if (n >= huge && n <= SIZE_MAX - huge) n = (n + huge - 1) / huge * huge;
    if (posix_memalign(&p, n >= huge ? huge : 64, n > 64 ? n : 64) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    if (n >= huge) madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
}

/* --- the host: target triple and CPU feature bits (docs/artifact.md) ------------------------------------------ */

#if defined(__x86_64__) && defined(__linux__)
#define HOST_TRIPLE "x86_64-linux-gnu"
#elif defined(__aarch64__) && defined(__linux__)
#define HOST_TRIPLE "aarch64-linux-gnu"
#else
#define HOST_TRIPLE "unknown"
#endif

static const char *feature_name(int bit)
{
    static const char *const x86[] = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                                      "avx512dq", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8",
                                      "avx512_fp16", "avx_vnni"};
    static const char *const arm[] = {"neon", "sve", "bf16", "i8mm", "dotprod"};
    if (bit < 15) return x86[bit];
    if (bit >= 32 && bit < 37) return arm[bit - 32];
    return bit == 48 ? "simd128" : bit == 49 ? "threads" : "an unknown feature";
}

/* CUVIL_DISABLE_CPU_FEATURES: comma-separated feature names masked off the host's (as in the Python loader),
 * to run a file's lower level on a CPU that has a higher one. */
static uint64_t masked_features(void)
{
    uint64_t mask = 0;
    for (int bit = 0; bit < 64; bit++)
        if (cuvil_feature_disabled(feature_name(bit))) mask |= 1ull << bit;
    return mask;
}

static uint64_t cpu_features(void)
{
    uint64_t f = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a, b, c, d, b7 = 0, c7 = 0, d7 = 0, a71 = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    unsigned c1 = c;
    uint64_t xcr0 = 0;
    if (c1 & (1u << 27)) { /* OSXSAVE: the OS saves the vector registers it enabled */
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = (uint64_t)hi << 32 | lo;
    }
    if (__get_cpuid_count(7, 0, &a, &b7, &c7, &d7) && a >= 1) __get_cpuid_count(7, 1, &a71, &b, &c, &d);
    int ymm = (xcr0 & 6) == 6, zmm = ymm && (xcr0 & 0xe0) == 0xe0, tiles = (xcr0 & 0x60000) == 0x60000;
    const struct { unsigned reg, bit; int os; } bits[15] = {
        {c1, 20, 1}, {c1, 28, ymm}, {b7, 5, ymm}, {c1, 12, ymm}, {c1, 29, ymm}, {b7, 16, zmm}, {b7, 30, zmm},
        {b7, 31, zmm}, {b7, 17, zmm}, {a71, 5, zmm}, {c7, 11, zmm}, {d7, 22, tiles}, {d7, 25, tiles}, {d7, 23, zmm},
        {a71, 4, ymm}};
    for (int k = 0; k < 15; k++)
        if ((bits[k].reg >> bits[k].bit & 1) && bits[k].os) f |= 1ull << k;
#elif defined(__aarch64__) && defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    f |= (uint64_t)(hw >> 1 & 1) << 32 | (uint64_t)(hw >> 22 & 1) << 33 | (uint64_t)(hw2 >> 14 & 1) << 34
         | (uint64_t)(hw2 >> 13 & 1) << 35 | (uint64_t)(hw >> 20 & 1) << 36;
#endif
    return f;
}

static uint64_t host_features(void) { return cpu_features() & ~masked_features(); }

static cuvil_status check_target(cuvil_model *m, const cuvil_section **native)
{
    char triple[33];
    memcpy(triple, m->data + 48, 32);
    triple[32] = 0;
    for (const char *c = triple; *c; c++)
        if (*c < 0x20 || *c > 0x7e) return cuvil_fail(CUVIL_ERR_FORMAT, "%s: the target triple is not ASCII", m->where);
    if (strcmp(triple, HOST_TRIPLE) != 0)
        return cuvil_fail(CUVIL_ERR_TARGET, "%s: made for %s, this machine is %s", m->where, triple, HOST_TRIPLE);
    uint64_t have = host_features(), missing = m->required_features & ~have;
    int best = -1;
    for (int k = 0; k < m->n_sections && !missing; k++) {
        const cuvil_section *s = &m->sections[k];
        const char *level = s->name + 6;
        int is_native = strncmp(s->name, "native", 6) == 0 && (!*level || (*level == '.' && level[1]
                        && strspn(level + 1, "0123456789") == strlen(level + 1)));
        if (is_native && !(s->features & ~have)
            && (best < 0 || __builtin_popcountll(s->features) > __builtin_popcountll(m->sections[best].features)))
            best = k;
    }
    if (!missing && best < 0) missing = cuvil_find_section(m, "native")->features & ~have;
    if (missing)
        return cuvil_fail(CUVIL_ERR_TARGET, "%s: this CPU lacks %s, which the native code needs", m->where,
                          feature_name(__builtin_ctzll(missing)));
    *native = &m->sections[best];
    return CUVIL_OK;
}

/* --- native code ---------------------------------------------------------------------------------------------- */

static unsigned long native_loads;

unsigned long cuvil_native_loads(void) { return __atomic_load_n(&native_loads, __ATOMIC_RELAXED); }

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

/* dlopen under a name no library of this process had: the dynamic loader hands back a loaded library whose name
 * matches, and descriptor numbers (so /proc/self/fd paths) are reused. Each load's path spells a counter in
 * equivalent steps ("./" for a 1, "/" for a 0) between the folder and the file. RTLD_NODELETE: the library (and
 * the threading runtime it brought, whose idle workers outlive a call) stays mapped after cuvil_close. */
static void *dlopen_unique(const char *dir, const char *file)
{
    static unsigned long counter;
    unsigned long n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    char path[4200];
    int at = snprintf(path, sizeof path, "%s/", dir);
    for (; n && at < (int)sizeof path - 3; n >>= 1) at += snprintf(path + at, sizeof path - (size_t)at, "%s", n & 1 ? "./" : "/");
    snprintf(path + at, sizeof path - (size_t)at, "%s", file);
    __atomic_add_fetch(&native_loads, 1, __ATOMIC_RELAXED);
    return dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
}

/* The shared object in a memfd, else in a private temporary file unlinked once loaded. */
static cuvil_status load_native(cuvil_model *m, const cuvil_section *s)
{
    const uint8_t *image = m->data + s->offset;
    char path[4096], *file = path;
    int fd = -1;
#ifdef SYS_memfd_create
    fd = (int)syscall(SYS_memfd_create, "cuvil-model", 1u /* MFD_CLOEXEC */);
#endif
    if (fd >= 0) {
        snprintf(path, sizeof path, "%d", fd);
        if (write_all(fd, image, s->size) == 0) m->library = dlopen_unique("/proc/self/fd", path);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/cuvil-model-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if ((fd = mkstemp(path)) < 0)
            return cuvil_fail(CUVIL_ERR_LOAD, "%s: cannot create a file for the native code: %s", m->where,
                              strerror(errno));
        file = strrchr(path, '/');
        *file++ = 0;
        if (write_all(fd, image, s->size) == 0) m->library = dlopen_unique(path, file);
        file[-1] = '/';
        unlink(path);
    }
    close(fd);
    const char *why = m->library ? NULL : dlerror();
    if (!m->library)
        return cuvil_fail(CUVIL_ERR_LOAD, "%s: cannot load section '%s': %s", m->where, s->name,
                          why ? why : "cannot write it to memory");
    return CUVIL_OK;
}

static void *symbol(cuvil_model *m, const char *prefix, const char *name, cuvil_status *rc)
{
    char full[2 * CUVIL_MAX_NAME + 2];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    void *p = *rc ? NULL : dlsym(m->library, full);
    if (!p && !*rc) *rc = cuvil_fail(CUVIL_ERR_LOAD, "%s: the native code has no symbol %s", m->where, full);
    return p;
}

/* Bytes of prepared buffer `j` in the block of them all: a multiple of 64 (each starts 64-byte aligned), at least
 * 64; 0 if the library asks for a negative size. */
static size_t block_share(cuvil_bytes_fn bytes, int64_t j)
{
    int64_t size = bytes(j);
    return size < 0 || (uint64_t)size > SIZE_MAX / 4 ? 0 : size ? ((size_t)size + 63) / 64 * 64 : 64;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; an older kernel refuses it and the first writes fault the pages in */
#endif

typedef struct { uint8_t *p; size_t n; } block_part;

static void *populate(void *arg)
{
    const block_part *part = arg;
    madvise(part->p, part->n, MADV_POPULATE_WRITE);
    return NULL;
}

/* Faults in the `n` bytes of huge-page `block` before `prepare` writes them, its huge pages shared out to a thread
 * per CPU (this one among them; the kernel zeroes each page). The Winograd transform writes 36 streams spread over
 * its whole buffer: faulting the pages as it went, it took twice the CPU time of its writes into present pages
 * (ResNet-18: 30 MB, 20 against 10 ms). */
static void prefault(uint8_t *block, size_t n)
{
    const size_t huge = (size_t)2 << 20;
    size_t pages = (n + huge - 1) / huge, share;
    pthread_t threads[16];
    block_part parts[16];
    int want = cuvil_cpu_count(), started[16] = {0};
    if ((size_t)want > pages) want = (int)pages;
    share = (pages + (size_t)want - 1) / (size_t)want * huge;
    for (int k = 0; k < want; k++) {
        parts[k].p = block + (size_t)k * share;
        parts[k].n = (size_t)k * share >= pages * huge ? 0 : pages * huge - (size_t)k * share;
        if (parts[k].n > share) parts[k].n = share;
        if (k && parts[k].n) started[k] = pthread_create(&threads[k], NULL, populate, &parts[k]) == 0;
    }
    for (int k = 0; k < want; k++)
        if (!k || (parts[k].n && !started[k])) populate(&parts[k]);
    for (int k = 1; k < want; k++)
        if (started[k]) pthread_join(threads[k], NULL);
}

/* The buffers `prepare` makes (those not saved), in one block: huge pages cover it all, where one allocation a
 * buffer left each one's end and every small one on 4 KiB pages, a fault each (ResNet-18: 11 buffers, 30 MB). */
static cuvil_status make_prepared(cuvil_model *m, cuvil_entry *e, const uint8_t *saved, cuvil_bytes_fn bytes,
                                  cuvil_prepare_fn prepare)
{
    size_t total = 0;
    for (int64_t j = 0; j < e->n_buffers; j++) {
        size_t share = saved[j] ? 0 : block_share(bytes, j);
        if ((!saved[j] && !share) || share > SIZE_MAX / 4 - total)
            return cuvil_fail(CUVIL_ERR_MEMORY, "%s: entry '%s': no memory for prepared buffer %lld", m->where,
                              e->name, (long long)j);
        total += share;
    }
    uint8_t *block = total ? aligned(total) : NULL;
    if (total && (!block || !own(m, block)))
        return cuvil_fail(CUVIL_ERR_MEMORY, "%s: entry '%s': no memory for its prepared buffers (%zu bytes)", m->where,
                          e->name, total);
    if (total >= (size_t)2 << 20) prefault(block, total);
    for (int64_t j = 0; j < e->n_buffers; j++) {
        if (saved[j]) continue;
        e->consts[e->n_const + j] = block;
        block += block_share(bytes, j);
        prepare(e->consts, j);
    }
    return CUVIL_OK;
}

/* The constants as pointers into the mapping, the saved prepared buffers likewise, the others made by prepare. */
static cuvil_status bind_entry(cuvil_model *m, cuvil_entry *e)
{
    cuvil_status rc = CUVIL_OK;
    e->main = (cuvil_main_fn)symbol(m, e->prefix, "main", &rc);
    e->arena_bytes = (cuvil_arena_fn)symbol(m, e->prefix, "arena_bytes", &rc);
    cuvil_count_fn count = (cuvil_count_fn)symbol(m, e->prefix, "packed_count", &rc);
    cuvil_bytes_fn bytes = (cuvil_bytes_fn)symbol(m, e->prefix, "packed_bytes", &rc);
    cuvil_prepare_fn prepare = (cuvil_prepare_fn)symbol(m, e->prefix, "prepare", &rc);
    cuvil_bytes_fn source = (cuvil_bytes_fn)symbol(m, e->prefix, "packed_source", &rc);
    if (rc) return rc;
    int64_t n = count();
    if (n < 0 || n > (1 << 24))
        return cuvil_fail(CUVIL_ERR_LOAD, "%s: entry '%s' asks for %lld prepared buffers", m->where, e->name, (long long)n);
    e->n_buffers = (int)n;
    e->consts = cuvil_take(m, ((size_t)e->n_const + (size_t)n + 1) * sizeof(void *));
    uint8_t *saved = cuvil_take(m, (size_t)n + 1);
    if (!e->consts || !saved) return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    const cuvil_section *consts = cuvil_find_section(m, "consts"), *prep = cuvil_find_section(m, "prepared");
    for (int k = 0; k < e->n_const; k++) {
        e->consts[k] = e->const_at[k] == CUVIL_DERIVED ? NULL : (void *)(m->data + consts->offset + e->const_at[k]);
    }
    for (int k = 0; k < e->n_prep; k++) {
        int64_t j = e->prep_index[k];
        if (j >= n || saved[j] || e->prep_bytes[k] < bytes(j))
            return cuvil_fail(CUVIL_ERR_LOAD, "%s: entry '%s': saved prepared buffer %lld does not fit the "
                              "library's (index, size)", m->where, e->name, (long long)j);
        saved[j] = 1;
        e->consts[e->n_const + j] = (void *)(m->data + prep->offset + e->prep_at[k]);
    }
    for (int64_t j = 0; j < n; j++) { /* before any prepare: each buffer it makes reads a constant that is there */
        int64_t src = source(j);
        if (!saved[j] && (src < 0 || src >= e->n_const || !e->consts[src]))
            return cuvil_fail(CUVIL_ERR_LOAD, "%s: entry '%s': prepared buffer %lld is neither saved nor made from a "
                              "stored constant", m->where, e->name, (long long)j);
    }
    return make_prepared(m, e, saved, bytes, prepare);
}

static cuvil_status load_model(cuvil_model *m)
{
    const cuvil_section *native = NULL;
    cuvil_status rc = cuvil_check_file(m);
    if (!rc && cuvil_cuda_target(m)) return cuvil_cuda_load(m); /* kernels for the GPU: no native code here */
    if (!rc) rc = check_target(m, &native);
    if (!rc) rc = load_native(m, native);
    if (rc) return rc;
    int (*abi)(void) = (int (*)(void))symbol(m, "cuvil_", "abi_version", &rc);
    m->last_error = (const char *(*)(void))symbol(m, "cuvil_", "last_error", &rc);
    m->set_threads = (void (*)(int))symbol(m, "cuvil_", "set_num_threads", &rc);
    if (!rc && abi() != 1)
        rc = cuvil_fail(CUVIL_ERR_LOAD, "%s: the native code's ABI is version %d, this runtime's 1", m->where, abi());
    for (int k = 0; k < m->n_entries && !rc; k++) rc = bind_entry(m, &m->entries[k]);
    return rc;
}

static cuvil_status open_model(cuvil_model *m, cuvil_model **out)
{
    cuvil_status rc = load_model(m);
    if (rc) {
        cuvil_close(m);
        *out = NULL;
        return rc;
    }
    *out = m;
    return CUVIL_OK;
}

cuvil_status cuvil_open_file(const char *path, cuvil_model **out)
{
    *out = NULL;
    cuvil_model *m = calloc(1, sizeof *m);
    if (!m) return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    m->where = path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        cuvil_status rc = cuvil_fail(CUVIL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        free(m);
        return rc;
    }
    m->size = (size_t)st.st_size;
    if (m->size >= CUVIL_HEADER_SIZE) {
        m->mapped = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m->mapped == MAP_FAILED) {
            m->mapped = NULL;
            close(fd);
            free(m);
            return cuvil_fail(CUVIL_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
        }
    }
    close(fd);
    m->data = m->mapped ? m->mapped : (const uint8_t *)"";
    char *where = cuvil_take(m, strlen(path) + 1);
    if (where) m->where = strcpy(where, path);
    return open_model(m, out);
}

cuvil_status cuvil_open_memory(const void *data, size_t size, cuvil_model **out)
{
    *out = NULL;
    cuvil_model *m = calloc(1, sizeof *m);
    if (!m) return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    m->where = "<memory>";
    m->size = size;
    m->data = data;
    if ((uintptr_t)data % 64) { /* the weights are read in place and the code expects them 64-byte aligned */
        if (!(m->copied = aligned(size))) { free(m); return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory"); }
        memcpy(m->copied, data, size);
        m->data = m->copied;
    }
    return open_model(m, out);
}

void cuvil_close(cuvil_model *m)
{
    if (!m) return;
    cuvil_cuda_close(m);
    if (m->library) dlclose(m->library);
    if (m->mapped) munmap(m->mapped, m->size);
    free(m->copied);
    for (int k = 0; k < m->n_blocks; k++) free(m->blocks[k]);
    free(m->blocks);
    free(m);
}

/* --- signatures ----------------------------------------------------------------------------------------------- */

int cuvil_entry_count(const cuvil_model *m) { return m->n_entries; }

int cuvil_entry_find(const cuvil_model *m, const char *name)
{
    for (int k = 0; k < m->n_entries; k++)
        if (strcmp(m->entries[k].name, name) == 0) return k;
    cuvil_fail(CUVIL_ERR_ARGUMENT, "%s: no entry named '%s'", m->where, name);
    return -1;
}

cuvil_status cuvil_entry_info_get(const cuvil_model *m, int index, cuvil_entry_info *info)
{
    if (index < 0 || index >= m->n_entries)
        return cuvil_fail(CUVIL_ERR_ARGUMENT, "%s: no entry %d (it has %d)", m->where, index, m->n_entries);
    const cuvil_entry *e = &m->entries[index];
    *info = (cuvil_entry_info){e->name, e->n_in, e->n_out, e->n_sym, e->n_rel, e->tensors, e->tensors + e->n_in,
                               e->symbols, e->relations};
    return CUVIL_OK;
}

void cuvil_model_set_threads(const cuvil_model *m, int n)
{
    if (m->set_threads) m->set_threads(n);
}

/* --- calls ---------------------------------------------------------------------------------------------------- */

struct cuvil_workspace {
    const cuvil_model *model;
    uint8_t **arena;
    int64_t *size;
};

cuvil_status cuvil_workspace_new(const cuvil_model *m, cuvil_workspace **out)
{
    cuvil_workspace *ws = calloc(1, sizeof *ws);
    if (ws) {
        ws->model = m;
        ws->arena = calloc((size_t)m->n_entries, sizeof(uint8_t *));
        ws->size = calloc((size_t)m->n_entries, sizeof(int64_t));
    }
    if (!ws || !ws->arena || !ws->size) {
        cuvil_workspace_free(ws);
        return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    }
    *out = ws;
    return CUVIL_OK;
}

void cuvil_workspace_free(cuvil_workspace *ws)
{
    if (!ws) return;
    for (int k = 0; ws->arena && k < ws->model->n_entries; k++) free(ws->arena[k]);
    free(ws->arena);
    free(ws->size);
    free(ws);
}

static int64_t input_dim(const void *inputs, int64_t i, int64_t axis)
{
    return ((const cuvil_tensor *)inputs)[i].shape[axis];
}

/* Bytes of `rank` sizes of `itemsize`-byte elements; 0 with *ok = 0 if a size is negative or the product overflows. */
static size_t tensor_bytes(const int64_t *shape, int rank, size_t itemsize, int *ok)
{
    uint64_t n = itemsize;
    *ok = 1;
    for (int k = 0; k < rank; k++) {
        if (shape[k] < 0 || (shape[k] && n > UINT64_MAX / 2 / (uint64_t)shape[k])) { *ok = 0; return 0; }
        n *= (uint64_t)shape[k];
    }
    return (size_t)n;
}

static cuvil_status check_failed(const cuvil_entry *e, int at, const int64_t why[2], const int64_t *sym)
{
    const cuvil_check_site *s = NULL;
    for (int k = 0; k < e->n_sites && !s; k++)
        if (e->sites[k].pc == at) s = &e->sites[k];
    if (s && s->kind == 'd')
        return cuvil_fail(CUVIL_ERR_SHAPE, "entry '%s': input '%s' has size %lld in axis %d, but the signature needs "
                          "%s = %lld", e->name, e->tensors[s->tensor].name, (long long)why[1], s->axis, s->lhs,
                          (long long)why[0]);
    if (s && (s->kind == '=' || s->kind == '>')) {
        char bound[512] = "";
        for (int k = 0, at = 0; k < e->n_sym && at < (int)sizeof bound - 1; k++)
            at += snprintf(bound + at, sizeof bound - (size_t)at, "%s%s = %lld (%s)", k ? ", " : "; ", e->symbols[k],
                           (long long)sym[k], e->bound_from[k] ? e->bound_from[k] : "?");
        return cuvil_fail(CUVIL_ERR_SHAPE, "entry '%s' needs %s %s %s, but the inputs give %lld and %lld%s", e->name,
                          s->lhs, s->kind == '=' ? "==" : ">=", s->rhs, (long long)why[0], (long long)why[1], bound);
    }
    if (s && s->kind == 'o')
        return cuvil_fail(CUVIL_ERR_SHAPE, "entry '%s': output '%s' would have size %s = %lld in axis %d", e->name,
                          e->tensors[s->tensor].name, s->lhs, (long long)why[0], s->axis);
    if (s && s->kind == '/')
        return cuvil_fail(CUVIL_ERR_SHAPE, "entry '%s': the sizes of the inputs divide by zero in %s", e->name, s->lhs);
    return cuvil_fail(CUVIL_ERR_SHAPE, "entry '%s': the inputs' sizes fail check %d of its program", e->name, at);
}

/* Checks the inputs, binds the symbols into `sym` and fills in the outputs' dtype, rank, shape and nbytes. */
static cuvil_status bind_sizes(const cuvil_model *m, int index, const cuvil_tensor *in, int n_in, cuvil_tensor *out,
                               int n_out, int64_t *sym)
{
    if (index < 0 || index >= m->n_entries)
        return cuvil_fail(CUVIL_ERR_ARGUMENT, "%s: no entry %d (it has %d)", m->where, index, m->n_entries);
    const cuvil_entry *e = &m->entries[index];
    if (n_in != e->n_in || n_out != e->n_out || (n_in && !in) || (n_out && !out))
        return cuvil_fail(CUVIL_ERR_ARGUMENT, "entry '%s' takes %d inputs and %d outputs, got %d and %d", e->name,
                          e->n_in, e->n_out, n_in, n_out);
    for (int i = 0; i < n_in; i++) {
        const cuvil_tensor_info *t = &e->tensors[i];
        int ok;
        size_t need = tensor_bytes(in[i].shape, in[i].rank < 0 || in[i].rank > CUVIL_MAX_RANK ? 0 : in[i].rank,
                                   cuvil_dtype_size(t->dtype), &ok);
        if (in[i].dtype != t->dtype || in[i].rank != t->rank)
            return cuvil_fail(CUVIL_ERR_ARGUMENT, "entry '%s': input '%s' must be %s of rank %d, got %s of rank %d",
                              e->name, t->name, cuvil_dtype_name(t->dtype), t->rank, cuvil_dtype_name(in[i].dtype),
                              in[i].rank);
        if (!ok || (in[i].nbytes && in[i].nbytes < need) || (need && !in[i].data))
            return cuvil_fail(CUVIL_ERR_ARGUMENT, "entry '%s': input '%s' has a negative size or a buffer of %zu bytes, "
                              "smaller than its sizes need (%zu)", e->name, t->name, in[i].nbytes, need);
    }
    int64_t dims[CUVIL_MAX_OUT_DIMS + 1], why[2] = {0, 0};
    memset(sym, 0, (size_t)e->n_sym * sizeof(int64_t)); /* a failed check prints them */
    int at = cuvil_run_checks(e->code, e->n_code, input_dim, in, sym, dims, why);
    if (at) return check_failed(e, at - 1, why, sym);
    for (int j = 0, d = 0; j < n_out; d += out[j].rank, j++) {
        const cuvil_tensor_info *t = &e->tensors[e->n_in + j];
        int ok;
        out[j].dtype = t->dtype;
        out[j].rank = t->rank;
        memcpy(out[j].shape, dims + d, (size_t)t->rank * sizeof(int64_t));
        size_t need = tensor_bytes(out[j].shape, t->rank, cuvil_dtype_size(t->dtype), &ok);
        if (!ok) return cuvil_fail(CUVIL_ERR_SHAPE, "entry '%s': output '%s' would be too large", e->name, t->name);
        if (out[j].data && out[j].nbytes < need)
            return cuvil_fail(CUVIL_ERR_ARGUMENT, "entry '%s': the buffer of output '%s' has %zu bytes, it needs %zu",
                              e->name, t->name, out[j].nbytes, need);
        if (!out[j].data) out[j].nbytes = need;
    }
    return CUVIL_OK;
}

cuvil_status cuvil_output_shapes(const cuvil_model *m, int index, const cuvil_tensor *in, int n_in, cuvil_tensor *out,
                                 int n_out)
{
    int64_t sym[CUVIL_MAX_SYMBOLS + 1];
    void *keep[CUVIL_MAX_TENSORS];
    for (int j = 0; j < n_out && j < CUVIL_MAX_TENSORS; j++) keep[j] = out[j].data, out[j].data = NULL;
    cuvil_status rc = bind_sizes(m, index, in, n_in, out, n_out, sym);
    for (int j = 0; j < n_out && j < CUVIL_MAX_TENSORS; j++) out[j].data = keep[j];
    return rc;
}

/* The arena: the workspace's (grown when too small), or one for this call (*owned). */
static uint8_t *arena_for(cuvil_workspace *ws, int index, int64_t size, uint8_t **owned)
{
    *owned = NULL;
    if (!ws) return *owned = aligned((size_t)size);
    if (size > ws->size[index] || !ws->arena[index]) {
        free(ws->arena[index]);
        ws->arena[index] = aligned((size_t)size);
        ws->size[index] = ws->arena[index] ? size : 0;
    }
    return ws->arena[index];
}

cuvil_status cuvil_run(const cuvil_model *m, cuvil_workspace *ws, int index, const cuvil_tensor *in, int n_in,
                       cuvil_tensor *out, int n_out)
{
    int64_t sym[CUVIL_MAX_SYMBOLS + 1];
    if (ws && ws->model != m) return cuvil_fail(CUVIL_ERR_ARGUMENT, "a workspace of another model");
    cuvil_status rc = bind_sizes(m, index, in, n_in, out, n_out, sym);
    if (rc) return rc;
    const cuvil_entry *e = &m->entries[index];
    void *ins[CUVIL_MAX_TENSORS + 1], *outs[CUVIL_MAX_TENSORS + 1];
    uint8_t allocated[CUVIL_MAX_TENSORS + 1] = {0};
    for (int i = 0; i < n_in; i++) ins[i] = in[i].data;
    for (int j = 0; j < n_out && !rc; j++) {
        if (!out[j].data && (allocated[j] = 1, !(out[j].data = aligned(out[j].nbytes))))
            rc = cuvil_fail(CUVIL_ERR_MEMORY, "entry '%s': no memory for output '%s' (%zu bytes)", e->name,
                            e->tensors[e->n_in + j].name, out[j].nbytes);
        outs[j] = out[j].data;
    }
    if (!rc && m->cuda) rc = cuvil_cuda_run(m, index, in, out); /* the device's arena, not a host workspace */
    int64_t size = rc || m->cuda ? 0 : e->arena_bytes(sym);
    uint8_t *owned = NULL, *arena = rc || m->cuda || size < 0 ? NULL : arena_for(ws, index, size, &owned);
    if (!rc && !arena && !m->cuda)
        rc = cuvil_fail(size < 0 ? CUVIL_ERR_EXEC : CUVIL_ERR_MEMORY, "entry '%s': no workspace of %lld bytes",
                        e->name, (long long)size);
    int code = rc || m->cuda ? 0 : e->main(ins, outs, sym, arena, (const void *const *)e->consts);
    if (!rc && code) {
        const char *why = m->last_error();
        rc = cuvil_fail(CUVIL_ERR_EXEC, "entry '%s' failed (code %d): %s", e->name, code, why && *why ? why : "no message");
    }
    if (!rc) free(owned);
    else {
        if (arena) free(owned);
        for (int j = 0; j < n_out; j++)
            if (allocated[j]) { free(out[j].data); out[j].data = NULL; }
    }
    return rc;
}
