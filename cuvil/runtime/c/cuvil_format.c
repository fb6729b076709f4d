/* Checking and parsing a .cuv file (docs/artifact.md, "What a loader checks", 1-3): the header and its CRC, the
 * section table and its SHA-256, every section's bounds and SHA-256, meta's JSON syntax, and the entries text,
 * parsed into the model's entries with their check programs verified. Nothing here runs the file's code.
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include "cuvil_internal.h"

#include "cuvil_checks.h"
#include "cuvil_hash.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint32_t u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t u64(const uint8_t *p) { return (uint64_t)u32(p) | (uint64_t)u32(p + 4) << 32; }

static int all_zero(const uint8_t *p, size_t n)
{
    while (n--)
        if (*p++) return 0;
    return 1;
}

/* A zero-padded ASCII field: printable characters, then only zeros. 0 if malformed. */
static int ascii_field(const uint8_t *p, size_t n, char *out)
{
    size_t len = 0;
    while (len < n && p[len]) len++;
    if (!all_zero(p + len, n - len)) return 0;
    for (size_t k = 0; k < len; k++)
        if (p[k] < 0x20 || p[k] > 0x7e) return 0;
    memcpy(out, p, len);
    out[len] = 0;
    return 1;
}

const cuvil_section *cuvil_find_section(const cuvil_model *m, const char *name)
{
    for (int k = 0; k < m->n_sections; k++)
        if (strcmp(m->sections[k].name, name) == 0) return &m->sections[k];
    return NULL;
}

static cuvil_status check_header(cuvil_model *m, uint64_t *table_at, uint32_t *count)
{
    const uint8_t *h = m->data;
    if (m->size < CUVIL_HEADER_SIZE)
        return cuvil_fail(CUVIL_ERR_FORMAT, "%s: %zu bytes is too short for a .cuv file (the header is 128)", m->where,
                          m->size);
    if (memcmp(h, "\x89" "CUV\r\n\x1a\n", 8) != 0)
        return cuvil_fail(CUVIL_ERR_FORMAT, "%s: not a .cuv file (wrong magic)", m->where);
    uint32_t version = m->version = u32(h + 8);
    if (version > CUVIL_RUNTIME_FORMAT)
        return cuvil_fail(CUVIL_ERR_VERSION, "%s: format version %u is newer than this runtime's (%d)", m->where,
                          version, CUVIL_RUNTIME_FORMAT);
    if (cuvil_crc32(h, 124) != u32(h + 124))
        return cuvil_fail(CUVIL_ERR_CHECKSUM, "%s: the header's CRC-32 does not match (a corrupt header)", m->where);
    if (u64(h + 16) != m->size)
        return cuvil_fail(CUVIL_ERR_FORMAT, "%s: the header says %llu bytes, the file has %zu (truncated?)", m->where,
                          (unsigned long long)u64(h + 16), m->size);
    *count = u32(h + 24);
    *table_at = u64(h + 32);
    m->required_features = u64(h + 40);
    if (version < 1 || u32(h + 12) != CUVIL_HEADER_SIZE || u32(h + 28) != 0 || *count > CUVIL_MAX_SECTIONS
        || !all_zero(h + 112, 12))
        return cuvil_fail(CUVIL_ERR_FORMAT, "%s: a malformed header (version %u, size %u, flags %u, %u sections)",
                          m->where, version, u32(h + 12), u32(h + 28), *count);
    return CUVIL_OK;
}

static int compressible(const char *name) { return strcmp(name, "ir") == 0 || strcmp(name, "csrc") == 0; }

static cuvil_status check_row(cuvil_model *m, int k, const uint8_t *r, uint64_t table_end)
{
    cuvil_section *s = &m->sections[k];
    if (!ascii_field(r, 16, s->name) || !s->name[0] || cuvil_find_section(m, s->name) != NULL)
        return cuvil_fail(CUVIL_ERR_FORMAT, "%s: section %d has an empty, repeated or non-ASCII name", m->where, k);
    s->offset = u64(r + 16);
    s->size = u64(r + 24);
    s->sha256 = r + 32;
    s->flags = u32(r + 64);
    s->features = u64(r + 72);
    if ((s->flags & ~1u) || u32(r + 68) || !all_zero(r + 80, 16) || ((s->flags & 1u) && !compressible(s->name)))
        return cuvil_fail(CUVIL_ERR_FORMAT, "%s: section '%s' has bad flags (%u) or reserved fields", m->where,
                          s->name, s->flags);
    if (s->offset % 64 || s->offset < table_end || s->offset > m->size || s->size > m->size - s->offset)
        return cuvil_fail(CUVIL_ERR_FORMAT,
                          "%s: section '%s' (%llu bytes at %llu) does not lie 64-byte aligned in the file after the "
                          "table", m->where, s->name, (unsigned long long)s->size, (unsigned long long)s->offset);
    return CUVIL_OK;
}

