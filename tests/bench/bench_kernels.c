/* bench_kernels — decode matvec throughput (GB/s of weights read) against the machine's read
 * bandwidth, for every per-frame shape of 0.6B and 1.7B, bf16, int8 and q4, 1 and 2 threads.
 * Each shape cycles through copies of its matrices totalling more than the L3, so every pass
 * streams from DRAM; between the matvec calls the probe reads other copies with the same
 * threads, and the table gives the median of the per-pass ratios (the machine is shared: only
 * two measurements taken under the same background load compare). Then the element-wise
 * kernels, attention, batched linears and the pool round trip.
 * usage: bench_kernels [VARIANT...]  (default: the variant in use; e.g. avx512 avx2 scalar)
 * QV_BENCH_SECTIONS picks sections (default all): matvec batch quant eltwise attention gemm pool.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "kernels/q4.h"
#include "kernels/q8.h"
#include "tests/bench/helpers/measure.h"

#define N_PASSES 7
/* Matrix set per shape: default 384 MB, twelve times this VM's 32 MiB L3; QV_BENCH_SET_MB
 * overrides (e.g. 16 to see the L3-resident rate the code predictor's re-read weights get). */
static size_t g_set_bytes = (size_t)384 << 20;

static const char *g_sections;

static int want(const char *section) {
    if (!g_sections) return 1;
    const size_t n = strlen(section);
    for (const char *p = strstr(g_sections, section); p; p = strstr(p + 1, section))
        if ((p == g_sections || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return 1;
    return 0;
}

/* ---- FMA peak (each thread runs the probe) ---------------------------------------------- */

struct fma_job {
    long n_iter;
    uint64_t macs[64];
};

static void fma_run(int ith, int nth, void *arg) {
    struct fma_job *j = arg;
    j->macs[ith] = qvk_fma_probe(j->n_iter);
}

/* ---- pool round trip -------------------------------------------------------------------- */

static void empty_run(int ith, int nth, void *arg) {
    (void)ith, (void)nth, (void)arg;
}

/* ---- matvec ----------------------------------------------------------------------------- */

/* One engine call: the matrices sharing an input, dispatched together (talker.c qve_matvec). */
struct shape {
    const char *what;
    int n_in, n_mv, outs[3];
};

/* The per-frame calls of the talkers and the code predictor (engine/talker.c). */
static const struct shape g_shapes[] = {
    {"0.6B/cp q+k+v 4096x1024", 1024, 3, {2048, 1024, 1024}},
    {"0.6B/cp o 1024x2048", 2048, 1, {1024}},
    {"0.6B/cp gate+up 6144x1024", 1024, 2, {3072, 3072}},
    {"0.6B/cp down 1024x3072", 3072, 1, {1024}},
    {"0.6B codec head 3072x1024", 1024, 1, {3072}},
    {"cp head 2048x1024", 1024, 1, {2048}},
    {"1.7B q+k+v 4096x2048", 2048, 3, {2048, 1024, 1024}},
    {"1.7B o 2048x2048", 2048, 1, {2048}},
    {"1.7B gate+up 12288x2048", 2048, 2, {6144, 6144}},
    {"1.7B down 2048x6144", 6144, 1, {2048}},
    {"1.7B codec head 3072x2048", 2048, 1, {3072}},
    {"1.7B mtp proj 1024x2048", 2048, 1, {1024}},
};

/* n_set copies of one shape's matrices, laid out back to back in one arena per format. */
struct workload {
    const struct shape *sh;
    int n_set, rows; /* rows: of one copy (all its matrices) */
    uint16_t *w;     /* [n_set · rows, n_in] bf16 */
    int8_t *q;       /* the same, int8 */
    float *scale;    /* [n_set · rows] */
    uint8_t *q4;     /* the same, q4: [n_set · rows, n_in / 2] */
    uint16_t *q4sb;  /* its scales then biases, [n_set · rows, n_in / 64] each */
    const float *x;  /* [n_x, n_in] */
    float *y;        /* [n_x, rows] */
    int n_x;         /* int8 only: vectors through the matrices together (the batched step) */
};

enum { FMT_BF16, FMT_INT8, FMT_Q4, N_FMT };
static const char *const g_fmt[N_FMT] = {"bf16", "int8", "q4"};

/* Bytes of one copy in format fmt (q4: packed values, scales and biases). */
static size_t copy_bytes(const struct workload *wl, int fmt) {
    size_t n = (size_t)wl->rows * wl->sh->n_in;
    return fmt == FMT_BF16 ? 2 * n : fmt == FMT_INT8 ? n : n / 2 + n / QVK_Q4_GROUP * 4;
}

/* Copy s of the shape's matrices through one engine call. */
static void run_copy(qvk_pool *pool, const struct workload *wl, int s, int fmt) {
    const struct shape *sh = wl->sh;
    const int n_g = sh->n_in / QVK_Q4_GROUP;
    const size_t row = (size_t)s * wl->rows, n_sb = (size_t)wl->n_set * wl->rows * n_g;
    qvk_mv mv[3];
    qvk_q8_mv mq[3];
    qvk_q4_mv m4[3];
    for (int m = 0, o = 0; m < sh->n_mv; o += sh->outs[m], m++) {
        mv[m] = (qvk_mv){wl->y + o, wl->w + (row + o) * sh->n_in, NULL, sh->outs[m]};
        mq[m] = (qvk_q8_mv){wl->y + (size_t)o * wl->n_x, wl->q + (row + o) * sh->n_in,
                            wl->scale + row + o, NULL, sh->outs[m]};
        m4[m] = (qvk_q4_mv){wl->y + o, wl->q4 + (row + o) * sh->n_in / 2,
                            wl->q4sb + (row + o) * n_g, wl->q4sb + n_sb + (row + o) * n_g, NULL,
                            sh->outs[m]};
    }
    if (fmt == FMT_INT8)
        qvk_q8_matvec_batch(pool, wl->x, wl->n_x, sh->n_in, mq, sh->n_mv);
    else if (fmt == FMT_Q4)
        qvk_q4_matvec_multi(pool, wl->x, sh->n_in, m4, sh->n_mv);
    else
        qvk_matvec_bf16_multi(pool, wl->x, sh->n_in, mv, sh->n_mv);
}

struct result {
    double gbs, ratio; /* medians: matvec GB/s, per-pass matvec / probe ratio */
};

/* Probe and matvec alternate copy by copy (the probe reading the copy half a set away, so
 * neither finds the other's bytes in cache): load changes on the shared machine hit both. */
static struct result bench(qvk_pool *pool, const struct workload *wl, int fmt) {
    double t_mv[N_PASSES], ratio[N_PASSES];
    const size_t copy = copy_bytes(wl, fmt);
    const char *base = (const char *)wl->w; /* the probe reads as many bytes as the matvec */
    for (int r = 0; r < N_PASSES + 1; r++) {
        double rd = 0, mv = 0;
        for (int s = 0; s < wl->n_set; s++) {
            rd += bench_read_s(pool, base + copy * ((s + wl->n_set / 2) % wl->n_set), copy);
            double t1 = bench_clock_s(CLOCK_MONOTONIC);
            run_copy(pool, wl, s, fmt);
            mv += bench_clock_s(CLOCK_MONOTONIC) - t1;
        }
        if (r == 0) continue; /* warm-up: page tables, pool, frequency */
        t_mv[r - 1] = mv;
        ratio[r - 1] = rd / mv;
    }
    return (struct result){copy * wl->n_set / bench_median(t_mv, N_PASSES) / 1e9,
                           bench_median(ratio, N_PASSES)};
}

/* Small bf16 values around ±1, different per row; pages really touched. */
static void fill_weights(uint16_t *w, size_t n) {
    for (size_t i = 0; i < n; i++)
        w[i] = (uint16_t)(0x3f00 + ((i * 2654435761u) >> 20) % 256) | (uint16_t)((i & 1) << 15);
}

/* batched = 0: every shape, format and variant with one x. batched = 1: the int8 rows of the
 * 0.6B shapes (the talker's and code predictor's per-frame calls) with B = 1, 2, 4 vectors
 * through each matrix at once (the batched frame step of B streams); GB/s counts weight bytes
 * once per call, so B columns at the same GB/s cost no more than one. */
static int bench_matvecs(qvk_pool *pool2, const char *const *variants, int n_var, int batched) {
    static const int batch_x[] = {1, 2, 4};
    float *x = qvk_alloc(4 * 8192 * sizeof(float)), *y = qvk_alloc(4 * 16384 * sizeof(float));
    if (!x || !y) return -1;
    for (int i = 0; i < 4 * 8192; i++)
        x[i] = (float)((i % 17) - 8) * 0.125f;
    if (batched)
        printf("\nbatched int8 matvec, B vectors per call (GB/s of weights read once per call)\n");
    printf("%-27s %-7s %-4s | %-20s | %-20s\n", "matvec [rows x in]", "variant",
           batched ? "B" : "fmt", "1 thread: GB/s %read", "2 threads: GB/s %read");
    for (size_t s = 0; s < sizeof g_shapes / sizeof g_shapes[0]; s++) {
        const struct shape *sh = &g_shapes[s];
        if (batched && strncmp(sh->what, "0.6B", 4) && strncmp(sh->what, "cp ", 3)) continue;
        struct workload wl = {sh, 0, 0, NULL, NULL, NULL, NULL, NULL, x, y, 1};
        for (int m = 0; m < sh->n_mv; m++)
            wl.rows += sh->outs[m];
        size_t copy = (size_t)wl.rows * sh->n_in;
        wl.n_set = (int)((g_set_bytes / 2 + copy - 1) / copy);
        size_t n = copy * wl.n_set;
        wl.w = qvk_alloc(n * 2);
        wl.q = qvk_alloc(n);
        wl.scale = qvk_alloc((size_t)wl.n_set * wl.rows * sizeof(float));
        wl.q4 = batched ? NULL : qvk_alloc(n / 2);
        wl.q4sb = batched ? NULL : qvk_alloc(n / QVK_Q4_GROUP * 4);
        if (!wl.w || !wl.q || !wl.scale || (!batched && (!wl.q4 || !wl.q4sb))) return -1;
        fill_weights(wl.w, n);
        qvk_q8_quantize_bf16(pool2, wl.q, wl.scale, wl.w, wl.n_set * wl.rows, sh->n_in);
        if (!batched)
            qvk_q4_quantize_bf16(pool2, wl.q4, wl.q4sb, wl.q4sb + n / QVK_Q4_GROUP, wl.w,
                                 wl.n_set * wl.rows, sh->n_in);
        for (int v = 0; v < n_var; v++) {
            if (qvk_set_variant(variants[v]) != 0) continue;
            for (int k = 0; k < (batched ? 3 : N_FMT); k++) {
                const int fmt = batched ? FMT_INT8 : k;
                char col[8];
                snprintf(col, sizeof col, "%d", batch_x[k]);
                wl.n_x = batched ? batch_x[k] : 1;
                struct result r1 = bench(NULL, &wl, fmt), r2 = bench(pool2, &wl, fmt);
                printf("%-27s %-7s %-4s | %6.1f  %4.0f%%       | %6.1f  %4.0f%%\n", sh->what,
                       variants[v], batched ? col : g_fmt[fmt], r1.gbs, 100 * r1.ratio, r2.gbs,
                       100 * r2.ratio);
                fflush(stdout);
            }
        }
        qvk_free(wl.w);
        qvk_free(wl.q);
        qvk_free(wl.scale);
        qvk_free(wl.q4);
        qvk_free(wl.q4sb);
    }
    qvk_free(x);
    qvk_free(y);
    return 0;
}

/* Weight quantization (int8 session start): 0.6B's decode matrices, ≈ 0.55 G weights, as one
 * [rows, 1024] matrix cycled from a 384 MB bf16 set, in memory already touched (a session's
 * first quantization also pays the kernel's zeroing of the fresh 0.55 GB int8 buffer). */
static void bench_quantize(qvk_pool *pool2) {
    const int n_in = 1024;
    size_t rows = g_set_bytes / 2 / n_in, total = (size_t)553 << 20;
    uint16_t *w = qvk_alloc(rows * n_in * 2);
    int8_t *q = qvk_alloc(rows * n_in);
    float *sc = qvk_alloc(rows * sizeof(float));
    if (!w || !q || !sc) return;
    fill_weights(w, rows * n_in);
    printf("\nweight quantization bf16 -> int8, 0.6B's %zu M weights, s:", total >> 20);
    for (int th = 1; th <= 2; th++) {
        double t[N_PASSES];
        for (int r = 0; r < N_PASSES; r++) {
            double t0 = bench_clock_s(CLOCK_MONOTONIC);
            for (size_t done = 0; done < total; done += rows * n_in)
                qvk_q8_quantize_bf16(th == 1 ? NULL : pool2, q, sc, w, (int)rows, n_in);
            t[r] = bench_clock_s(CLOCK_MONOTONIC) - t0;
        }
        printf("   %d thr %.3f", th, bench_median(t, N_PASSES));
    }
    printf("\n");
    qvk_free(w);
    qvk_free(q);
    qvk_free(sc);
}

int main(int argc, char **argv) {
    qvk_init();
    const char *mb = getenv("QV_BENCH_SET_MB");
    if (mb && atol(mb) > 0) g_set_bytes = (size_t)atol(mb) << 20;
    g_sections = getenv("QV_BENCH_SECTIONS");
    qvk_pool *pool2 = qvk_pool_create(2);
    if (!pool2) {
        fprintf(stderr, "bench_kernels: cannot create a 2-thread pool\n");
        return 1;
    }
    const char *picked = qvk_variant();
    const char *const *variants = argc > 1 ? (const char *const *)argv + 1 : &picked;
    int n_var = argc > 1 ? argc - 1 : 1;
    printf("kernel variant: %s   (matrices cycled: %zu MB per shape, median of %d passes)\n\n",
           picked, g_set_bytes >> 20, N_PASSES);

    size_t bw_bytes = (size_t)1 << 30;
    uint64_t *buf = qvk_alloc(bw_bytes);
    if (!buf) {
        fprintf(stderr, "bench_kernels: cannot allocate 1 GiB\n");
        return 1;
    }
    memset(buf, 1, bw_bytes);
    double bw1 = bench_read_gbs(NULL, buf, bw_bytes, 5);
    double bw2 = bench_read_gbs(pool2, buf, bw_bytes, 5);
    double bw_l2_1 = bench_read_gbs(NULL, buf, (size_t)256 << 10, 25);
    qvk_free(buf);
    printf("read bandwidth (qvk_mem_read of 1 GiB, %s): 1 thread %.1f GB/s, 2 threads %.1f GB/s"
           "   (same loop in L2: %.1f GB/s, so the loop is not the limit)\n\n",
           picked, bw1, bw2, bw_l2_1);
    for (int batched = 0; batched < 2; batched++)
        if (want(batched ? "batch" : "matvec") && bench_matvecs(pool2, variants, n_var, batched)) {
            fprintf(stderr, "bench_kernels: out of memory\n");
            return 1;
        }
    qvk_set_variant(picked);
    if (want("quant")) bench_quantize(pool2);

    /* element-wise kernels the speech decoder and attention spend time in (cache-resident) */
    if (want("eltwise")) {
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
                    double t0 = bench_clock_s(CLOCK_MONOTONIC);
                    if (op == 0) qvk_snakebeta(eb, C, T, C, la, lb);
                    if (op == 1) qvk_silu(eb, C * T);
                    if (op == 2)
                        for (int c = 0; c < C; c++)
                            qvk_softmax(eb + (size_t)c * T, T);
                    t[r] = bench_clock_s(CLOCK_MONOTONIC) - t0;
                }
                printf(" %8.2f", bench_median(t, N_PASSES) / (C * T) * 1e9);
            }
            printf("\n");
        }
        qvk_free(eb);
        qvk_free(la);
        qvk_free(lb);
    }

    /* attention over an f32 KV cache, talker shape (16 q / 8 kv heads, head_dim 128), 28 layers
     * of 1000 positions each (229 MB, more than L2, so this is a KV-read bandwidth figure) */
    if (want("attention")) {
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
                    double t0 = bench_clock_s(CLOCK_MONOTONIC);
                    for (int l = 0; l < NL; l++) {
                        const float *k = kv + per_layer * 2 * l;
                        qvk_attend(th == 1 ? NULL : pool2, o, q, k, k + per_layer, CTX, NKV * HD,
                                   NH, NKV, HD, 0.088f, sc);
                    }
                    t[r] = bench_clock_s(CLOCK_MONOTONIC) - t0;
                }
                double m = bench_median(t, N_PASSES);
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

    /* prefill GEMM: every batched shape of 0.6B and 1.7B (sets sharing X run as one call) at
     * GEMM_ROWS rows (a 40-token prompt's positions), GFLOP/s (2·rows·n_in·n_out per call) and
     * the share of the FMA peak the probe measures with the same threads, passes interleaved */
    if (want("gemm")) {
        enum { GEMM_ROWS = 51, MAXW = 6144 * 2048 * 2, MAXIN = 6144 };
        static const struct {
            const char *name;
            int n_in, n_out[3], n_mv;
        } sh[] = {
            {"0.6B qkv", 1024, {2048, 1024, 1024}, 3}, {"0.6B o", 2048, {1024}, 1},
            {"0.6B gate+up", 1024, {3072, 3072}, 2},   {"0.6B down", 3072, {1024}, 1},
            {"text fc1", 2048, {2048}, 1},             {"0.6B text fc2", 2048, {1024}, 1},
            {"1.7B qkv", 2048, {2048, 1024, 1024}, 3}, {"1.7B o", 2048, {2048}, 1},
            {"1.7B gate+up", 2048, {6144, 6144}, 2},   {"1.7B down", 6144, {2048}, 1},
        };
        uint16_t *w = qvk_alloc((size_t)MAXW * 2);
        float *x = qvk_alloc(sizeof(float) * GEMM_ROWS * MAXIN);
        float *y = qvk_alloc(sizeof(float) * GEMM_ROWS * MAXW);
        float *scratch = qvk_alloc(sizeof(float) * qvk_linear_bf16_scratch(GEMM_ROWS, MAXIN, 6144));
        fill_weights(w, (size_t)MAXW);
        for (int i = 0; i < GEMM_ROWS * MAXIN; i++)
            x[i] = (float)((i % 13) - 6) * 0.1f;
        for (int v = 0; v < n_var; v++) {
            if (qvk_set_variant(variants[v])) continue;
            printf("\nprefill GEMM (%s), %d rows, fastest of %d passes (load only slows a pass "
                   "down): ms, GFLOP/s, share of the FMA probe's fastest pass with the same "
                   "threads\n",
                   qvk_variant(), GEMM_ROWS, N_PASSES);
            for (size_t k = 0; k < sizeof sh / sizeof sh[0]; k++) {
                qvk_mv mv[3];
                size_t off = 0;
                double flop = 0;
                for (int m = 0; m < sh[k].n_mv; m++) {
                    mv[m] = (qvk_mv){y + (size_t)GEMM_ROWS * off, w + off * sh[k].n_in, NULL,
                                     sh[k].n_out[m]};
                    off += (size_t)sh[k].n_out[m];
                    flop += 2.0 * GEMM_ROWS * sh[k].n_in * sh[k].n_out[m];
                }
                char shape[32];
                snprintf(shape, sizeof shape, "%d->%zu", sh[k].n_in, off);
                printf("  %-14s %-11s", sh[k].name, shape);
                for (int th = 1; th <= 2; th++) {
                    qvk_pool *p = th == 1 ? NULL : pool2;
                    double best = 1e30, best_peak = 0;
                    for (int r = 0; r < N_PASSES; r++) {
                        /* a probe about as long as the GEMM (192 multiply-adds per AVX-512
                         * round, 96 per AVX2 round) */
                        struct fma_job fj = {(long)(flop / 2 / 192 / th), {0}};
                        double t0 = bench_clock_s(CLOCK_MONOTONIC);
                        qvk_pool_run(p, fma_run, &fj);
                        double tp = bench_clock_s(CLOCK_MONOTONIC) - t0;
                        uint64_t macs = 0;
                        for (int i = 0; i < th; i++)
                            macs += fj.macs[i];
                        const double peak = 2.0 * (double)macs / tp;
                        best_peak = peak > best_peak ? peak : best_peak;
                        t0 = bench_clock_s(CLOCK_MONOTONIC);
                        qvk_linear_bf16_multi(p, x, GEMM_ROWS, sh[k].n_in, mv, sh[k].n_mv,
                                              scratch);
                        double tg = bench_clock_s(CLOCK_MONOTONIC) - t0;
                        best = tg < best ? tg : best;
                    }
                    printf("   %d thr %6.2f ms %6.1f GFLOP/s", th, best * 1e3, flop / best / 1e9);
                    if (best_peak > 0) printf(" %3.0f %%", 100 * flop / best / best_peak);
                }
                printf("\n");
            }
        }
        qvk_set_variant(picked);
        qvk_free(w);
        qvk_free(x);
        qvk_free(y);
        qvk_free(scratch);
    }

    /* pool dispatch round trip with an empty job */
    if (want("pool")) {
        double t0 = bench_clock_s(CLOCK_MONOTONIC);
        for (int r = 0; r < 20000; r++)
            qvk_pool_run(pool2, empty_run, NULL);
        printf("\npool round trip (2 threads, empty job): %.2f us\n",
               (bench_clock_s(CLOCK_MONOTONIC) - t0) / 20000 * 1e6);
    }
    qvk_set_variant(picked);
    qvk_pool_free(pool2);
    return 0;
}
