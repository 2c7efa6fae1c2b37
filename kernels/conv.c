/* conv.c — the 1-D convolutions: one descriptor (qvk_conv), one padding rule, two kinds of input.
 * Long clips (speaker and speech encoders, 30 s): qvk_conv1d_chunked / _tm cut time into chunks a
 * pool shares, gather each chunk's padded input window once (activating it there), and multiply
 * it with sgemm. Short time-major windows (the speech decoder, a few frames at a time): Winograd
 * convs, the p48-panel transposed conv, a dense conv as one sgemm per tap (pre_conv) and the
 * depthwise conv (ConvNeXt); qvk_conv_transpose1d (Wᵀ·x with one sgemm, then col2im) is the
 * plain form the tests check the transposed ones against, and a conv to one channel (the
 * decoder's last).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

/* ---- geometry and padding ---------------------------------------------------------------- */

int64_t qvk_conv1d_out_len(const qvk_conv *cv, int64_t t_in) {
    int64_t t = t_in + cv->pad_left + cv->pad_right - (int64_t)cv->dilation * (cv->k - 1) - 1;
    return t < 0 ? 0 : t / cv->stride + 1;
}

void qvk_conv_causal(qvk_conv *cv, int64_t t_in) {
    int k_eff = (cv->k - 1) * cv->dilation + 1;
    cv->pad_left = k_eff - cv->stride;
    int64_t n_out = (t_in + cv->stride - 1) / cv->stride;
    /* ideal padded length (n_out − 1)·stride + k_eff; the right pad fills what is missing */
    int64_t need = (n_out - 1) * cv->stride + k_eff - (t_in + cv->pad_left);
    cv->pad_right = need > 0 ? (int)need : 0;
}

void qvk_conv_same(qvk_conv *cv) {
    cv->pad_left = cv->pad_right = cv->dilation * (cv->k - 1) / 2;
}

/* Source index of padded position p (p < 0 or p >= t_in lie in the padding). -1 means zero. */
static long src_index(enum qvk_pad mode, long p, long t_in) {
    if (p >= 0 && p < t_in) return p;
    switch (mode) {
    case QVK_PAD_ZERO:
        return -1;
    case QVK_PAD_REPLICATE:
        return p < 0 ? 0 : t_in - 1;
    case QVK_PAD_REFLECT: {
        if (t_in == 1) return 0;
        long period = 2 * (t_in - 1);
        long m = p % period;
        if (m < 0) m += period;
        return m < t_in ? m : period - m;
    }
    }
    return -1;
}

size_t qvk_conv_transpose1d_scratch(int c_in, int c_out, int k, int t_in) {
    return (size_t)c_out * k * t_in;
}

int qvk_conv_transpose1d(float *restrict y, const float *restrict x, int c_in, int c_out, int t_in,
                         int k, int stride, int trim_right, const float *restrict w,
                         const float *restrict b, float *restrict scratch) {
    long kept = (long)t_in * stride + k - stride - trim_right;
    if (t_in <= 0 || kept <= 0) return 0;
    /* col[o·k + j, t] = Σ_i W[i, o, j]·x[i, t]: W viewed as [c_in, c_out·k], transposed. */
    qvk_sgemm(1, 0, c_out * k, t_in, c_in, 1.0f, w, c_out * k, x, t_in, 0.0f, scratch, t_in);
    for (int o = 0; o < c_out; o++) {
        float *yr = y + (size_t)o * kept;
        float bias = b ? b[o] : 0.0f;
        for (long p = 0; p < kept; p++)
            yr[p] = bias;
        for (int j = 0; j < k; j++) {
            const float *cr = scratch + ((size_t)o * k + j) * t_in;
            for (int t = 0; t < t_in; t++) {
                long p = (long)t * stride + j;
                if (p < kept) yr[p] += cr[t];
            }
        }
    }
    return (int)kept;
}

/* ---- long inputs in chunks on a pool (speaker and speech encoders) ------------------------ */

