/* cuvil_internal.h: what the runtime's two halves share (cuvil_format.c checks and parses a file, cuvil_runtime.c
 * loads and runs it). Not part of the public API. */
#ifndef CUVIL_INTERNAL_H
#define CUVIL_INTERNAL_H

#include "cuvil_runtime.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __GNUC__
#define CUVIL_INTERNAL __attribute__((visibility("hidden"))) /* shared by the runtime's files, not exported */
#else
#define CUVIL_INTERNAL
#endif

#define CUVIL_HEADER_SIZE 128
#define CUVIL_ROW_SIZE 96
#define CUVIL_PIECE (1u << 20) /* format 2: a section's SHA-256 is over the SHA-256s of its pieces of this size */
#define CUVIL_MAX_SECTIONS 64
#define CUVIL_MAX_NAME 63
#define CUVIL_MAX_ENTRIES 1024
#define CUVIL_DERIVED (-2) /* const_at of a constant the file leaves out (`derived INDEX`): only prepare read it */
#define CUVIL_MAX_TENSORS 1024   /* inputs or outputs of one entry */
#define CUVIL_MAX_SYMBOLS 1024
#define CUVIL_MAX_OUT_DIMS 4096  /* sizes of all outputs of one entry together */

typedef struct {
    char name[17];
    uint64_t offset, size, features;
    uint32_t flags;
    const uint8_t *sha256;
} cuvil_section;

/* Where a check may fail, to say which input or size broke it: kind 'd' = the size of input `tensor` axis `axis`
 * must be `lhs`; '=' or '>' = the relation lhs == rhs or lhs >= rhs; 'o' = output size `axis` (`lhs`) of output
 * `tensor` is negative; '/' = a division by zero in `lhs`. */
typedef struct {
    int pc;
    char kind;
    int tensor, axis;
    const char *lhs, *rhs;
} cuvil_check_site;

typedef int (*cuvil_main_fn)(void *const *, void *const *, const int64_t *, uint8_t *, const void *const *);
typedef int64_t (*cuvil_arena_fn)(const int64_t *);
typedef int64_t (*cuvil_count_fn)(void);
typedef int64_t (*cuvil_bytes_fn)(int64_t);
typedef void (*cuvil_prepare_fn)(void *const *, int64_t);

typedef struct {
    char name[CUVIL_MAX_NAME + 1], prefix[CUVIL_MAX_NAME + 1];
    int n_in, n_out, n_sym, n_const, n_prep, n_code, n_sites, n_rel, out_dims; /* n_prep: saved prepared buffers */
    int n_buffers; /* prepared buffers in all (PREFIX packed_count, once loaded) */
    cuvil_tensor_info *tensors; /* n_in inputs, then n_out outputs */
    int *ranks;                 /* likewise */
    const char **symbols, **relations;
    const char **bound_from; /* per symbol: the input size it is bound to ("x.shape[0]") */
    int64_t *code;
    cuvil_check_site *sites;
    int64_t *const_at, *const_bytes;   /* offset and size in `consts` of each constant; CUVIL_DERIVED: not stored */
    int64_t *prep_index, *prep_at, *prep_bytes; /* the saved prepared buffers: index, offset and size in `prepared` */
    /* after loading */
    cuvil_main_fn main;
    cuvil_arena_fn arena_bytes;
    void **consts; /* n_const constants, then n_prep prepared buffers */
} cuvil_entry;

struct cuvil_model {
    const uint8_t *data;
    size_t size;
    void *mapped;  /* the file's mapping (munmap), or NULL */
    void *copied;  /* an aligned copy of unaligned memory (free), or NULL */
    const char *where;
    uint32_t version; /* the header's format version: 1 hashes a section whole, 2 in pieces (docs/artifact.md) */
    cuvil_section sections[CUVIL_MAX_SECTIONS];
    int n_sections;
    uint64_t required_features;
    cuvil_entry *entries;
    int n_entries;
    void **blocks; /* every allocation the model owns, freed at close */
    int n_blocks, cap_blocks;
    void *library;
    const char *(*last_error)(void);
    void (*set_threads)(int);
    struct cuvil_cuda *cuda; /* a .cuv for CUDA: its host program and device state (cuvil_cuda_rt.c), else NULL */
};

/* Records a failure for cuvil_last_message and returns `code`. */
CUVIL_INTERNAL cuvil_status cuvil_fail(cuvil_status code, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Zeroed memory that lives as long as the model (NULL when out of memory). */
CUVIL_INTERNAL void *cuvil_take(cuvil_model *m, size_t n);

/* Checks 1-3 of docs/artifact.md: header, table, every section's SHA-256, meta's syntax, the entries. */
CUVIL_INTERNAL cuvil_status cuvil_check_file(cuvil_model *m);
CUVIL_INTERNAL const cuvil_section *cuvil_find_section(const cuvil_model *m, const char *name);
/* The CPUs this process may run on (1-16): threads the check hashes on and the prepared block is faulted in on. */
CUVIL_INTERNAL int cuvil_cpu_count(void);

/* The CUDA half: whether the file is for CUDA, parsing its steps at open, a run (the driver opened at the first),
 * and the device state released at close. cuvil_cuda_load.c forwards them to libcuvilcuda.so (cuvil_cuda_rt.c),
 * opened at the first CUDA file: the library gets the runtime's helpers in a cuvil_cuda_host and fills a
 * cuvil_cuda_library through its one exported function, CUVIL_CUDA_ENTRY (0: done). */
typedef struct {
    cuvil_status (*fail)(cuvil_status code, const char *fmt, ...);
    void *(*take)(cuvil_model *m, size_t n);
    const cuvil_section *(*find_section)(const cuvil_model *m, const char *name);
    const char *(*last_message)(void);
    size_t (*dtype_size)(cuvil_dtype dtype);
} cuvil_cuda_host;
typedef struct {
    cuvil_status (*load)(cuvil_model *m);
    cuvil_status (*run)(const cuvil_model *m, int index, const cuvil_tensor *in, cuvil_tensor *out);
    void (*close)(cuvil_model *m);
} cuvil_cuda_library;
#define CUVIL_CUDA_ENTRY "cuvil_cuda_library_v1"
typedef int (*cuvil_cuda_entry_fn)(const cuvil_cuda_host *host, cuvil_cuda_library *out);

CUVIL_INTERNAL int cuvil_cuda_target(const cuvil_model *m);
CUVIL_INTERNAL cuvil_status cuvil_cuda_load(cuvil_model *m);
CUVIL_INTERNAL cuvil_status cuvil_cuda_run(const cuvil_model *m, int index, const cuvil_tensor *in, cuvil_tensor *out);
CUVIL_INTERNAL void cuvil_cuda_close(cuvil_model *m);

#endif
