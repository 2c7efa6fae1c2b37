/* matvec_scalar.c — portable reference kernels of the dispatch table (always compiled; the spec
 * the SIMD files are tested against). Dot products keep 8 partial sums (lane j takes elements
 * i ≡ j mod 8) reduced pairwise: a fixed order independent of row blocking and threads.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

#define LANES 8

static float reduce8(const float *acc) {
    float a = (acc[0] + acc[4]) + (acc[2] + acc[6]);
    float b = (acc[1] + acc[5]) + (acc[3] + acc[7]);
    return a + b;
}

static float dot_bf16(const uint16_t *restrict w, const float *restrict x, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++)
            acc[j] += qvk_bf16_to_f32_1(w[i + j]) * x[i + j];
    for (int j = 0; i < n; i++, j++)
        acc[j] += qvk_bf16_to_f32_1(w[i]) * x[i];
    return reduce8(acc);
}

static float dot_f32(const float *a, const float *b, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++)
            acc[j] += a[i + j] * b[i + j];
    for (int j = 0; i < n; i++, j++)
        acc[j] += a[i] * b[i];
    return reduce8(acc);
}

static void mv_bf16(float *restrict y, const uint16_t *restrict w, const float *restrict x,
                    const float *restrict bias, int r0, int r1, int n_in) {
    for (int r = r0; r < r1; r++) {
        float s = dot_bf16(w + (size_t)r * n_in, x, n_in);
        y[r] = bias ? s + bias[r] : s;
    }
}

static void mm_bf16(float *restrict y, const uint16_t *restrict w, const float *restrict x,
                    const float *restrict bias, int o0, int o1, int n_in, int n_out, int n_rows) {
    for (int o = o0; o < o1; o++)
        for (int r = 0; r < n_rows; r++) {
            float s = dot_bf16(w + (size_t)o * n_in, x + (size_t)r * n_in, n_in);
            y[(size_t)r * n_out + o] = bias ? s + bias[o] : s;
        }
}

static void axpy(float *restrict y, float a, const float *restrict x, int n) {
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

static double sumsq(const float *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

static void widen_bf16(float *restrict dst, const uint16_t *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = qvk_bf16_to_f32_1(src[i]);
}

static float maxf(const float *x, int n) {
    float m = x[0];
    for (int i = 1; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

static double exp_sub_sum(float *x, int n, float m) {
    double s = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    return s;
}

static void silu_mul(float *y, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) {
        float v = g[i] / (1.0f + expf(-g[i]));
        y[i] = u ? v * u[i] : v;
    }
}

static void snake(float *x, int n, const float *a, const float *inv_b) {
    for (int c = 0; c < n; c++) {
        float s = sinf(a[c] * x[c]);
        x[c] += inv_b[c] * (s * s);
    }
}

static uint64_t xor64(const void *p, size_t n_bytes) {
    const unsigned char *b = p;
    uint64_t a[4] = {0};
    size_t n = n_bytes / 8, i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) {
            uint64_t u;
            memcpy(&u, b + (i + j) * 8, 8);
            a[j] ^= u;
        }
    for (; i < n; i++) {
        uint64_t u;
        memcpy(&u, b + i * 8, 8);
        a[0] ^= u;
    }
    return a[0] ^ a[1] ^ a[2] ^ a[3];
}

static void elu(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] > 0.0f ? x[i] : expm1f(x[i]);
}

static void add_bias(float *y, int64_t ldy, const float *v, int64_t n_rows, int n) {
    for (int64_t r = 0; r < n_rows; r++)
        for (int i = 0; i < n; i++) y[(size_t)r * ldy + i] += v[i];
}

static void add_rows(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t n_rows, int n) {
    for (int64_t r = 0; r < n_rows; r++)
        for (int i = 0; i < n; i++) y[(size_t)r * ldy + i] += x[(size_t)r * ldx + i];
}

const qvk_impl qvk_impl_scalar = {
    .name = "scalar",
    .mv_bf16 = mv_bf16,
    .mm_bf16 = mm_bf16,
    .dot = dot_f32,
    .axpy = axpy,
    .sumsq = sumsq,
    .widen_bf16 = widen_bf16,
    .maxf = maxf,
    .exp_sub_sum = exp_sub_sum,
    .silu_mul = silu_mul,
    .snake = snake,
    .elu = elu,
    .xor64 = xor64,
    .add_bias = add_bias,
    .add_rows = add_rows,
};