static cuvil_status check_table(cuvil_model *m, uint64_t table_at, uint32_t count)
{
    uint8_t digest[32];
    uint64_t table_end = table_at + (uint64_t)CUVIL_ROW_SIZE * count;
    if (table_at < CUVIL_HEADER_SIZE || table_at > m->size || table_end > m->size)
        return cuvil_fail(CUVIL_ERR_FORMAT, "%s: the section table (%u rows at %llu) lies outside the file", m->where,
                          count, (unsigned long long)table_at);
    cuvil_sha256(m->data + table_at, table_end - table_at, digest);
    if (memcmp(digest, m->data + 80, 32) != 0)
        return cuvil_fail(CUVIL_ERR_CHECKSUM, "%s: the section table does not match its SHA-256 (corrupt)", m->where);
    for (uint32_t k = 0; k < count; k++) {
        cuvil_status rc = check_row(m, (int)k, m->data + table_at + (uint64_t)k * CUVIL_ROW_SIZE, table_end);
        if (rc) return rc;
        m->n_sections = (int)k + 1;
    }
    for (int a = 0; a < m->n_sections; a++)
        for (int b = a + 1; b < m->n_sections; b++) {
            const cuvil_section *x = &m->sections[a], *y = &m->sections[b];
            if (x->offset < y->offset + y->size && y->offset < x->offset + x->size)
                return cuvil_fail(CUVIL_ERR_FORMAT, "%s: sections '%s' and '%s' overlap", m->where, x->name, y->name);
        }
    static const char *const required[] = {"meta", "entries", "native"};
    for (int k = 0; k < 3; k++)
        if (!cuvil_find_section(m, required[k]))
            return cuvil_fail(CUVIL_ERR_FORMAT, "%s: the required section '%s' is missing", m->where, required[k]);
    return CUVIL_OK;
}

/* Check 3 for every section, known or not: weights are checked before the first call reads them, so at open.
 * Format 2 hashes a section in pieces of CUVIL_PIECE bytes and its digest is the SHA-256 of the pieces' digests,
 * so the pieces of all sections are shared out to threads (one per CPU, this one among them; full pieces first,
 * lay_out_jobs), sixteen at a time in AVX-512 lanes while enough remain for every thread to have work, then two
 * at a time (their SHA-NI rounds interleave); format 1 hashes each section whole, a section a job. Where a thread cannot start, the others (and
 * at least this one) do its share. */
typedef struct {
    const cuvil_model *m;
    uint8_t *digests;       /* 32 bytes per job */
    const uint8_t **start;  /* per job: its bytes */
    uint64_t *size;         /* per job: its length */
    unsigned long n_jobs, next, threads;
} digest_work;

/* Jobs to take from `k` on: a full batch while the rest leaves the other threads half a batch each, else two. */
static unsigned long take(const digest_work *w, unsigned long k, unsigned long wide)
{
    return w->n_jobs - k >= wide + (w->threads - 1) * wide / 2 ? wide : 2;
}

