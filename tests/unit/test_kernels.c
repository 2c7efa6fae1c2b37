/* test_kernels.c — every kernel against a naive double-precision reference at a stated tolerance,
 * every SIMD variant against the scalar one, and 2 threads against 1 bit for bit.
 * Dot-product tolerances use the worst-case bound for f32 summation in any order:
 * |Δ| ≤ n·2⁻²⁴·Σ|aᵢbᵢ| (plus a tiny absolute floor); the measured max |Δ| is printed.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kernels/kernels.h"
#include "tests/unit/helpers/npy.h"
#include "tests/unit/helpers/tmpdir.h"

static const char *const k_variants[] = {"scalar", "avx2", "avx512"};
#define N_VARIANTS 3

/* Tests that loop over variants put back the one dispatch picked. */
static const char *g_picked;
static void restore_variant(void) {
    assert_int_equal(qvk_set_variant(g_picked), 0);
}

/* ---- deterministic random numbers ------------------------------------------------------ */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

/* uniform in [-1, 1) */
static float rnd(void) {
    return (float)((double)rnd_u32() / 2147483648.0 - 1.0);
}

static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = rnd() * scale;
}

static void fill_bf16(uint16_t *w, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) {
        float f = rnd() * scale;
        qvk_f32_to_bf16(&w[i], &f, 1);
    }
}

static float *falloc(size_t n) {
    float *p = qvk_alloc(n * sizeof(float));
    assert_non_null(p);
    return p;
}

/* ---- comparison helpers ---------------------------------------------------------------- */

/* Checks |got − want| ≤ atol + rtol·|want| element-wise; prints max |Δ|. */
static void check_close(const char *what, const float *got, const double *want, size_t n,
                        double atol, double rtol) {
    double max_d = 0;
    size_t bad = n;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fabs(want[i])) && bad == n) bad = i;
        if (d > max_d || isnan(d)) max_d = d;
    }
    printf("  %-40s max|Δ| = %.3g (tol %.1g + %.1g·|ref|)\n", what, max_d, atol, rtol);
    if (bad != n)
        fail_msg("%s: element %zu: got %.9g, want %.9g", what, bad, (double)got[bad], want[bad]);
}

/* ---- conversions ----------------------------------------------------------------------- */

static void test_conversions(void **state) {
    (void)state;
    const float in[] = {1.0f,
                        -2.5f,
                        1.00390625f /* tie, even -> 1.0 */,
                        1.01171875f /* tie, odd -> up */,
                        3.0e38f,
                        INFINITY,
                        NAN};
    const uint16_t want[] = {0x3f80, 0xc020, 0x3f80, 0x3f82, 0x7f62, 0x7f80};
    uint16_t out[7];
    qvk_f32_to_bf16(out, in, 7);
    for (int i = 0; i < 6; i++)
        assert_int_equal(out[i], want[i]);
    assert_true((out[6] & 0x7f80) == 0x7f80 && (out[6] & 0x7f) != 0);
    float back[6];
    qvk_bf16_to_f32(back, out, 6);
    assert_true(back[0] == 1.0f && back[1] == -2.5f && back[3] == 1.015625f && isinf(back[5]));

    /* widening, every variant, all lengths 0..40 (vector bodies and tails) */
    uint16_t bits[40];
    float wide[41];
    for (int i = 0; i < 40; i++)
        bits[i] = (uint16_t)rnd_u32();
    for (int v = 0; v < N_VARIANTS; v++) {
        if (qvk_set_variant(k_variants[v]) != 0) continue;
        for (int n = 0; n <= 40; n++) {
            wide[n] = 12345.0f;
            qvk_bf16_to_f32(wide, bits, (size_t)n);
            for (int i = 0; i < n; i++) {
                uint32_t u;
                memcpy(&u, &wide[i], 4);
                assert_int_equal(u, (uint32_t)bits[i] << 16);
            }
            assert_true(wide[n] == 12345.0f);
        }
    }
    restore_variant();

    const uint16_t h[] = {0x3c00, 0xc000, 0x0001, 0x03ff, 0x7bff, 0x7c00, 0x8000, 0x7e00};
    float f[8];
    qvk_f16_to_f32(f, h, 8);
    assert_true(f[0] == 1.0f);
    assert_true(f[1] == -2.0f);
    assert_true(f[2] == ldexpf(1.0f, -24));
    assert_true(f[3] == ldexpf(1023.0f, -24));
    assert_true(f[4] == 65504.0f);
    assert_true(isinf(f[5]) && f[5] > 0);
    assert_true(f[6] == 0.0f && signbit(f[6]));
    assert_true(isnan(f[7]));
}

/* ---- matvec ---------------------------------------------------------------------------- */

static void ref_matvec_bf16(double *y, double *bound, const uint16_t *w, const float *x,
                            const float *bias, int n_out, int n_in) {
    for (int o = 0; o < n_out; o++) {
        double s = 0, a = 0;
        for (int i = 0; i < n_in; i++) {
            double p = (double)qvk_bf16_to_f32_1(w[(size_t)o * n_in + i]) * x[i];
            s += p;
            a += fabs(p);
        }
        if (bias) {
            s += bias[o];
            a += fabs(bias[o]);
        }
        y[o] = s;
        bound[o] = (n_in + 1) * ldexp(1.0, -24) * a + 1e-30;
    }
}

static void check_bound(const char *what, const float *got, const double *want, const double *bound,
                        int n) {
    double max_d = 0, max_ratio = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (d > max_d) max_d = d;
        if (d / bound[i] > max_ratio || isnan(d)) max_ratio = d / bound[i];
        if (!(d <= bound[i]))
            fail_msg("%s: row %d: got %.9g, want %.9g (bound %.3g)", what, i, (double)got[i],
                     want[i], bound[i]);
    }
    printf("  %-40s max|Δ| = %.3g (%.3g of its bound)\n", what, max_d, max_ratio);
}

static void test_matvec_vs_reference(void **state) {
    (void)state;
    const int shapes[][2] = {{1, 1},    {3, 7},     {5, 16},     {17, 33},
                             {37, 100}, {64, 1024}, {129, 1027}, {8, 3072}};
    qvk_pool *pool = qvk_pool_create(2);
    assert_non_null(pool);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n_out = shapes[s][0], n_in = shapes[s][1];
        size_t nw = (size_t)n_out * n_in;
        uint16_t *w = qvk_alloc(nw * 2);
        float *wf = falloc(nw), *x = falloc((size_t)n_in), *b = falloc((size_t)n_out);
        float *y = falloc((size_t)n_out), *y_scalar = falloc((size_t)n_out);
        double *ref = malloc(sizeof(double) * (size_t)n_out);
        double *bound = malloc(sizeof(double) * (size_t)n_out);
        assert_true(w && ref && bound);
        fill_bf16(w, nw, 1.0f);
        qvk_bf16_to_f32(wf, w, nw);
        fill(x, (size_t)n_in, 2.0f);
        fill(b, (size_t)n_out, 0.5f);
        for (int use_bias = 0; use_bias < 2; use_bias++) {
            const float *bias = use_bias ? b : NULL;
            ref_matvec_bf16(ref, bound, w, x, bias, n_out, n_in);
            for (int v = 0; v < N_VARIANTS; v++) {
                if (qvk_set_variant(k_variants[v]) != 0) continue;
                char what[96];
                snprintf(what, sizeof what, "matvec_bf16 %s %dx%d%s", k_variants[v], n_out, n_in,
                         use_bias ? "+b" : "");
                qvk_matvec_bf16(pool, y, w, x, bias, n_out, n_in);
                check_bound(what, y, ref, bound, n_out);
                if (v == 0) memcpy(y_scalar, y, sizeof(float) * (size_t)n_out);
                /* variant vs scalar: both within the bound, so within twice of it */
                for (int o = 0; o < n_out; o++)
                    assert_true(fabs((double)y[o] - y_scalar[o]) <= 2 * bound[o]);
                snprintf(what, sizeof what, "matvec_f32 %s %dx%d%s", k_variants[v], n_out, n_in,
                         use_bias ? "+b" : "");
                qvk_matvec_f32(pool, y, wf, x, bias, n_out, n_in);
                check_bound(what, y, ref, bound, n_out);
            }
        }
        qvk_free(w);
        qvk_free(wf);
        qvk_free(x);
        qvk_free(b);
        qvk_free(y);
        qvk_free(y_scalar);
        free(ref);
        free(bound);
    }
    restore_variant();
    qvk_pool_free(pool);
}

