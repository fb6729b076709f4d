/* The C runtime's test driver (built by tests/runtime/test_c_runtime.py with the runtime's sources):
 *
 *   runtime_driver api MODEL.cuv IN.bin D0 D1 ... OUT.bin
 *       opens MODEL from memory (at an unaligned address too), prints every entry's signature, runs `main` on one
 *       f32 input of sizes D0 D1 ... read raw from IN.bin into caller-allocated outputs, checks that 8 threads
 *       calling it at once (each with a workspace, or none) get the same bytes, and writes output 0 raw to OUT.bin.
 *   runtime_driver mutate MODEL.cuv SPECS
 *       for each line of SPECS, `T LENGTH` (truncate) or `F OFFSET XOR` (flip bits of one byte), opens the mutated
 *       copy from memory; prints `ok N` when every one failed with an error and none reached dlopen.
 *   runtime_driver files PATH ...
 *       opens each file; prints `PATH CODE LOADED` (LOADED: whether it got as far as dlopen) and the message.
 *   runtime_driver hash PATH
 *       prints the SHA-256 path in use (cuvil_hash.h, internal), then the SHA-256 of each prefix of the file's
 *       bytes of 0, 1, ..., 130 bytes and of the whole file, and of its two halves hashed as a pair.
 */
#include "cuvil_runtime.h"

#include "cuvil_hash.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*size + 65);
    if (p && fread(p, 1, *size, f) != *size) { free(p); p = NULL; }
    fclose(f);
    return p;
}

static int die(const char *what)
{
    fprintf(stderr, "runtime_driver: %s: %s\n", what, cuvil_last_message());
    return 1;
}

typedef struct {
    const cuvil_model *m;
    const cuvil_tensor *in;
    const cuvil_tensor *want;
    int use_workspace, failures;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    cuvil_workspace *ws = NULL;
    if (w->use_workspace && cuvil_workspace_new(w->m, &ws) != CUVIL_OK) { w->failures++; return NULL; }
    for (int k = 0; k < 20; k++) {
        cuvil_tensor out = {0};
        if (cuvil_run(w->m, ws, 0, w->in, 1, &out, 1) != CUVIL_OK || out.nbytes != w->want->nbytes
            || memcmp(out.data, w->want->data, out.nbytes) != 0)
            w->failures++;
        free(out.data);
    }
    cuvil_workspace_free(ws);
    return NULL;
}

static void print_signature(const cuvil_model *m)
{
    for (int e = 0; e < cuvil_entry_count(m); e++) {
        cuvil_entry_info s;
        cuvil_entry_info_get(m, e, &s);
        printf("entry %s:", s.name);
        for (int k = 0; k < s.n_inputs + s.n_outputs; k++) {
            const cuvil_tensor_info *t = k < s.n_inputs ? &s.inputs[k] : &s.outputs[k - s.n_inputs];
            printf(" %s %s %s[", k < s.n_inputs ? "in" : "out", t->name, cuvil_dtype_name(t->dtype));
            for (int d = 0; d < t->rank; d++) printf("%s%s", d ? "," : "", t->dims[d]);
            printf("]");
        }
        printf("\n");
    }
}

static int api(int argc, char **argv)
{
    size_t size, in_size;
    unsigned char *file = slurp(argv[2], &size), *x = slurp(argv[3], &in_size);
    if (!file || !x) return die("cannot read the inputs");
    cuvil_model *m, *unaligned;
    memmove(file + 1, file, size); /* an unaligned copy first: the runtime must copy it to align the weights */
    if (cuvil_open_memory(file + 1, size, &unaligned) != CUVIL_OK) return die("open unaligned");
    memmove(file, file + 1, size);
    if (cuvil_open_memory(file, size, &m) != CUVIL_OK) return die("open");
    print_signature(m);
    if (cuvil_entry_find(m, "main") != 0) return die("find main");
    cuvil_tensor in = {x, CUVIL_F32, argc - 5, {0}, in_size};
    for (int k = 0; k < in.rank; k++) in.shape[k] = atoll(argv[4 + k]);
    cuvil_tensor out = {0};
    if (cuvil_output_shapes(m, 0, &in, 1, &out, 1) != CUVIL_OK) return die("output shapes");
    out.data = malloc(out.nbytes); /* the caller's buffer: written in place */
    void *mine = out.data;
    if (cuvil_run(m, NULL, 0, &in, 1, &out, 1) != CUVIL_OK || out.data != mine) return die("run");
    cuvil_tensor again = {0};
    if (cuvil_run(unaligned, NULL, 0, &in, 1, &again, 1) != CUVIL_OK || memcmp(again.data, out.data, out.nbytes))
        return die("run from the unaligned copy");
    pthread_t threads[8];
    worker w[8];
    for (int t = 0; t < 8; t++) {
        w[t] = (worker){m, &in, &out, t % 2, 0};
        pthread_create(&threads[t], NULL, work, &w[t]);
    }
    int failures = 0;
    for (int t = 0; t < 8; t++) pthread_join(threads[t], NULL), failures += w[t].failures;
    if (failures) { fprintf(stderr, "runtime_driver: %d threaded calls differ\n", failures); return 1; }
    FILE *f = fopen(argv[argc - 1], "wb");
    if (!f || fwrite(out.data, 1, out.nbytes, f) != out.nbytes || fclose(f)) return die("write the output");
    printf("threads ok\n");
    free(again.data);
    free(out.data);
    cuvil_close(unaligned);
    cuvil_close(m);
    free(file);
    free(x);
    return 0;
}

