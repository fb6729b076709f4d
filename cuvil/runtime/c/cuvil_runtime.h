/* cuvil_runtime.h: the standalone C runtime of Cuvil's `.cuv` files (docs/artifact.md, docs/runtime.md).
 *
 * C99; needs libc, libm, libdl and the threading runtime only. A model is opened from a path or from memory,
 * checked whole (header CRC, table and section SHA-256, entries, target and CPU features) before any of its native
 * code is loaded, and then run with the caller's buffers or with outputs the runtime allocates:
 *
 *     cuvil_model *m;
 *     if (cuvil_open_file("model.cuv", &m) != CUVIL_OK) { fprintf(stderr, "%s\n", cuvil_last_message()); ... }
 *     int e = cuvil_entry_find(m, "main");
 *     cuvil_tensor in = {x, CUVIL_F32, 2, {8, 784}, sizeof x}, out = {0};   // out.data NULL: allocated
 *     if (cuvil_run(m, NULL, e, &in, 1, &out, 1) != CUVIL_OK) ...
 *     free(out.data);
 *     cuvil_close(m);
 *
 * Concurrent cuvil_run calls on one model are safe: each call uses its own workspace (`ws` NULL: allocated for the
 * call) or the caller's `cuvil_workspace`, which one thread at a time may use. Every function that fails returns an
 * error code and leaves a message for this thread in cuvil_last_message().
 *
 * Names: the model's native code exports cuvil_main-style symbols of its own (cuvil_last_error,
 * cuvil_set_num_threads, ...); the runtime's functions are named apart from them, so neither interposes the other.
 */
#ifndef CUVIL_RUNTIME_H
#define CUVIL_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUVIL_RUNTIME_FORMAT 2 /* the newest .cuv format version this runtime reads */
#define CUVIL_MAX_RANK 16

typedef enum {
    CUVIL_OK = 0,
    CUVIL_ERR_IO,       /* the file cannot be opened, read or mapped */
    CUVIL_ERR_FORMAT,   /* not a .cuv file, truncated, or a malformed header, table or section */
    CUVIL_ERR_VERSION,  /* a format version newer than this runtime's */
    CUVIL_ERR_CHECKSUM, /* a CRC-32 or SHA-256 that does not match: the file is corrupt */
    CUVIL_ERR_TARGET,   /* made for another machine: target triple or a CPU feature this one lacks */
    CUVIL_ERR_LOAD,     /* the native code cannot be placed in memory or loaded, or lacks a symbol */
    CUVIL_ERR_ARGUMENT, /* a call that does not fit the entry: unknown entry, count, dtype, rank, buffer size */
    CUVIL_ERR_SHAPE,    /* input sizes that break the signature or a relation between its sizes */
    CUVIL_ERR_MEMORY,   /* out of memory */
    CUVIL_ERR_EXEC,     /* the model's code reported an error (the message says which) */
    CUVIL_ERR_DEVICE    /* a .cuv for CUDA on a machine without an NVIDIA driver, a device or cuBLASLt */
} cuvil_status;

typedef enum {
    CUVIL_F16, CUVIL_BF16, CUVIL_F32, CUVIL_F64, CUVIL_I8, CUVIL_I16, CUVIL_I32, CUVIL_I64,
    CUVIL_U8, CUVIL_U16, CUVIL_U32, CUVIL_U64, CUVIL_BOOL
} cuvil_dtype;

/* A tensor passed to or returned by cuvil_run: `data` in C order. Inputs: every field set by the caller
 * (`nbytes` 0: not checked). Outputs: `data` NULL makes the runtime allocate it (64-byte aligned; release with
 * free()), else `nbytes` must hold the result; dtype, rank, shape and nbytes are filled in by the call. */
typedef struct {
    void *data;
    cuvil_dtype dtype;
    int rank;
    int64_t shape[CUVIL_MAX_RANK];
    size_t nbytes;
} cuvil_tensor;

/* An input or output of an entry: its name, element type, rank and each size as text ("batch", "2*n", "784"). */
typedef struct {
    const char *name;
    cuvil_dtype dtype;
    int rank;
    const char *const *dims;
} cuvil_tensor_info;

/* An entry point's signature; `relations` are the checks between sizes beyond the dims (e.g. "n == 2*m"). */
typedef struct {
    const char *name;
    int n_inputs, n_outputs, n_symbols, n_relations;
    const cuvil_tensor_info *inputs, *outputs;
    const char *const *symbols;
    const char *const *relations;
} cuvil_entry_info;

typedef struct cuvil_model cuvil_model;
typedef struct cuvil_workspace cuvil_workspace;

/* Open, check and load a .cuv file (mapped read-only; the weights are used in place). */
cuvil_status cuvil_open_file(const char *path, cuvil_model **model);
/* The same from `size` bytes at `data`, which must stay valid until cuvil_close (not copied when 64-byte aligned;
 * copied into an aligned buffer otherwise). */
cuvil_status cuvil_open_memory(const void *data, size_t size, cuvil_model **model);
void cuvil_close(cuvil_model *model);

int cuvil_entry_count(const cuvil_model *model);
/* The index of the entry named `name`, or -1 (with a message) when there is none. */
int cuvil_entry_find(const cuvil_model *model, const char *name);
/* The signature of entry `index`; the strings live as long as the model. */
cuvil_status cuvil_entry_info_get(const cuvil_model *model, int index, cuvil_entry_info *info);
/* The output shapes entry `index` gives for these inputs (checks them as cuvil_run does); outputs[k].shape,
 * rank, dtype and nbytes are filled in, data is left alone. */
cuvil_status cuvil_output_shapes(const cuvil_model *model, int index, const cuvil_tensor *inputs, int n_inputs,
                                 cuvil_tensor *outputs, int n_outputs);

/* A workspace for calls from one thread at a time: the memory-plan arena, kept and grown across calls. */
cuvil_status cuvil_workspace_new(const cuvil_model *model, cuvil_workspace **ws);
void cuvil_workspace_free(cuvil_workspace *ws);

/* Run entry `index`: checks the inputs against the signature, binds the symbolic sizes, computes the output
 * shapes, then calls the native code with the caller's buffers (no copies). `ws` NULL: a workspace for this call. */
cuvil_status cuvil_run(const cuvil_model *model, cuvil_workspace *ws, int index, const cuvil_tensor *inputs,
                       int n_inputs, cuvil_tensor *outputs, int n_outputs);

/* Threads of the model's own parallel loops (its OpenMP runtime); n <= 0: the default. */
void cuvil_model_set_threads(const cuvil_model *model, int n);

const char *cuvil_strerror(cuvil_status code);
/* The message of this thread's last failed call ("" if none). */
const char *cuvil_last_message(void);

const char *cuvil_dtype_name(cuvil_dtype dtype);
size_t cuvil_dtype_size(cuvil_dtype dtype);
/* The dtype named `name` (Cuvil's names: "f32", "i64", "bool", ...); -1 if none. */
int cuvil_dtype_from_name(const char *name);

/* How many native libraries this process has loaded (the tests show with it that no file failing a check gets
 * as far as dlopen). */
unsigned long cuvil_native_loads(void);

#ifdef __cplusplus
}
#endif
#endif
