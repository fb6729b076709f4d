/* Four threads calling cuvil_parallel_team at once on teams of 3 (one job at a time; the others run inline), 200
 * loops each, under ThreadSanitizer: test_pool_tsan.py. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "cuvil_kernels.h"

static int add_one(void *ctx, int64_t lo, int64_t hi)
{
    float *x = ctx;
    for (int64_t i = lo; i < hi; i++)
        x[i] += 1.0f;
    return 0;
}

static void *caller(void *arg)
{
    int64_t n = (int64_t)(intptr_t)arg;
    float *x = calloc((size_t)n, sizeof *x);
    for (int r = 0; r < 200; r++)
        cuvil_parallel_team(n, 3, add_one, x);
    for (int64_t i = 0; i < n; i++)
        if (x[i] != 200.0f) { printf("wrong at %lld: %g\n", (long long)i, x[i]); exit(1); }
    free(x);
    return NULL;
}

int main(void)
{
    cuvil_set_num_threads(3);
    pthread_t t[4];
    for (int k = 0; k < 4; k++)
        pthread_create(&t[k], NULL, caller, (void *)(intptr_t)(4099 + 1000 * k));
    for (int k = 0; k < 4; k++)
        pthread_join(t[k], NULL);
    puts("pool tsan ok");
    return 0;
}