/* 1 thread vs 2 threads, and multi vs separate calls: bit for bit, for every variant. */
static void test_matvec_threads_bit_identical(void **state) {
    (void)state;
    enum { N_IN = 1000, N_A = 333, N_B = 64, N_C = 7 };
    const int n_outs[3] = {N_A, N_B, N_C};
    uint16_t *w[3];
    float *bias = falloc(N_A), *x = falloc(N_IN);
    float *y1[3], *y2[3], *y3[3];
    for (int m = 0; m < 3; m++) {
        w[m] = qvk_alloc((size_t)n_outs[m] * N_IN * 2);
        assert_non_null(w[m]);
        fill_bf16(w[m], (size_t)n_outs[m] * N_IN, 1.0f);
        y1[m] = falloc((size_t)n_outs[m]);
        y2[m] = falloc((size_t)n_outs[m]);
        y3[m] = falloc((size_t)n_outs[m]);
    }
    fill(bias, N_A, 1.0f);
    fill(x, N_IN, 1.0f);
    qvk_pool *p2 = qvk_pool_create(2), *p3 = qvk_pool_create(3);
    assert_true(p2 && p3);
    assert_int_equal(qvk_pool_threads(p2), 2);
    assert_int_equal(qvk_pool_threads(NULL), 1);
    for (int v = 0; v < N_VARIANTS; v++) {
        if (qvk_set_variant(k_variants[v]) != 0) {
            printf("  variant %s not supported here: skipped\n", k_variants[v]);
            continue;
        }
        for (int m = 0; m < 3; m++) {
            const float *b = m == 0 ? bias : NULL;
            qvk_matvec_bf16(NULL, y1[m], w[m], x, b, n_outs[m], N_IN);
            qvk_matvec_bf16(p2, y2[m], w[m], x, b, n_outs[m], N_IN);
            assert_memory_equal(y1[m], y2[m], sizeof(float) * (size_t)n_outs[m]);
            qvk_matvec_bf16(p3, y2[m], w[m], x, b, n_outs[m], N_IN);
            assert_memory_equal(y1[m], y2[m], sizeof(float) * (size_t)n_outs[m]);
        }
        qvk_mv mv[3];
        for (int m = 0; m < 3; m++)
            mv[m] = (qvk_mv){y3[m], w[m], m == 0 ? bias : NULL, n_outs[m]};
        qvk_pool *pools[3] = {NULL, p2, p3};
        for (int p = 0; p < 3; p++) {
            for (int m = 0; m < 3; m++)
                memset(y3[m], 0xff, sizeof(float) * (size_t)n_outs[m]);
            qvk_matvec_bf16_multi(pools[p], x, N_IN, mv, 3);
            for (int m = 0; m < 3; m++)
                assert_memory_equal(y1[m], y3[m], sizeof(float) * (size_t)n_outs[m]);
        }
        printf("  %s: 1/2/3 threads and multi bit-identical\n", k_variants[v]);
    }
    restore_variant();
    qvk_pool_free(p2);
    qvk_pool_free(p3);
    for (int m = 0; m < 3; m++) {
        qvk_free(w[m]);
        qvk_free(y1[m]);
        qvk_free(y2[m]);
        qvk_free(y3[m]);
    }
    qvk_free(bias);
    qvk_free(x);
}

static void test_mem_read(void **state) {
    (void)state;
    enum { N = 1000 };
    unsigned char *buf = qvk_alloc(N + 1);
    for (int i = 0; i <= N; i++)
        buf[i] = (unsigned char)rnd_u32();
    for (int v = 0; v < N_VARIANTS; v++) {
        if (qvk_set_variant(k_variants[v]) != 0) continue;
        for (int off = 0; off < 2; off++)
            for (int n = 0; n <= N - off; n += n < 600 ? 1 : 37) {
                uint64_t want = 0;
                for (int i = 0; i < n; i++)
                    want ^= (uint64_t)buf[off + i] << (8 * (i & 7));
                assert_true(qvk_mem_read(buf + off, (size_t)n) == want);
            }
    }
    restore_variant();
    qvk_free(buf);
}

/* ---- thread pool ----------------------------------------------------------------------- */

struct count_arg {
    int counts[8];
    int nth_seen;
};

static void count_job(int ith, int nth, void *p) {
    struct count_arg *a = p;
    a->counts[ith]++;
    if (ith == 0) a->nth_seen = nth; /* one writer: ThreadSanitizer */
}

static void test_pool(void **state) {
    (void)state;
    assert_null(qvk_pool_create(0));
    qvk_pool_free(NULL);
    for (int n = 1; n <= 4; n++) {
        qvk_pool *pool = qvk_pool_create(n);
        assert_non_null(pool);
        struct count_arg a = {{0}, 0};
        for (int r = 0; r < 5000; r++)
            qvk_pool_run(pool, count_job, &a);
        /* let workers fall asleep, then check they wake from the futex */
        usleep(2000);
        qvk_pool_run(pool, count_job, &a);
        for (int i = 0; i < n; i++)
            assert_int_equal(a.counts[i], 5001);
        for (int i = n; i < 8; i++)
            assert_int_equal(a.counts[i], 0);
        assert_int_equal(a.nth_seen, n);
        qvk_pool_free(pool);
    }
}

/* A queued job: threads take items from a shared counter; each item is marked by its taker. */
struct queue_arg {
    _Atomic int next;
    int n_items;
    int taken[256];
};

static void queue_job(int ith, int nth, void *p) {
    struct queue_arg *a = p;
    (void)nth;
    for (int i; (i = atomic_fetch_add(&a->next, 1)) < a->n_items;)
        a->taken[i] = 1 + ith;
}

/* Queued jobs (a late worker is not waited for and skips the job) interleaved with ordinary
 * ones: every item done, and nothing past them touched, when the call returns; every thread still
 * runs every ordinary job; with workers polling and with workers sleeping at once. */
static void test_pool_queued(void **state) {
    (void)state;
    for (int n = 1; n <= 4; n++) {
        for (int spin = 0; spin < 2; spin++) {
            qvk_pool *pool = qvk_pool_create(n);
            assert_non_null(pool);
            qvk_pool_set_spin(pool, spin ? -1 : 0);
            struct count_arg c = {{0}, 0};
            int by_worker = 0;
            for (int r = 0; r < 3000; r++) {
                struct queue_arg q = {.n_items = 1 + r % 256};
                atomic_init(&q.next, 0);
                qvk_pool_run_queued(pool, queue_job, &q);
                for (int i = 0; i < q.n_items; i++) {
                    assert_in_range(q.taken[i], 1, n);
                    by_worker += q.taken[i] > 1;
                }
                for (int i = q.n_items; i < 256; i++)
                    assert_int_equal(q.taken[i], 0);
                if (r % 3 == 0) qvk_pool_run(pool, count_job, &c);
            }
            for (int i = 0; i < n; i++)
                assert_int_equal(c.counts[i], 1000);
            if (n == 1) assert_int_equal(by_worker, 0);
            qvk_pool_free(pool);
        }
    }
}

