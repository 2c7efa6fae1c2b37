/* bench_kernels — matvec throughput (GB/s of weights read) against the machine's read bandwidth.
 * Bandwidth: sum a 1 GiB buffer with 1 and 2 threads. Matvec: cycle through distinct matrices
 * totalling > 200 MB so every pass streams from DRAM, not cache. Medians of several passes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

#define N_PASSES 7
/* Matrix set per shape: default 768 MB, above this VM's 480 MiB L3; QV_BENCH_SET_MB overrides
 * (e.g. 32 to see the L3-resident rate that the code predictor's re-read weights get). */
static size_t g_set_bytes = (size_t)768 << 20;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* ---- read bandwidth --------------------------------------------------------------------- */

struct sum_job {
    const uint64_t *p;
    size_t n;
    uint64_t out[64];
};

/* Each thread reads a contiguous share at full vector width (qvk_mem_read). */
static void sum_run(int ith, int nth, void *arg) {
    struct sum_job *j = arg;
    size_t per = (j->n / (size_t)nth) & ~(size_t)7;
    size_t n = ith == nth - 1 ? j->n - per * (size_t)ith : per;
    j->out[ith] = qvk_mem_read(j->p + per * (size_t)ith, n * 8);
}

static double read_bw(qvk_pool *pool, const uint64_t *buf, size_t n_bytes, int n_rep) {
    struct sum_job j = {buf, n_bytes / 8, {0}};
    double t[N_PASSES * 4];
    uint64_t sink = 0;
    for (int r = 0; r < n_rep; r++) {
        double t0 = now_s();
        qvk_pool_run(pool, sum_run, &j);
        t[r] = now_s() - t0;
        sink += j.out[0];
    }
    if (sink == 42) printf(" ");
    return n_bytes / median(t, n_rep) / 1e9;
}

/* ---- matvec ----------------------------------------------------------------------------- */

struct shape {
    const char *what;
    int n_out, n_in;
};

struct result {
    double gbs, bw_gbs, ratio; /* medians: matvec GB/s, read GB/s on the same set, per-pass ratio */
};

/* One pass of the workload over the whole matrix set (kind 0: matvec, 1: multi q/k/v). */
struct workload {
    int kind, n_mat, n_out, n_in;
    uint16_t **w;
    size_t *bytes;
    float *x, *y;
};

static void run_pass(qvk_pool *pool, const struct workload *wl) {
    if (wl->kind == 0) {
        for (int m = 0; m < wl->n_mat; m++)
            qvk_matvec_bf16(pool, wl->y, wl->w[m], wl->x, NULL, wl->n_out, wl->n_in);
        return;
    }
    const int outs[3] = {2048, 1024, 1024};
    for (int s = 0; s + 3 <= wl->n_mat; s += 3) {
        qvk_mv mv[3];
        for (int m = 0; m < 3; m++)
            mv[m] = (qvk_mv){wl->y + 2048 * m, wl->w[s + m], NULL, outs[m]};
        qvk_matvec_bf16_multi(pool, wl->x, 1024, mv, 3);
    }
}

/* The machine is shared: a plain read of the same matrices is timed right before every matvec
 * pass, so the percentage compares two measurements taken under the same background load. */
static struct result bench(qvk_pool *pool, const struct workload *wl) {
    double t_mv[N_PASSES], t_rd[N_PASSES], ratio[N_PASSES];
    size_t total = 0;
    for (int m = 0; m < wl->n_mat; m++)
        total += wl->bytes[m];
    for (int r = 0; r < N_PASSES + 1; r++) {
        double t0 = now_s();
        uint64_t sink = 0;
        for (int m = 0; m < wl->n_mat; m++) {
            struct sum_job j = {(const uint64_t *)wl->w[m], wl->bytes[m] / 8, {0}};
            qvk_pool_run(pool, sum_run, &j);
            sink += j.out[0];
        }
        double t1 = now_s();
        run_pass(pool, wl);
        double t2 = now_s();
        if (sink == 42) printf(" ");
        if (r == 0) continue; /* warm-up: page tables, pool, frequency */
        t_rd[r - 1] = t1 - t0;
        t_mv[r - 1] = t2 - t1;
        ratio[r - 1] = (t1 - t0) / (t2 - t1);
    }
    struct result res = {total / median(t_mv, N_PASSES) / 1e9, total / median(t_rd, N_PASSES) / 1e9,
                         median(ratio, N_PASSES)};
    return res;
}

