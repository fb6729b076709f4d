/* cuvil-run: run a .cuv model on .npy files with the standalone runtime, no Python needed.
 *
 *     cuvil-run model.cuv in0.npy [in1.npy ...] -o OUTDIR    writes OUTDIR/output_0.npy, ...
 *     cuvil-run model.cuv in0.npy --bench 100                  latency percentiles over 100 calls
 *     cuvil-run model.cuv --info                               the entries and their signatures
 *
 * .npy files: format versions 1-3, C order, little-endian, the dtypes of docs/artifact.md (bf16 as '<V2', what
 * NumPy saves for ml_dtypes.bfloat16, or its raw bits as '<u2'). Any error prints a message and exits non-zero.
 */
#define _POSIX_C_SOURCE 200809L
#include "cuvil_runtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static const char *const usage =
    "usage: cuvil-run MODEL.cuv [INPUT.npy ...] [-o OUTDIR] [--entry NAME] [--bench N] [--warmup N] [--threads N]\n"
    "       cuvil-run MODEL.cuv --info\n";

static int fail(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "cuvil-run: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 1;
}

/* --- .npy ----------------------------------------------------------------------------------------------------- */

static const char *const npy_descr[] = {"<f2", "<V2", "<f4", "<f8", "|i1", "<i2", "<i4", "<i8",
                                        "|u1", "<u2", "<u4", "<u8", "|b1"};

/* Whether .npy dtype text `d` holds elements of `want` (bf16 also as its raw bits, '<u2'). */
static int descr_fits(const char *d, cuvil_dtype want)
{
    if (strcmp(d, npy_descr[want]) == 0) return 1;
    if (want == CUVIL_BF16) return strcmp(d, "|V2") == 0 || strcmp(d, "<u2") == 0;
    return d[0] == '=' && strcmp(d + 1, npy_descr[want] + 1) == 0;
}

/* The quoted value after `key` in the header dict, into out; 0 if missing. */
static int header_text(const char *h, const char *key, char *out, size_t cap)
{
    const char *p = strstr(h, key);
    if (!p || !(p = strchr(p + strlen(key), ':'))) return 0;
    while (*++p == ' ') {}
    if (*p != '\'' && *p != '"') {
        size_t n = strcspn(p, ",}");
        if (n >= cap) return 0;
        memcpy(out, p, n), out[n] = 0;
        return 1;
    }
    const char *end = strchr(p + 1, *p);
    if (!end || (size_t)(end - p - 1) >= cap) return 0;
    memcpy(out, p + 1, (size_t)(end - p - 1)), out[end - p - 1] = 0;
    return 1;
}

static int parse_shape(const char *h, cuvil_tensor *t)
{
    const char *p = strstr(h, "'shape'");
    if (!p || !(p = strchr(p, '('))) return 0;
    t->rank = 0;
    for (p++;;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') return 1;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || t->rank == CUVIL_MAX_RANK) return 0;
        t->shape[t->rank++] = v;
        p = end;
    }
}

/* Reads `path` into `t` (data malloc'd); returns an error message or NULL. */
static const char *read_npy(const char *path, cuvil_dtype want, cuvil_tensor *t)
{
    static char why[256];
    FILE *f = fopen(path, "rb");
    unsigned char pre[12];
    if (!f) return strerror(errno);
    const char *err = NULL;
    char *header = NULL, descr[16], order[16];
    size_t hlen = 0;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] < 1 || pre[6] > 3)
        err = "not a .npy file (versions 1-3)";
    else if (pre[6] == 1)
        hlen = pre[8] | (size_t)pre[9] << 8;
    else if (fread(pre + 10, 1, 2, f) != 2)
        err = "a truncated .npy header";
    else
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    if (!err && (hlen > (1 << 20) || !(header = calloc(1, hlen + 1)) || fread(header, 1, hlen, f) != hlen))
        err = "a truncated .npy header";
    if (!err && (!header_text(header, "'descr'", descr, sizeof descr) || !header_text(header, "'fortran_order'", order,
                 sizeof order) || !parse_shape(header, t)))
        err = "a .npy header without descr, fortran_order and shape";
    if (!err && strcmp(order, "False") != 0) err = "a Fortran-order array (only C order is read)";
    if (!err && !descr_fits(descr, want)) {
        snprintf(why, sizeof why, "dtype '%s', but the entry takes %s (as '%s'; little-endian only)", descr,
                 cuvil_dtype_name(want), npy_descr[want]);
        err = why;
    }
    if (!err) {
        size_t n = cuvil_dtype_size(want);
        for (int k = 0; k < t->rank; k++) n *= (size_t)t->shape[k];
        t->dtype = want, t->nbytes = n;
        if (!(t->data = malloc(n ? n : 1)) || fread(t->data, 1, n, f) != n) err = "fewer elements than its shape";
    }
    free(header);
    fclose(f);
    return err;
}