/* ---- linear (sgemm) -------------------------------------------------------------------- */

static void test_linear(void **state) {
    (void)state;
    enum { R = 5, IN = 67, OUT = 33 };
    float *x = falloc(R * IN), *w = falloc(OUT * IN), *b = falloc(OUT), *y = falloc(R * OUT);
    float *scratch = falloc(OUT * IN);
    uint16_t *wb = qvk_alloc(OUT * IN * 2);
    double ref[R * OUT];
    fill(x, R * IN, 1.0f);
    fill_bf16(wb, OUT * IN, 1.0f);
    qvk_bf16_to_f32(w, wb, OUT * IN);
    fill(b, OUT, 1.0f);
    for (int r = 0; r < R; r++)
        for (int o = 0; o < OUT; o++) {
            double s = b[o];
            for (int i = 0; i < IN; i++)
                s += (double)x[r * IN + i] * w[o * IN + i];
            ref[r * OUT + o] = s;
        }
    qvk_linear_f32(y, x, w, b, R, IN, OUT);
    check_close("linear_f32 5x67->33", y, ref, R * OUT, 1e-5, 1e-5);
    memset(y, 0, sizeof(float) * R * OUT);
    /* sgemm with transposes: C = 2·Aᵀ·Bᵀ + 0.5·C */
    enum { M = 4, N = 3, K = 6 };
    float a[K * M], bb[N * K], c[M * N];
    double cref[M * N];
    fill(a, K * M, 1.0f);
    fill(bb, N * K, 1.0f);
    fill(c, M * N, 1.0f);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)a[k * M + i] * bb[j * K + k];
            cref[i * N + j] = 2 * s + 0.5 * c[i * N + j];
        }
    qvk_sgemm(1, 1, M, N, K, 2.0f, a, M, bb, K, 0.5f, c, N);
    check_close("sgemm AᵀBᵀ", c, cref, M * N, 1e-5, 1e-5);
    qvk_free(x);
    qvk_free(w);
    qvk_free(b);
    qvk_free(y);
    qvk_free(scratch);
    qvk_free(wb);
}

/* Batched bf16 linear (qvk_linear_bf16_multi) on every prefill set of 0.6B and 1.7B (QKV and
 * gate/up as one call, the text projection) and on an odd shape, every variant, against a
 * double-precision reference: up to QVK_LINEAR_DIRECT_MAX_ROWS rows, the AVX2 GEMM (f32 FMAs)
 * and the scalar widen + sgemm within the f32 bound (n+1)·2⁻²⁴·Σ|wx| (the direct path also
 * equals qvk_matvec_bf16 row by row); the AVX-512 GEMM (x as bf16 hi + lo, 2n exact products
 * summed in f32) within
 * (2(n+1)·2⁻²⁴ + 2⁻¹⁶)·Σ|wx|. Row counts that are not a multiple of the 6-row tile, and 2 and
 * 3 threads bit for bit equal to 1. The reference covers every fifth output column and the
 * last four of each matrix (all tile positions mod 4) to keep the test short. */
static void test_linear_bf16(void **state) {
    (void)state;
    static const struct {
        int n_in, n_out[3], n_mv, n_rows[12];
    } sets[] = {
        {1030, {517, 33}, 2, {1, 2, 3, 4, 5, 7, 8, 9, 13, 70}}, /* odd: tails everywhere */
        {1024, {2048, 1024, 1024}, 3, {9, 51}},                 /* 0.6B q, k, v */
        {2048, {1024}, 1, {9, 51}},                             /* 0.6B o, text fc2 */
        {1024, {3072, 3072}, 2, {9, 51}},                       /* 0.6B gate, up */
        {3072, {1024}, 1, {9, 51}},                             /* 0.6B down */
        {2048, {2048}, 1, {51}},                                /* text fc1, 1.7B o, fc2 */
        {2048, {2048, 1024, 1024}, 3, {51}},                    /* 1.7B q, k, v */
        {2048, {6144, 6144}, 2, {51}},                          /* 1.7B gate, up */
        {6144, {2048}, 1, {9, 51}},                             /* 1.7B down */
    };
    enum { MAXR = 70 };
    qvk_pool *pool2 = qvk_pool_create(2), *pool3 = qvk_pool_create(3);
    for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++) {
        const int IN = sets[si].n_in, n_mv = sets[si].n_mv;
        int total = 0;
        for (int m = 0; m < n_mv; m++)
            total += sets[si].n_out[m];
        float *x = falloc((size_t)MAXR * IN), *b = falloc((size_t)total);
        float *y = falloc((size_t)MAXR * total), *y2 = falloc((size_t)MAXR * total);
        float *row = falloc((size_t)total);
        uint16_t *w = qvk_alloc((size_t)total * IN * 2);
        size_t n_scratch = 0;
        for (int m = 0; m < n_mv; m++) {
            size_t k = qvk_linear_bf16_scratch(MAXR, IN, sets[si].n_out[m]);
            n_scratch = k > n_scratch ? k : n_scratch;
        }
        float *scratch = falloc(n_scratch);
        double *ref = malloc(sizeof(double) * MAXR * total);
        double *bound = malloc(sizeof(double) * MAXR * total);
        assert_true(w && ref && bound);
        fill(x, (size_t)MAXR * IN, 1.0f);
        fill(b, (size_t)total, 1.0f);
        fill_bf16(w, (size_t)total * IN, 1.0f);
        /* matrix m: rows off_m.. of w, y and bias; y_m is [n, n_out_m] at y + n·off_m */
        int off[3] = {0};
        for (int m = 1; m < n_mv; m++)
            off[m] = off[m - 1] + sets[si].n_out[m - 1];
        for (int m = 0; m < n_mv; m++) {
            const int n_out = sets[si].n_out[m];
            for (int o = 0; o < n_out; o++) {
                if (o % 5 && o < n_out - 4) continue;
                const uint16_t *wr = w + (size_t)(off[m] + o) * IN;
                for (int r = 0; r < MAXR; r++) {
                    double sum = b[off[m] + o], a = fabs(b[off[m] + o]);
                    for (int i = 0; i < IN; i++) {
                        double p = (double)qvk_bf16_to_f32_1(wr[i]) * x[(size_t)r * IN + i];
                        sum += p, a += fabs(p);
                    }
                    ref[(size_t)(off[m] + o) * MAXR + r] = sum;
                    bound[(size_t)(off[m] + o) * MAXR + r] = a;
                }
            }
        }
        for (int v = 0; v < N_VARIANTS; v++) {
            if (qvk_set_variant(k_variants[v]) != 0) continue;
            for (int k = 0; k < 12 && sets[si].n_rows[k]; k++) {
                const int n = sets[si].n_rows[k];
                const int gemm = n > QVK_LINEAR_DIRECT_MAX_ROWS && !strcmp(k_variants[v], "avx512");
                qvk_mv mv[3];
                for (int m = 0; m < n_mv; m++)
                    mv[m] = (qvk_mv){y + (size_t)n * off[m], w + (size_t)off[m] * IN, b + off[m],
                                     sets[si].n_out[m]};
                qvk_linear_bf16_multi(NULL, x, n, IN, mv, n_mv, scratch);
                double max_d = 0, max_ratio = 0;
                for (int m = 0; m < n_mv; m++) {
                    const int n_out = sets[si].n_out[m];
                    for (int o = 0; o < n_out; o++) {
                        if (o % 5 && o < n_out - 4) continue;
                        for (int r = 0; r < n; r++) {
                            const size_t e = (size_t)(off[m] + o) * MAXR + r;
                            const double got = y[(size_t)n * off[m] + (size_t)r * n_out + o];
                            const double d = fabs(got - ref[e]);
                            const double tol =
                                (gemm ? 2 * (IN + 1) * ldexp(1.0, -24) + ldexp(1.0, -16)
                                      : (IN + 1) * ldexp(1.0, -24)) * bound[e] + 1e-30;
                            if (d > max_d) max_d = d;
                            if (d / tol > max_ratio || isnan(d)) max_ratio = d / tol;
                            if (!(d <= tol))
                                fail_msg("linear_bf16 %s %dx%d: matrix %d row %d col %d: got %.9g, "
                                         "want %.9g (tol %.3g)", k_variants[v], n, IN, m, r, o,
                                         got, ref[e], tol);
                        }
                    }
                }
                printf("  linear_bf16 %-6s %2dx%4d->%-5d max|Δ| = %.3g (%.3g of the bound)\n",
                       k_variants[v], n, IN, total, max_d, max_ratio);
                for (int t = 0; t < 2; t++) {
                    for (int m = 0; m < n_mv; m++)
                        mv[m].y = y2 + (size_t)n * off[m];
                    qvk_linear_bf16_multi(t ? pool3 : pool2, x, n, IN, mv, n_mv, scratch);
                    assert_memory_equal(y, y2, sizeof(float) * (size_t)n * total);
                }
                if (n <= QVK_LINEAR_DIRECT_MAX_ROWS)
                    for (int m = 0; m < n_mv; m++)
                        for (int r = 0; r < n; r++) {
                            const int n_out = sets[si].n_out[m];
                            qvk_matvec_bf16(NULL, row, w + (size_t)off[m] * IN, x + (size_t)r * IN,
                                            b + off[m], n_out, IN);
                            assert_memory_equal(row, y + (size_t)n * off[m] + (size_t)r * n_out,
                                                sizeof(float) * n_out);
                        }
            }
        }
        restore_variant();
        qvk_free(x);
        qvk_free(b);
        qvk_free(y);
        qvk_free(y2);
        qvk_free(row);
        qvk_free(scratch);
        qvk_free(w);
        free(ref);
        free(bound);
    }
    qvk_pool_free(pool2);
    qvk_pool_free(pool3);
}

