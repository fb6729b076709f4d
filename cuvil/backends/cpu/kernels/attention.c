/* Fused attention (passes/attention.py's group): O = softmax(scale Q K^T + mask) V for each batch item, a block of
 * query rows at a time. The block's scores live in a buffer of the thread's (sized to stay in L2), so the scores
 * never make a round trip through memory, and the softmax runs on them between the two GEMMs. Blocks are split over
 * the pool; each block's GEMMs run on its thread alone. */

#include <math.h>

#define ATTENTION_SCORES_FLOATS (1 << 16) /* a block's scores: 256 KB, in L2 with the block's Q and output */
#define ATTENTION_MIN_ROWS 12             /* the fewest query rows of a block (two GEMM row tiles) */

typedef struct {
    const cuvil_attention_t *a;
    int64_t block, blocks_per_item, ld; /* rows a block, blocks a batch item, a score row's stride */
} attention_job_t;

static float hmax(vf x)
{
    float m = x[0];
    for (int l = 1; l < VL; l++) m = x[l] > m ? x[l] : m;
    return m;
}

static float hsum(vf x)
{
    float s = 0.0f;
    for (int l = 0; l < VL; l++) s += x[l];
    return s;
}

static void fill_row(float *s, int64_t n, float value)
{
    for (int64_t j = 0; j < n; j++) s[j] = value;
}

/* The exponentials of the softmax of s[0, n) in place, s with room for `padded` floats (a multiple of VL); returns
 * the factor that normalises them, which the caller applies to the row's output (dv floats, not n). A row without
 * a key left (all -inf) is NaN, as the softmax's reference, or 0 when the model guards it (guarded 1 or 2): its
 * exponentials are 0 and the factor NaN or 0. With guarded 2 (an isnan guard) a row whose softmax is NaN gives 0
 * too. */
static float softmax_row(float *s, int64_t n, int64_t padded, int guarded)
{
    fill_row(s + n, padded - n, -INFINITY);
    vf m = cuvil_splat(-INFINITY);
    for (int64_t j = 0; j < padded; j += VL) m = cuvil_max(m, cuvil_load(s + j));
    float top = hmax(m);
    if (top == -INFINITY) { /* no key left, or only NaN beside -inf: a NaN row, which the -inf guard keeps */
        int nan = 0;
        for (int64_t j = 0; j < n; j++) nan |= s[j] != s[j];
        fill_row(s, n, 0.0f);
        return guarded == 2 || (guarded && !nan) ? 0.0f : NAN;
    } /* elsewhere a NaN makes the sum NaN, so the row */
    vf sum = cuvil_splat(0.0f), shift = cuvil_splat(top);
    for (int64_t j = 0; j < padded; j += VL) {
        /* x <= 0 (or NaN): below -87.3, where exp leaves the normal range, 0 (under 1.2e-38 of a sum >= 1, and a
         * masked key's exact 0); so exp needs no subnormal scaling and no upper clamp */
        vf x = cuvil_load(s + j) - shift;
        vf e = cuvil_select(x < cuvil_splat(-87.3f), cuvil_splat(0.0f), cuvil_v_exp_normal(x));
        cuvil_store(s + j, e);
        sum += e;
    }
    float total = hsum(sum);
    if (guarded == 2 && total != total) { /* NaN in the row's softmax: the isnan guard gives 0 */
        fill_row(s, n, 0.0f);
        return 0.0f;
    }
    return 1.0f / total;
}

/* o[0, n) *= f: a row's softmax normalised after its weighted sum. */
static void scale_row(float *o, int64_t n, float f)
{
    for (int64_t j = 0; j < n; j++) o[j] *= f;
}

/* A batch item's K^T and V packed for the GEMMs (cuvil_sgemm_pack_b's layout), once for all its blocks in a chunk:
 * each block's GEMMs would pack them again (K^T from strided rows, the slow direction). */
typedef struct {
    int64_t item; /* the batch item packed, or -1 */
    float *k, *v;
} packed_kv_t;

static void pack_item(const cuvil_attention_t *a, int64_t b, packed_kv_t *p)
{
    const float *k = a->k + b * a->keys * a->d;
    if (a->k_transposed) cuvil_sgemm_pack_b_serial(a->d, a->keys, k, a->keys, 1, p->k);
    else cuvil_sgemm_pack_b_serial(a->d, a->keys, k, 1, a->d, p->k);
    cuvil_sgemm_pack_b_serial(a->keys, a->dv, a->v + b * a->keys * a->dv, a->dv, 1, p->v);
    p->item = b;
}

/* Scores of `rows` query rows from row r0 of batch item b: scale Q K^T (K^T packed, or NULL: as stored), plus the
 * mask. */
