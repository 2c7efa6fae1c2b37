/* test_q4.c — 4-bit affine matvec (kernels/q4.h): MLX packing, quantization within half a step,
 * every variant against the scalar reference and a double-precision evaluation of the same
 * quantized product, error against the unquantized product, bit-identical for 1 and 2 threads
 * and between the batched and the one-vector matvec.
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
#include "kernels/q4.h"
#include "tests/unit/helpers/matref.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/run.h"

enum { N_OUT = 203, N_IN = 1216, N_G = N_IN / QVK_Q4_GROUP }; /* 19 groups: odd, > 16 */

static uint16_t *g_w;
static float *g_x, *g_bias, *g_xs, *g_xsum;
static uint16_t *g_s, *g_b; /* bf16 */
static uint8_t *g_q;
static int8_t *g_xq;

static int setup(void **st) {
    (void)st;
    uint32_t s = 4242;
    g_w = qvk_alloc(sizeof(uint16_t) * N_OUT * N_IN);
    g_x = qvk_alloc(sizeof(float) * N_IN);
    g_bias = qvk_alloc(sizeof(float) * N_OUT);
    g_q = qvk_alloc((size_t)N_OUT * N_IN / 2);
    g_s = qvk_alloc(sizeof(uint16_t) * N_OUT * N_G);
    g_b = qvk_alloc(sizeof(uint16_t) * N_OUT * N_G);
    g_xq = qvk_alloc(N_IN);
    g_xs = qvk_alloc(sizeof(float) * N_G);
    g_xsum = qvk_alloc(sizeof(float) * N_G);
    float *row = malloc(sizeof(float) * N_IN);
    for (int r = 0; r < N_OUT; r++) {
        float amp = 0.01f * (1 + r % 7), off = r % 3 ? 0.0f : 0.02f; /* some rows off-centre */
        for (int i = 0; i < N_IN; i++)
            row[i] = r == 5 ? 0.0f : off + amp * matref_rand(&s); /* row 5 all zero */
        qvk_f32_to_bf16(g_w + (size_t)r * N_IN, row, N_IN);
        g_bias[r] = 0.1f * matref_rand(&s);
    }
    for (int i = 0; i < N_IN; i++)
        g_x[i] = matref_rand(&s) * (i == 300 ? 20.0f : 1.0f) + 0.1f; /* an outlier and a mean */
    free(row);
    assert_int_equal(qvk_q4_quantize_bf16(NULL, g_q, g_s, g_b, g_w, N_OUT, N_IN), 0);
    qvk_q4_prepare_x(g_xq, g_xs, g_xsum, g_x, N_IN);
    return 0;
}

static int teardown(void **st) {
    (void)st;
    qvk_free(g_w), qvk_free(g_x), qvk_free(g_bias), qvk_free(g_q), qvk_free(g_s);
    qvk_free(g_b), qvk_free(g_xq), qvk_free(g_xs), qvk_free(g_xsum);
    return 0;
}

static int nib(int r, int i) {
    const uint8_t v = g_q[(size_t)r * N_IN / 2 + (size_t)i / 2];
    return i & 1 ? v >> 4 : v & 15;
}

static void test_packing(void **st) {
    (void)st;
    /* a ramp 0..15 quantizes to q = i % 16 and packs as MLX's uint32 0x76543210, 0xfedcba98 */
    float w[QVK_Q4_GROUP];
    uint16_t s, b;
    uint8_t q[QVK_Q4_GROUP / 2];
    for (int i = 0; i < QVK_Q4_GROUP; i++)
        w[i] = (float)(i % 16);
    qvk_q4_quantize_row(q, &s, &b, w, QVK_Q4_GROUP);
    uint32_t u0, u1;
    memcpy(&u0, q, 4), memcpy(&u1, q + 4, 4); /* little-endian host, as the checkpoint */
    assert_int_equal(u0, 0x76543210u);
    assert_int_equal(u1, 0xfedcba98u);
    assert_true(s == 0x3f80 && b == 0); /* bf16 1.0 and 0.0 */
    float back[QVK_Q4_GROUP];
    qvk_q4_dequantize(back, q, &s, &b, 1, QVK_Q4_GROUP);
    assert_memory_equal(back, w, sizeof w);
    assert_int_equal(qvk_q4_quantize_bf16(NULL, q, &s, &b, g_w, 1, 100), -1); /* not a multiple */
}

