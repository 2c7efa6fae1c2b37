/* conv.c — 1-D convolution as chunked sgemm over a gathered input window, with padding and the
 * input activation applied while gathering. Chunking bounds memory (the 30 s clip is 720 000
 * samples at the first Mimi layers), activating the window applies ELU once per input sample
 * instead of once per kernel tap, and the chunks are what a thread pool shares (each thread its
 * own scratch, single-threaded sgemm inside). Channels-first (ECAPA) unfolds the window
 * (im2col); time-major (Mimi) multiplies tap groups of the window directly where it can.
 */
#include "features/features_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/kernels.h"

/* Chunk sizing. A chunk's unfolded rows stay within BUDGET floats (1 MB) so the gathered window
 * is still in L2 when sgemm packs it, but never fewer than MIN_ROWS rows: every sgemm call repacks
 * the whole weight matrix, which dominates short layers with big weights (750 frames × 8192). */
#define BUDGET (1 << 18)
#define MIN_ROWS 256

static int64_t chunk_max(const qvc_conv *cv) {
    int64_t n = BUDGET / ((int64_t)cv->c_in * cv->k);
    return n < MIN_ROWS ? MIN_ROWS : n;
}

/* Each thread's share, cut into equal chunks of at most chunk_max rows. OpenBLAS sums each output
 * element over K in the same order whatever the M split, so the result does not depend on the
 * thread count (test_clone checks 1 vs 2 threads). */
static int64_t chunk_len(const qvc_conv *cv, int64_t t_out, int n_threads) {
    int64_t share = (t_out + n_threads - 1) / n_threads, m = chunk_max(cv);
    int64_t pieces = (share + m - 1) / m;
    int64_t n = pieces > 0 ? (share + pieces - 1) / pieces : 1;
    return n < 1 ? 1 : n;
}

static int64_t span_len(const qvc_conv *cv, int64_t n) {
    return (n - 1) * cv->stride + (int64_t)(cv->k - 1) * cv->dilation + 1;
}

int64_t qvc_conv_out_len(const qvc_conv *cv, int64_t t_in) {
    int64_t num = t_in + cv->pad_left + cv->pad_right - (int64_t)cv->dilation * (cv->k - 1) - 1;
    return num < 0 ? 0 : num / cv->stride + 1;
}

size_t qvc_conv_scratch(const qvc_conv *cv) {
    int64_t n = chunk_max(cv);
    size_t per = (size_t)((int64_t)cv->c_in * span_len(cv, n) + (int64_t)cv->c_in * cv->k * n +
                          (int64_t)cv->c_out * n);
    return (per + 15) / 16 * 16;   /* keeps every thread's slice 64-byte aligned */
}

void qvc_conv_causal(qvc_conv *cv, int64_t t_in) {
    int k_eff = (cv->k - 1) * cv->dilation + 1;
    cv->pad_left = k_eff - cv->stride;
    int64_t n_out = (t_in + cv->stride - 1) / cv->stride;
    /* ideal padded length (n_out − 1)·stride + k_eff; the right pad fills what is missing */
    int64_t need = (n_out - 1) * cv->stride + k_eff - (t_in + cv->pad_left);
    cv->pad_right = need > 0 ? (int)need : 0;
}

void qvc_conv_same(qvc_conv *cv) {
    cv->pad_left = cv->pad_right = cv->dilation * (cv->k - 1) / 2;
}

void *qvc_alloc_large(size_t n_bytes) {
    void *p = qvk_alloc(n_bytes);
    const uintptr_t huge = (uintptr_t)2 << 20;
    if (p && n_bytes >= 2 * huge) {
        uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
        uintptr_t b = ((uintptr_t)p + n_bytes) & ~(huge - 1);
        if (b > a) madvise((void *)a, b - a, MADV_HUGEPAGE);   /* advice only: errors ignored */
    }
    return p;
}

static int64_t src_index(enum qvc_pad pad, int64_t p, int64_t t_in) {
    if (p >= 0 && p < t_in) return p;
    switch (pad) {
    case QVC_PAD_ZERO: return -1;
    case QVC_PAD_REFLECT: return p < 0 ? -p : 2 * (t_in - 1) - p;
    case QVC_PAD_REPLICATE: return p < 0 ? 0 : t_in - 1;
    }
    return -1;
}

/* AVX2+FMA helpers unless the CPU lacks them or QV_KERNELS=scalar forces the portable loops
 * (same switch as kernels/). Decided once; concurrent first calls store the same value. */