/* Small bf16 values around ±1, different per matrix; pages really touched. */
static uint16_t *alloc_weights(size_t n_bytes, int seed) {
    uint16_t *w = qvk_alloc(n_bytes);
    if (!w) return NULL;
    for (size_t i = 0; i < n_bytes / 2; i++)
        w[i] = (uint16_t)(0x3f00 + ((i * 2654435761u + (size_t)seed) >> 20) % 256) |
               (uint16_t)((i & 1) << 15);
    return w;
}

int main(int argc, char **argv) {
    qvk_init();
    const char *mb = getenv("QV_BENCH_SET_MB");
    if (mb && atol(mb) > 0) g_set_bytes = (size_t)atol(mb) << 20;
    qvk_pool *pool2 = qvk_pool_create(2);
    if (!pool2) {
        fprintf(stderr, "bench_kernels: cannot create a 2-thread pool\n");
        return 1;
    }
    printf("kernel variant: %s   (matrices cycled: %zu MB per shape, median of %d passes)\n\n",
           qvk_variant(), g_set_bytes >> 20, N_PASSES);

    size_t bw_bytes = (size_t)1 << 30;
    uint64_t *buf = qvk_alloc(bw_bytes);
    if (!buf) {
        fprintf(stderr, "bench_kernels: cannot allocate 1 GiB\n");
        return 1;
    }
    memset(buf, 1, bw_bytes);
    double bw1 = read_bw(NULL, buf, bw_bytes, 5);
    double bw2 = read_bw(pool2, buf, bw_bytes, 5);
    double bw_l2_1 = read_bw(NULL, buf, (size_t)256 << 10, 25);
    qvk_free(buf);
    printf("read bandwidth (qvk_mem_read of 1 GiB, %s): 1 thread %.1f GB/s, 2 threads %.1f GB/s"
           "   (same loop in L2: %.1f GB/s, so the loop is not the limit)\n\n",
           qvk_variant(), bw1, bw2, bw_l2_1);

    const struct shape shapes[] = {
        {"1024x3072 (down)", 1024, 3072},
        {"3072x1024 (gate/up)", 3072, 1024},
        {"2048x1024 (q)", 2048, 1024},
        {"1024x2048 (o)", 1024, 2048},
    };
    /* variants to run: the arguments, or all three */
    const char *all[] = {"avx512", "avx2", "scalar"};
    const char *const *variants = argc > 1 ? (const char *const *)argv + 1 : all;
    int n_var = argc > 1 ? argc - 1 : 3;
    const char *picked = qvk_variant();
    printf("%-22s %-7s | %-22s | %-22s\n", "bf16 matvec [out x in]", "variant",
           "1 thread: GB/s  %read", "2 threads: GB/s  %read");
    float *x = qvk_alloc(4096 * sizeof(float)), *y = qvk_alloc(4096 * 3 * sizeof(float));
    for (int i = 0; i < 4096; i++)
        x[i] = (float)((i % 17) - 8) * 0.125f;
    for (size_t s = 0; s <= sizeof shapes / sizeof shapes[0]; s++) {
        int multi = s == sizeof shapes / sizeof shapes[0];
        struct workload wl = {multi, 0, multi ? 4096 : shapes[s].n_out, 1024, NULL, NULL, x, y};
        if (!multi) wl.n_in = shapes[s].n_in;
        size_t set_bytes = (size_t)wl.n_out * wl.n_in * 2;
        wl.n_mat = (int)((g_set_bytes + set_bytes - 1) / set_bytes) * (multi ? 3 : 1);
        wl.w = calloc((size_t)wl.n_mat, sizeof *wl.w);
        wl.bytes = calloc((size_t)wl.n_mat, sizeof *wl.bytes);
        if (!wl.w || !wl.bytes) return 1;
        for (int m = 0; m < wl.n_mat; m++) {
            wl.bytes[m] = multi ? (size_t)(m % 3 == 0 ? 2048 : 1024) * 1024 * 2 : set_bytes;
            if (!(wl.w[m] = alloc_weights(wl.bytes[m], m))) {
                fprintf(stderr, "bench_kernels: out of memory\n");
                return 1;
            }
        }
        for (int v = 0; v < n_var; v++) {
            if (qvk_set_variant(variants[v]) != 0) continue;
            struct result r1 = bench(NULL, &wl), r2 = bench(pool2, &wl);
            printf("%-22s %-7s | %6.1f (rd %4.1f) %4.0f%% | %6.1f (rd %4.1f) %4.0f%%\n",
                   multi ? "multi q+k+v 4096x1024" : shapes[s].what, variants[v], r1.gbs, r1.bw_gbs,
                   100 * r1.ratio, r2.gbs, r2.bw_gbs, 100 * r2.ratio);
        }
        for (int m = 0; m < wl.n_mat; m++)
            qvk_free(wl.w[m]);
        free(wl.w);
        free(wl.bytes);
    }

    /* element-wise kernels the speech decoder and attention spend time in (cache-resident) */
    {
        enum { C = 96, T = 24000 };
        float *eb = qvk_alloc(sizeof(float) * C * T), *la = qvk_alloc(C * 4),
              *lb = qvk_alloc(C * 4);
        for (int c = 0; c < C; c++)
            la[c] = lb[c] = 0.01f * c;
        printf("\n%-32s", "ns/element (1 thread)");
        for (int v = 0; v < n_var; v++)
            printf(" %8s", variants[v]);
        printf("\n");
        const char *names[] = {"snakebeta 96x24000", "silu 96x24000", "softmax 24000 x96"};
        for (int op = 0; op < 3; op++) {
            printf("%-32s", names[op]);
            for (int v = 0; v < n_var; v++) {
                if (qvk_set_variant(variants[v]) != 0) {
                    printf(" %8s", "-");
                    continue;
                }
                double t[N_PASSES];
                for (int r = 0; r < N_PASSES; r++) {
                    for (size_t i = 0; i < (size_t)C * T; i++)
                        eb[i] = (float)((i * 7919) % 2001) * 1e-3f - 1.0f;
                    double t0 = now_s();
                    if (op == 0) qvk_snakebeta(eb, C, T, la, lb);
                    if (op == 1) qvk_silu(eb, C * T);
                    if (op == 2)
                        for (int c = 0; c < C; c++)
                            qvk_softmax(eb + (size_t)c * T, T);
                    t[r] = now_s() - t0;
                }
                printf(" %8.2f", median(t, N_PASSES) / (C * T) * 1e9);
            }
            printf("\n");
        }
        qvk_free(eb);
        qvk_free(la);
        qvk_free(lb);
    }

    /* attention over an f32 KV cache, talker shape (16 q / 8 kv heads, head_dim 128), 28 layers
     * of 1000 positions each (229 MB, more than L2, so this is a KV-read bandwidth figure) */
    {
        enum { NH = 16, NKV = 8, HD = 128, CTX = 1000, NL = 28 };
        size_t per_layer = (size_t)CTX * NKV * HD;
        float *kv = qvk_alloc(sizeof(float) * per_layer * 2 * NL);
        float *q = qvk_alloc(sizeof(float) * NH * HD), *o = qvk_alloc(sizeof(float) * NH * HD);
        float *sc = qvk_alloc(sizeof(float) * NH * CTX);
        if (!kv || !q || !o || !sc) return 1;
        for (size_t i = 0; i < per_layer * 2 * NL; i++)
            kv[i] = (float)(i % 7) * 0.01f;
        for (int i = 0; i < NH * HD; i++)
            q[i] = (float)(i % 5) * 0.02f;
        printf(
            "\nattention, 28 layers x ctx %d (16/8 heads, hd 128): ms per token and GB/s of K+V\n",
            CTX);
        for (int v = 0; v < n_var; v++) {
            if (qvk_set_variant(variants[v]) != 0) continue;
            printf("  %-7s", variants[v]);
            for (int th = 1; th <= 2; th++) {
                double t[N_PASSES];
                for (int r = 0; r < N_PASSES; r++) {
                    double t0 = now_s();
                    for (int l = 0; l < NL; l++) {
                        const float *k = kv + per_layer * 2 * l;
                        qvk_attend(th == 1 ? NULL : pool2, o, q, k, k + per_layer, CTX, NKV * HD,
                                   NH, NKV, HD, 0.088f, sc);
                    }
                    t[r] = now_s() - t0;
                }
                double m = median(t, N_PASSES);
                printf("   %d thr %6.2f ms %5.1f GB/s", th, m * 1e3,
                       (double)per_layer * 2 * NL * 4 / m / 1e9);
            }
            printf("\n");
        }
        qvk_set_variant(picked);
        qvk_free(kv);
        qvk_free(q);
        qvk_free(o);
        qvk_free(sc);
    }

    /* batched bf16 linear (prefill): direct bf16 path vs widening + OpenBLAS sgemm */
    {
        enum { OUT = 3072, IN = 1024, MAXR = 256 };
        uint16_t *w = alloc_weights((size_t)OUT * IN * 2, 1);
        float *xs = qvk_alloc(sizeof(float) * MAXR * IN),
              *ys = qvk_alloc(sizeof(float) * MAXR * OUT);
        float *wf = qvk_alloc(sizeof(float) * OUT * IN);
        for (int i = 0; i < MAXR * IN; i++)
            xs[i] = (float)((i % 13) - 6) * 0.1f;
        printf("\nlinear_bf16 %dx%d, ms per call (%s)    rows:", OUT, IN, picked);
        const int rows[] = {4, 16, 32, 64, 128, 256};
        for (int k = 0; k < 6; k++)
            printf(" %7d", rows[k]);
        for (int th = 1; th <= 2; th++) {
            qvk_pool *p = th == 1 ? NULL : pool2;
            qvk_set_variant(picked);
            for (int path = 0; path < 2; path++) {
                printf("\n  %d thr %-30s", th,
                       path ? "widen all + 1 sgemm (blas thr=thr)" : "qvk_linear_bf16");
                qvk_blas_set_threads(th);
                for (int k = 0; k < 6; k++) {
                    double t[N_PASSES];
                    for (int r = 0; r < N_PASSES; r++) {
                        double t0 = now_s();
                        if (path == 0) {
                            qvk_linear_bf16(p, ys, xs, w, NULL, rows[k], IN, OUT, wf);
                        } else {
                            qvk_bf16_to_f32(wf, w, (size_t)OUT * IN);
                            qvk_linear_f32(ys, xs, wf, NULL, rows[k], IN, OUT);
                        }
                        t[r] = now_s() - t0;
                    }
                    printf(" %7.2f", median(t, N_PASSES) * 1e3);
                }
            }
        }
        qvk_blas_set_threads(1);
        printf("\n");
        qvk_free(w);
        qvk_free(xs);
        qvk_free(ys);
        qvk_free(wf);
    }

    /* pool dispatch round trip with an empty job */
    {
        struct sum_job j = {NULL, 0, {0}};
        double t0 = now_s();
        for (int r = 0; r < 20000; r++)
            qvk_pool_run(pool2, sum_run, &j);
        printf("\npool round trip (2 threads, empty job): %.2f us\n", (now_s() - t0) / 20000 * 1e6);
    }
    qvk_set_variant(picked);
    qvk_free(x);
    qvk_free(y);
    qvk_pool_free(pool2);
    return 0;
}