static void test_quantize_bounds(void **st) {
    (void)st;
    double worst = 0;
    for (int r = 0; r < N_OUT; r++)
        for (int i = 0; i < N_IN; i++) {
            const float s = qvk_bf16_to_f32_1(g_s[r * N_G + i / QVK_Q4_GROUP]),
                        b = qvk_bf16_to_f32_1(g_b[r * N_G + i / QVK_Q4_GROUP]);
            double w = qvk_bf16_to_f32_1(g_w[(size_t)r * N_IN + i]);
            double e = fabs(w - ((double)s * nib(r, i) + b));
            /* half a step, plus the bf16 rounding of s (15 steps · 2^-9) and of b (2^-9 |b|) */
            double lim = s * (0.5 + 15 * 0x1p-8) + fabs(b) * 0x1p-8 + 1e-12;
            if (e / lim > worst) worst = e / lim;
        }
    printf("weight quantization: max |w - (s*q + b)| = %.3f of the bound\n", worst);
    assert_true(worst <= 1.0);
    assert_true(g_s[5 * N_G] == 0 && g_b[5 * N_G] == 0);
}

/* The quantized product in double, and the sum of |terms| that scales its rounding bound. */
static double ref_q(int r, double *mag) {
    double acc = g_bias[r];
    *mag = fabs(g_bias[r]);
    for (int g = 0; g < N_G; g++) {
        long d = 0, ad = 0;
        for (int k = 0; k < QVK_Q4_GROUP; k++) {
            const int i = g * QVK_Q4_GROUP + k;
            const long t = (long)nib(r, i) * g_xq[g * QVK_Q4_GROUP + (k & 1) * 32 + k / 2];
            d += t, ad += labs(t);
        }
        const double sx = (double)qvk_bf16_to_f32_1(g_s[r * N_G + g]) * g_xs[g];
        const double bx = (double)qvk_bf16_to_f32_1(g_b[r * N_G + g]) * g_xsum[g];
        acc += sx * (double)d + bx;
        *mag += fabs(sx) * (double)ad + fabs(bx);
    }
    return acc;
}

static void test_variants(void **st) {
    (void)st;
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    float y[N_OUT], yref[N_OUT];
    qvk_q4_mv mv = {y, g_q, g_s, g_b, g_bias, N_OUT};
    qvk_q4_mv mref = {yref, g_q, g_s, g_b, g_bias, N_OUT};
    assert_int_equal(qvk_q4_rows("scalar", &mref, g_xq, g_xs, g_xsum, 0, N_OUT, N_IN), 0);
    for (int v = 0; v < 3; v++) {
        if (qvk_q4_rows(names[v], &mv, g_xq, g_xs, g_xsum, 0, N_OUT, N_IN)) {
            printf("%s: not supported here, skipped\n", names[v]);
            continue;
        }
        double worst = 0, worst_s = 0;
        for (int r = 0; r < N_OUT; r++) {
            double mag, e = fabs(y[r] - ref_q(r, &mag)) / (1e-5 * mag + 1e-30);
            double es = fabs(y[r] - yref[r]) / (1e-5 * mag + 1e-30);
            if (e > worst) worst = e;
            if (es > worst_s) worst_s = es;
        }
        printf("%s: max |dy| vs double %.3f, vs scalar %.3f (of 1e-5*sum|terms|)\n", names[v],
               worst, worst_s);
        assert_true(worst <= 1.0 && worst_s <= 1.0);
    }
}

static void test_quantization_error(void **st) {
    (void)st;
    float y[N_OUT];
    qvk_q4_mv mv = {y, g_q, g_s, g_b, g_bias, N_OUT};
    qvk_q4_matvec_multi(NULL, g_x, N_IN, &mv, 1);
    double worst = matref_worst_rel_err(y, g_w, g_x, g_bias, N_OUT, N_IN);
    /* 16 weight levels: a uniform error of up to s/2 per weight, mostly cancelling */
    printf("q4 vs unquantized bf16 product: max |dy| = %.5f of sum|w*x| (limit 0.05)\n", worst);
    assert_true(worst < 0.05);
}

static void test_threads_identical(void **st) {
    (void)st;
    float y1[N_OUT], y2[N_OUT], z1[100], z2[100], yr[N_OUT];
    qvk_pool *p2 = qvk_pool_create(2);
    assert_non_null(p2);
    qvk_q4_mv mv1[2] = {{y1, g_q, g_s, g_b, g_bias, N_OUT}, {z1, g_q, g_s, g_b, NULL, 100}};
    qvk_q4_mv mv2[2] = {{y2, g_q, g_s, g_b, g_bias, N_OUT}, {z2, g_q, g_s, g_b, NULL, 100}};
    qvk_q4_matvec_multi(NULL, g_x, N_IN, mv1, 2);
    qvk_q4_matvec_multi(p2, g_x, N_IN, mv2, 2);
    qvk_q4_mv mr = {yr, g_q, g_s, g_b, g_bias, N_OUT};
    qvk_q4_rows(NULL, &mr, g_xq, g_xs, g_xsum, 0, N_OUT, N_IN);
    int diff = 0;
    for (int r = 0; r < N_OUT; r++)
        diff += memcmp(&y1[r], &y2[r], 4) != 0, diff += memcmp(&y1[r], &yr[r], 4) != 0;
    for (int r = 0; r < 100; r++)
        diff += memcmp(&z1[r], &z2[r], 4) != 0;
    printf("1 vs 2 threads (and vs the row kernel): %d rows differ\n", diff);
    assert_int_equal(diff, 0);
    qvk_pool_free(p2);
}