static int have_avx2(void) {
    static _Atomic int have = -1;
    if (have < 0) {
        const char *force = getenv("QV_KERNELS");
        __builtin_cpu_init();
        have = !(force && !strcmp(force, "scalar")) && __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma");
    }
    return have;
}

void qvc_add_bias(float *y, int64_t ldy, const float *v, int64_t n_rows, int n) {
    if (have_avx2()) {
        qvc_add_bias_avx2(y, ldy, v, n_rows, n);
        return;
    }
    for (int64_t r = 0; r < n_rows; r++)
        for (int i = 0; i < n; i++) y[(size_t)r * ldy + i] += v[i];
}

void qvc_add_rows(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t n_rows, int n) {
    if (have_avx2()) {
        qvc_add_rows_avx2(y, ldy, x, ldx, n_rows, n);
        return;
    }
    for (int64_t r = 0; r < n_rows; r++)
        for (int i = 0; i < n; i++) y[(size_t)r * ldy + i] += x[(size_t)r * ldx + i];
}

/* The kernels' current choice, read per call so that a test switching the variant
 * (qvk_set_variant) switches the 1-channel conv with it (the results are the same). */
static int have_avx512(void) {
    return have_avx2() && !strcmp(qvk_variant(), "avx512");
}

static void activate(float *x, size_t n, enum qvc_act act) {
    switch (act) {
    case QVC_ACT_NONE: break;
    case QVC_ACT_RELU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case QVC_ACT_ELU: qvk_elu(x, n); break;
    }
}

typedef struct {
    const qvc_conv *cv;
    float *y;
    int64_t ldy, ldx, t_in, t_out, n_chunk;
    const float *x, *w, *bias;
    float *scratch;
    int time_major;
} conv_job;

/* A 1×1 conv with nothing applied to its input reads x in place: no window, no unfolding, so
 * each thread's share is one chunk (one weight packing). ECAPA's tdnn1/tdnn2/MFA/attention
 * convs are ~70 % of its work. */
static int reads_in_place(const qvc_conv *cv, int time_major) {
    return !time_major && cv->k == 1 && cv->stride == 1 && cv->act_in == QVC_ACT_NONE &&
           cv->pad_left == 0 && cv->pad_right == 0 && !cv->residual;
}

/* One chunk of output columns [t0, t0 + n), channels-first. */
static void chunk_cf(const conv_job *j, int64_t t0, int64_t n, float *scratch) {
    const qvc_conv *cv = j->cv;
    if (reads_in_place(cv, 0)) {
        float *dst = j->y + t0;
        qvk_sgemm(0, 0, cv->c_out, (int)n, cv->c_in, 1.0f, j->w, cv->c_in, j->x + t0, (int)j->ldx,
                  0.0f, dst, (int)j->ldy);
        for (int o = 0; o < cv->c_out; o++) {
            float *orow = dst + (size_t)o * j->ldy;
            if (j->bias) {
                float b = j->bias[o];
                for (int64_t i = 0; i < n; i++) orow[i] += b;
            }
            activate(orow, (size_t)n, cv->act_out);
        }
        return;
    }
    int64_t n_max = chunk_max(cv), t_in = j->t_in;
    int kk = cv->c_in * cv->k;
    float *win = scratch;
    float *cols = win + cv->c_in * span_len(cv, n_max);
    float *out = cols + (size_t)kk * n_max;
    int64_t span = span_len(cv, n);
    int64_t p0 = t0 * cv->stride - cv->pad_left;
    /* padded, activated input window [c_in, span] */
    for (int c = 0; c < cv->c_in; c++) {
        const float *xr = j->x + (size_t)c * j->ldx;
        float *wr = win + (size_t)c * span;
        int64_t lo = p0 < 0 ? -p0 : 0;
        int64_t hi = t_in - p0 < span ? t_in - p0 : span;
        if (hi > lo) memcpy(wr + lo, xr + p0 + lo, (size_t)(hi - lo) * sizeof(float));
        else hi = lo;
        for (int64_t i = 0; i < lo; i++) {
            int64_t s = src_index(cv->pad, p0 + i, t_in);
            wr[i] = s < 0 ? 0.0f : xr[s];
        }
        for (int64_t i = hi; i < span; i++) {
            int64_t s = src_index(cv->pad, p0 + i, t_in);
            wr[i] = s < 0 ? 0.0f : xr[s];
        }
    }
    activate(win, (size_t)cv->c_in * span, cv->act_in);
    const float *b_mat = win;
    int64_t ldb = span;
    if (!(cv->k == 1 && cv->stride == 1)) {
        for (int c = 0; c < cv->c_in; c++)
            for (int k = 0; k < cv->k; k++) {
                const float *src = win + (size_t)c * span + (int64_t)k * cv->dilation;
                float *dst = cols + ((size_t)c * cv->k + k) * n;
                if (cv->stride == 1) {
                    memcpy(dst, src, (size_t)n * sizeof(float));
                } else {
                    for (int64_t i = 0; i < n; i++) dst[i] = src[i * cv->stride];
                }
            }
        b_mat = cols;
        ldb = n;
    }
    /* without a residual the product goes straight into y (bias and activation in place) */
    float *dst = cv->residual ? out : j->y + t0;
    int64_t ldc = cv->residual ? n : j->ldy;
    qvk_sgemm(0, 0, cv->c_out, (int)n, kk, 1.0f, j->w, kk, b_mat, (int)ldb, 0.0f, dst, (int)ldc);
    for (int o = 0; o < cv->c_out; o++) {
        float *orow = dst + (size_t)o * ldc;
        if (j->bias) {
            float b = j->bias[o];
            for (int64_t i = 0; i < n; i++) orow[i] += b;
        }
        activate(orow, (size_t)n, cv->act_out);
        if (cv->residual) qvc_add_rows(j->y + (size_t)o * j->ldy + t0, 0, orow, 0, 1, (int)n);
    }
}