/* ---- element-wise and norms ------------------------------------------------------------ */

static void test_elementwise(void **state) {
    (void)state;
    enum { N = 1031 };
    float x[N], y[N], w[N], b[N], g[N], u[N];
    double ref[N];
    fill(x, N, 4.0f);
    fill(w, N, 1.0f);
    fill(b, N, 1.0f);
    fill(g, N, 6.0f);
    fill(u, N, 2.0f);

    for (int v = 0; v < N_VARIANTS; v++) {
        if (qvk_set_variant(k_variants[v]) != 0) continue;
        double ss = 0;
        for (int i = 0; i < N; i++)
            ss += (double)x[i] * x[i];
        double r = 1.0 / sqrt(ss / N + 1e-6);
        for (int i = 0; i < N; i++)
            ref[i] = w[i] * x[i] * r;
        qvk_rmsnorm(y, x, w, N, 1e-6f);
        char what[64];
        snprintf(what, sizeof what, "rmsnorm %s", k_variants[v]);
        check_close(what, y, ref, N, 1e-6, 4e-7 * 4);
    }
    restore_variant();

    double mean = 0, var = 0;
    for (int i = 0; i < N; i++)
        mean += x[i];
    mean /= N;
    for (int i = 0; i < N; i++)
        var += (x[i] - mean) * (x[i] - mean);
    var /= N;
    for (int i = 0; i < N; i++)
        ref[i] = (x[i] - mean) / sqrt(var + 1e-5) * w[i] + b[i];
    qvk_layernorm(y, x, w, b, N, 1e-5f);
    check_close("layernorm", y, ref, N, 1e-6, 2e-6);
    for (int i = 0; i < N; i++)
        ref[i] -= b[i];
    qvk_layernorm(y, x, w, NULL, N, 1e-5f);
    check_close("layernorm (no bias)", y, ref, N, 1e-6, 2e-6);

    for (int i = 0; i < N; i++)
        ref[i] = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
    memcpy(y, x, sizeof x);
    qvk_gelu_erf(y, N);
    check_close("gelu_erf", y, ref, N, 1e-7, 1e-6);

    for (int i = 0; i < N; i++)
        ref[i] = x[i] > 0 ? x[i] : expm1((double)x[i]);
    memcpy(y, x, sizeof x);
    qvk_elu(y, N);
    check_close("elu", y, ref, N, 1e-7, 1e-6);
}

/* The SIMD exp/sin polynomials over wide argument ranges, per variant. */
/* Channels-first [ch, n] → time-major [n, ch] (row t holds the ch channels of step t), and back. */
static void to_tm(float *dst, const float *src, int ch, int n) {
    for (int c = 0; c < ch; c++)
        for (int t = 0; t < n; t++)
            dst[(size_t)t * ch + c] = src[(size_t)c * n + t];
}

static void from_tm(float *dst, const float *src, int ch, int n) {
    for (int c = 0; c < ch; c++)
        for (int t = 0; t < n; t++)
            dst[(size_t)c * n + t] = src[(size_t)t * ch + c];
}

static void test_vector_math(void **state) {
    (void)state;
    enum { N = 4099, C = 3, T = 1000 };
    static float x[N], y[N], g[N], u[N], sx[C * T], sx0[C * T], sx0t[C * T];
    static double ref[N], sref[C * T];
    for (int i = 0; i < N; i++)
        x[i] = -100.0f + 200.0f * i / (N - 1); /* silu: exp(-x) up to e^100 */
    fill(g, N, 8.0f);
    fill(u, N, 2.0f);
    /* snake arguments a·x up to ~2·10⁵, so the scalar fallback for |a·x| ≥ 2¹⁶ runs too */
    const float la[C] = {-0.5f, 0.0f, 2.5f}, lb[C] = {0.3f, -1.0f, 0.0f};
    for (int t = 0; t < T; t++) {
        sx0[t] = rnd() * 3.0f;
        sx0[T + t] = rnd() * 50.0f;
        sx0[2 * T + t] = (t < T / 2 ? rnd() : rnd() * 2e4f);
    }
    for (int c = 0; c < C; c++)
        for (int t = 0; t < T; t++) {
            /* a·x rounded to f32 as the reference does; at |a·x| ~ 10⁵ that rounding alone
             * moves sin by up to 0.01, which is not what this test measures */
            float arg = expf(la[c]) * sx0[c * T + t];
            double s = sin((double)arg);
            sref[c * T + t] = sx0[c * T + t] + s * s / ((double)expf(lb[c]) + 1e-9);
        }
    for (int v = 0; v < N_VARIANTS; v++) {
        if (qvk_set_variant(k_variants[v]) != 0) continue;
        char what[64];

        for (int i = 0; i < N; i++)
            ref[i] = x[i] / (1 + exp(-(double)x[i]));
        memcpy(y, x, sizeof x);
        qvk_silu(y, N);
        snprintf(what, sizeof what, "silu [-100,100] %s", k_variants[v]);
        check_close(what, y, ref, N, 1e-30, 4e-7);

        for (int i = 0; i < N; i++)
            ref[i] = g[i] / (1 + exp(-(double)g[i])) * u[i];
        qvk_swiglu(y, g, u, N);
        snprintf(what, sizeof what, "swiglu %s", k_variants[v]);
        check_close(what, y, ref, N, 1e-30, 5e-7);

        /* softmax over a 120-wide range: tiny probabilities must stay accurate too */
        for (int n = 1; n <= 37; n += 12) {
            for (int i = 0; i < N; i++)
                y[i] = -110.0f + 120.0f * (float)((i * 7919) % N) / N;
            /* x − max is rounded to f32 as in the reference implementation (not the kernel's
             * error: up to ½ ulp of 110, i.e. a 4e-6 relative change of e^(x−max)) */
            float mx = -INFINITY;
            double sum = 0;
            for (int i = 0; i < n * 100; i++)
                mx = y[i] > mx ? y[i] : mx;
            for (int i = 0; i < n * 100; i++)
                sum += exp((double)(y[i] - mx));
            for (int i = 0; i < n * 100; i++)
                ref[i] = exp((double)(y[i] - mx)) / sum;
            qvk_softmax(y, n * 100);
            snprintf(what, sizeof what, "softmax n=%d %s", n * 100, k_variants[v]);
            check_close(what, y, ref, (size_t)n * 100, 1e-44, 1e-6);
        }

        for (int i = 0; i < N; i++)
            ref[i] = x[i] > 0 ? x[i] : expm1((double)x[i]);
        memcpy(y, x, sizeof x);
        qvk_elu(y, N);
        snprintf(what, sizeof what, "elu [-100,100] %s", k_variants[v]);
        check_close(what, y, ref, N, 1e-30, 4e-7);

        to_tm(sx, sx0, C, T);
        qvk_snakebeta(sx, C, T, C, la, lb);
        from_tm(sx0t, sx, C, T);
        snprintf(what, sizeof what, "snakebeta %s", k_variants[v]);
        check_close(what, sx0t, sref, C * T, 2e-6, 3e-7);
    }
    restore_variant();
}