static void *digest_worker(void *arg)
{
    digest_work *w = arg;
    const unsigned long wide = (unsigned long)cuvil_sha256_width();
    unsigned long k = __atomic_load_n(&w->next, __ATOMIC_RELAXED), end;
    for (;;) {
        do {
            if (k >= w->n_jobs) return NULL;
            end = k + take(w, k, wide);
        } while (!__atomic_compare_exchange_n(&w->next, &k, end, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
        if (end > w->n_jobs) end = w->n_jobs;
        for (unsigned long j; k < end; k = j) { /* runs of one length */
            for (j = k + 1; j < end && w->size[j] == w->size[k]; j++) {}
            cuvil_sha256_batch(w->start + k, (int)(j - k), w->size[k], (uint8_t (*)[32])(w->digests + 32 * k));
        }
        k = __atomic_load_n(&w->next, __ATOMIC_RELAXED);
    }
}

int cuvil_cpu_count(void)
{
    int n = (int)sysconf(_SC_NPROCESSORS_ONLN);
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set); /* the CPUs this process may run on */
#endif
    return n < 1 ? 1 : n > 16 ? 16 : n;
}

static void run_digests(digest_work *w)
{
    pthread_t threads[16];
    int want = cuvil_cpu_count() - 1, started = 0;
    if ((unsigned long)want > w->n_jobs / 2) want = (int)(w->n_jobs / 2);
    w->threads = (unsigned long)want + 1;
    while (started < want && pthread_create(&threads[started], NULL, digest_worker, w) == 0) started++;
    digest_worker(w);
    for (int k = 0; k < started; k++) pthread_join(threads[k], NULL);
}

/* Where a section's jobs are: its full pieces from `full` on (`n_full` of them), then its short last piece (or, in
 * format 1, the whole section) at job `tail`, if it has one (`tail` = -1 if not). */
typedef struct {
    unsigned long full, n_full;
    long tail;
} section_jobs;

/* The jobs of every section, the full pieces of all sections first, then the short ones: so every batch of sixteen
 * taken from the front has one length and fills the AVX-512 lanes (pieces in section order would break runs of
 * equal length at each section's short last piece and at the small sections before the weights). */
static unsigned long lay_out_jobs(const cuvil_model *m, section_jobs *jobs)
{
    unsigned long n = 0;
    for (int k = 0; k < m->n_sections; k++) {
        uint64_t size = m->sections[k].size;
        jobs[k].n_full = m->version < 2 ? 0 : (unsigned long)(size / CUVIL_PIECE);
        jobs[k].full = n, n += jobs[k].n_full;
    }
    for (int k = 0; k < m->n_sections; k++) {
        int has_tail = m->version < 2 || m->sections[k].size % CUVIL_PIECE != 0;
        jobs[k].tail = has_tail ? (long)n++ : -1;
    }
    return n;
}

static void set_job(digest_work *w, unsigned long j, const uint8_t *start, uint64_t size)
{
    w->start[j] = start, w->size[j] = size;
}

/* A section's digest from its jobs' (docs/artifact.md): format 1 its one job's, format 2 the SHA-256 of its
 * pieces' in order, gathered into `scratch`. */
static void section_digest(const cuvil_model *m, const digest_work *w, const section_jobs *j, uint8_t *scratch,
                           uint8_t top[32])
{
    if (m->version < 2) { memcpy(top, w->digests + 32 * j->tail, 32); return; }
    size_t n = 32 * j->n_full;
    memcpy(scratch, w->digests + 32 * j->full, n);
    if (j->tail >= 0) memcpy(scratch + n, w->digests + 32 * j->tail, 32), n += 32;
    cuvil_sha256(scratch, n, top);
}

static cuvil_status check_digests(cuvil_model *m)
{
    section_jobs jobs[CUVIL_MAX_SECTIONS];
    unsigned long n = lay_out_jobs(m, jobs);
    digest_work w = {m, malloc(32 * n + 1), malloc(n * sizeof(uint8_t *) + 1), malloc(n * sizeof(uint64_t) + 1), n, 0,
                     1};
    uint8_t *scratch = malloc(32 * n + 1);
    cuvil_status rc = CUVIL_OK;
    if (!w.digests || !w.start || !w.size || !scratch) rc = cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    for (int k = 0; k < m->n_sections && !rc; k++) {
        const cuvil_section *s = &m->sections[k];
        const uint8_t *at = m->data + s->offset;
        for (unsigned long p = 0; p < jobs[k].n_full; p++)
            set_job(&w, jobs[k].full + p, at + (uint64_t)p * CUVIL_PIECE, CUVIL_PIECE);
        uint64_t done = (uint64_t)jobs[k].n_full * CUVIL_PIECE;
        if (jobs[k].tail >= 0) set_job(&w, (unsigned long)jobs[k].tail, at + done, s->size - done);
    }
    if (!rc) run_digests(&w);
    for (int k = 0; k < m->n_sections && !rc; k++) {
        uint8_t top[32];
        section_digest(m, &w, &jobs[k], scratch, top);
        if (memcmp(top, m->sections[k].sha256, 32) != 0)
            rc = cuvil_fail(CUVIL_ERR_CHECKSUM, "%s: section '%s' does not match its SHA-256 (corrupt)", m->where,
                            m->sections[k].name);
    }
    free(w.digests), free(w.start), free(w.size), free(scratch);
    return rc;
}

/* --- meta: JSON syntax (the Python loader reads it; the runtime only checks that it parses) -------------------- */

typedef struct { const uint8_t *p, *end; } span;

static void skip_ws(span *s) { while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++; }

static int utf8_char(span *s)
{
    uint8_t c = *s->p++;
    int more = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 && c >= 0xC2 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 && c <= 0xF4 ? 3 : -1;
    if (more < 0 || s->end - s->p < more) return 0;
    for (int k = 0; k < more; k++)
        if ((*s->p++ & 0xC0) != 0x80) return 0;
    return 1;
}

static int json_string(span *s)
{
    if (s->p >= s->end || *s->p != '"') return 0;
    for (s->p++; s->p < s->end;) {
        uint8_t c = *s->p;
        if (c == '"') { s->p++; return 1; }
        if (c < 0x20) return 0;
        if (c == '\\') {
            if (++s->p >= s->end || !strchr("\"\\/bfnrtu", *s->p)) return 0;
            if (*s->p++ == 'u')
                for (int k = 0; k < 4; k++, s->p++)
                    if (s->p >= s->end || !strchr("0123456789abcdefABCDEF", *s->p)) return 0;
        } else if (!utf8_char(s))
            return 0;
    }
    return 0;
}

static int digits(span *s)
{
    const uint8_t *start = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') s->p++;
    return s->p > start;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int json_number(span *s)
{
    if (s->p < s->end && *s->p == '-') s->p++;
    if (s->p < s->end && *s->p == '0') s->p++;
    else if (!digits(s)) return 0;
    if (s->p < s->end && *s->p == '.' && (s->p++, !digits(s))) return 0;
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-')) s->p++;
        if (!digits(s)) return 0;
    }
    return 1;
}

static int json_value(span *s, int depth)
{
    skip_ws(s);
    if (s->p >= s->end || depth > 64) return 0;
    uint8_t c = *s->p;
    if (c == '"') return json_string(s);
    if (c == '{' || c == '[') {
        uint8_t close = c == '{' ? '}' : ']';
        s->p++;
        skip_ws(s);
        if (s->p < s->end && *s->p == close) { s->p++; return 1; }
        for (;;) {
            if (c == '{') {
                skip_ws(s);
                if (!json_string(s)) return 0;
                skip_ws(s);
                if (s->p >= s->end || *s->p++ != ':') return 0;
            }
            if (!json_value(s, depth + 1)) return 0;
            skip_ws(s);
            if (s->p >= s->end) return 0;
            if (*s->p == close) { s->p++; return 1; }
            if (*s->p++ != ',') return 0;
        }
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(words[k]);
        if ((size_t)(s->end - s->p) >= n && memcmp(s->p, words[k], n) == 0) { s->p += n; return 1; }
    }
    return json_number(s);
}

static cuvil_status check_meta(cuvil_model *m)
{
    const cuvil_section *meta = cuvil_find_section(m, "meta");
    span s = {m->data + meta->offset, m->data + meta->offset + meta->size};
    int ok = json_value(&s, 0);
    skip_ws(&s);
    if (!ok || s.p != s.end)
        return cuvil_fail(CUVIL_ERR_FORMAT, "%s: section 'meta' is not valid JSON (at byte %ld)", m->where,
                          (long)(s.p - (m->data + meta->offset)));
    return CUVIL_OK;
}

/* --- entries: the text records of docs/artifact.md ------------------------------------------------------------- */

typedef struct {
    cuvil_model *m;
    span text;
    span line;
    int line_no;
} reader;

static cuvil_status bad(reader *r, const char *what)
{
    return cuvil_fail(CUVIL_ERR_FORMAT, "%s: section 'entries' line %d: %s", r->m->where, r->line_no, what);
}

/* The next line (without its newline) into r->line; 0 at the end of the text. */
static int next_line(reader *r)
{
    if (r->text.p >= r->text.end) return 0;
    const uint8_t *nl = memchr(r->text.p, '\n', (size_t)(r->text.end - r->text.p));
    r->line.p = r->text.p;
    r->line.end = nl ? nl : r->text.end;
    r->text.p = nl ? nl + 1 : r->text.end;
    r->line_no++;
    return 1;
}

/* The next space-separated word of the line into `out` (at most `cap` - 1 characters); 0 if none or too long. */
static int word(reader *r, char *out, size_t cap)
{
    const uint8_t *start = r->line.p;
    while (r->line.p < r->line.end && *r->line.p != ' ') {
        if (*r->line.p < 0x21 || *r->line.p > 0x7e) return 0; /* printable ASCII only */
        r->line.p++;
    }
    size_t n = (size_t)(r->line.p - start);
    if (n == 0 || n >= cap) return 0;
    memcpy(out, start, n);
    out[n] = 0;
    if (r->line.p < r->line.end) r->line.p++; /* the one space; a word must follow it */
    return r->line.p < r->line.end || r->line.p[-1] != ' ';
}

static int integer(reader *r, int64_t lo, int64_t hi, int64_t *out)
{
    char buf[24], *end;
    if (!word(r, buf, sizeof buf)) return 0;
    if (!((buf[0] >= '0' && buf[0] <= '9') || (buf[0] == '-' && buf[1] >= '0' && buf[1] <= '9'))) return 0;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (*end || errno || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int is_name(const char *s)
{
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_')) return 0;
    for (s++; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return 0;
    return 1;
}

/* A line `KEYWORD ...`: reads the keyword and returns whether it is `want`. */
static int record(reader *r, const char *want)
{
    char key[16];
    return next_line(r) && word(r, key, sizeof key) && strcmp(key, want) == 0;
}

static int line_done(const reader *r) { return r->line.p == r->line.end; }

static char *keep(cuvil_model *m, const char *s)
{
    char *out = cuvil_take(m, strlen(s) + 1);
    if (out) strcpy(out, s);
    return out;
}

static cuvil_status tensor_line(reader *r, const char *kind, cuvil_tensor_info *t, int *rank)
{
    char name[CUVIL_MAX_NAME + 2], dtype[8];
    int64_t v;
    if (!record(r, kind) || !word(r, name, sizeof name) || !is_name(name) || !word(r, dtype, sizeof dtype)
        || cuvil_dtype_from_name(dtype) < 0 || !integer(r, 0, CUVIL_MAX_RANK, &v) || !line_done(r))
        return bad(r, kind[0] == 'i' ? "expected `input NAME DTYPE RANK`" : "expected `output NAME DTYPE RANK`");
    t->name = keep(r->m, name);
    t->dtype = (cuvil_dtype)cuvil_dtype_from_name(dtype);
    t->rank = *rank = (int)v;
    t->dims = cuvil_take(r->m, (size_t)(v + 1) * sizeof(char *));
    return t->name && t->dims ? CUVIL_OK : cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
}

/* The rest of a `const INDEX OFFSET NBYTES` line: an index below `n` not seen before (`seen` per index: -1 until
 * then; `n` 0: no index, a `prepared` line's was read already), a range inside its section. */
static cuvil_status buffer_line(reader *r, const char *kind, int64_t n, uint64_t section_size, int64_t *seen,
                                int64_t *bytes, int64_t *at)
{
    int64_t j = 0, off, nb;
    if ((n > 0 && !integer(r, 0, n - 1, &j)) || !integer(r, 0, INT64_MAX, &off) || !integer(r, 0, INT64_MAX, &nb)
        || !line_done(r))
        return bad(r, kind[0] == 'c' ? "expected `const INDEX OFFSET NBYTES`" : "expected `prepared INDEX OFFSET NBYTES`");
    if (seen[j] != -1) return bad(r, "a constant index given twice");
    if (off % 64 || (uint64_t)off > section_size || (uint64_t)nb > section_size - (uint64_t)off)
        return bad(r, "a buffer that does not lie 64-byte aligned inside its section");
    seen[j] = at[j] = off;
    bytes[j] = nb;
    return CUVIL_OK;
}

/* The text of the check program's values, to print signatures and say which check failed. */
typedef struct { const char *text; int tensor, axis; } sym_value;

static const char *fmt(cuvil_model *m, const char *f, const char *a, const char *b)
{
    char buf[160];
    int n = snprintf(buf, sizeof buf, f, a, b);
    if (n >= (int)sizeof buf) strcpy(buf + sizeof buf - 4, "...");
    return keep(m, buf);
}

/* Parentheses around a sum used as a factor. */
static const char *factor(cuvil_model *m, const char *s) { return strchr(s, ' ') ? fmt(m, "(%s)%s", s, "") : s; }

/* The arrays behind the public `const char *const *dims` are the model's own. */
static void set_dim(cuvil_entry *e, int t, int axis, const char *text) { ((const char **)e->tensors[t].dims)[axis] = text; }

static cuvil_status describe(cuvil_model *m, cuvil_entry *e)
{
    sym_value st[CUVIL_CHECK_STACK];
    int sp = 0;
    char num[24];
    const int64_t *c = e->code;
    for (int pc = 0; pc < e->n_code;) {
        int at = pc;
        int64_t op = c[pc++];
        const int64_t *a = c + pc;
        pc += cuvil_check_ops[op].operands;
        sym_value v = {NULL, -1, -1}, *x = sp >= 2 ? &st[sp - 2] : NULL, *y = sp >= 1 ? &st[sp - 1] : NULL;
        cuvil_check_site *site = &e->sites[e->n_sites];
        switch (op) {
        case CUVIL_OP_CONST: snprintf(num, sizeof num, "%lld", (long long)a[0]); v.text = keep(m, num); break;
        case CUVIL_OP_SYM: v.text = e->symbols[a[0]]; break;
        case CUVIL_OP_DIM:
            snprintf(num, sizeof num, "[%d]", (int)a[1]);
            v.text = fmt(m, "%s.shape%s", e->tensors[a[0]].name, num);
            v.tensor = (int)a[0], v.axis = (int)a[1];
            break;
        case CUVIL_OP_ADD:
            v.text = strcmp(x->text, "0") == 0 ? y->text : strcmp(y->text, "0") == 0 ? x->text : fmt(m, "%s + %s", x->text, y->text);
            break;
        case CUVIL_OP_MUL:
            v.text = strcmp(x->text, "1") == 0 ? y->text : strcmp(y->text, "1") == 0 ? x->text
                     : fmt(m, "%s*%s", factor(m, x->text), factor(m, y->text));
            break;
        case CUVIL_OP_FLOORDIV: case CUVIL_OP_MOD:
            v.text = fmt(m, op == CUVIL_OP_MOD ? "%s %% %s" : "%s // %s", factor(m, x->text), y->text);
            *site = (cuvil_check_site){at, '/', -1, -1, v.text, NULL};
            e->n_sites++;
            break;
        case CUVIL_OP_EQ:
            if (y->tensor >= 0) {
                set_dim(e, y->tensor, y->axis, x->text);
                *site = (cuvil_check_site){at, 'd', y->tensor, y->axis, x->text, NULL};
            } else {
                e->relations[e->n_rel++] = fmt(m, "%s == %s", x->text, y->text);
                *site = (cuvil_check_site){at, '=', -1, -1, x->text, y->text};
            }
            e->n_sites++;
            break;
        case CUVIL_OP_GE:
            e->relations[e->n_rel++] = fmt(m, "%s >= %s", x->text, y->text);
            *site = (cuvil_check_site){at, '>', -1, -1, x->text, y->text};
            e->n_sites++;
            break;
        case CUVIL_OP_BIND:
            if (y->tensor >= 0) set_dim(e, y->tensor, y->axis, e->symbols[a[0]]);
            e->bound_from[a[0]] = y->text;
            break;
        case CUVIL_OP_OUT: {
            int j = 0, k = (int)a[0];
            while (k >= e->ranks[e->n_in + j]) k -= e->ranks[e->n_in + j++];
            set_dim(e, e->n_in + j, k, y->text);
            *site = (cuvil_check_site){at, 'o', e->n_in + j, k, y->text, NULL};
            e->n_sites++;
            break;
        }
        }
        if (v.text == NULL && cuvil_check_ops[op].pushes) return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
        sp += cuvil_check_ops[op].pushes - cuvil_check_ops[op].pops;
        if (cuvil_check_ops[op].pushes) st[sp - 1] = v;
    }
    for (int t = 0; t < e->n_in + e->n_out; t++)
        for (int k = 0; k < e->tensors[t].rank; k++)
            if (!e->tensors[t].dims[k]) set_dim(e, t, k, "?");
    return CUVIL_OK;
}

static cuvil_status checks_line(reader *r, cuvil_entry *e)
{
    cuvil_model *m = r->m;
    int64_t n;
    if (!record(r, "checks") || !integer(r, 0, (int64_t)(r->line.end - r->line.p), &n))
        return bad(r, "expected `checks N c0 ... cN-1`");
    e->n_code = (int)n;
    e->code = cuvil_take(m, (size_t)(n + 1) * sizeof(int64_t));
    e->sites = cuvil_take(m, (size_t)(n + 1) * sizeof(cuvil_check_site));
    e->relations = cuvil_take(m, (size_t)(n + 1) * sizeof(char *));
    uint8_t *bound = cuvil_take(m, (size_t)e->n_sym + 1), *written = cuvil_take(m, (size_t)e->out_dims + 1);
    if (!e->code || !e->sites || !e->relations || !bound || !written) return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    for (int64_t k = 0; k < n; k++)
        if (!integer(r, INT64_MIN, INT64_MAX, &e->code[k])) return bad(r, "a malformed check program");
    if (!line_done(r)) return bad(r, "more numbers than `checks N` says");
    int at = cuvil_checks_verify(e->code, e->n_code, e->n_in, e->ranks, e->n_sym, e->out_dims, bound, written);
    if (at) {
        char what[160];
        snprintf(what, sizeof what, "entry '%s': the check program is malformed at instruction %d", e->name, at - 1);
        return bad(r, what);
    }
    return describe(m, e);
}

static cuvil_status entry_lines(reader *r, cuvil_entry *e)
{
    cuvil_model *m = r->m;
    const cuvil_section *consts = cuvil_find_section(m, "consts"), *prep = cuvil_find_section(m, "prepared");
    int64_t v[5];
    const int64_t lim[5] = {CUVIL_MAX_TENSORS, CUVIL_MAX_TENSORS, CUVIL_MAX_SYMBOLS, 1 << 24, 1 << 24};
    int ok = word(r, e->name, sizeof e->name) && is_name(e->name) && word(r, e->prefix, sizeof e->prefix)
             && is_name(e->prefix);
    for (int k = 0; k < 5 && ok; k++) ok = integer(r, 0, lim[k], &v[k]);
    if (!ok || !line_done(r)) return bad(r, "expected `entry NAME PREFIX N_INPUTS N_OUTPUTS N_SYMBOLS N_CONSTS N_PREPARED`");
    int64_t lines_left = (int64_t)(r->text.end - r->text.p) / 8; /* every record takes more than 8 bytes */
    if (v[0] + v[1] + v[2] + v[3] + v[4] > lines_left) return bad(r, "more records announced than the text holds");
    e->n_in = (int)v[0], e->n_out = (int)v[1], e->n_sym = (int)v[2], e->n_const = (int)v[3], e->n_prep = (int)v[4];
    if ((e->n_const && !consts) || (e->n_prep && !prep)) return bad(r, "buffers in a section the file lacks");
    e->symbols = cuvil_take(m, (v[2] + 1) * sizeof(char *));
    e->bound_from = cuvil_take(m, (v[2] + 1) * sizeof(char *));
    e->tensors = cuvil_take(m, (v[0] + v[1] + 1) * sizeof(cuvil_tensor_info));
    e->ranks = cuvil_take(m, (v[0] + v[1] + 1) * sizeof(int));
    e->const_at = cuvil_take(m, (v[3] + 1) * sizeof(int64_t));
    e->const_bytes = cuvil_take(m, (v[3] + 1) * sizeof(int64_t));
    e->prep_at = cuvil_take(m, (v[4] + 1) * sizeof(int64_t));
    e->prep_index = cuvil_take(m, (v[4] + 1) * sizeof(int64_t));
    e->prep_bytes = cuvil_take(m, (v[4] + 1) * sizeof(int64_t));
    if (!e->symbols || !e->bound_from || !e->tensors || !e->ranks || !e->const_at || !e->const_bytes || !e->prep_at || !e->prep_bytes
        || !e->prep_index)
        return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    for (int k = 0; k < e->n_sym; k++) {
        char name[CUVIL_MAX_NAME + 2];
        if (!record(r, "symbol") || !word(r, name, sizeof name) || !is_name(name) || !line_done(r))
            return bad(r, "expected `symbol NAME`");
        if (!(e->symbols[k] = keep(m, name))) return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    }
    cuvil_status rc = CUVIL_OK;
    for (int k = 0; k < e->n_in + e->n_out && !rc; k++) {
        rc = tensor_line(r, k < e->n_in ? "input" : "output", &e->tensors[k], &e->ranks[k]);
        if (k >= e->n_in) e->out_dims += e->ranks[k];
    }
    if (rc) return rc;
    if (e->out_dims > CUVIL_MAX_OUT_DIMS) return bad(r, "too many output sizes");
    int64_t *at = e->const_at, *bytes = e->const_bytes;
    for (int k = 0; k < e->n_const; k++) at[k] = -1;
    for (int k = 0; k < e->n_const && !rc; k++) {
        char key[16];
        int64_t j;
        if (!next_line(r) || !word(r, key, sizeof key)) rc = bad(r, "expected `const INDEX OFFSET NBYTES`");
        else if (strcmp(key, "const") == 0) rc = buffer_line(r, "const", e->n_const, consts ? consts->size : 0, at, bytes, at);
        else if (strcmp(key, "derived") != 0 || !integer(r, 0, e->n_const - 1, &j) || !line_done(r))
            rc = bad(r, "expected `const INDEX OFFSET NBYTES` or `derived INDEX`");
        else if (at[j] != -1) rc = bad(r, "a constant index given twice");
        else at[j] = CUVIL_DERIVED, bytes[j] = 0;
    }
    /* Prepared buffers: N_PREPARED lines give the saved ones; the library says how many there are in all
     * (PREFIX packed_count), so the loader checks the indices against that (cuvil_runtime.c). */
    for (int k = 0; k < e->n_prep && !rc; k++) {
        int64_t none = -1;
        rc = record(r, "prepared") && integer(r, 0, INT32_MAX, &e->prep_index[k])
                 ? buffer_line(r, "prepared", 0, prep ? prep->size : 0, &none, &e->prep_bytes[k], &e->prep_at[k])
                 : bad(r, "expected `prepared INDEX OFFSET NBYTES`");
    }
    return rc;
}

static cuvil_status check_entries(cuvil_model *m)
{
    const cuvil_section *s = cuvil_find_section(m, "entries");
    reader r = {m, {m->data + s->offset, m->data + s->offset + s->size}, {NULL, NULL}, 0};
    char head[16];
    int64_t version;
    if (!next_line(&r) || !word(&r, head, sizeof head) || strcmp(head, "cuvil-entries") != 0
        || !integer(&r, 1, 1, &version) || !line_done(&r))
        return bad(&r, "expected `cuvil-entries 1`");
    m->entries = cuvil_take(m, CUVIL_MAX_ENTRIES * sizeof(cuvil_entry));
    if (!m->entries) return cuvil_fail(CUVIL_ERR_MEMORY, "out of memory");
    while (r.text.p < r.text.end) {
        if (m->n_entries == CUVIL_MAX_ENTRIES) return bad(&r, "too many entries");
        if (!record(&r, "entry")) return bad(&r, "expected `entry ...`");
        cuvil_entry *e = &m->entries[m->n_entries];
        cuvil_status rc = entry_lines(&r, e);
        if (!rc) rc = checks_line(&r, e);
        if (rc) return rc;
        if (!record(&r, "end") || !line_done(&r)) return bad(&r, "expected `end`");
        for (int k = 0; k < m->n_entries; k++)
            if (strcmp(m->entries[k].name, e->name) == 0 || strcmp(m->entries[k].prefix, e->prefix) == 0)
                return bad(&r, "two entries with one name or prefix");
        m->n_entries++;
    }
    if (m->n_entries == 0) return bad(&r, "no entry");
    return CUVIL_OK;
}

cuvil_status cuvil_check_file(cuvil_model *m)
{
    uint64_t table_at = 0;
    uint32_t count = 0;
    cuvil_status rc = check_header(m, &table_at, &count);
    if (!rc) rc = check_table(m, table_at, count);
    if (!rc) rc = check_digests(m);
    if (!rc) rc = check_meta(m);
    if (!rc) rc = check_entries(m);
    return rc;
}