static int write_npy(const char *path, const cuvil_tensor *t)
{
    char h[256], dims[CUVIL_MAX_RANK * 22 + 4] = "";
    for (int k = 0; k < t->rank; k++)
        snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%lld%s", (long long)t->shape[k],
                 t->rank == 1 || k + 1 < t->rank ? "," : "");
    int n = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", npy_descr[t->dtype], dims);
    int pad = 63 - (10 + n) % 64; /* the header ends with '\n' on a 64-byte boundary */
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)((n + pad + 1) & 0xff),
                             (unsigned char)((n + pad + 1) >> 8)};
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(h, 1, (size_t)n, f) == (size_t)n
             && fprintf(f, "%*s\n", pad, "") == pad + 1 && fwrite(t->data, 1, t->nbytes, f) == t->nbytes;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* --- commands ------------------------------------------------------------------------------------------------- */

static void print_tensor(const char *kind, const cuvil_tensor_info *t)
{
    printf("  %-6s %s: %s[", kind, t->name, cuvil_dtype_name(t->dtype));
    for (int k = 0; k < t->rank; k++) printf("%s%s", k ? ", " : "", t->dims[k]);
    printf("]\n");
}

static int info(const cuvil_model *m)
{
    for (int e = 0; e < cuvil_entry_count(m); e++) {
        cuvil_entry_info s;
        cuvil_entry_info_get(m, e, &s);
        printf("entry %s\n", s.name);
        for (int k = 0; k < s.n_inputs; k++) print_tensor("input", &s.inputs[k]);
        for (int k = 0; k < s.n_outputs; k++) print_tensor("output", &s.outputs[k]);
        for (int k = 0; k < s.n_symbols; k++) printf("  %s %s", k ? "," : "symbols", s.symbols[k]);
        if (s.n_symbols) printf("\n");
        for (int k = 0; k < s.n_relations; k++) printf("  needs %s\n", s.relations[k]);
    }
    return 0;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Latency over `runs` calls with one workspace and the outputs allocated once (as a serving loop would). */
static int bench(const cuvil_model *m, int e, const cuvil_tensor *in, int n_in, cuvil_tensor *out, int n_out, int runs,
                 int warmup)
{
    cuvil_workspace *ws;
    double *t = malloc((size_t)runs * sizeof(double));
    if (!t || cuvil_workspace_new(m, &ws) != CUVIL_OK) return fail("%s", "out of memory", NULL);
    int rc = 0;
    for (int k = -warmup; k < runs && !rc; k++) {
        double start = now();
        rc = cuvil_run(m, ws, e, in, n_in, out, n_out);
        if (k >= 0) t[k] = now() - start;
    }
    cuvil_workspace_free(ws);
    if (rc) { free(t); return fail("%s", cuvil_last_message(), NULL); }
    double sum = 0;
    for (int k = 0; k < runs; k++) sum += t[k];
    qsort(t, (size_t)runs, sizeof(double), by_value);
#define PCT(p) (1e3 * t[(size_t)((p) / 100.0 * (runs - 1) + 0.5)])
    printf("%d runs (%d warm-up): mean %.3f ms, min %.3f, p50 %.3f, p90 %.3f, p99 %.3f, max %.3f\n", runs, warmup,
           1e3 * sum / runs, PCT(0), PCT(50), PCT(90), PCT(99), PCT(100));
    free(t);
    return 0;
}

typedef struct {
    const char *model, *outdir, *entry, *inputs[CUVIL_MAX_RANK * 64];
    int n_inputs, bench, warmup, threads, info;
} options;

static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){NULL, NULL, "main", {NULL}, 0, 0, -1, 0, 0};
    for (int k = 1; k < argc; k++) {
        const char *a = argv[k], *v = k + 1 < argc ? argv[k + 1] : NULL;
        int takes = strcmp(a, "-o") == 0 || strcmp(a, "--entry") == 0 || strcmp(a, "--bench") == 0
                    || strcmp(a, "--warmup") == 0 || strcmp(a, "--threads") == 0;
        if (takes && !v) return fail("%s needs a value", a, NULL);
        char *end = NULL;
        long n = takes ? strtol(v, &end, 10) : 0;
        int number = takes && *v && !*end && n >= 0 && n < (1L << 30);
        if (strcmp(a, "--info") == 0) o->info = 1;
        else if (strcmp(a, "-o") == 0) o->outdir = v;
        else if (strcmp(a, "--entry") == 0) o->entry = v;
        else if (takes && !number) return fail("%s needs a number, got '%s'", a, v);
        else if (strcmp(a, "--bench") == 0) o->bench = (int)n;
        else if (strcmp(a, "--warmup") == 0) o->warmup = (int)n;
        else if (strcmp(a, "--threads") == 0) o->threads = (int)n;
        else if (a[0] == '-' && a[1]) return fail("unknown option %s\n%s", a, usage);
        else if (!o->model) o->model = a;
        else if (o->n_inputs < (int)(sizeof o->inputs / sizeof o->inputs[0])) o->inputs[o->n_inputs++] = a;
        else return fail("%s", "too many inputs", NULL);
        k += takes;
    }
    if (!o->model) return fail("%s", usage, NULL);
    return 0;
}

