/* The GEMM's epilogue (store_tile, cuvil_gemm.h) and the elementwise activation binding. Every path applies the
 * activation through activate_tile: one compiled copy of the vector math, not three (it was half this unit's compile). */
#include <string.h>

#include "cuvil_gemm.h"

/* ---- the epilogue: C = act(alpha acc + bias + beta C), applied per K block as the tile leaves registers ---- */

CUVIL_INLINE vf finish(const gemm_t *g, vf x, const float *c, vf bias, int first, int last)
{
    if (g->alpha != 1.0f) x *= g->alpha;
    if (!first) x += cuvil_load(c);
    else if (g->beta != 0.0f) x += g->beta * cuvil_load(c);
    return last ? x + bias : x;
}

CUVIL_INLINE vf relu(vf x) { return cuvil_activate(x, CUVIL_ACT_RELU); }
CUVIL_INLINE vf relu6(vf x) { return cuvil_activate(x, CUVIL_ACT_RELU6); }

#define ACT_CASE(code, fn)                                                                         \
    case code:                                                                                     \
        for (int r = 0; r < mr; r++)                                                               \
            for (int v = 0; v < NV; v++) cuvil_store(c + r * ldc + v * VL, fn(cuvil_load(c + r * ldc + v * VL))); \
        break;

/* The activation as a second pass over a whole tile that is still in L1, one loop per activation. */
static void activate_tile(float *c, int64_t ldc, int mr, int act)
{
    switch (act) {
        ACT_CASE(CUVIL_ACT_RELU, relu)
        ACT_CASE(CUVIL_ACT_GELU_TANH, cuvil_v_gelu_tanh)
        ACT_CASE(CUVIL_ACT_GELU_ERF, cuvil_v_gelu_erf)
        ACT_CASE(CUVIL_ACT_SIGMOID, cuvil_v_sigmoid)
        ACT_CASE(CUVIL_ACT_TANH, cuvil_v_tanh)
        ACT_CASE(CUVIL_ACT_RELU6, relu6)
        ACT_CASE(CUVIL_ACT_SILU, cuvil_v_silu)
        ACT_CASE(CUVIL_ACT_HARDSWISH, cuvil_v_hardswish)
    default: break;
    }
}

/* Store rows [i, i+mr) x columns [j, j+nr) of C. Whole tiles take one or two FMAs per vector and no branches;
 * a partial tile goes through a padded copy. */
CUVIL_GEMM_PART void store_tile(const gemm_t *g, vf acc[MR][NV], int mr, int nr, int64_t i, int64_t j, int first, int last)
{
    const float *bias = g->bias && last ? g->bias + j : NULL;
    const float *row_bias = g->row_bias && last ? g->row_bias + i : NULL;
    float *c = g->C + i * g->ldc + j;
    if (nr == NR) {
        float alpha = g->alpha, cscale = first ? g->beta : 1.0f;
        int64_t ldc = g->ldc;
        vf add[NV];
        for (int v = 0; v < NV; v++) add[v] = bias ? cuvil_load(bias + v * VL) : (vf){0};
        if (cscale == 0.0f) {
            for (int r = 0; r < mr; r++) {
                vf row_add = row_bias ? cuvil_splat(row_bias[r]) : (vf){0};
                for (int v = 0; v < NV; v++) cuvil_store(c + r * ldc + v * VL, acc[r][v] * alpha + (add[v] + row_add));
            }
        } else {
            for (int r = 0; r < mr; r++) {
                vf row_add = row_bias ? cuvil_splat(row_bias[r]) : (vf){0};
                for (int v = 0; v < NV; v++) {
                    float *cv = c + r * ldc + v * VL;
                    cuvil_store(cv, acc[r][v] * alpha + (cuvil_load(cv) * cscale + (add[v] + row_add)));
                }
            }
        }
        if (last) activate_tile(c, ldc, mr, g->act);
        return;
    }
    float row[NR] __attribute__((aligned(64))), bias_pad[NR] __attribute__((aligned(64)));
    int reads_c = !first || g->beta != 0.0f;
    memset(bias_pad, 0, sizeof bias_pad);
    if (bias) memcpy(bias_pad, bias, sizeof(float) * nr);
    for (int r = 0; r < mr; r++) {
        float *crow = c + r * g->ldc;
        vf row_add = row_bias ? cuvil_splat(row_bias[r]) : (vf){0};
        memset(row, 0, sizeof row);
        if (reads_c) memcpy(row, crow, sizeof(float) * nr);
        for (int v = 0; v < NV; v++)
            cuvil_store(row + v * VL, finish(g, acc[r][v], row + v * VL, cuvil_load(bias_pad + v * VL) + row_add,
                                             first, last));
        if (last) activate_tile(row, NR, 1, g->act);
        memcpy(crow, row, sizeof(float) * nr);
    }
}

/* Whole rows of a tile at a time (in place where y == x: the int8 and 16-bit GEMMs' epilogues), the tail padded. */
void cuvil_activation(int act, int64_t n, const float *x, float *y)
{
    int64_t i = 0;
    for (; i + NR <= n; i += NR) {
        if (y != x) memcpy(y + i, x + i, sizeof(float) * NR);
        activate_tile(y + i, NR, 1, act);
    }
    if (i < n) {
        float tmp[NR] __attribute__((aligned(64))) = {0};
        memcpy(tmp, x + i, sizeof(float) * (n - i));
        activate_tile(tmp, NR, 1, act);
        memcpy(y + i, tmp, sizeof(float) * (n - i));
    }
}