/* Chunk sizing. A chunk's unfolded rows stay within BUDGET floats (1 MB) so the gathered window
 * is still in L2 when sgemm packs it, but never fewer than MIN_ROWS rows: every sgemm call repacks
 * the whole weight matrix, which dominates short layers with big weights (750 frames × 8192). */
#define BUDGET (1 << 18)
#define MIN_ROWS 256
#define IN_PLACE_CHUNK 512 /* columns of a 1x1 conv read in place (no window, no budget) */

static int64_t chunk_max(const qvk_conv *cv) {
    int64_t n = BUDGET / ((int64_t)cv->c_in * cv->k);
    return n < MIN_ROWS ? MIN_ROWS : n;
}

/* Chunks have one length whatever the thread count (threads take them in turn): every sgemm call
 * then has the same shape and operands for 1 thread or 8, so the result is the same bits however
 * OpenBLAS tiles a call (its Haswell kernels round a tile cut short differently from a whole one,
 * so splitting one call's columns by thread count is not enough; test_clone checks 1 vs 2). */
static int64_t chunk_len(const qvk_conv *cv) { return chunk_max(cv); }

static int64_t span_len(const qvk_conv *cv, int64_t n) {
    return (n - 1) * cv->stride + (int64_t)(cv->k - 1) * cv->dilation + 1;
}

size_t qvk_conv_chunk_scratch(const qvk_conv *cv) {
    int64_t n = chunk_max(cv);
    size_t per = (size_t)((int64_t)cv->c_in * span_len(cv, n) + (int64_t)cv->c_in * cv->k * n +
                          (int64_t)cv->c_out * n);
    return (per + 15) / 16 * 16;   /* keeps every thread's slice 64-byte aligned */
}

/* y[r, :n] += v[:n] / += x[r, :n]: exact adds, so every variant gives the same bits. */
void qvk_add_bias(float *y, int64_t ldy, const float *v, int64_t n_rows, int n) {
    qvk_impl_get()->add_bias(y, ldy, v, n_rows, n);
}

void qvk_add_rows(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t n_rows, int n) {
    qvk_impl_get()->add_rows(y, ldy, x, ldx, n_rows, n);
}

static void activate(float *x, size_t n, enum qvk_act act) {
    switch (act) {
    case QVK_ACT_NONE: break;
    case QVK_ACT_RELU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case QVK_ACT_ELU: qvk_elu(x, n); break;
    }
}

typedef struct {
    const qvk_conv *cv;
    float *y;
    int64_t ldy, ldx, t_in, t_out, n_chunk;
    const float *x, *w, *bias;
    float *scratch;
    int time_major;
} conv_job;

/* A 1×1 conv with nothing applied to its input reads x in place: no window, no unfolding, so
 * each thread's share is one chunk (one weight packing). ECAPA's tdnn1/tdnn2/MFA/attention
 * convs are ~70 % of its work. */
static int reads_in_place(const qvk_conv *cv, int time_major) {
    return !time_major && cv->k == 1 && cv->stride == 1 && cv->act_in == QVK_ACT_NONE &&
           cv->pad_left == 0 && cv->pad_right == 0 && !cv->residual;
}

/* One chunk of output columns [t0, t0 + n), channels-first. */
static void chunk_cf(const conv_job *j, int64_t t0, int64_t n, float *scratch) {
    const qvk_conv *cv = j->cv;
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
        if (cv->residual) qvk_add_rows(j->y + (size_t)o * j->ldy + t0, 0, orow, 0, 1, (int)n);
    }
}