/* Softmax rows of every length from 1 to 300 (the speech encoder's causal attention has them
 * all), values down to e^-110 (subnormal probabilities): the AVX-512 variant gives the AVX2
 * variant's bits (same polynomial, same expf tail, same summation order), so the clone's codes
 * cannot depend on which of the two runs. */
static void test_softmax_avx512_is_avx2(void **state) {
    (void)state;
    static float a[300], b[300];
    if (qvk_set_variant("avx512") || qvk_set_variant("avx2")) {
        printf("  AVX-512 or AVX2 variant not supported here: nothing to compare\n");
        restore_variant();
        return;
    }
    int n_diff = 0, n_all = 0;
    for (int n = 1; n <= 300; n++) {
        for (int i = 0; i < n; i++) a[i] = b[i] = rnd() * (i % 3 ? 8.0f : 55.0f);
        qvk_set_variant("avx512");
        qvk_softmax(a, n);
        qvk_set_variant("avx2");
        qvk_softmax(b, n);
        for (int i = 0; i < n; i++) n_diff += memcmp(a + i, b + i, sizeof(float)) != 0;
        n_all += n;
    }
    printf("  softmax avx512 vs avx2, lengths 1..300: %d of %d values differ (tolerance 0)\n",
           n_diff, n_all);
    assert_int_equal(n_diff, 0);
    restore_variant();
}

/* ---- RoPE ------------------------------------------------------------------------------ */

static void test_rope(void **state) {
    (void)state;
    enum { HD = 128, H = 3 };
    float c[HD / 2], s[HD / 2], x[H * HD];
    double cref[HD / 2], sref[HD / 2], xref[H * HD];
    int pos = 1234;
    qvk_rope_table(c, s, HD, pos, 1e6f);
    for (int i = 0; i < HD / 2; i++) {
        /* the reference computes the angle in f32: pos·f_i rounded, then cos/sin of it */
        float f = 1.0f / powf(1e6f, (float)(2 * i) / HD);
        float a = (float)pos * f;
        cref[i] = cos((double)a);
        sref[i] = sin((double)a);
    }
    check_close("rope_table cos", c, cref, HD / 2, 2e-7, 0);
    check_close("rope_table sin", s, sref, HD / 2, 2e-7, 0);
    fill(x, H * HD, 1.0f);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < HD / 2; i++) {
            double a = x[h * HD + i], b = x[h * HD + i + HD / 2];
            xref[h * HD + i] = a * c[i] - b * s[i];
            xref[h * HD + i + HD / 2] = b * c[i] + a * s[i];
        }
    qvk_rope_apply(x, H, HD, c, s);
    check_close("rope_apply", x, xref, H * HD, 1e-6, 1e-6);
}

/* ---- attention ------------------------------------------------------------------------- */

/* GQA groups of 4, 2 and 1 query heads per kv head; head_dim with a vector tail; strided rows. */
static void test_attend(void **state) {
    (void)state;
    enum { NH = 8, HD = 67, CTX = 45, MAXSTRIDE = NH * HD + 5 };
    float *q = falloc(NH * HD), *k = falloc(CTX * MAXSTRIDE), *v = falloc(CTX * MAXSTRIDE);
    float *out = falloc(NH * HD), *out2 = falloc(NH * HD), *scratch = falloc(NH * CTX);
    double ref[NH * HD];
    qvk_pool *pool = qvk_pool_create(2);
    const int n_kvs[] = {2, 4, 8};
    for (int c = 0; c < 3; c++) {
        int nkv = n_kvs[c], stride = nkv * HD + 5;
        fill(q, NH * HD, 1.0f);
        fill(k, (size_t)CTX * stride, 1.0f);
        fill(v, (size_t)CTX * stride, 1.0f);
        float scale = 1.0f / sqrtf(HD);
        for (int h = 0; h < NH; h++) {
            int kvh = h / (NH / nkv);
            double sc[CTX], mx = -1e300, sum = 0;
            for (int t = 0; t < CTX; t++) {
                double d = 0;
                for (int i = 0; i < HD; i++)
                    d += (double)q[h * HD + i] * k[t * stride + kvh * HD + i];
                sc[t] = d * scale;
                mx = sc[t] > mx ? sc[t] : mx;
            }
            for (int t = 0; t < CTX; t++)
                sum += sc[t] = exp(sc[t] - mx);
            for (int i = 0; i < HD; i++) {
                double o = 0;
                for (int t = 0; t < CTX; t++)
                    o += sc[t] / sum * v[t * stride + kvh * HD + i];
                ref[h * HD + i] = o;
            }
        }
        for (int vv = 0; vv < N_VARIANTS; vv++) {
            if (qvk_set_variant(k_variants[vv]) != 0) continue;
            qvk_attend(NULL, out, q, k, v, CTX, stride, NH, nkv, HD, scale, scratch);
            char what[64];
            snprintf(what, sizeof what, "attend %s %d/%d heads", k_variants[vv], NH, nkv);
            check_close(what, out, ref, NH * HD, 2e-6, 1e-5);
            qvk_attend(pool, out2, q, k, v, CTX, stride, NH, nkv, HD, scale, scratch);
            assert_memory_equal(out, out2, sizeof(float) * NH * HD);
        }
    }
    restore_variant();
    qvk_pool_free(pool);
    qvk_free(q);
    qvk_free(k);
    qvk_free(v);
    qvk_free(out);
    qvk_free(out2);
    qvk_free(scratch);
}

/* ---- convolutions ---------------------------------------------------------------------- */

static void test_conv1d_out_len(void **state) {
    (void)state;
    qvk_conv cz = {.c_in = 2, .c_out = 2, .k = 5, .stride = 1, .dilation = 1};
    assert_int_equal(qvk_conv1d_out_len(&cz, 4), 0);
    assert_int_equal(qvk_conv1d_out_len(&cz, 5), 1);
}