/* x -> int8 per 64-group: xs = max|x| / 127, xq = x / xs rounded half to even (de-interleaved),
 * xsum within float rounding of the double sum; NaN and infinities give bytes in range. */
static void test_prepare_x(void **st) {
    (void)st;
    double worst = 0;
    for (int g = 0; g < N_G; g++) {
        const float *xg = g_x + g * QVK_Q4_GROUP;
        float amax = 0;
        double sum = 0, mag = 0;
        for (int i = 0; i < QVK_Q4_GROUP; i++)
            amax = fmaxf(amax, fabsf(xg[i])), sum += xg[i], mag += fabs(xg[i]);
        assert_true(g_xs[g] == amax / 127.0f);
        for (int i = 0; i < QVK_Q4_GROUP; i++) {
            const long want = lrintf(fminf(fmaxf(xg[i] * (127.0f / amax), -127.0f), 127.0f));
            assert_int_equal(g_xq[g * QVK_Q4_GROUP + (i & 1) * 32 + i / 2], want);
        }
        if (fabs(g_xsum[g] - sum) / mag > worst) worst = fabs(g_xsum[g] - sum) / mag;
    }
    printf("prepare_x: bytes as rint, max |xsum - double| = %.2e of sum|x|\n", worst);
    assert_true(worst < 1e-6);
    float bad[QVK_Q4_GROUP] = {NAN, INFINITY, -INFINITY, 1.0f};
    _Alignas(64) int8_t q[QVK_Q4_GROUP];
    float xs, xsum;
    qvk_q4_prepare_x(q, &xs, &xsum, bad, QVK_Q4_GROUP);
    for (int i = 0; i < QVK_Q4_GROUP; i++)
        assert_true(q[i] >= -127 && q[i] <= 127);
}

/* The batched form (prefill, batched streams): every y_k bit-identical to the one-vector matvec
 * of x_k, for every variant, 1 and 2 threads, with scratch and on the stack (60 vectors: more
 * than one stack share and than QVK_Q4_BATCH_MAX_X, neither a multiple; the first 2, 3, 5 and 6
 * alone: every tail of the AVX-512 kernel's blocks of four). */
enum { N_X = 60 };
static void test_batch_identical(void **st) {
    (void)st;
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    const char *cur = qvk_variant();
    float *x = malloc(sizeof(float) * N_X * N_IN), *y = malloc(sizeof(float) * N_X * N_OUT);
    float *z = malloc(sizeof(float) * N_X * 100), *one = malloc(sizeof(float) * (N_OUT + 100));
    void *scratch = qvk_alloc(qvk_q4_batch_scratch(N_X, N_IN));
    qvk_pool *p2 = qvk_pool_create(2);
    assert_true(x && y && z && one && scratch && p2);
    uint32_t s = 77;
    for (int i = 0; i < N_X * N_IN; i++)
        x[i] = matref_rand(&s) * (i % 97 == 0 ? 8.0f : 1.0f);
    for (int v = 0; v < 3; v++) {
        if (qvk_set_variant(names[v])) continue;
        int diff = 0;
        static const int n_xs[] = {2, 3, 5, 6, N_X};
        for (int run = 0; run < 4 * 5; run++) {
            const int nx = n_xs[run / 4];
            qvk_q4_mv mv[2] = {{y, g_q, g_s, g_b, g_bias, N_OUT}, {z, g_q, g_s, g_b, NULL, 100}};
            qvk_q4_matvec_batch(run & 1 ? p2 : NULL, x, nx, N_IN, mv, 2, run & 2 ? scratch : NULL);
            for (int k = 0; k < nx; k++) {
                qvk_q4_mv m1[2] = {{one, g_q, g_s, g_b, g_bias, N_OUT},
                                   {one + N_OUT, g_q, g_s, g_b, NULL, 100}};
                qvk_q4_matvec_multi(NULL, x + (size_t)k * N_IN, N_IN, m1, 2);
                diff += memcmp(one, y + (size_t)k * N_OUT, sizeof(float) * N_OUT) != 0;
                diff += memcmp(one + N_OUT, z + (size_t)k * 100, sizeof(float) * 100) != 0;
            }
        }
        printf("%s: batches of 2, 3, 5, 6, %d vs one at a time: %d outputs differ\n", names[v], N_X, diff);
        assert_int_equal(diff, 0);
    }
    qvk_set_variant(cur);
    qvk_pool_free(p2);
    qvk_free(scratch);
    free(x), free(y), free(z), free(one);
}

QVT_MAIN(setup, teardown, test_packing, test_quantize_bounds, test_prepare_x, test_variants,
         test_quantization_error, test_threads_identical, test_batch_identical)
