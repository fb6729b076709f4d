/* The start-up of the C runtime by stage, for bench/runtime.py: the runtime's sources are included, so this
 * driver times the steps of cuvil_open_file one by one (wall milliseconds from main, as one JSON line):
 *
 *     runtime_stages MODEL.cuv INPUT.bin D0 D1 ...     (entry 0's one f32 input, raw, with its sizes)
 *
 * map (open + mmap), check (header, table, every section's digest: the hashing), load (target, memfd, dlopen),
 * prepare (bind the entries: the prepared weights made from the constants), call (the first call, its arena
 * and outputs allocated), second (a second call, for what the first one costs more), close (cuvil_close: the
 * native code unloaded, its threads ended, the memory freed); and for each stage NAME,
 * NAME_cpu: the CPU milliseconds of all the process's threads in it (what a loaded machine does not inflate as it
 * does the wall time). */
#include "cuvil_runtime.c"

#include <time.h>

static double clock_ms(clockid_t which)
{
    struct timespec t;
    clock_gettime(which, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static double t[8], cpu[8];

static void mark(int k) { t[k] = clock_ms(CLOCK_MONOTONIC), cpu[k] = clock_ms(CLOCK_PROCESS_CPUTIME_ID); }

static cuvil_status load_stage(cuvil_model *m)
{
    const cuvil_section *native = NULL;
    cuvil_status rc = check_target(m, &native);
    if (!rc) rc = load_native(m, native);
    m->last_error = (const char *(*)(void))symbol(m, "cuvil_", "last_error", &rc);
    return rc;
}

static cuvil_status call(cuvil_model *m, cuvil_tensor *in)
{
    cuvil_tensor out = {0};
    cuvil_status rc = cuvil_run(m, NULL, 0, in, 1, &out, 1);
    free(out.data);
    return rc;
}

int main(int argc, char **argv)
{
    mark(0);
    if (argc < 4) return fprintf(stderr, "usage: runtime_stages MODEL.cuv INPUT.bin D0 [D1 ...]\n"), 2;
    cuvil_tensor in = {0};
    in.dtype = CUVIL_F32, in.rank = argc - 3, in.nbytes = 4;
    for (int k = 0; k < in.rank; k++) in.nbytes *= (size_t)(in.shape[k] = atoll(argv[3 + k]));
    FILE *f = fopen(argv[2], "rb");
    in.data = malloc(in.nbytes);
    if (!f || fread(in.data, 1, in.nbytes, f) != in.nbytes) return fprintf(stderr, "cannot read %s\n", argv[2]), 1;
    fclose(f);
    cuvil_model *m = calloc(1, sizeof *m);
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (!m || fd < 0 || fstat(fd, &st) != 0) return fprintf(stderr, "cannot open %s\n", argv[1]), 1;
    m->where = argv[1], m->size = (size_t)st.st_size;
    m->mapped = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    m->data = m->mapped;
    mark(1);
    cuvil_status rc = m->mapped == MAP_FAILED ? CUVIL_ERR_IO : cuvil_check_file(m);
    mark(2);
    if (!rc) rc = load_stage(m);
    mark(3);
    for (int k = 0; k < m->n_entries && !rc; k++) rc = bind_entry(m, &m->entries[k]);
    mark(4);
    if (!rc) rc = call(m, &in);
    mark(5);
    if (!rc) rc = call(m, &in);
    mark(6);
    if (rc) return fprintf(stderr, "%s\n", cuvil_last_message()), 1;
    cuvil_close(m);
    mark(7);
    static const char *const names[] = {"map", "check", "load", "prepare", "call", "second", "close"};
    for (int k = 0; k < 7; k++) printf("%s\"%s\": %.3f", k ? ", " : "{", names[k], t[k + 1] - t[k]);
    for (int k = 0; k < 7; k++) printf(", \"%s_cpu\": %.3f", names[k], cpu[k + 1] - cpu[k]);
    printf("}\n");
    return 0;
}