static void test_conv_transpose1d(void **state) {
    (void)state;
    const int cfg[][4] = {
        /* c_in c_out k stride */ {4, 3, 2, 2}, {3, 5, 16, 8}, {2, 2, 10, 5}, {5, 4, 3, 1}};
    double max_all = 0;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        int ci = cfg[c][0], co = cfg[c][1], k = cfg[c][2], st = cfg[c][3];
        for (int trim_mode = 0; trim_mode < 2; trim_mode++) {
            int trim = trim_mode ? k - st : 0;
            int t_in = 11;
            int full = (t_in - 1) * st + k;
            float *x = falloc((size_t)ci * t_in), *w = falloc((size_t)ci * co * k);
            float *b = falloc(co), *y = falloc((size_t)co * full);
            float *scratch = falloc(qvk_conv_transpose1d_scratch(ci, co, k, t_in));
            double *ref = calloc((size_t)co * full, sizeof(double));
            fill(x, (size_t)ci * t_in, 1.0f);
            fill(w, (size_t)ci * co * k, 1.0f);
            fill(b, co, 1.0f);
            for (int o = 0; o < co; o++) {
                for (int p = 0; p < full; p++)
                    ref[(size_t)o * full + p] = b[o];
                for (int i = 0; i < ci; i++)
                    for (int t = 0; t < t_in; t++)
                        for (int j = 0; j < k; j++)
                            ref[(size_t)o * full + t * st + j] +=
                                (double)x[i * t_in + t] * w[((size_t)i * co + o) * k + j];
            }
            /* plain, then time-major with the weights packed in panels (the speech decoder's
             * path: x and y as [time, channels]) */
            float *wp = falloc(qvk_p48_size(ci, co * k));
            float *sp = falloc(qvk_conv_transpose1d_p48_scratch(ci, co, k, t_in));
            float *xt = falloc((size_t)ci * t_in);
            qvk_p48_pack(wp, w, ci, co * k, co * k, 0);
            to_tm(xt, x, ci, t_in);
            for (int packed = 0; packed < 2; packed++) {
                int kept = packed ? qvk_conv_transpose1d_p48(y, co, xt, ci, ci, co, t_in, k, st,
                                                             trim, wp, b, sp)
                                  : qvk_conv_transpose1d(y, x, ci, co, t_in, k, st, trim, w, b,
                                                         scratch);
                assert_int_equal(kept, full - trim);
                for (int o = 0; o < co; o++)
                    for (int p = 0; p < kept; p++) {
                        const float v = packed ? y[(size_t)p * co + o] : y[(size_t)o * kept + p];
                        double d = fabs(v - ref[(size_t)o * full + p]);
                        if (d > max_all) max_all = d;
                        if (!(d <= 1e-5))
                            fail_msg("conv_transpose1d cfg %zu packed %d: o %d p %d", c, packed,
                                     o, p);
                    }
            }
            qvk_free(wp);
            qvk_free(sp);
            qvk_free(xt);
            qvk_free(x);
            qvk_free(w);
            qvk_free(b);
            qvk_free(y);
            qvk_free(scratch);
            free(ref);
        }
    }
    printf("  %-40s max|Δ| = %.3g (tol 1e-5)\n", "conv_transpose1d (4 cfg x 2 trims x 2 paths)", max_all);
}

/* The speech decoder's short time-major convs against double sums: a dense conv by per-tap
 * sgemms (pre_conv's shape and an odd one), a conv to one channel (the last), the depthwise one
 * (ConvNeXt). x, w in [-1, 1). */
static void test_conv_tm(void **state) {
    (void)state;
    const int cases[][4] = {/* c_in c_out k n */ {512, 1024, 3, 8}, {5, 3, 7, 11}, {96, 1, 7, 1920},
                            {6, 1, 7, 4}};
    double max_all = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int ci = cases[c][0], co = cases[c][1], k = cases[c][2], n = cases[c][3], w_in = n + k - 1;
        float *x = falloc((size_t)w_in * ci), *w = falloc((size_t)co * ci * k);
        float *wt = falloc((size_t)co * ci * k), *b = falloc(co), *y = falloc((size_t)n * co);
        float *z = falloc((size_t)w_in * k);
        fill(x, (size_t)w_in * ci, 1.0f);
        fill(w, (size_t)co * ci * k, 1.0f);
        fill(b, co, 1.0f);
        for (int o = 0; o < co; o++) /* PyTorch [c_out, c_in, k] → tap-major [k, c_out, c_in] */
            for (int i = 0; i < ci; i++)
                for (int j = 0; j < k; j++)
                    wt[((size_t)j * co + o) * ci + i] = w[((size_t)o * ci + i) * k + j];
        for (int one = 0; one < 1 + (co == 1); one++) {
            if (one)
                qvk_conv1d_to1_tm(y, x, w_in, ci, k, wt, b[0], z);
            else
                qvk_conv1d_taps_tm(y, x, w_in, ci, co, k, wt, b);
            for (int t = 0; t < n; t++)
                for (int o = 0; o < co; o++) {
                    double acc = b[o];
                    for (int i = 0; i < ci; i++)
                        for (int j = 0; j < k; j++)
                            acc += (double)w[((size_t)o * ci + i) * k + j] *
                                   x[(size_t)(t + j) * ci + i];
                    double d = fabs(y[(size_t)t * co + o] - acc);
                    if (d > max_all) max_all = d;
                    if (!(d <= 1e-4))
                        fail_msg("conv tm case %zu one %d: t %d o %d: %g vs %g", c, one, t, o,
                                 y[(size_t)t * co + o], acc);
                }
        }
        /* depthwise on ci channels, weights [ci, 1, k] */
        float *yd = falloc((size_t)n * ci), *bd = falloc(ci);
        fill(bd, ci, 1.0f);
        qvk_conv1d_depthwise_tm(yd, x, n, ci, k, w, bd);
        for (int t = 0; t < n; t++)
            for (int i = 0; i < ci; i++) {
                double acc = bd[i];
                for (int j = 0; j < k; j++)
                    acc += (double)w[(size_t)i * k + j] * x[(size_t)(t + j) * ci + i];
                double d = fabs(yd[(size_t)t * ci + i] - acc);
                if (d > max_all) max_all = d;
                if (!(d <= 1e-5)) fail_msg("depthwise case %zu: t %d c %d", c, t, i);
            }
        qvk_free(yd);
        qvk_free(bd);
        qvk_free(x);
        qvk_free(w);
        qvk_free(wt);
        qvk_free(b);
        qvk_free(y);
        qvk_free(z);
    }
    printf("  %-40s max|Δ| = %.3g (tol 1e-4)\n", "conv taps / to-1 / depthwise, time-major", max_all);
}

/* The speech decoder's Winograd F(5, 7) residual convs on its shapes (channels, dilation,
 * outputs; plus one with channels off the 48-column panels and ragged phases) against a double
 * reference, in the scalar (sgemm) and AVX-512 paths. x and w in [-1, 1) and [-s, s) with
 * s = 1/√(7c), so outputs are O(1): the transforms' f32 rounding measured ≤ 4.1e-5 absolute
 * (F(4, 7): 2.5e-5). */
/* Winograd's transforms scale rounding errors up against a direct sum (F(5, 7) evaluates at 11
 * points, ±1/4 … ±4: about two orders), so both checks bound each output's error by a share of
 * its Σ|w·x|: measured up to ~3.4e-6 (7-tap F(5, 7)) and ~5e-7 (transposed, F(4, 2)) here. The decoder's PCM
 * against the goldens stays at 1.2e-5 of its 1e-4 tolerance. */
