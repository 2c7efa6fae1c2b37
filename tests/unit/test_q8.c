/* test_q8.c — int8 matvec (kernels/q8.h): every variant against the scalar reference and a
 * double-precision evaluation of the same quantized product; quantization error against the
 * unquantized bf16 product; bit-identical results for 1, 2 and 3 threads.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/kernels.h"
#include "kernels/q8.h"
#include "tests/unit/helpers/matref.h"
#include "tests/unit/helpers/run.h"

enum { N_OUT = 203, N_IN = 768 }; /* odd row count: blocked rows plus tails */

static uint16_t *g_w;
static float *g_x, *g_bias;
static int8_t *g_q, *g_xq;
static float *g_scale, *g_xs;

static int setup(void **st) {
    (void)st;
    uint32_t s = 12345;
    g_w = qvk_alloc(sizeof(uint16_t) * N_OUT * N_IN);
    g_x = qvk_alloc(sizeof(float) * N_IN);
    g_bias = qvk_alloc(sizeof(float) * N_OUT);
    g_q = qvk_alloc((size_t)N_OUT * N_IN);
    g_scale = qvk_alloc(sizeof(float) * N_OUT);
    g_xq = qvk_alloc(N_IN);
    g_xs = qvk_alloc(sizeof(float) * N_IN / QVK_Q8_GROUP);
    float *row = malloc(sizeof(float) * N_IN);
    for (int r = 0; r < N_OUT; r++) {
        float amp = 0.01f * (1 + r % 7); /* rows of different magnitude */
        for (int i = 0; i < N_IN; i++)
            row[i] = amp * matref_rand(&s);
        if (r == 5)
            for (int i = 0; i < N_IN; i++)
                row[i] = 0; /* an all-zero row */
        qvk_f32_to_bf16(g_w + (size_t)r * N_IN, row, N_IN);
        g_bias[r] = 0.1f * matref_rand(&s);
    }
    for (int i = 0; i < N_IN; i++)
        g_x[i] = matref_rand(&s) * (i == 300 ? 20.0f : 1.0f); /* one outlier, in group 2 */
    free(row);
    assert_int_equal(qvk_q8_quantize_bf16(NULL, g_q, g_scale, g_w, N_OUT, N_IN), 0);
    qvk_q8_quantize_x(g_xq, g_xs, g_x, N_IN);
    return 0;
}

static int teardown(void **st) {
    (void)st;
    qvk_free(g_w), qvk_free(g_x), qvk_free(g_bias), qvk_free(g_q), qvk_free(g_scale);
    qvk_free(g_xq), qvk_free(g_xs);
    return 0;
}

/* The quantized product evaluated in double. */
static double ref_q(int r) {
    double acc = 0;
    for (int g = 0; g < N_IN / QVK_Q8_GROUP; g++) {
        long d = 0;
        for (int i = g * QVK_Q8_GROUP; i < (g + 1) * QVK_Q8_GROUP; i++)
            d += (long)g_q[(size_t)r * N_IN + i] * g_xq[i];
        acc += (double)g_xs[g] * (double)d;
    }
    return acc * g_scale[r] + g_bias[r];
}

static void test_quantize_bounds(void **st) {
    (void)st;
    int8_t q[256];
    float s;
    assert_int_equal(qvk_q8_quantize_bf16(NULL, q, &s, g_w, 1, 100), -1); /* not a multiple */
    for (size_t i = 0; i < (size_t)N_OUT * N_IN; i++)
        assert_true(g_q[i] >= -127 && g_q[i] <= 127);
    assert_true(g_scale[5] == 0.0f);
    /* each weight is within half a step of its bf16 value */
    double worst = 0;
    for (int r = 0; r < N_OUT; r++)
        for (int i = 0; i < N_IN; i++) {
            double w = qvk_bf16_to_f32_1(g_w[(size_t)r * N_IN + i]);
            double e = fabs(w - (double)g_scale[r] * g_q[(size_t)r * N_IN + i]);
            if (g_scale[r] > 0) e /= g_scale[r];
            if (e > worst) worst = e;
        }
    printf("weight quantization: max |w - s*q| = %.4f steps (limit 0.5 + 1e-5)\n", worst);
    assert_true(worst <= 0.5 + 1e-5);
    /* every variant quantizes to the same bytes (the SIMD row repeats the portable operations) */
    const char *cur = qvk_variant();
    int8_t *q2 = qvk_alloc((size_t)N_OUT * N_IN);
    float s2[N_OUT];
    assert_int_equal(qvk_set_variant("scalar"), 0);
    assert_int_equal(qvk_q8_quantize_bf16(NULL, q2, s2, g_w, N_OUT, N_IN), 0);
    qvk_set_variant(cur);
    size_t n_diff = 0;
    for (size_t i = 0; i < (size_t)N_OUT * N_IN; i++)
        n_diff += q2[i] != g_q[i];
    for (int r = 0; r < N_OUT; r++)
        n_diff += memcmp(&s2[r], &g_scale[r], sizeof(float)) != 0;
    printf("weight quantization, %s vs scalar: %zu bytes/scales differ\n", cur, n_diff);
    assert_int_equal(n_diff, 0);
    qvk_free(q2);
}

