/* matvec_avx2.c — AVX2+FMA kernels of the dispatch table: bf16 widened exactly to f32, FMA with
 * f32 x, eight rows per pass sharing each x load, the next eight prefetched into L2
 * (qvk_prefetch_l2). One 8-lane accumulator per row plus a scalar tail, so a row's result does
 * not depend on whether it ran inside a block.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

#define MV_ROWS 8 /* rows per block of mv_bf16 */

static inline __m256 load_bf16(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float tail_bf16(float s, const uint16_t *w, const float *x, int i, int n) {
    for (; i < n; i++)
        s += qvk_bf16_to_f32_1(w[i]) * x[i];
    return s;
}

/* NR rows at a time, one accumulator per row plus the scalar tail (a row's sum is the same in a
 * block or alone); the next block (NR·n_in·2 contiguous bytes) prefetched into L2, NR·16 bytes
 * per step. */
static inline __attribute__((always_inline)) void
mv_block(int NR, float *restrict y, const uint16_t *restrict w, const float *restrict x,
         const float *restrict bias, int r, int n_in) {
    const int n8 = n_in & ~7;
    const uint16_t *wr = w + (size_t)r * n_in;
    const char *next = (const char *)(wr + (size_t)NR * n_in);
    __m256 acc[MV_ROWS];
#pragma GCC unroll 8
    for (int k = 0; k < NR; k++)
        acc[k] = _mm256_setzero_ps();
    for (int i = 0; i < n8; i += 8) {
        if (NR > 1) qvk_prefetch_l2(next + (size_t)i * 2 * NR, NR * 16);
        __m256 xv = _mm256_loadu_ps(x + i);
#pragma GCC unroll 8
        for (int k = 0; k < NR; k++)
            acc[k] = _mm256_fmadd_ps(load_bf16(wr + (size_t)k * n_in + i), xv, acc[k]);
    }
#pragma GCC unroll 8
    for (int k = 0; k < NR; k++) {
        float s = tail_bf16(hsum(acc[k]), wr + (size_t)k * n_in, x, n8, n_in);
        y[r + k] = bias ? s + bias[r + k] : s;
    }
}

static void mv_bf16(float *restrict y, const uint16_t *restrict w, const float *restrict x,
                    const float *restrict bias, int r0, int r1, int n_in) {
    int r = r0;
    for (; r + MV_ROWS <= r1; r += MV_ROWS)
        mv_block(MV_ROWS, y, w, x, bias, r, n_in);
    for (; r < r1; r++)
        mv_block(1, y, w, x, bias, r, n_in);
}

/* NR rows of X against NW rows of W (NR·NW ≤ 8 accumulators of the 16 ymm registers); the
 * per-element arithmetic is mv_bf16's: 8-wide chunks, hsum, scalar tail. */
static inline __attribute__((always_inline)) void
mm_block(int NR, int NW, float *restrict y, const uint16_t *restrict w, const float *restrict x,
         const float *restrict bias, int o, int r, int n_in, int n_out) {
    int n8 = n_in & ~7;
    __m256 acc[2][4];
    const uint16_t *wr[4];
    const float *xr[2];
    for (int b = 0; b < NW; b++)
        wr[b] = w + (size_t)(o + b) * n_in;
    for (int a = 0; a < NR; a++) {
        xr[a] = x + (size_t)(r + a) * n_in;
        for (int b = 0; b < NW; b++)
            acc[a][b] = _mm256_setzero_ps();
    }
    for (int i = 0; i < n8; i += 8) {
        __m256 wv[4];
        for (int b = 0; b < NW; b++)
            wv[b] = load_bf16(wr[b] + i);
        for (int a = 0; a < NR; a++) {
            __m256 xv = _mm256_loadu_ps(xr[a] + i);
            for (int b = 0; b < NW; b++)
                acc[a][b] = _mm256_fmadd_ps(wv[b], xv, acc[a][b]);
        }
    }
    for (int a = 0; a < NR; a++)
        for (int b = 0; b < NW; b++) {
            float s = tail_bf16(hsum(acc[a][b]), wr[b], xr[a], n8, n_in);
            y[(size_t)(r + a) * n_out + o + b] = bias ? s + bias[o + b] : s;
        }
}

static void mm_bf16(float *restrict y, const uint16_t *restrict w, const float *restrict x,
                    const float *restrict bias, int o0, int o1, int n_in, int n_out, int n_rows) {
    int o = o0;
    for (; o + 4 <= o1; o += 4) {
        int r = 0;
        for (; r + 2 <= n_rows; r += 2)
            mm_block(2, 4, y, w, x, bias, o, r, n_in, n_out);
        if (r < n_rows) mm_block(1, 4, y, w, x, bias, o, r, n_in, n_out);
    }
    for (; o < o1; o++)
        for (int r = 0; r < n_rows; r++)
            mm_block(1, 1, y, w, x, bias, o, r, n_in, n_out);
}

static float dot(const float *a, const float *b, int n) {
    int n8 = n & ~7;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n8; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = hsum(acc);
    for (int i = n8; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static void axpy(float *restrict y, float a, const float *restrict x, int n) {
    int n8 = n & ~7;
    __m256 av = _mm256_set1_ps(a);
    for (int i = 0; i < n8; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (int i = n8; i < n; i++)
        y[i] += a * x[i];
}

static double sumsq(const float *x, int n) {
    int n4 = n & ~3;
    __m256d acc = _mm256_setzero_pd();
    for (int i = 0; i < n4; i += 4) {
        __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        acc = _mm256_fmadd_pd(v, v, acc);
    }
    __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(acc), _mm256_extractf128_pd(acc, 1));
    double s = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
    for (int i = n4; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

/* ---- vector exp / sin (same polynomials as the AVX-512 file) ---------------------------- */

#define SET1 _mm256_set1_ps

/* 2^k for integer k in [-126, 127]. */
static inline __m256 pow2i(__m256i k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

static inline __m256 exp8(__m256 x) {
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 xc = _mm256_max_ps(_mm256_min_ps(x, SET1(89.0f)), SET1(-104.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, SET1(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, SET1(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, SET1(-2.12194440e-4f), r);
    __m256 p = SET1(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, SET1(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, SET1(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, SET1(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, SET1(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, SET1(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, SET1(1.0f)));
    /* 2^n as 2^n1·2^n2 so n in [-150, 129] neither wraps the exponent field nor loses
     * gradual underflow / overflow to inf */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1);
    __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, pow2i(n1)), pow2i(_mm256_sub_epi32(ni, n1)));
    return _mm256_blendv_ps(e, x, nan);
}

static inline __m256 sin2_8(__m256 x, int *big) {
    __m256 j = _mm256_round_ps(_mm256_mul_ps(x, SET1(0.636619772367581343f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(j, SET1(1.5707963705062866f), x);
    r = _mm256_fnmadd_ps(j, SET1(-4.371138828673793e-08f), r);
    r = _mm256_fnmadd_ps(j, SET1(-1.7151245100058819e-15f), r);
    __m256 z = _mm256_mul_ps(r, r);
    __m256 ps = _mm256_fmadd_ps(SET1(-1.9515295891e-4f), z, SET1(8.3321608736e-3f));
    ps = _mm256_fmadd_ps(ps, z, SET1(-1.6666654611e-1f));
    ps = _mm256_fmadd_ps(_mm256_mul_ps(ps, z), r, r);
    __m256 pc = _mm256_fmadd_ps(SET1(2.443315711809948e-5f), z, SET1(-1.388731625493765e-3f));
    pc = _mm256_fmadd_ps(pc, z, SET1(4.166664568298827e-2f));
    pc = _mm256_fmadd_ps(_mm256_mul_ps(pc, z), z, _mm256_fnmadd_ps(SET1(0.5f), z, SET1(1.0f)));
    __m256i odd = _mm256_slli_epi32(_mm256_cvtps_epi32(j), 31);
    __m256 sv = _mm256_blendv_ps(ps, pc, _mm256_castsi256_ps(odd));
    __m256 absx = _mm256_andnot_ps(SET1(-0.0f), x);
    *big = _mm256_movemask_ps(_mm256_cmp_ps(absx, SET1(65536.0f), _CMP_NLT_UQ)) != 0;
    return _mm256_mul_ps(sv, sv);
}

static void widen_bf16(float *restrict dst, const uint16_t *restrict src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, load_bf16(src + i));
    for (; i < n; i++)
        dst[i] = qvk_bf16_to_f32_1(src[i]);
}

static float maxf(const float *x, int n) {
    /* _mm256_max_ps returns its second operand when either is NaN: the running max stays. */
    __m256 m = _mm256_set1_ps(x[0]);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
    float t[8];
    _mm256_storeu_ps(t, m);
    float r = t[0];
    for (int l = 1; l < 8; l++)
        r = t[l] > r ? t[l] : r;
    for (; i < n; i++)
        r = x[i] > r ? x[i] : r;
    return r;
}

static double exp_sub_sum(float *x, int n, float m) {
    __m256 mv = SET1(m);
    __m256d acc = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double t[4];
    _mm256_storeu_pd(t, acc);
    double s = (t[0] + t[2]) + (t[1] + t[3]);
    for (; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    return s;
}

static void silu_mul(float *y, const float *g, const float *u, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        __m256 v = _mm256_div_ps(
            gv, _mm256_add_ps(SET1(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv))));
        if (u) v = _mm256_mul_ps(v, _mm256_loadu_ps(u + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++) {
        float v = g[i] / (1.0f + expf(-g[i]));
        y[i] = u ? v * u[i] : v;
    }
}

static void snake(float *x, int n, const float *a, const float *inv_b) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_loadu_ps(x + i), av = _mm256_loadu_ps(a + i);
        __m256 bv = _mm256_loadu_ps(inv_b + i);
        int big;
        __m256 s2 = sin2_8(_mm256_mul_ps(av, xv), &big);
        if (big) {
            float t[8];
            _mm256_storeu_ps(t, s2);
            for (int l = 0; l < 8; l++) {
                float s = sinf(a[i + l] * x[i + l]);
                if (fabsf(a[i + l] * x[i + l]) >= 65536.0f) t[l] = s * s;
            }
            s2 = _mm256_loadu_ps(t);
        }
        _mm256_storeu_ps(x + i, _mm256_fmadd_ps(bv, s2, xv));
    }
    for (; i < n; i++) {
        float s = sinf(a[i] * x[i]);
        x[i] += inv_b[i] * (s * s);
    }
}

static uint64_t xor64(const void *p, size_t n_bytes) {
    const unsigned char *b = p;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 128 <= n_bytes; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_loadu_si256((const __m256i *)(b + i)));
        a1 = _mm256_xor_si256(a1, _mm256_loadu_si256((const __m256i *)(b + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_loadu_si256((const __m256i *)(b + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_loadu_si256((const __m256i *)(b + i + 96)));
    }
    __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, a);
    return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3] ^ qvk_impl_scalar.xor64(b + i, n_bytes - i);
}

/* ELU with an 8-wide expm1: x = k·ln2 + r (Cody-Waite), expm1(r) by its degree-8 Taylor polynomial
 * on |r| ≤ ln2/2, expm1(x) = 2^k·expm1(r) + (2^k − 1). Measured ≤ 2 ulp from glibc expm1f over
 * [−20, 0]; the speech encoder applies ELU to ~2·10^8 values per 30 s clip, and the scalar libm
 * call was 15 % of its time. */
static void elu(float *x, size_t n) {
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 ln2_hi = _mm256_set1_ps(0.693145751953125f);
    const __m256 ln2_lo = _mm256_set1_ps(1.428606765330187045e-06f);
    const __m256 lo = _mm256_set1_ps(-20.0f), zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    const float c[8] = {1.f / 40320.f, 1.f / 5040.f, 1.f / 720.f, 1.f / 120.f, 1.f / 24.f,
                        1.f / 6.f, 0.5f, 1.0f};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 xc = _mm256_max_ps(_mm256_min_ps(v, zero), lo);
        __m256 kf = _mm256_round_ps(_mm256_mul_ps(xc, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 r = _mm256_fnmadd_ps(kf, ln2_hi, xc);
        r = _mm256_fnmadd_ps(kf, ln2_lo, r);
        __m256 p = _mm256_set1_ps(c[0]);
        for (int j = 1; j < 7; j++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c[j]));
        p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r);          /* expm1(r) */
        __m256i ki = _mm256_cvtps_epi32(kf);
        __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(ki, _mm256_set1_epi32(127)), 23));
        __m256 e = _mm256_fmadd_ps(s, p, _mm256_sub_ps(s, one));
        _mm256_storeu_ps(x + i, _mm256_blendv_ps(v, e, _mm256_cmp_ps(v, zero, _CMP_LT_OQ)));
    }
    for (; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : expm1f(x[i]);
}

const qvk_impl qvk_impl_avx2 = {
    .name = "avx2",
    .mv_bf16 = mv_bf16,
    .mm_bf16 = mm_bf16,
    .gemm_pack = qvk_gemm_pack_avx2,
    .gemm_bf16 = qvk_gemm_bf16_avx2,
    .fma_probe = qvk_fma_probe_avx2,
    .dot = dot,
    .axpy = axpy,
    .sumsq = sumsq,
    .widen_bf16 = widen_bf16,
    .maxf = maxf,
    .exp_sub_sum = exp_sub_sum,
    .silu_mul = silu_mul,
    .snake = snake,
    .elu = elu,
    .xor64 = xor64,
    .add_bias = qvk_add_bias_avx2,
    .add_rows = qvk_add_rows_avx2,
    .gemm_p48_f16 = qvk_gemm_p48_f16_avx2,
};
