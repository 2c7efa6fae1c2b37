/* conv.c — 1-D convolution as chunked im2col + sgemm, with padding and activations fused into
 * the gather. Chunking bounds the unfolded matrix (the 30 s clip is 720 000 samples at the first
 * Mimi layers), and activating the gathered window applies ELU once per input sample instead of
 * once per kernel tap.
 */
#include "clone_impl.h"

#include <math.h>
#include <string.h>

#include "kernels.h"

/* Unfolded matrix budget in floats per chunk (8 MB): large enough for efficient sgemm shapes. */
#define COLS_BUDGET (1 << 21)

static int64_t chunk_len(const qvc_conv *cv) {
    int64_t kk = (int64_t)cv->c_in * cv->k;
    int64_t n = COLS_BUDGET / kk;
    if (n < 64) n = 64;
    return n;
}

static int64_t span_len(const qvc_conv *cv, int64_t n) {
    return (n - 1) * cv->stride + (int64_t)(cv->k - 1) * cv->dilation + 1;
}

int64_t qvc_conv_out_len(const qvc_conv *cv, int64_t t_in) {
    int64_t num = t_in + cv->pad_left + cv->pad_right - (int64_t)cv->dilation * (cv->k - 1) - 1;
    return num < 0 ? 0 : num / cv->stride + 1;
}