/* One chunk of output rows [t0, t0 + n), time-major. */
static void chunk_tm(const conv_job *j, int64_t t0, int64_t n, float *scratch) {
    const qvc_conv *cv = j->cv;
    int64_t n_max = chunk_max(cv);
    int c_in = cv->c_in, kk = c_in * cv->k;
    float *win = scratch;
    float *cols = win + (size_t)c_in * span_len(cv, n_max);
    float *out = cols + (size_t)kk * n_max;
    int64_t span = span_len(cv, n);
    int64_t p0 = t0 * cv->stride - cv->pad_left;
    /* window rows [p0, p0 + span) of x, padded; contiguous [span, c_in]. Rows inside the input
     * are one block copy when x rows are packed (ldx == c_in). */
    int64_t lo = p0 < 0 ? -p0 : 0;
    int64_t hi = j->t_in - p0 < span ? j->t_in - p0 : span;
    if (hi < lo) hi = lo;
    if (j->ldx == c_in && hi > lo) {
        memcpy(win + (size_t)lo * c_in, j->x + (size_t)(p0 + lo) * c_in,
               (size_t)(hi - lo) * c_in * sizeof(float));
    } else {
        for (int64_t i = lo; i < hi; i++)
            memcpy(win + (size_t)i * c_in, j->x + (size_t)(p0 + i) * j->ldx, (size_t)c_in * sizeof(float));
    }
    for (int64_t i = 0; i < span; i++) {
        if (i == lo) i = hi;
        if (i >= span) break;
        int64_t s = src_index(cv->pad, p0 + i, j->t_in);
        float *wr = win + (size_t)i * c_in;
        if (s < 0) memset(wr, 0, (size_t)c_in * sizeof(float));
        else memcpy(wr, j->x + (size_t)s * j->ldx, (size_t)c_in * sizeof(float));
    }
    activate(win, (size_t)c_in * span, cv->act_in);
    /* With dilation 1 and k a multiple of the stride, tap group g (taps g·s .. g·s + s − 1) of
     * output row i is the contiguous slice win[(i + g)·s·c_in, +s·c_in): a plain sgemm operand with
     * lda = s·c_in. Summing the k/s group products avoids unfolding (the first Mimi layers would
     * otherwise copy ~1 GB per clip); narrow inputs (the 1-channel first conv) still unfold. */
    int grouped = cv->dilation == 1 && cv->k % cv->stride == 0 && c_in * cv->stride >= 16;
    /* without a residual the product goes straight into y; with one it is formed first, so the
     * sum keeps the reference's order y + (W·x + b) */
    float *dst = cv->residual ? out : j->y + (size_t)t0 * j->ldy;
    int ldc = cv->residual ? cv->c_out : (int)j->ldy;
    int direct = c_in == 1 && cv->stride == 1 && cv->dilation == 1 && cv->k <= 16 &&
                 cv->c_out % 16 == 0 && cv->c_out <= 256 && have_avx512();
    if (direct) {
        qvc_conv_c1_avx512(dst, ldc, win, n, j->w, cv->k, cv->c_out);
    } else if (grouped) {
        int kg = c_in * cv->stride;
        for (int g = 0; g < cv->k / cv->stride; g++)
            qvk_sgemm(0, 1, (int)n, cv->c_out, kg, 1.0f, win + (size_t)g * kg, kg,
                      j->w + (size_t)g * kg, kk, g ? 1.0f : 0.0f, dst, ldc);
    } else {
        const float *a = win;
        if (!(cv->k == 1 && cv->stride == 1)) {
            for (int64_t i = 0; i < n; i++) {
                float *d = cols + (size_t)i * kk;
                const float *src = win + (size_t)i * cv->stride * c_in;
                if (cv->dilation == 1) {
                    memcpy(d, src, (size_t)kk * sizeof(float));
                } else {
                    for (int k = 0; k < cv->k; k++)
                        memcpy(d + (size_t)k * c_in, src + (size_t)k * cv->dilation * c_in,
                               (size_t)c_in * sizeof(float));
                }
            }
            a = cols;
        }
        qvk_sgemm(0, 1, (int)n, cv->c_out, kk, 1.0f, a, kk, j->w, kk, 0.0f, dst, ldc);
    }
    if (j->bias) qvc_add_bias(dst, ldc, j->bias, n, cv->c_out);
    if (cv->act_out != QVC_ACT_NONE)
        for (int64_t i = 0; i < n; i++) activate(dst + (size_t)i * ldc, (size_t)cv->c_out, cv->act_out);
    if (cv->residual) qvc_add_rows(j->y + (size_t)t0 * j->ldy, j->ldy, out, cv->c_out, n, cv->c_out);
}

