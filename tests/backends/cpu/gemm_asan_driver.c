/* Runs every entry point of the kernel library (GEMMs, depthwise conv) on odd shapes with exactly-sized heap
 * buffers, for AddressSanitizer (tests/backends/cpu/test_gemm.py compiles it with the library's sources and
 * -fsanitize=address). Exit status 1 on a wrong result; ASan aborts on any out-of-bounds access. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuvil_kernels.h"

static float *random_buffer(int64_t n, unsigned *seed)
{
    float *p = malloc(sizeof(float) * (n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = (float)(rand_r(seed) % 2001 - 1000) / 1000.0f;
    return p;
}

/* ref = relu(A @ B + bias[j] + row_bias[i] + 0.5 C) with A given by (rsa, csa) and B by (rsb, csb), in double;
 * either bias may be NULL. */
static int check(int64_t M, int64_t N, int64_t K, const float *A, int64_t rsa, int64_t csa, const float *B,
                 int64_t rsb, int64_t csb, const float *C0, const float *bias, const float *row_bias, const float *C,
                 const char *what)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = (bias ? bias[j] : 0.0) + (row_bias ? row_bias[i] : 0.0) + 0.5 * C0[i * N + j];
            for (int64_t k = 0; k < K; k++) s += (double)A[i * rsa + k * csa] * B[k * rsb + j * csb];
            s = s > 0 ? s : 0;
            if (fabs(C[i * N + j] - s) > 1e-4 * (1 + sqrt((double)K))) {
                printf("%s M=%ld N=%ld K=%ld: C[%ld,%ld] = %g, expected %g\n", what, (long)M, (long)N, (long)K,
                       (long)i, (long)j, C[i * N + j], s);
                return 1;
            }
        }
    return 0;
}

static int run_shape(int64_t M, int64_t N, int64_t K, unsigned seed)
{
    int bad = 0;
    float *A = random_buffer(M * K, &seed), *B = random_buffer(K * N, &seed), *C0 = random_buffer(M * N, &seed);
    float *bias = random_buffer(N, &seed), *C = malloc(sizeof(float) * (M * N > 0 ? M * N : 1));
    float *row_bias = random_buffer(M, &seed);
    float *packed = malloc(sizeof(float) * (cuvil_sgemm_packed_size(K, N) + 1));
    for (int layout = 0; layout < 4; layout++) { /* A row-major or transposed, B row-major or transposed */
        int64_t rsa = layout & 1 ? 1 : K, csa = layout & 1 ? M : 1, rsb = layout & 2 ? 1 : N, csb = layout & 2 ? K : 1;
        for (int64_t i = 0; i < M * N; i++) C[i] = C0[i];
        cuvil_sgemm(M, N, K, 1.0f, A, rsa, csa, B, rsb, csb, 0.5f, C, N, bias, CUVIL_ACT_RELU);
        bad |= check(M, N, K, A, rsa, csa, B, rsb, csb, C0, bias, NULL, C, "sgemm");
        cuvil_sgemm_pack_b(K, N, B, rsb, csb, packed);
        for (int64_t i = 0; i < M * N; i++) C[i] = C0[i];
        cuvil_sgemm_packed(M, N, K, 1.0f, A, rsa, csa, packed, 0.5f, C, N, bias, CUVIL_ACT_RELU);
        bad |= check(M, N, K, A, rsa, csa, B, rsb, csb, C0, bias, NULL, C, "sgemm_packed");
        for (int64_t i = 0; i < M * N; i++) C[i] = C0[i];
        cuvil_sgemm_batched(1, M, N, K, 1.0f, A, rsa, csa, 0, B, rsb, csb, 0, 0.5f, C, N, 0, bias, CUVIL_ACT_RELU);
        bad |= check(M, N, K, A, rsa, csa, B, rsb, csb, C0, bias, NULL, C, "sgemm_batched");
        for (int64_t i = 0; i < M * N; i++) C[i] = C0[i];
        cuvil_sgemm_row_bias(M, N, K, 1.0f, A, rsa, csa, B, rsb, csb, 0.5f, C, N, row_bias, CUVIL_ACT_RELU);
        bad |= check(M, N, K, A, rsa, csa, B, rsb, csb, C0, NULL, row_bias, C, "sgemm_row_bias");
    }
    cuvil_activation(CUVIL_ACT_GELU_TANH, N, bias, bias);
    free(A), free(B), free(C0), free(bias), free(row_bias), free(C), free(packed);
    return bad;
}