static int write_outputs(const char *dir, const cuvil_tensor *out, int n_out)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return fail("cannot create %s: %s", dir, strerror(errno));
    for (int j = 0; j < n_out; j++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/output_%d.npy", dir, j);
        if (write_npy(path, &out[j]) != 0) return fail("cannot write %s: %s", path, strerror(errno));
    }
    return 0;
}

static void summary(const cuvil_entry_info *s, const cuvil_tensor *out)
{
    for (int j = 0; j < s->n_outputs; j++) {
        printf("output %d %s: %s[", j, s->outputs[j].name, cuvil_dtype_name(out[j].dtype));
        for (int k = 0; k < out[j].rank; k++) printf("%s%lld", k ? ", " : "", (long long)out[j].shape[k]);
        printf("]\n");
    }
}

static int run(const cuvil_model *m, const options *o)
{
    int e = cuvil_entry_find(m, o->entry);
    cuvil_entry_info s;
    if (e < 0 || cuvil_entry_info_get(m, e, &s) != CUVIL_OK) return fail("%s", cuvil_last_message(), NULL);
    if (o->n_inputs != s.n_inputs)
        return fprintf(stderr, "cuvil-run: entry '%s' takes %d inputs, got %d .npy files\n", s.name, s.n_inputs,
                       o->n_inputs), 1;
    cuvil_tensor *in = calloc((size_t)s.n_inputs + 1, sizeof *in), *out = calloc((size_t)s.n_outputs + 1, sizeof *out);
    int rc = !in || !out ? fail("%s", "out of memory", NULL) : 0;
    for (int i = 0; i < s.n_inputs && !rc; i++) {
        const char *err = read_npy(o->inputs[i], s.inputs[i].dtype, &in[i]);
        if (err) rc = fail("%s: %s", o->inputs[i], err);
    }
    if (!rc && cuvil_run(m, NULL, e, in, s.n_inputs, out, s.n_outputs) != CUVIL_OK)
        rc = fail("%s", cuvil_last_message(), NULL);
    if (!rc && o->outdir) rc = write_outputs(o->outdir, out, s.n_outputs);
    if (!rc && !o->outdir && !o->bench) summary(&s, out);
    if (!rc && o->bench) rc = bench(m, e, in, s.n_inputs, out, s.n_outputs, o->bench, o->warmup < 0 ? 10 : o->warmup);
    for (int i = 0; in && i < s.n_inputs; i++) free(in[i].data);
    for (int j = 0; out && j < s.n_outputs; j++) free(out[j].data);
    free(in);
    free(out);
    return rc;
}

int main(int argc, char **argv)
{
    options o;
    if (parse_args(argc, argv, &o)) return 2;
    cuvil_model *m;
    if (cuvil_open_file(o.model, &m) != CUVIL_OK) return fail("%s", cuvil_last_message(), NULL);
    const char *env = getenv("CUVIL_NUM_THREADS"); /* as in Python: --threads, else this, else the model's default */
    int threads = o.threads ? o.threads : env ? atoi(env) : 0;
    if (threads > 0) cuvil_model_set_threads(m, threads);
    int rc = o.info ? info(m) : run(m, &o);
    cuvil_close(m);
    return rc;
}