size_t qvc_conv_scratch(const qvc_conv *cv) {
    int64_t n = chunk_len(cv);
    return (size_t)(cv->c_in * span_len(cv, n) + (int64_t)cv->c_in * cv->k * n + cv->c_out * n) + 64;
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

static int64_t src_index(enum qvc_pad pad, int64_t p, int64_t t_in) {
    if (p >= 0 && p < t_in) return p;
    switch (pad) {
    case QVC_PAD_ZERO: return -1;
    case QVC_PAD_REFLECT: return p < 0 ? -p : 2 * (t_in - 1) - p;
    case QVC_PAD_REPLICATE: return p < 0 ? 0 : t_in - 1;
    }
    return -1;
}

void qvc_elu(float *x, size_t n) {
    static int have_avx2 = -1;
    if (have_avx2 < 0) {
        __builtin_cpu_init();
        have_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    if (have_avx2) {
        qvc_elu_avx2(x, n);
        return;
    }
    for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : expm1f(x[i]);
}

static void activate(float *x, size_t n, enum qvc_act act) {
    switch (act) {
    case QVC_ACT_NONE: break;
    case QVC_ACT_RELU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case QVC_ACT_ELU: qvc_elu(x, n); break;
    }
}

void qvc_conv1d(const qvc_conv *cv, float *y, int64_t ldy, const float *x, int64_t ldx,
                int64_t t_in, const float *w, const float *bias, float *scratch) {
    int64_t t_out = qvc_conv_out_len(cv, t_in);
    int64_t n_max = chunk_len(cv);
    int kk = cv->c_in * cv->k;
    int direct = cv->k == 1 && cv->stride == 1;
    float *win = scratch;
    float *cols = win + cv->c_in * span_len(cv, n_max);
    float *out = cols + (size_t)kk * n_max;
    for (int64_t t0 = 0; t0 < t_out; t0 += n_max) {
        int64_t n = t_out - t0 < n_max ? t_out - t0 : n_max;
        int64_t span = span_len(cv, n);
        int64_t p0 = t0 * cv->stride - cv->pad_left;
        /* padded, activated input window [c_in, span] */
        for (int c = 0; c < cv->c_in; c++) {
            const float *xr = x + (size_t)c * ldx;
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
        if (!direct) {
            for (int c = 0; c < cv->c_in; c++)
                for (int j = 0; j < cv->k; j++) {
                    const float *src = win + (size_t)c * span + (int64_t)j * cv->dilation;
                    float *dst = cols + ((size_t)c * cv->k + j) * n;
                    if (cv->stride == 1) {
                        memcpy(dst, src, (size_t)n * sizeof(float));
                    } else {
                        for (int64_t i = 0; i < n; i++) dst[i] = src[i * cv->stride];
                    }
                }
            b_mat = cols;
            ldb = n;
        }
        qvk_sgemm(0, 0, cv->c_out, (int)n, kk, 1.0f, w, kk, b_mat, (int)ldb, 0.0f, out, (int)n);
        for (int o = 0; o < cv->c_out; o++) {
            float *orow = out + (size_t)o * n;
            float *yrow = y + (size_t)o * ldy + t0;
            float b = bias ? bias[o] : 0.0f;
            if (bias)
                for (int64_t i = 0; i < n; i++) orow[i] += b;
            activate(orow, (size_t)n, cv->act_out);
            if (cv->residual)
                for (int64_t i = 0; i < n; i++) yrow[i] += orow[i];
            else
                memcpy(yrow, orow, (size_t)n * sizeof(float));
        }
    }
}

/* ---- time-major ------------------------------------------------------------------------- */

static int64_t chunk_len_tm(const qvc_conv *cv) {
    int64_t n = COLS_BUDGET / ((int64_t)cv->c_in * cv->k);
    return n < 64 ? 64 : n;
}

size_t qvc_conv_scratch_tm(const qvc_conv *cv) {
    int64_t n = chunk_len_tm(cv);
    return (size_t)((int64_t)cv->c_in * span_len(cv, n) + (int64_t)cv->c_in * cv->k * n +
                    (int64_t)cv->c_out * n) + 64;
}

void qvc_conv_weights_tm(float *dst, const float *src, int c_out, int c_in, int k) {
    for (int o = 0; o < c_out; o++)
        for (int c = 0; c < c_in; c++)
            for (int j = 0; j < k; j++)
                dst[((size_t)o * k + j) * c_in + c] = src[((size_t)o * c_in + c) * k + j];
}

void qvc_conv1d_tm(const qvc_conv *cv, float *y, int64_t ldy, const float *x, int64_t ldx,
                   int64_t t_in, const float *w, const float *bias, float *scratch) {
    int64_t t_out = qvc_conv_out_len(cv, t_in);
    int64_t n_max = chunk_len_tm(cv);
    int c_in = cv->c_in, kk = c_in * cv->k;
    int direct = cv->k == 1 && cv->stride == 1;
    float *win = scratch;
    float *cols = win + (size_t)c_in * span_len(cv, n_max);
    float *out = cols + (size_t)kk * n_max;
    for (int64_t t0 = 0; t0 < t_out; t0 += n_max) {
        int64_t n = t_out - t0 < n_max ? t_out - t0 : n_max;
        int64_t span = span_len(cv, n);
        int64_t p0 = t0 * cv->stride - cv->pad_left;
        /* window rows [p0, p0 + span) of x, padded; contiguous [span, c_in] */
        for (int64_t i = 0; i < span; i++) {
            int64_t s = src_index(cv->pad, p0 + i, t_in);
            float *wr = win + (size_t)i * c_in;
            if (s < 0) memset(wr, 0, (size_t)c_in * sizeof(float));
            else memcpy(wr, x + (size_t)s * ldx, (size_t)c_in * sizeof(float));
        }
        activate(win, (size_t)c_in * span, cv->act_in);
        const float *a = win;
        if (!direct) {
            for (int64_t i = 0; i < n; i++) {
                float *dst = cols + (size_t)i * kk;
                const float *src = win + (size_t)i * cv->stride * c_in;
                if (cv->dilation == 1) {
                    memcpy(dst, src, (size_t)kk * sizeof(float));
                } else {
                    for (int j = 0; j < cv->k; j++)
                        memcpy(dst + (size_t)j * c_in, src + (size_t)j * cv->dilation * c_in,
                               (size_t)c_in * sizeof(float));
                }
            }
            a = cols;
        }
        qvk_sgemm(0, 1, (int)n, cv->c_out, kk, 1.0f, a, kk, w, kk, 0.0f, out, cv->c_out);
        for (int64_t i = 0; i < n; i++) {
            float *orow = out + (size_t)i * cv->c_out;
            float *yrow = y + (size_t)(t0 + i) * ldy;
            if (bias)
                for (int o = 0; o < cv->c_out; o++) orow[o] += bias[o];
            activate(orow, (size_t)cv->c_out, cv->act_out);
            if (cv->residual)
                for (int o = 0; o < cv->c_out; o++) yrow[o] += orow[o];
            else
                memcpy(yrow, orow, (size_t)cv->c_out * sizeof(float));
        }
    }
}