static void test_variants(void **st) {
    (void)st;
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    float y[N_OUT];
    for (int v = 0; v < 3; v++) {
        if (qvk_q8_rows(names[v], y, g_q, g_scale, g_xq, g_xs, g_bias, 0, N_OUT, N_IN)) {
            printf("%s: not supported here, skipped\n", names[v]);
            continue;
        }
        double worst = 0;
        for (int r = 0; r < N_OUT; r++) {
            double bound = 1e-5; /* f32 sum of 6 group terms and two products */
            double mag = 0;
            for (int g = 0; g < N_IN / QVK_Q8_GROUP; g++) {
                long d = 0;
                for (int i = g * QVK_Q8_GROUP; i < (g + 1) * QVK_Q8_GROUP; i++)
                    d += labs((long)g_q[(size_t)r * N_IN + i] * g_xq[i]);
                mag += (double)g_xs[g] * (double)d;
            }
            bound *= mag * g_scale[r] + fabs(g_bias[r]) + 1e-30;
            double e = fabs(y[r] - ref_q(r)) / bound;
            if (e > worst) worst = e;
        }
        printf("%s vs double of the quantized product: max |dy| = %.3f of 1e-5*sum|terms|\n",
               names[v], worst);
        assert_true(worst <= 1.0);
    }
}

static void test_quantization_error(void **st) {
    (void)st;
    float y[N_OUT];
    assert_int_equal(qvk_q8_rows(NULL, y, g_q, g_scale, g_xq, g_xs, g_bias, 0, N_OUT, N_IN), 0);
    double worst = matref_worst_rel_err(y, g_w, g_x, g_bias, N_OUT, N_IN);
    /* rounding both operands to 255 levels: expect well under 1 % of sum |w x| */
    printf("int8 vs unquantized bf16 product: max |dy| = %.5f of sum|w*x| (limit 0.01)\n", worst);
    assert_true(worst < 0.01);
}

/* 1, 2 and 3 threads bit for bit, over enough rows (4 matrices, 709 rows) that the pool hands
 * out several chunks. */
static void test_threads_identical(void **st) {
    (void)st;
    enum { N_MV = 4, ROWS = 4 * N_OUT };
    const int outs[N_MV] = {N_OUT, 100, N_OUT, N_OUT};
    static float y[3][ROWS];
    qvk_pool *pools[3] = {NULL, qvk_pool_create(2), qvk_pool_create(3)};
    assert_true(pools[1] && pools[2]);
    for (int p = 0; p < 3; p++) {
        qvk_q8_mv mv[N_MV];
        for (int m = 0, o = 0; m < N_MV; o += outs[m], m++)
            mv[m] = (qvk_q8_mv){y[p] + o, g_q, g_scale, m == 0 ? g_bias : NULL, outs[m]};
        qvk_q8_matvec_multi(pools[p], g_x, N_IN, mv, N_MV);
    }
    int diff = 0;
    for (int r = 0; r < ROWS; r++)
        diff += memcmp(&y[0][r], &y[1][r], sizeof(float)) != 0 ||
                memcmp(&y[0][r], &y[2][r], sizeof(float)) != 0;
    float yr[N_OUT];
    qvk_q8_rows(NULL, yr, g_q, g_scale, g_xq, g_xs, g_bias, 0, N_OUT, N_IN);
    for (int r = 0; r < N_OUT; r++)
        diff += memcmp(&y[0][r], &yr[r], sizeof(float)) != 0;
    printf("1 vs 2 vs 3 threads (and vs the row kernel): %d rows differ\n", diff);
    assert_int_equal(diff, 0);
    qvk_pool_free(pools[1]);
    qvk_pool_free(pools[2]);
}

QVT_MAIN(setup, teardown, test_quantize_bounds, test_variants, test_quantization_error,
         test_threads_identical)
