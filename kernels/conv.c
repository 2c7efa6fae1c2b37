/* conv.c — 1-D convolutions on channels-first [C, T] data.
 * conv1d pads into scratch, then either runs depthwise directly or builds one group's im2col
 * matrix [c_in/g·k, t_out] and multiplies it by W with sgemm. The transposed conv computes
 * Wᵀ·x = [c_out·k, t_in] with one sgemm and scatters (col2im) into the output.
 */
#include <string.h>

#include "kernels/kernels.h"

int qvk_conv1d_out_len(const qvk_conv *cv, int t_in) {
    long span = (long)cv->dilation * (cv->k - 1) + 1;
    long t = (long)t_in + cv->pad_left + cv->pad_right - span;
    if (t < 0) return 0;
    return (int)(t / cv->stride + 1);
}

static size_t padded_len(const qvk_conv *cv, int t_in) {
    return (size_t)t_in + (size_t)cv->pad_left + (size_t)cv->pad_right;
}

static int depthwise(const qvk_conv *cv) {
    return cv->groups == cv->c_in && cv->groups == cv->c_out && cv->groups > 1;
}

size_t qvk_conv1d_scratch(const qvk_conv *cv, int t_in) {
    size_t t_out = (size_t)qvk_conv1d_out_len(cv, t_in);
    size_t n = (size_t)cv->c_in * padded_len(cv, t_in);
    if (!depthwise(cv)) n += (size_t)(cv->c_in / cv->groups) * cv->k * t_out;
    return n;
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

static void pad_input(const qvk_conv *cv, float *xp, const float *x, int t_in) {
    long tp = (long)padded_len(cv, t_in);
    for (int c = 0; c < cv->c_in; c++) {
        const float *src = x + (size_t)c * t_in;
        float *dst = xp + (size_t)c * tp;
        memcpy(dst + cv->pad_left, src, (size_t)t_in * sizeof *dst);
        for (long p = 0; p < tp; p++) {
            long q = p - cv->pad_left;
            if (q >= 0 && q < t_in) continue;
            long s = src_index(cv->pad, q, t_in);
            dst[p] = s < 0 ? 0.0f : src[s];
        }
    }
}

void qvk_conv1d(const qvk_conv *cv, float *restrict y, const float *restrict x, int t_in,
                const float *restrict w, const float *restrict b, float *restrict scratch) {
    int t_out = qvk_conv1d_out_len(cv, t_in);
    if (t_out <= 0) return;
    size_t tp = padded_len(cv, t_in);
    float *xp = scratch;
    pad_input(cv, xp, x, t_in);
    int k = cv->k, st = cv->stride, dl = cv->dilation;

    if (depthwise(cv)) {
        for (int c = 0; c < cv->c_out; c++) {
            const float *xr = xp + (size_t)c * tp;
            const float *wr = w + (size_t)c * k;
            float *yr = y + (size_t)c * t_out;
            float bias = b ? b[c] : 0.0f;
            /* tap-outer order: the inner loop over t is independent per element and vectorises */
            for (int t = 0; t < t_out; t++)
                yr[t] = 0.0f;
            for (int j = 0; j < k; j++) {
                const float *src = xr + (size_t)j * dl;
                float wj = wr[j];
                if (st == 1)
                    for (int t = 0; t < t_out; t++)
                        yr[t] += wj * src[t];
                else
                    for (int t = 0; t < t_out; t++)
                        yr[t] += wj * src[(size_t)t * st];
            }
            for (int t = 0; t < t_out; t++)
                yr[t] += bias;
        }
        return;
    }

    int cig = cv->c_in / cv->groups, cog = cv->c_out / cv->groups;
    float *col = xp + (size_t)cv->c_in * tp;
    for (int g = 0; g < cv->groups; g++) {
        for (int ci = 0; ci < cig; ci++) {
            const float *xr = xp + (size_t)(g * cig + ci) * tp;
            for (int j = 0; j < k; j++) {
                float *cr = col + ((size_t)ci * k + j) * t_out;
                const float *src = xr + (size_t)j * dl;
                if (st == 1)
                    memcpy(cr, src, (size_t)t_out * sizeof *cr);
                else
                    for (int t = 0; t < t_out; t++)
                        cr[t] = src[(size_t)t * st];
            }
        }
        /* y_g[cog, t_out] = W_g[cog, cig·k] · col[cig·k, t_out] */
        qvk_sgemm(0, 0, cog, t_out, cig * k, 1.0f, w + (size_t)g * cog * cig * k, cig * k, col,
                  t_out, 0.0f, y + (size_t)g * cog * t_out, t_out);
    }
    if (b)
        for (int o = 0; o < cv->c_out; o++)
            for (int t = 0; t < t_out; t++)
                y[(size_t)o * t_out + t] += b[o];
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