static void conv_run(int ith, int nth, void *arg) {
    const conv_job *j = arg;
    float *scratch = j->scratch + (size_t)ith * qvc_conv_scratch(j->cv);
    int64_t n_chunks = (j->t_out + j->n_chunk - 1) / j->n_chunk;
    for (int64_t c = ith; c < n_chunks; c += nth) {
        int64_t t0 = c * j->n_chunk;
        int64_t n = j->t_out - t0 < j->n_chunk ? j->t_out - t0 : j->n_chunk;
        if (j->time_major) chunk_tm(j, t0, n, scratch);
        else chunk_cf(j, t0, n, scratch);
    }
}

static void conv_dispatch(qvk_pool *pool, const qvc_conv *cv, float *y, int64_t ldy,
                          const float *x, int64_t ldx, int64_t t_in, const float *w,
                          const float *bias, float *scratch, int time_major) {
    conv_job j = {.cv = cv, .y = y, .ldy = ldy, .ldx = ldx, .t_in = t_in, .x = x, .w = w,
                  .bias = bias, .scratch = scratch, .time_major = time_major};
    j.t_out = qvc_conv_out_len(cv, t_in);
    int nt = qvk_pool_threads(pool);
    j.n_chunk = reads_in_place(cv, time_major) ? (j.t_out + nt - 1) / nt
                                               : chunk_len(cv, j.t_out, nt);
    if (j.t_out > 0) qvk_pool_run(pool, conv_run, &j);
}

void qvc_conv1d(qvk_pool *pool, const qvc_conv *cv, float *y, int64_t ldy, const float *x,
                int64_t ldx, int64_t t_in, const float *w, const float *bias, float *scratch) {
    conv_dispatch(pool, cv, y, ldy, x, ldx, t_in, w, bias, scratch, 0);
}

void qvc_conv1d_tm(qvk_pool *pool, const qvc_conv *cv, float *y, int64_t ldy, const float *x,
                   int64_t ldx, int64_t t_in, const float *w, const float *bias, float *scratch) {
    conv_dispatch(pool, cv, y, ldy, x, ldx, t_in, w, bias, scratch, 1);
}

void qvc_conv_weights_tm(float *dst, const float *src, int c_out, int c_in, int k) {
    for (int o = 0; o < c_out; o++)
        for (int c = 0; c < c_in; c++)
            for (int j = 0; j < k; j++)
                dst[((size_t)o * k + j) * c_in + c] = src[((size_t)o * c_in + c) * k + j];
}