static int mutate(const char *path, const char *specs)
{
    size_t size;
    unsigned char *base = slurp(path, &size), *copy = malloc(size + 64);
    FILE *f = fopen(specs, "r");
    if (!base || !copy || !f) return die("cannot read the inputs");
    char kind;
    unsigned long long a, b = 0;
    int n = 0, bad = 0;
    unsigned long loads = cuvil_native_loads();
    while (fscanf(f, " %c %llu", &kind, &a) == 2 && (kind == 'T' || fscanf(f, " %llu", &b) == 1)) {
        size_t len = kind == 'T' ? (size_t)a : size;
        memcpy(copy, base, size);
        if (kind == 'F') copy[a] ^= (unsigned char)b;
        cuvil_model *m;
        cuvil_status rc = cuvil_open_memory(copy, len, &m);
        if (rc == CUVIL_OK || !*cuvil_last_message() || cuvil_native_loads() != loads) {
            printf("NOT REFUSED: %c %llu %llu (code %d)\n", kind, a, b, rc);
            bad++;
            if (rc == CUVIL_OK) cuvil_close(m);
            loads = cuvil_native_loads();
        }
        n++;
    }
    fclose(f);
    free(base);
    free(copy);
    printf("%s %d\n", bad ? "failed" : "ok", n);
    return bad != 0;
}

static int files(int argc, char **argv)
{
    for (int k = 2; k < argc; k++) {
        unsigned long loads = cuvil_native_loads();
        cuvil_model *m;
        cuvil_status rc = cuvil_open_file(argv[k], &m);
        printf("%s %d %d %s\n", argv[k], rc, cuvil_native_loads() != loads, rc ? cuvil_last_message() : "");
        if (rc == CUVIL_OK) cuvil_close(m);
    }
    return 0;
}

static void hex(const unsigned char *d)
{
    for (int i = 0; i < 32; i++) printf("%02x", d[i]);
    printf("\n");
}

static int hashes(const char *path)
{
    size_t size;
    unsigned char *data = slurp(path, &size), d[32];
    if (!data) return die("cannot read the input");
    printf("%s\n", cuvil_sha256_path());
    for (size_t n = 0; n <= 130 && n <= size; n++) cuvil_sha256(data, n, d), hex(d);
    cuvil_sha256(data, size, d), hex(d);
    const uint8_t *pieces[16];
    uint8_t digests[16][32];
    for (int k = 0; k < 16; k++) pieces[k] = data + k * (size / 16);
    printf("%d\n", cuvil_sha256_width());
    cuvil_sha256_batch(pieces, 16, size / 16, digests); /* 16 at once where the CPU can */
    for (int k = 0; k < 16; k++) hex(digests[k]);
    pieces[1] = data + size / 2;
    cuvil_sha256_batch(pieces, 3, size / 2, digests); /* a pair and one */
    for (int k = 0; k < 3; k++) hex(digests[k]);
    free(data);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "hash") == 0) return hashes(argv[2]);
    if (argc >= 6 && strcmp(argv[1], "api") == 0) return api(argc, argv);
    if (argc == 4 && strcmp(argv[1], "mutate") == 0) return mutate(argv[2], argv[3]);
    if (argc >= 2 && strcmp(argv[1], "files") == 0) return files(argc, argv);
    fprintf(stderr, "usage: runtime_driver api|mutate|files|hash ...\n");
    return 2;
}
