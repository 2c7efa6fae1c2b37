/* nn.c — element-wise ops, norms, RoPE and single-query attention.
 * Numerics follow the PyTorch reference: f32 element math, norm statistics accumulated in double
 * and rounded to f32 (what torch's f32 reductions approximate best), softmax max-subtracted.
 */
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

void qvk_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    float ms = (float)(qvk_impl_get()->sumsq(x, n) / n);
    float r = 1.0f / sqrtf(ms + eps);
    for (int i = 0; i < n; i++)
        y[i] = w[i] * (x[i] * r);
}

double qvk_cosine(const float *a, const float *b, int n) {
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0.0 && bb > 0.0 ? ab / sqrt(aa * bb) : 0.0;
}

void qvk_layernorm(float *y, const float *x, const float *w, const float *b, int n, float eps) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += x[i];
    float mean = (float)(s / n);
    double v = 0;
    for (int i = 0; i < n; i++) {
        double d = (double)x[i] - mean;
        v += d * d;
    }
    float r = 1.0f / sqrtf((float)(v / n) + eps);
    for (int i = 0; i < n; i++) {
        float t = (x[i] - mean) * r * w[i];
        y[i] = b ? t + b[i] : t;
    }
}

void qvk_softmax(float *x, int n) {
    if (n <= 0) return;
    const qvk_impl *impl = qvk_impl_get();
    float m = impl->maxf(x, n);
    double s = impl->exp_sub_sum(x, n, m);
    float inv = (float)(1.0 / s);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void qvk_silu(float *x, int n) {
    qvk_impl_get()->silu_mul(x, x, NULL, n);
}

void qvk_gelu_erf(float *x, int n) {
    for (int i = 0; i < n; i++)
        x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * (float)M_SQRT1_2));
}

void qvk_elu(float *x, size_t n) {
    qvk_impl_get()->elu(x, n);
}

void qvk_snakebeta(float *x, int64_t ldx, int n_t, int n_ch, const float *log_alpha,
                   const float *log_beta) {
    enum { CH = 256 }; /* channels per pass: their factors on the stack */
    float a[CH], inv_b[CH];
    const qvk_impl *im = qvk_impl_get();
    for (int c0 = 0; c0 < n_ch; c0 += CH) {
        const int nc = n_ch - c0 < CH ? n_ch - c0 : CH;
        for (int c = 0; c < nc; c++) {
            a[c] = expf(log_alpha[c0 + c]);
            inv_b[c] = 1.0f / (expf(log_beta[c0 + c]) + 1e-9f);
        }
        for (int t = 0; t < n_t; t++)
            im->snake(x + (size_t)t * ldx + c0, nc, a, inv_b);
    }
}

void qvk_swiglu(float *y, const float *g, const float *u, int n) {
    qvk_impl_get()->silu_mul(y, g, u, n);
}

void qvk_rope_table(float *c, float *s, int head_dim, int pos, float theta) {
    int h = head_dim / 2;
    for (int i = 0; i < h; i++) {
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
        float a = (float)pos * inv_freq;
        c[i] = cosf(a);
        s[i] = sinf(a);
    }
}

void qvk_rope_apply(float *x, int n_heads, int head_dim, const float *c, const float *s) {
    int h = head_dim / 2;
    for (int hd = 0; hd < n_heads; hd++) {
        float *v = x + (size_t)hd * head_dim;
        for (int i = 0; i < h; i++) {
            float a = v[i], b = v[i + h];
            v[i] = a * c[i] - b * s[i];
            v[i + h] = b * c[i] + a * s[i];
        }
    }
}

struct attend_job {
    const qvk_impl *impl;
    float *out;
    const float *q, *k, *v;
    float *scratch;
    int n_ctx, kv_stride, n_heads, n_kv_heads, head_dim;
    float scale;
};

/* Keys ahead to prefetch: each kv row of a head sits on its own 4 KB page in the cache layout
 * [t, kv_heads·hd], which the hardware prefetchers do not follow. */
#define ATT_PF 6

static void prefetch_row(const float *p, int hd) {
    const char *c = (const char *)p;
    for (int b = 0; b < hd * 4; b += 64)
        __builtin_prefetch(c + b); /* read, all cache levels (prefetcht0) */
}

/* n_q query heads sharing one kv head: sc[h·n_ctx + t] = dot(q[h·hd..], k[t·kv_stride..])·scale */
static void attn_scores(const qvk_impl *impl, float *restrict sc, const float *restrict q, int n_q,
                        const float *k, int n_ctx, int kv_stride, int hd, float scale) {
    for (int t = 0; t < n_ctx; t++) {
        if (t + ATT_PF < n_ctx) prefetch_row(k + (size_t)(t + ATT_PF) * kv_stride, hd);
        const float *kr = k + (size_t)t * kv_stride;
        for (int h = 0; h < n_q; h++)
            sc[(size_t)h * n_ctx + t] = impl->dot(q + (size_t)h * hd, kr, hd) * scale;
    }
}

/* out[h·hd + i] = Σ_t sc[h·n_ctx + t]·v[t·kv_stride + i], summed in t order. */
static void attn_values(const qvk_impl *impl, float *restrict out, const float *restrict sc,
                        int n_q, const float *v, int n_ctx, int kv_stride, int hd) {
    for (int i = 0; i < n_q * hd; i++)
        out[i] = 0.0f;
    for (int t = 0; t < n_ctx; t++) {
        if (t + ATT_PF < n_ctx) prefetch_row(v + (size_t)(t + ATT_PF) * kv_stride, hd);
        const float *vr = v + (size_t)t * kv_stride;
        for (int h = 0; h < n_q; h++)
            impl->axpy(out + (size_t)h * hd, sc[(size_t)h * n_ctx + t], vr, hd);
    }
}

/* Threads take whole kv-head groups, so each kv row is read by one thread, once for all the
 * query heads that share it; a head's arithmetic does not depend on the split. */
static void attend_run(int ith, int nth, void *p) {
    const struct attend_job *j = p;
    int group = j->n_heads / j->n_kv_heads;
    int hd = j->head_dim;
    for (int g = ith; g < j->n_kv_heads; g += nth) {
        size_t h0 = (size_t)g * group;
        float *sc = j->scratch + h0 * j->n_ctx;
        attn_scores(j->impl, sc, j->q + h0 * hd, group, j->k + (size_t)g * hd, j->n_ctx,
                    j->kv_stride, hd, j->scale);
        for (int h = 0; h < group; h++)
            qvk_softmax(sc + (size_t)h * j->n_ctx, j->n_ctx);
        attn_values(j->impl, j->out + h0 * hd, sc, group, j->v + (size_t)g * hd, j->n_ctx,
                    j->kv_stride, hd);
    }
}

void qvk_attend(qvk_pool *pool, float *restrict out, const float *restrict q, const float *k,
                const float *v, int n_ctx, int kv_stride, int n_heads, int n_kv_heads, int head_dim,
                float scale, float *restrict scratch) {
    struct attend_job j = {qvk_impl_get(), out,       q,       k,          v,        scratch,
                           n_ctx,          kv_stride, n_heads, n_kv_heads, head_dim, scale};
    qvk_pool_run(pool, attend_run, &j);
}