/* One chunk of output rows [t0, t0 + n), time-major. */
static void chunk_tm(const conv_job *j, int64_t t0, int64_t n, float *scratch) {
    const qvk_conv *cv = j->cv;
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
    const qvk_impl *im = qvk_impl_get();
    int direct = c_in == 1 && cv->stride == 1 && cv->dilation == 1 && cv->k <= 16 &&
                 cv->c_out % 16 == 0 && cv->c_out <= 256 && im->conv_c1;
    if (direct) {
        im->conv_c1(dst, ldc, win, n, j->w, cv->k, cv->c_out);
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
    if (j->bias) qvk_add_bias(dst, ldc, j->bias, n, cv->c_out);
    if (cv->act_out != QVK_ACT_NONE)
        for (int64_t i = 0; i < n; i++) activate(dst + (size_t)i * ldc, (size_t)cv->c_out, cv->act_out);
    if (cv->residual) qvk_add_rows(j->y + (size_t)t0 * j->ldy, j->ldy, out, cv->c_out, n, cv->c_out);
}

static void conv_run(int ith, int nth, void *arg) {
    const conv_job *j = arg;
    float *scratch = j->scratch + (size_t)ith * qvk_conv_chunk_scratch(j->cv);
    int64_t n_chunks = (j->t_out + j->n_chunk - 1) / j->n_chunk;
    for (int64_t c = ith; c < n_chunks; c += nth) {
        int64_t t0 = c * j->n_chunk;
        int64_t n = j->t_out - t0 < j->n_chunk ? j->t_out - t0 : j->n_chunk;
        if (j->time_major) chunk_tm(j, t0, n, scratch);
        else chunk_cf(j, t0, n, scratch);
    }
}

static void conv_dispatch(qvk_pool *pool, const qvk_conv *cv, float *y, int64_t ldy,
                          const float *x, int64_t ldx, int64_t t_in, const float *w,
                          const float *bias, float *scratch, int time_major) {
    conv_job j = {.cv = cv, .y = y, .ldy = ldy, .ldx = ldx, .t_in = t_in, .x = x, .w = w,
                  .bias = bias, .scratch = scratch, .time_major = time_major};
    j.t_out = qvk_conv1d_out_len(cv, t_in);
    j.n_chunk = reads_in_place(cv, time_major) ? IN_PLACE_CHUNK : chunk_len(cv);
    if (j.t_out > 0) qvk_pool_run(pool, conv_run, &j);
}

void qvk_conv1d_chunked(qvk_pool *pool, const qvk_conv *cv, float *y, int64_t ldy, const float *x,
                int64_t ldx, int64_t t_in, const float *w, const float *bias, float *scratch) {
    conv_dispatch(pool, cv, y, ldy, x, ldx, t_in, w, bias, scratch, 0);
}

void qvk_conv1d_chunked_tm(qvk_pool *pool, const qvk_conv *cv, float *y, int64_t ldy, const float *x,
                   int64_t ldx, int64_t t_in, const float *w, const float *bias, float *scratch) {
    conv_dispatch(pool, cv, y, ldy, x, ldx, t_in, w, bias, scratch, 1);
}

void qvk_conv_weights_tm(float *dst, const float *src, int c_out, int c_in, int k) {
    for (int o = 0; o < c_out; o++)
        for (int c = 0; c < c_in; c++)
            for (int j = 0; j < k; j++)
                dst[((size_t)o * k + j) * c_in + c] = src[((size_t)o * c_in + c) * k + j];
}

/* ---- short time-major windows: per-tap sgemms, one output channel, depthwise ------------- */

void qvk_conv1d_taps_tm(float *y, const float *x, int w_in, int c_in, int c_out, int k,
                        const float *wt, const float *bias) {
    const int n = w_in - (k - 1);
    for (int t = 0; t < n; t++)
        memcpy(y + (size_t)t * c_out, bias, (size_t)c_out * sizeof *y);
    for (int j = 0; j < k; j++)
        qvk_sgemm(0, 1, n, c_out, c_in, 1.0f, x + (size_t)j * c_in, c_in,
                  wt + (size_t)j * c_out * c_in, c_in, 1.0f, y, c_out);
}

void qvk_conv1d_to1_tm(float *y, const float *x, int w_in, int c_in, int k, const float *w,
                       float bias, float *z) {
    qvk_sgemm(0, 1, w_in, k, c_in, 1.0f, x, c_in, w, c_in, 0.0f, z, k);
    for (int t = 0; t < w_in - (k - 1); t++) {
        float v = 0.0f;
        for (int j = 0; j < k; j++)
            v += z[(size_t)(t + j) * k + j];
        y[t] = v + bias;
    }
}

void qvk_conv1d_depthwise_tm(float *y, const float *x, int n, int ch, int k, const float *w,
                             const float *b) {
    for (int t = 0; t < n; t++) {
        float *yr = y + (size_t)t * ch;
        memset(yr, 0, (size_t)ch * sizeof *yr);
        for (int j = 0; j < k; j++) {
            const float *xr = x + (size_t)(t + j) * ch;
            for (int c = 0; c < ch; c++)
                yr[c] += w[(size_t)c * k + j] * xr[c];
        }
        for (int c = 0; c < ch; c++)
            yr[c] += b[c];
    }
}

/* ---- Winograd minimal filtering (speech decoder) ------------------------------------------ */

/* Correlation y[i] = Σ_j g[j]·x[i + j] (i < m, j < k) through Toom-Cook on the points below and ∞
 * (Winograd's transposition of linear convolution): Bᵀ holds the coefficients of the Lagrange
 * numerators Π_{j≠i}(x − p_j) and of Π_j(x − p_j); G evaluates the filter at the points over the
 * Lagrange denominators; Aᵀ evaluates the output polynomial's powers at the points. The f32
 * error grows with the transforms' magnitudes: of the sets tried for F(4, 7) (test_kernels'
 * decoder shapes), ±3, ±1/3 or ±1/4 as the last pair gave 3–9e-5, ±3/2 3e-5, 3/2 and −3/4 2e-5;
 * the tenth point for F(5, 7): 1/4 4.0e-5, 3/4 4.5e-5, −3/2 5.6e-5, 2/3 6.3e-5. */
static const double wino_points[] = {0, 1, -1, 2, -2, 0.5, -0.5, 1.5, -0.75, 0.25};

int qvk_wino_init(qvk_wino *wn, int m, int k) {
    int a = m + k - 1, n = a - 1;
    if (m < 1 || k < 1 || a > QVK_WINO_MAX_A || n > (int)(sizeof wino_points / sizeof *wino_points))
        return -1;
    memset(wn, 0, sizeof *wn);
    wn->m = m;
    wn->k = k;
    wn->alpha = a;
    const double *p = wino_points;
    double poly[QVK_WINO_MAX_A + 1];
    for (int r = 0; r < a; r++) {
        /* row r < n: Π_{j≠r}(x − p_j); row n: Π_j(x − p_j) */
        memset(poly, 0, sizeof poly);
        poly[0] = 1.0;
        int deg = 0;
        double den = 1.0;
        for (int j = 0; j < n; j++) {
            if (j == r) continue;
            for (int e = deg + 1; e > 0; e--)
                poly[e] = poly[e - 1] - p[j] * poly[e];
            poly[0] = -p[j] * poly[0];
            deg++;
            if (r < n) den *= p[r] - p[j];
        }
        for (int e = 0; e < a; e++)
            wn->bt[r * a + e] = (float)poly[e];
        for (int e = 0; e < k; e++)
            wn->g[r * k + e] = r < n ? pow(p[r], e) / den : (e == k - 1);
        for (int i = 0; i < m; i++)
            wn->at[i * a + r] = r < n ? (float)pow(p[r], i) : (float)(i == m - 1);
    }
    return 0;
}

/* Products run on 48-column panels of U (gemm_p48 takes the tiles 8 at a time). */
#define WINO_NR 48

static int round_up(int v, int to) {
    return (v + to - 1) / to * to;
}

size_t qvk_p48_size(int k, int n) {
    return (size_t)k * round_up(n, WINO_NR);
}

/* Panels to dst (f32) or dsth (IEEE half, rounded to nearest even). */
static void p48_pack(float *dst, uint16_t *dsth, const float *w, int k, int n, int64_t ldw,
                     int trans) {
    int np = round_up(n, WINO_NR) / WINO_NR;
    for (int p = 0; p < np; p++)
        for (int i = 0; i < k; i++)
            for (int l = 0; l < WINO_NR; l++) {
                int c = p * WINO_NR + l;
                float v = c >= n ? 0.0f : trans ? w[(size_t)c * ldw + i] : w[(size_t)i * ldw + c];
                size_t at = ((size_t)p * k + i) * WINO_NR + l;
                if (dsth) qvk_f32_to_f16(dsth + at, &v, 1);
                else dst[at] = v;
            }
}

void qvk_p48_pack(float *dst, const float *w, int k, int n, int64_t ldw, int trans) {
    p48_pack(dst, NULL, w, k, n, ldw, trans);
}

void qvk_p48_pack_f16(uint16_t *dst, const float *w, int k, int n, int64_t ldw, int trans) {
    p48_pack(NULL, dst, w, k, n, ldw, trans);
}

/* Half panels without a variant kernel: each element an fmaf chain from zero over i in order (the
 * avx512 kernel's arithmetic), accumulated in y; one panel row widened at a time. */
static void p48_f16_scalar(float *y, int64_t ldy, const float *x, int64_t ldx, const uint16_t *w,
                           int k, int n_rows, int n) {
    for (int p = 0; p * WINO_NR < n; p++) {
        const int nc = n - p * WINO_NR < WINO_NR ? n - p * WINO_NR : WINO_NR;
        for (int r = 0; r < n_rows; r++)
            memset(y + r * ldy + p * WINO_NR, 0, (size_t)nc * sizeof *y);
        for (int i = 0; i < k; i++) {
            float wv[WINO_NR];
            qvk_f16_to_f32(wv, w + ((size_t)p * k + i) * WINO_NR, (size_t)nc);
            for (int r = 0; r < n_rows; r++) {
                float *yr = y + r * ldy + p * WINO_NR;
                const float xv = x[r * ldx + i];
                for (int l = 0; l < nc; l++)
                    yr[l] = fmaf(xv, wv[l], yr[l]);
            }
        }
    }
}

void qvk_p48w_matmul(float *y, int64_t ldy, const float *x, int64_t ldx, qvk_p48w w, int k, int n,
                     int n_rows) {
    const qvk_impl *im = qvk_impl_get();
    int np = round_up(n, WINO_NR) / WINO_NR;
    if (w.f16) {
        if (im->gemm_p48_f16) im->gemm_p48_f16(y, ldy, x, ldx, w.f16, k, n_rows, n);
        else p48_f16_scalar(y, ldy, x, ldx, w.f16, k, n_rows, n);
        return;
    }
    if (im->gemm_p48) {
        im->gemm_p48(y, ldy, x, ldx, w.f32, k, n_rows, n);
        return;
    }
    for (int q = 0; q < np; q++)
        qvk_sgemm(0, 0, n_rows, n - q * WINO_NR < WINO_NR ? n - q * WINO_NR : WINO_NR, k, 1.0f, x,
                  (int)ldx, w.f32 + (size_t)q * k * WINO_NR, WINO_NR, 0.0f, y + q * WINO_NR,
                  (int)ldy);
}

void qvk_p48_matmul(float *y, int64_t ldy, const float *x, int64_t ldx, const float *wp, int k,
                    int n, int n_rows) {
    qvk_p48w_matmul(y, ldy, x, ldx, (qvk_p48w){wp, NULL}, k, n, n_rows);
}

size_t qvk_conv_transpose1d_p48_scratch(int c_in, int c_out, int k, int t_in) {
    return (size_t)t_in * round_up(c_out * k, WINO_NR);
}

int qvk_conv_transpose1d_p48(float *restrict y, int64_t ldy, const float *restrict x, int64_t ldx,
                             int c_in, int c_out, int t_in, int k, int stride, int trim_right,
                             const float *wp, const float *restrict b, float *restrict scratch) {
    return qvk_conv_transpose1d_p48w(y, ldy, x, ldx, c_in, c_out, t_in, k, stride, trim_right,
                                     (qvk_p48w){wp, NULL}, b, scratch);
}

int qvk_conv_transpose1d_p48w(float *restrict y, int64_t ldy, const float *restrict x,
                              int64_t ldx, int c_in, int c_out, int t_in, int k, int stride,
                              int trim_right, qvk_p48w wp, const float *restrict b,
                              float *restrict scratch) {
    long kept = (long)t_in * stride + k - stride - trim_right;
    if (t_in <= 0 || kept <= 0) return 0;
    int ld = round_up(c_out * k, WINO_NR);
    float *col = scratch; /* [t_in, ld]: col[t, o·k + j] = Σ_i x[t, i]·W[i, o, j] */
    qvk_p48w_matmul(col, ld, x, ldx, wp, c_in, c_out * k, t_in);
    for (long p = 0; p < kept; p++) {
        float *yr = y + p * ldy;
        for (int o = 0; o < c_out; o++)
            yr[o] = b ? b[o] : 0.0f;
    }
    for (int t = 0; t < t_in; t++)
        for (int j = 0; j < k && (long)t * stride + j < kept; j++) {
            float *yr = y + ((long)t * stride + j) * ldy;
            const float *cr = col + (size_t)t * ld + j;
            for (int o = 0; o < c_out; o++)
                yr[o] += cr[(size_t)o * k];
        }
    return (int)kept;
}

size_t qvk_wino_weights_size(const qvk_wino *wn, int c_out, int c_in) {
    return (size_t)wn->alpha * round_up(c_out, WINO_NR) * c_in;
}

/* U's α entries for output channel o, input channel i, from the k taps at wr[j·step]. */
static void wino_filter(const qvk_wino *wn, float *u, int cp, int c_in, int o, int i,
                        const float *wr, int64_t step) {
    for (int r = 0; r < wn->alpha; r++) {
        double s = 0.0;
        for (int j = 0; j < wn->k; j++)
            s += wn->g[r * wn->k + j] * wr[j * step];
        size_t panel = (size_t)r * cp + (size_t)(o / WINO_NR) * WINO_NR;
        u[(panel * c_in + (size_t)i * WINO_NR) + o % WINO_NR] = (float)s;
    }
}

void qvk_wino_weights(const qvk_wino *wn, float *u, const float *w, int c_out, int c_in) {
    int k = wn->k, cp = round_up(c_out, WINO_NR);
    memset(u, 0, qvk_wino_weights_size(wn, c_out, c_in) * sizeof *u);
    for (int o = 0; o < c_out; o++)
        for (int i = 0; i < c_in; i++)
            wino_filter(wn, u, cp, c_in, o, i, w + ((size_t)o * c_in + i) * k, 1);
}

/* Output channel j·c_out + o of the 2-tap conv is phase j of channel o: taps W[i, o, j + r]
 * (on the previous input) and W[i, o, j]. */
void qvk_wino_weights_ct(const qvk_wino *wn, float *u, const float *w, int c_in, int c_out,
                         int r) {
    int cp = round_up(r * c_out, WINO_NR);
    memset(u, 0, qvk_wino_weights_size(wn, r * c_out, c_in) * sizeof *u);
    for (int j = 0; j < r; j++)
        for (int o = 0; o < c_out; o++)
            for (int i = 0; i < c_in; i++)
                wino_filter(wn, u, cp, c_in, j * c_out + o, i,
                            w + ((size_t)i * c_out + o) * 2 * r + j + r, -r);
}

static void mix_rows_scalar(float *restrict y, int64_t ldy, const float *a, int rows, int cols,
                            const float *restrict x, int64_t ldx, int n) {
    for (int i = 0; i < rows; i++) {
        float *yr = y + i * ldy;
        for (int l = 0; l < n; l++)
            yr[l] = 0.0f;
        for (int j = 0; j < cols; j++) {
            float c = a[i * cols + j];
            if (c == 0.0f) continue;
            const float *xr = x + j * ldx;
            for (int l = 0; l < n; l++)
                yr[l] += c * xr[l];
        }
    }
}

/* Time runs in chunks of whole super-tiles: a super-tile is the m·dil outputs [b, b + m·dil), one
 * tile per phase (outputs b + p, b + p + dil, …), so a chunk is self-contained (its input window,
 * transforms, products and output stay together in L2 on the narrow late blocks, where one pass
 * per stage over 1920 steps thrashed it) and each output comes from the same tile whatever the
 * chunking: identical bits. A chunk has at least WINO_CHUNK_MIN tiles (the weights of the wide
 * layers are read once per chunk), more while its buffers stay under WINO_CHUNK_FLOATS. */
#define WINO_CHUNK_FLOATS 131072
#define WINO_CHUNK_MIN 64

static int wino_chunk(const qvk_wino *wn, int c_in, int cp, int n, int dil) {
    int per = (wn->m + wn->alpha) * (c_in + cp); /* floats per tile over the four buffers */
    int tiles = WINO_CHUNK_FLOATS / per;
    if (tiles < WINO_CHUNK_MIN) tiles = WINO_CHUNK_MIN;
    int st = (tiles + dil - 1) / dil, all = (n + wn->m * dil - 1) / (wn->m * dil);
    return st < all ? st : all; /* super-tiles per chunk */
}

size_t qvk_wino_scratch(const qvk_wino *wn, int c_in, int c_out, int n, int dil) {
    size_t cp = (size_t)round_up(c_out, WINO_NR), a = (size_t)wn->alpha;
    size_t st = (size_t)wino_chunk(wn, c_in, (int)cp, n, dil), nt = st * dil;
    size_t outs = st * wn->m * dil, ins = outs + (size_t)(wn->k - 1) * dil;
    return ins * c_in + a * nt * c_in + a * nt * cp + outs * cp;
}

/* The Winograd conv with c_out = ph·c_ch product channels, phase-major, time-major in and out:
 * x [w_in, c_in], y [n, c_out], whose row t holds output steps t·ph + j (j < ph) of c_ch channels
 * each, i.e. y is [n·ph, c_ch] (ph = 1: a plain conv; ph = r: a transposed conv). Only the
 * channels [c0, c1) of y are made (qvk_wino_part): their product columns j·c_ch + [c0, c1) and
 * output transforms; the input transform is the whole call's. Chunks read x in place and write y
 * in place; the last one, whose tiles run past the input or the output, goes through scratch. */
static void wino_run(const qvk_wino *wn, float *y, const float *x, int w_in, int c_in, int c_out,
                     int ph, int dil, const float *u, const float *bias, float *scratch, int c0,
                     int c1) {
    const int m = wn->m, a = wn->alpha, n = w_in - (wn->k - 1) * dil, c_ch = c_out / ph;
    if (n <= 0 || c0 >= c1) return;
    const int cp = round_up(c_out, WINO_NR), md = m * dil;
    const int st = wino_chunk(wn, c_in, cp, n, dil), nt_max = st * dil;
    const int ins_max = st * md + (wn->k - 1) * dil;
    /* column segments of the products: all c_out at once for the whole conv, else one per phase */
    const int whole = c0 == 0 && c1 == c_ch, n_seg = whole ? 1 : ph, seg_w = whole ? c_out : c1 - c0;
    float *xw = scratch;                          /* [ins, c_in] the last chunk's padded input */
    float *v = xw + (size_t)ins_max * c_in;       /* [α, tiles, c_in] transformed input */
    float *mo = v + (size_t)a * nt_max * c_in;    /* [α, tiles, cp] products */
    float *yw = mo + (size_t)a * nt_max * cp;     /* [outs, c_out] the last chunk's output */
    const qvk_impl *im = qvk_impl_get();
    void (*mix)(float *restrict, int64_t, const float *, int, int, const float *restrict, int64_t,
                int) = im->mix_rows ? im->mix_rows : mix_rows_scalar;
    for (int t0 = 0; t0 < n; t0 += st * md) {
        const int outs = n - t0 < st * md ? n - t0 : st * md; /* outputs of this chunk */
        const int s_n = (outs + md - 1) / md, ins = s_n * md + (wn->k - 1) * dil;
        const int have = w_in - t0 < ins ? w_in - t0 : ins;
        const float *xt = x + (size_t)t0 * c_in;
        if (have < ins) {
            memcpy(xw, xt, (size_t)have * c_in * sizeof *xw);
            memset(xw + (size_t)have * c_in, 0, (size_t)(ins - have) * c_in * sizeof *xw);
            xt = xw;
        }
        float *yt = outs == s_n * md ? y + (size_t)t0 * c_out : yw;
        /* tiles of the chunk: super-tile s, phase p, starting at output s·m·dil + p (< outs) */
        int nt = 0;
        for (int sb = 0; sb < s_n * md; sb += md)
            for (int p = 0; p < dil && sb + p < outs; p++, nt++)
                mix(v + (size_t)nt * c_in, (int64_t)nt_max * c_in, wn->bt, a, a,
                    xt + (size_t)(sb + p) * c_in, (int64_t)dil * c_in, c_in);
        for (int g = 0; g < n_seg; g++) {
            const int col = whole ? 0 : g * c_ch + c0;
            for (int r = 0; r < a; r++)
                qvk_p48_matmul(mo + (size_t)r * nt_max * cp + col, cp,
                               v + (size_t)r * nt_max * c_in, c_in,
                               u + ((size_t)r * cp + col) * c_in, c_in, seg_w, nt);
            nt = 0;
            for (int sb = 0; sb < s_n * md; sb += md)
                for (int p = 0; p < dil && sb + p < outs; p++, nt++)
                    mix(yt + (size_t)(sb + p) * c_out + col, (int64_t)dil * c_out, wn->at, m, a,
                        mo + (size_t)nt * cp + col, (int64_t)nt_max * cp, seg_w);
        }
        float *yc = y + (size_t)t0 * c_out + c0; /* rows of c_ch: output steps · ph */
        if (yt == yw)
            for (int i = 0; i < outs * ph; i++)
                memcpy(yc + (size_t)i * c_ch, yw + (size_t)i * c_ch + c0,
                       (size_t)(c1 - c0) * sizeof *yc);
        if (bias) qvk_add_bias(yc, c_ch, bias + c0, (int64_t)outs * ph, c1 - c0);
    }
}

void qvk_conv1d_wino(const qvk_wino *wn, float *y, const float *x, int w_in, int c_in, int c_out,
                     int dil, const float *u, const float *bias, float *scratch) {
    wino_run(wn, y, x, w_in, c_in, c_out, 1, dil, u, bias, scratch, 0, c_out);
}

void qvk_conv_transpose1d_wino(const qvk_wino *wn, float *y, const float *x, int w_in, int c_in,
                               int c_out, int r, const float *u, const float *bias,
                               float *scratch) {
    wino_run(wn, y, x, w_in, c_in, r * c_out, r, 1, u, bias, scratch, 0, c_out);
}

void qvk_wino_part(const qvk_wino *wn, float *y, const float *x, int w_in, int c_in, int c_out,
                   int ph, int dil, const float *u, const float *bias, float *scratch, int c0,
                   int c1) {
    wino_run(wn, y, x, w_in, c_in, ph * c_out, ph, dil, u, bias, scratch, c0, c1);
}