#define WINO_REL 1e-5    /* the bound: WINO_REL·Σ|w·x| per output */
#define WINO_CT_REL 2e-6 /* the same for the transposed convs */

static void test_conv_wino(void **state) {
    (void)state;
    const int cases[][3] = {{96, 9, 1920}, {192, 3, 640}, {384, 1, 160}, {768, 9, 40}, {20, 3, 37}};
    qvk_wino wn;
    assert_int_equal(qvk_wino_init(&wn, 5, 7), 0);
    assert_int_equal(wn.alpha, 11);
    assert_int_equal(qvk_wino_init(&wn, 12, 7), -1);
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        if (qvk_set_variant(k_variants[vi]) != 0 || strcmp(k_variants[vi], "avx2") == 0) continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int ch = cases[c][0], dil = cases[c][1], n = cases[c][2], w_in = n + 6 * dil;
            float *x = falloc((size_t)ch * w_in), *w = falloc((size_t)ch * ch * 7);
            float *b = falloc(ch), *y = falloc((size_t)ch * n);
            float *u = falloc(qvk_wino_weights_size(&wn, ch, ch));
            float *scratch = falloc(qvk_wino_scratch(&wn, ch, ch, n, dil));
            double *ref = malloc(sizeof(double) * (size_t)ch * n);
            double *mag = malloc(sizeof(double) * (size_t)ch * n);
            assert_non_null(ref);
            assert_non_null(mag);
            fill(x, (size_t)ch * w_in, 1.0f);
            fill(w, (size_t)ch * ch * 7, 1.0f / sqrtf(7.0f * ch));
            fill(b, ch, 1.0f);
            qvk_wino_weights(&wn, u, w, ch, ch);
            float *xt = falloc((size_t)ch * w_in), *yt = falloc((size_t)ch * n); /* time-major */
            to_tm(xt, x, ch, w_in);
            qvk_conv1d_wino(&wn, yt, xt, w_in, ch, ch, dil, u, b, scratch);
            from_tm(y, yt, ch, n);
            qvk_free(xt);
            qvk_free(yt);
            for (int o = 0; o < ch; o++)
                for (int t = 0; t < n; t++) {
                    double acc = b[o], m = fabs(b[o]);
                    for (int i = 0; i < ch; i++)
                        for (int j = 0; j < 7; j++) {
                            const double p = (double)w[((size_t)o * ch + i) * 7 + j] *
                                             x[(size_t)i * w_in + t + j * dil];
                            acc += p, m += fabs(p);
                        }
                    ref[(size_t)o * n + t] = acc, mag[(size_t)o * n + t] = WINO_REL * m;
                }
            char what[80];
            snprintf(what, sizeof what, "wino %s c%d d%d n%d", k_variants[vi], ch, dil, n);
            check_bound(what, y, ref, mag, ch * n);
            qvk_free(x);
            qvk_free(w);
            qvk_free(b);
            qvk_free(y);
            qvk_free(u);
            qvk_free(scratch);
            free(ref);
            free(mag);
        }
        /* the transposed convs (kernel 2r, stride r) as F(4, 2) over their output phases:
         * decoder blocks 1-3 and a shape off the panels */
        const int tcases[][4] = {{768, 384, 5, 32}, {384, 192, 4, 160}, {192, 96, 3, 640},
                                 {20, 7, 5, 13}};
        qvk_wino wt;
        assert_int_equal(qvk_wino_init(&wt, 4, 2), 0);
        for (size_t c = 0; c < sizeof tcases / sizeof tcases[0]; c++) {
            int ci = tcases[c][0], co = tcases[c][1], r = tcases[c][2], n = tcases[c][3];
            float *x = falloc((size_t)ci * (n + 1)), *w = falloc((size_t)ci * co * 2 * r);
            float *b = falloc(co), *y = falloc((size_t)co * n * r);
            float *u = falloc(qvk_wino_weights_size(&wt, r * co, ci));
            float *scratch = falloc(qvk_wino_scratch(&wt, ci, r * co, n, 1));
            double *ref = malloc(sizeof(double) * (size_t)co * n * r);
            double *mag = malloc(sizeof(double) * (size_t)co * n * r);
            assert_non_null(ref);
            assert_non_null(mag);
            fill(x, (size_t)ci * (n + 1), 1.0f);
            fill(w, (size_t)ci * co * 2 * r, 1.0f / sqrtf(2.0f * ci));
            fill(b, co, 1.0f);
            qvk_wino_weights_ct(&wt, u, w, ci, co, r);
            float *xt = falloc((size_t)ci * (n + 1)), *yt = falloc((size_t)co * n * r);
            to_tm(xt, x, ci, n + 1);
            qvk_conv_transpose1d_wino(&wt, yt, xt, n + 1, ci, co, r, u, b, scratch);
            from_tm(y, yt, co, n * r); /* y as [c_out, n·r] for the comparison below */
            qvk_free(xt);
            qvk_free(yt);
            /* output step s, phase j: W[:, o, j]·x[s + 1] + W[:, o, j + r]·x[s] (x[0]: context) */
            for (int o = 0; o < co; o++)
                for (int t = 0; t < n; t++)
                    for (int j = 0; j < r; j++) {
                        double acc = b[o], m = fabs(b[o]);
                        for (int i = 0; i < ci; i++) {
                            const float *wi = w + ((size_t)i * co + o) * 2 * r;
                            const double p = (double)wi[j] * x[(size_t)i * (n + 1) + t + 1],
                                         q = (double)wi[j + r] * x[(size_t)i * (n + 1) + t];
                            acc += p + q, m += fabs(p) + fabs(q);
                        }
                        ref[(size_t)o * n * r + (size_t)t * r + j] = acc;
                        mag[(size_t)o * n * r + (size_t)t * r + j] = WINO_CT_REL * m;
                    }
            char what[80];
            snprintf(what, sizeof what, "wino convT %s c%d>%d r%d n%d", k_variants[vi], ci, co, r,
                     n);
            check_bound(what, y, ref, mag, co * n * r);
            qvk_free(x);
            qvk_free(w);
            qvk_free(b);
            qvk_free(y);
            qvk_free(u);
            qvk_free(scratch);
            free(ref);
            free(mag);
        }
        /* packed matmul: a partial last panel, a partial last group of rows */
        int k = 3 * 16, nn = 100, rows = 13, ldx = k + 5;
        float *x = falloc((size_t)(rows - 1) * ldx + k), *w = falloc((size_t)k * nn);
        float *wp = falloc(qvk_p48_size(k, nn)), *y = falloc((size_t)rows * nn);
        double *ref = malloc(sizeof(double) * (size_t)rows * nn);
        assert_non_null(ref);
        fill(x, (size_t)(rows - 1) * ldx + k, 1.0f);
        fill(w, (size_t)k * nn, 1.0f);
        qvk_p48_pack(wp, w, k, nn, nn, 0);
        qvk_p48_matmul(y, nn, x, ldx, wp, k, nn, rows);
        for (int r = 0; r < rows; r++)
            for (int o = 0; o < nn; o++) {
                double acc = 0;
                for (int i = 0; i < k; i++)
                    acc += (double)x[(size_t)r * ldx + i] * w[(size_t)i * nn + o];
                ref[(size_t)r * nn + o] = acc;
            }
        check_close("p48 matmul 13x48 by 48x100", y, ref, (size_t)rows * nn, 1e-5, 1e-5);
        qvk_free(x);
        qvk_free(w);
        qvk_free(wp);
        qvk_free(y);
        free(ref);
    }
    restore_variant();
}