/* Depthwise conv with geometry g (H, W, OH, OW, KH, KW, SH, SW, DH, DW, PT, PL), C channels times mult,
 * against a reference in double; relu6 epilogue. */
static int run_dwconv(const int64_t *g, int64_t batch, int64_t C, int64_t mult, unsigned seed)
{
    const int64_t O = C * mult, in = g[0] * g[1], out = g[2] * g[3], taps = g[4] * g[5];
    float *x = random_buffer(batch * C * in, &seed), *w = random_buffer(O * taps, &seed);
    float *bias = random_buffer(O, &seed), *y = malloc(sizeof(float) * (batch * O * out > 0 ? batch * O * out : 1));
    cuvil_dwconv2d(batch, C, O, x, w, bias, y, g, 0.0f, 6.0f);
    int bad = 0;
    for (int64_t q = 0; q < batch * O && !bad; q++)
        for (int64_t oy = 0; oy < g[2]; oy++)
            for (int64_t ox = 0; ox < g[3]; ox++) {
                const int64_t o = q % O;
                const float *xp = x + (q / O * C + o / mult) * in;
                double s = bias[o];
                for (int64_t t = 0; t < taps; t++) {
                    int64_t iy = oy * g[6] + t / g[5] * g[8] - g[10], ix = ox * g[7] + t % g[5] * g[9] - g[11];
                    if (iy >= 0 && iy < g[0] && ix >= 0 && ix < g[1]) s += (double)w[o * taps + t] * xp[iy * g[1] + ix];
                }
                s = s < 0 ? 0 : s > 6 ? 6 : s;
                if (fabs(y[q * out + oy * g[3] + ox] - s) > 1e-4 * (1 + fabs(s))) {
                    printf("dwconv %ldx%ld k%ldx%ld s%ld: y[%ld,%ld,%ld] = %g, expected %g\n", (long)g[0], (long)g[1],
                           (long)g[4], (long)g[5], (long)g[6], (long)q, (long)oy, (long)ox, y[q * out + oy * g[3] + ox], s);
                    bad = 1;
                }
            }
    free(x), free(w), free(bias), free(y);
    return bad;
}

/* Attention on exactly-sized buffers: batch x rows queries of d, keys of d (transposed or not), values of dv, an
 * additive or keep mask, against a reference in double. */
