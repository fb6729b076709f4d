/* Runs every GEMM entry point on odd shapes with exactly-sized heap buffers, for AddressSanitizer
 * (tests/backends/cpu/test_gemm.py compiles it with gemm.c and -fsanitize=address). Exit status 1 on a
 * wrong result; ASan aborts on any out-of-bounds access. */
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

/* ref = relu(A @ B + bias + 0.5 C) with A given by (rsa, csa) and B by (rsb, csb), in double. */
static int check(int64_t M, int64_t N, int64_t K, const float *A, int64_t rsa, int64_t csa, const float *B,
                 int64_t rsb, int64_t csb, const float *C0, const float *bias, const float *C, const char *what)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = bias[j] + 0.5 * C0[i * N + j];
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
    float *packed = malloc(sizeof(float) * (cuvil_sgemm_packed_size(K, N) + 1));
    for (int layout = 0; layout < 4; layout++) { /* A row-major or transposed, B row-major or transposed */
        int64_t rsa = layout & 1 ? 1 : K, csa = layout & 1 ? M : 1, rsb = layout & 2 ? 1 : N, csb = layout & 2 ? K : 1;
        for (int64_t i = 0; i < M * N; i++) C[i] = C0[i];
        cuvil_sgemm(M, N, K, 1.0f, A, rsa, csa, B, rsb, csb, 0.5f, C, N, bias, CUVIL_ACT_RELU);
        bad |= check(M, N, K, A, rsa, csa, B, rsb, csb, C0, bias, C, "sgemm");
        cuvil_sgemm_pack_b(K, N, B, rsb, csb, packed);
        for (int64_t i = 0; i < M * N; i++) C[i] = C0[i];
        cuvil_sgemm_packed(M, N, K, 1.0f, A, rsa, csa, packed, 0.5f, C, N, bias, CUVIL_ACT_RELU);
        bad |= check(M, N, K, A, rsa, csa, B, rsb, csb, C0, bias, C, "sgemm_packed");
        for (int64_t i = 0; i < M * N; i++) C[i] = C0[i];
        cuvil_sgemm_batched(1, M, N, K, 1.0f, A, rsa, csa, 0, B, rsb, csb, 0, 0.5f, C, N, 0, bias, CUVIL_ACT_RELU);
        bad |= check(M, N, K, A, rsa, csa, B, rsb, csb, C0, bias, C, "sgemm_batched");
    }
    cuvil_activation(CUVIL_ACT_GELU_TANH, N, bias, bias);
    free(A), free(B), free(C0), free(bias), free(C), free(packed);
    return bad;
}

int main(void)
{
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {0, 5, 3}, {4, 0, 3}, {3, 4, 0}, {2, 3, 5}, {1, 37, 300}, {1, 1000, 9}, {5, 1, 9},
        {7, 33, 17}, {6, 64, 256}, {6, 130, 40}, {13, 65, 257}, {29, 129, 300}, {50, 70, 520}, {9, 600, 20},
    };
    int bad = 0;
    for (int threads = 1; threads <= 2; threads++) {
        cuvil_set_num_threads(threads);
        for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            bad |= run_shape(shapes[s][0], shapes[s][1], shapes[s][2], s);
    }
    puts(bad ? "FAILED" : "OK");
    return bad;
}