/* f16 panels (the --decoder-f16 speech decoder's): the same bits as f32 panels of the same values
 * through the avx512 kernel, and as an fmaf chain from zero over k in order, in every variant;
 * both orientations of the pack, a partial last panel, partial last row groups. */
static void test_p48_f16(void **state) {
    (void)state;
    /* k, n, rows: 13 and 12 rows end in a group of 5 (run as 8) and of 4 (run as 4) */
    const int cases[][3] = {{48, 100, 13}, {37, 48, 8}, {96, 7, 3}, {48, 100, 12}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int k = cases[c][0], nn = cases[c][1], rows = cases[c][2], ldx = k + 5;
        const int trans = c % 2;
        float *x = falloc((size_t)rows * ldx), *w = falloc((size_t)k * nn);
        float *wp = falloc(qvk_p48_size(k, nn)), *y32 = falloc((size_t)rows * nn);
        float *y = falloc((size_t)rows * nn), *ref = falloc((size_t)rows * nn);
        uint16_t *wh = qvk_alloc(qvk_p48_size(k, nn) * sizeof *wh), *h = malloc(sizeof *h);
        assert_non_null(wh);
        assert_non_null(h);
        fill(x, (size_t)rows * ldx, 1.0f);
        for (size_t i = 0; i < (size_t)k * nn; i++) { /* f16 values, as a --decoder-f16 tensor */
            float f = rnd() * 4.0f;
            qvk_f32_to_f16(h, &f, 1);
            qvk_f16_to_f32(&w[i], h, 1);
        }
        const int64_t ldw = trans ? k : nn; /* trans: w is [n, k] */
        qvk_p48_pack(wp, w, k, nn, ldw, trans);
        qvk_p48_pack_f16(wh, w, k, nn, ldw, trans);
        for (int r = 0; r < rows; r++)
            for (int o = 0; o < nn; o++) {
                float acc = 0.0f;
                for (int i = 0; i < k; i++)
                    acc = fmaf(x[(size_t)r * ldx + i],
                               trans ? w[(size_t)o * k + i] : w[(size_t)i * nn + o], acc);
                ref[(size_t)r * nn + o] = acc;
            }
        const int f32_kernel = qvk_set_variant("avx512") == 0;
        if (f32_kernel) qvk_p48_matmul(y32, nn, x, ldx, wp, k, nn, rows);
        for (int v = 0; v < N_VARIANTS; v++) {
            if (qvk_set_variant(k_variants[v]) != 0) continue;
            qvk_p48w_matmul(y, nn, x, ldx, (qvk_p48w){NULL, wh}, k, nn, rows);
            assert_memory_equal(y, ref, (size_t)rows * nn * sizeof *y);
            if (f32_kernel) assert_memory_equal(y, y32, (size_t)rows * nn * sizeof *y);
        }
        printf("p48 f16 %dx%d by %dx%d (%s): bit-identical to fmaf%s in every variant\n", rows, k,
               k, nn, trans ? "trans" : "plain", f32_kernel ? " and to avx512 f32 panels" : "");
        qvk_free(x);
        qvk_free(w);
        qvk_free(wp);
        qvk_free(y32);
        qvk_free(y);
        qvk_free(ref);
        qvk_free(wh);
        free(h);
    }
    restore_variant();
}

/* ---- .npy reader ----------------------------------------------------------------------- */

/* Builds a v1.0 .npy image: header padded so the data starts at a multiple of 64. */
static size_t make_npy(unsigned char *buf, const char *dict, const void *data, size_t n_data) {
    size_t dl = strlen(dict);
    size_t total_hdr = (10 + dl + 1 + 63) / 64 * 64;
    size_t hlen = total_hdr - 10;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)(hlen & 0xff);
    buf[9] = (unsigned char)(hlen >> 8);
    memcpy(buf + 10, dict, dl);
    memset(buf + 10 + dl, ' ', hlen - dl - 1);
    buf[total_hdr - 1] = '\n';
    memcpy(buf + total_hdr, data, n_data);
    return total_hdr + n_data;
}

static void test_npy(void **state) {
    (void)state;
    char path[] = "/tmp/qvk_test_npy_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    unsigned char buf[512];
    char err[256];
    npy_array a;

    const float f[8] = {1, -2, 3.5f, 0, 1e-3f, 42, 7, 8};
    size_t n = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f,
                        6 * sizeof *f);
    tmp_write(path, buf, n);
    assert_int_equal(npy_read(path, &a, err, sizeof err), 0);
    assert_int_equal(a.dtype, NPY_F32);
    assert_int_equal(a.n_dims, 2);
    assert_true(a.shape[0] == 2 && a.shape[1] == 3 && a.n_elems == 6);
    assert_memory_equal(npy_f32(&a), f, 6 * sizeof *f);
    npy_free(&a);

    const int64_t iv[3] = {-1, 151672, 1ll << 40};
    n = make_npy(buf, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", iv, sizeof iv);
    tmp_write(path, buf, n);
    assert_int_equal(npy_read_typed(path, NPY_I64, &a, err, sizeof err), 0);
    assert_true(a.n_dims == 1 && a.shape[0] == 3);
    assert_memory_equal(npy_i64(&a), iv, sizeof iv);
    npy_free(&a);
    assert_int_equal(npy_read_typed(path, NPY_F32, &a, err, sizeof err), -1);

    n = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", f, 4);
    tmp_write(path, buf, n);
    assert_int_equal(npy_read(path, &a, err, sizeof err), 0);
    assert_true(a.n_dims == 0 && a.n_elems == 1 && npy_f32(&a)[0] == 1.0f);
    npy_free(&a);

    /* hostile inputs: each must fail with a message and leave nothing allocated */
    struct {
        const char *dict;
        size_t n_data;
    } bad[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20}, /* short */
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28}, /* long */
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 8},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }", 8},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, }", 8},
        {"{'fortran_order': False, 'shape': (2,), }", 8},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = make_npy(buf, bad[i].dict, f, bad[i].n_data);
        tmp_write(path, buf, n);
        err[0] = 0;
        assert_int_equal(npy_read(path, &a, err, sizeof err), -1);
        assert_null(a.data);
        assert_true(strstr(err, path) == err);
    }
    n = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", f, 8);
    buf[8] = 0xff; /* header length beyond the file */
    buf[9] = 0xff;
    tmp_write(path, buf, n);
    assert_int_equal(npy_read(path, &a, err, sizeof err), -1);
    tmp_write(path, "\x93NUMPY\x01", 7);
    assert_int_equal(npy_read(path, &a, err, sizeof err), -1);
    tmp_write(path, "PK\x03\x04 not npy", 13);
    assert_int_equal(npy_read(path, &a, err, sizeof err), -1);
    unlink(path);
    assert_int_equal(npy_read(path, &a, err, sizeof err), -1);
    printf("  npy: f4/i8/scalar read, 11 malformed files rejected (last: %s)\n", err);
}

int main(void) {
    qvk_init();
    g_picked = qvk_variant();
    printf("kernel variant by CPUID/QV_KERNELS: %s\n", g_picked);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conversions),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_pool_queued),
        cmocka_unit_test(test_mem_read),
        cmocka_unit_test(test_matvec_vs_reference),
        cmocka_unit_test(test_matvec_threads_bit_identical),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_linear_bf16),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_vector_math),
        cmocka_unit_test(test_softmax_avx512_is_avx2),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_attend),
        cmocka_unit_test(test_conv1d_out_len),
        cmocka_unit_test(test_conv_transpose1d),
        cmocka_unit_test(test_conv_tm),
        cmocka_unit_test(test_conv_wino),
        cmocka_unit_test(test_p48_f16),
        cmocka_unit_test(test_npy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