static void block_scores(const cuvil_attention_t *a, int64_t b, int64_t r0, int64_t rows, const float *packed_k,
                         float *s, int64_t ld)
{
    const float *q = a->q + (b * a->rows + r0) * a->d, *k = a->k + b * a->keys * a->d;
    if (packed_k)
        cuvil_sgemm_packed_serial(rows, a->keys, a->d, a->scale, q, a->d, 1, packed_k, 0.0f, s, ld, NULL, 0);
    else if (a->k_transposed)
        cuvil_sgemm_serial(rows, a->keys, a->d, a->scale, q, a->d, 1, k, a->keys, 1, 0.0f, s, ld, NULL, 0);
    else
        cuvil_sgemm_serial(rows, a->keys, a->d, a->scale, q, a->d, 1, k, 1, a->d, 0.0f, s, ld, NULL, 0);
    if (!a->mask) return;
    for (int64_t i = 0; i < rows; i++) {
        int64_t at = (b * a->rows + r0 + i) * a->keys;
        float *si = s + i * ld;
        if (a->mask_kind == CUVIL_ATTENTION_ADD) {
            const float *m = (const float *)a->mask + at;
            for (int64_t j = 0; j < a->keys; j++) si[j] += m[j];
        } else {
            const uint8_t *keep = (const uint8_t *)a->mask + at;
            for (int64_t j = 0; j < a->keys; j++) si[j] = keep[j] ? si[j] : -INFINITY;
        }
    }
}

static int attention_blocks(void *ctx, int64_t lo, int64_t hi)
{
    const attention_job_t *job = ctx;
    const cuvil_attention_t *a = job->a;
    int64_t bpi = job->blocks_per_item, kn = cuvil_sgemm_packed_size(a->d, a->keys);
    int64_t packed_floats = bpi > 1 ? kn + cuvil_sgemm_packed_size(a->keys, a->dv) : 0;
    float *s = alloc_or_die(sizeof(float) * (job->block * (job->ld + 1) + packed_floats + VL));
    float *norm = s + job->block * job->ld;
    packed_kv_t kv = {-1, s + ceil_div(job->block * (job->ld + 1), VL) * VL, NULL};
    kv.v = kv.k + kn;
    for (int64_t w = lo; w < hi; w++) {
        int64_t b = w / bpi, r0 = w % bpi * job->block;
        int64_t rows = min64(job->block, a->rows - r0);
        float *o = a->o + (b * a->rows + r0) * a->dv;
        if (packed_floats && kv.item != b && min64(hi, (b + 1) * bpi) - w > 1) /* two blocks of b here, or more */
            pack_item(a, b, &kv);
        int packed = kv.item == b;
        block_scores(a, b, r0, rows, packed ? kv.k : NULL, s, job->ld);
        for (int64_t i = 0; i < rows; i++) norm[i] = softmax_row(s + i * job->ld, a->keys, job->ld, a->guarded);
        if (packed)
            cuvil_sgemm_packed_serial(rows, a->dv, a->keys, 1.0f, s, job->ld, 1, kv.v, 0.0f, o, a->dv, NULL, 0);
        else
            cuvil_sgemm_serial(rows, a->dv, a->keys, 1.0f, s, job->ld, 1, a->v + b * a->keys * a->dv, a->dv, 1,
                               0.0f, o, a->dv, NULL, 0);
        for (int64_t i = 0; i < rows; i++) scale_row(o + i * a->dv, a->dv, norm[i]);
    }
    free(s);
    return 0;
}

void cuvil_attention(const cuvil_attention_t *a)
{
    if (a->batch <= 0 || a->rows <= 0 || a->dv <= 0) return;
    if (a->keys <= 0) { /* no key at all: every row's softmax is empty */
        fill_row(a->o, a->batch * a->rows * a->dv, a->guarded ? 0.0f : NAN);
        return;
    }
    attention_job_t job = {a, 0, 0, ceil_div(a->keys, VL) * VL};
    int nt = threads_for(a->batch * a->rows * a->keys * (a->d + a->dv));
    /* whole GEMM row tiles a block (a multiple of ATTENTION_MIN_ROWS), and enough blocks to share out */
    job.block = min64(a->rows, max64(1, ATTENTION_SCORES_FLOATS / job.ld / ATTENTION_MIN_ROWS) * ATTENTION_MIN_ROWS);
    while (job.block > ATTENTION_MIN_ROWS && a->batch * ceil_div(a->rows, job.block) < 4 * nt)
        job.block = ceil_div(ceil_div(job.block, 2), ATTENTION_MIN_ROWS) * ATTENTION_MIN_ROWS;
    job.blocks_per_item = ceil_div(a->rows, job.block);
    cuvil_parallel_team(a->batch * job.blocks_per_item, nt, attention_blocks, &job);
}