static int run_attention(const int64_t *g, int mask_kind, int k_transposed, unsigned seed)
{
    int64_t batch = g[0], rows = g[1], keys = g[2], d = g[3], dv = g[4];
    float *q = random_buffer(batch * rows * d, &seed), *k = random_buffer(batch * keys * d, &seed);
    float *v = random_buffer(batch * keys * dv, &seed), *o = malloc(sizeof(float) * (batch * rows * dv + 1));
    float *add = random_buffer(batch * rows * keys, &seed);
    unsigned char *keep = malloc(batch * rows * keys + 1);
    for (int64_t i = 0; i < batch * rows * keys; i++) keep[i] = (i % 3) != 0;
    const void *mask = mask_kind == CUVIL_ATTENTION_ADD ? (const void *)add : mask_kind ? (const void *)keep : NULL;
    cuvil_attention_t a = {batch, rows, keys, d, dv, q, k, v, mask, mask_kind, k_transposed, 1, 0.37f, o};
    cuvil_attention(&a);
    int bad = 0;
    double *p = malloc(sizeof(double) * (keys + 1));
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < rows; i++) {
            double top = -INFINITY, sum = 0.0;
            for (int64_t j = 0; j < keys; j++) {
                double s = 0.0;
                for (int64_t c = 0; c < d; c++)
                    s += (double)q[(b * rows + i) * d + c] *
                         k[k_transposed ? (b * d + c) * keys + j : (b * keys + j) * d + c];
                int64_t at = (b * rows + i) * keys + j;
                s = s * 0.37 + (mask_kind == CUVIL_ATTENTION_ADD ? add[at] : 0.0);
                p[j] = mask_kind == CUVIL_ATTENTION_KEEP && !keep[at] ? -INFINITY : s;
                top = p[j] > top ? p[j] : top;
            }
            for (int64_t j = 0; j < keys; j++) sum += p[j] = top == -INFINITY ? 0.0 : exp(p[j] - top);
            for (int64_t c = 0; c < dv; c++) {
                double want = 0.0;
                for (int64_t j = 0; j < keys; j++) want += p[j] / (sum > 0 ? sum : 1.0) * v[(b * keys + j) * dv + c];
                if (fabs(want - o[(b * rows + i) * dv + c]) > 1e-4) bad = 1;
            }
        }
    if (bad) printf("attention %lld %lld %lld %lld %lld mask %d kt %d: wrong\n", (long long)batch, (long long)rows,
                    (long long)keys, (long long)d, (long long)dv, mask_kind, k_transposed);
    free(q), free(k), free(v), free(o), free(add), free(keep), free(p);
    return bad;
}

int main(void)
{
    static const int64_t convs[][12] = {
        {7, 7, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1}, {14, 13, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1}, {1, 1, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1},
        {9, 20, 5, 10, 5, 5, 2, 2, 1, 1, 2, 2}, {5, 4, 8, 7, 3, 3, 1, 1, 1, 1, 3, 2}, {3, 40, 1, 38, 3, 3, 1, 1, 1, 1, 0, 0},
        {13, 14, 13, 14, 3, 3, 1, 1, 2, 2, 2, 2}, {11, 10, 5, 10, 3, 5, 2, 1, 1, 1, 1, 2}, {1, 37, 1, 19, 1, 3, 1, 2, 1, 1, 0, 1},
    };
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {0, 5, 3}, {4, 0, 3}, {3, 4, 0}, {2, 3, 5}, {1, 37, 300}, {1, 1000, 9}, {5, 1, 9},
        {7, 33, 17}, {6, 64, 256}, {6, 130, 40}, {13, 65, 257}, {29, 129, 300}, {50, 70, 520}, {9, 600, 20},
        {7, 193, 769}, {3, 577, 1537},
    };
    static const int64_t attentions[][5] = {
        {1, 1, 1, 1, 1}, {3, 7, 13, 5, 9}, {2, 40, 2000, 16, 8}, {12, 1, 129, 64, 64}, {1, 33, 3, 3, 17}, {2, 0, 4, 4, 4},
        /* several blocks of rows an item: K and V packed once for them */
        {3, 100, 1500, 5, 9}, {2, 90, 600, 7, 3}, {2, 30, 700, 0, 3},
    };
    int bad = 0;
    for (int threads = 1; threads <= 2; threads++) {
        cuvil_set_num_threads(threads);
        for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            bad |= run_shape(shapes[s][0], shapes[s][1], shapes[s][2], s);
        for (unsigned s = 0; s < sizeof convs / sizeof convs[0]; s++)
            bad |= run_dwconv(convs[s], 1 + s % 2, 3 + s % 4, 1 + s % 3 / 2, s);
        for (unsigned s = 0; s < sizeof attentions / sizeof attentions[0]; s++)
            bad |= run_attention(attentions[s], s % 3, s % 2, s);
    }
    puts(bad ? "FAILED" : "OK");
    return bad;
}
