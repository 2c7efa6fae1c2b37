/* matvec_avx512.c — AVX-512 kernels of the dispatch table. bf16 weights are widened exactly to f32
 * and multiplied with f32 x by FMA (vdpbf16ps would round x to bf16, which the golden tests cannot
 * afford). Eight rows stream at a time sharing each x load, the next eight prefetched into L2
 * (qvk_prefetch_l2). One 16-lane accumulator per row and a masked tail, the same in a block or
 * alone (bit-identical).
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"

#define MV_ROWS 8 /* rows per block of mv_bf16 */

static inline __m512 load_bf16(const uint16_t *p) {
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __m512 load_bf16_tail(const uint16_t *p, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* NR rows at a time, one accumulator per row (so a row's sum is the same in a block or alone);
 * the next block (NR·n_in·2 contiguous bytes) prefetched into L2, NR·32 bytes per step. */
static inline __attribute__((always_inline)) void
mv_block(int NR, float *restrict y, const uint16_t *restrict w, const float *restrict x,
         const float *restrict bias, int r, int n_in, int n16, __mmask16 tail) {
    const uint16_t *wr = w + (size_t)r * n_in;
    const char *next = (const char *)(wr + (size_t)NR * n_in);
    __m512 acc[MV_ROWS];
#pragma GCC unroll 8
    for (int k = 0; k < NR; k++)
        acc[k] = _mm512_setzero_ps();
    for (int i = 0; i < n16; i += 16) {
        if (NR > 1) qvk_prefetch_l2(next + (size_t)i * 2 * NR, NR * 32);
        __m512 xv = _mm512_loadu_ps(x + i);
#pragma GCC unroll 8
        for (int k = 0; k < NR; k++)
            acc[k] = _mm512_fmadd_ps(load_bf16(wr + (size_t)k * n_in + i), xv, acc[k]);
    }
    if (tail) {
        __m512 xv = _mm512_maskz_loadu_ps(tail, x + n16);
#pragma GCC unroll 8
        for (int k = 0; k < NR; k++)
            acc[k] = _mm512_fmadd_ps(load_bf16_tail(wr + (size_t)k * n_in + n16, tail), xv,
                                     acc[k]);
    }
#pragma GCC unroll 8
    for (int k = 0; k < NR; k++) {
        float s = _mm512_reduce_add_ps(acc[k]);
        y[r + k] = bias ? s + bias[r + k] : s;
    }
}

static void mv_bf16(float *restrict y, const uint16_t *restrict w, const float *restrict x,
                    const float *restrict bias, int r0, int r1, int n_in) {
    int n16 = n_in & ~15;
    __mmask16 tail = (__mmask16)((1u << (n_in & 15)) - 1);
    int r = r0;
    for (; r + MV_ROWS <= r1; r += MV_ROWS)
        mv_block(MV_ROWS, y, w, x, bias, r, n_in, n16, tail);
    for (; r < r1; r++)
        mv_block(1, y, w, x, bias, r, n_in, n16, tail);
}

/* NR weight rows × NB vectors, NR·NB accumulators: each widened weight vector feeds all NB, and
 * each (row, vector) accumulates exactly as mv_block does (bit-identical). pf: prefetch the next
 * NR rows (only on the first pass over these rows; later passes read them from L1). */
static inline __attribute__((always_inline)) void
mvb_block(int NR, int NB, int pf, float *restrict y, int ldy, const uint16_t *restrict w,
          const float *restrict x, int n_in, const float *restrict bias, int r, int n16,
          __mmask16 tail) {
    const uint16_t *wr = w + (size_t)r * n_in;
    const char *next = (const char *)(wr + (size_t)NR * n_in);
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int k = 0; k < NR; k++)
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++)
            acc[k][b] = _mm512_setzero_ps();
    for (int i = 0; i < n16; i += 16) {
        if (pf) qvk_prefetch_l2(next + (size_t)i * 2 * NR, NR * 32);
        __m512 xv[4];
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++)
            xv[b] = _mm512_loadu_ps(x + (size_t)b * n_in + i);
#pragma GCC unroll 4
        for (int k = 0; k < NR; k++) {
            const __m512 wv = load_bf16(wr + (size_t)k * n_in + i);
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++)
                acc[k][b] = _mm512_fmadd_ps(wv, xv[b], acc[k][b]);
        }
    }
    if (tail) {
        __m512 xv[4];
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++)
            xv[b] = _mm512_maskz_loadu_ps(tail, x + (size_t)b * n_in + n16);
#pragma GCC unroll 4
        for (int k = 0; k < NR; k++) {
            const __m512 wv = load_bf16_tail(wr + (size_t)k * n_in + n16, tail);
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++)
                acc[k][b] = _mm512_fmadd_ps(wv, xv[b], acc[k][b]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < NR; k++)
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            float s = _mm512_reduce_add_ps(acc[k][b]);
            y[(size_t)b * ldy + r + k] = bias ? s + bias[r + k] : s;
        }
}

/* Four vectors at a time over each block of four rows (the block stays in L1 for the next four). */
static inline __attribute__((always_inline)) void
mvb_rows(int NR, float *restrict y, int ldy, const uint16_t *restrict w, const float *restrict x,
         int n_x, const float *restrict bias, int r, int n_in, int n16, __mmask16 tail) {
    for (int b = 0; b < n_x; b += 4) {
        float *yb = y + (size_t)b * ldy;
        const float *xb = x + (size_t)b * n_in;
        switch (n_x - b < 4 ? n_x - b : 4) {
        case 1: mvb_block(NR, 1, !b, yb, ldy, w, xb, n_in, bias, r, n16, tail); break;
        case 2: mvb_block(NR, 2, !b, yb, ldy, w, xb, n_in, bias, r, n16, tail); break;
        case 3: mvb_block(NR, 3, !b, yb, ldy, w, xb, n_in, bias, r, n16, tail); break;
        default: mvb_block(NR, 4, !b, yb, ldy, w, xb, n_in, bias, r, n16, tail); break;
        }
    }
}

static void mvb_bf16(float *restrict y, int ldy, const uint16_t *restrict w,
                     const float *restrict x, int n_x, const float *restrict bias, int r0, int r1,
                     int n_in) {
    int n16 = n_in & ~15;
    __mmask16 tail = (__mmask16)((1u << (n_in & 15)) - 1);
    int r = r0;
    for (; r + 4 <= r1; r += 4)
        mvb_rows(4, y, ldy, w, x, n_x, bias, r, n_in, n16, tail);
    for (; r < r1; r++)
        mvb_rows(1, y, ldy, w, x, n_x, bias, r, n_in, n16, tail);
}

/* NR rows of X against NW rows of W, all accumulators in registers (NR·NW ≤ 16); the
 * per-element arithmetic is mv_bf16's: one accumulator, 16-wide chunks, masked tail, reduce. */
static inline __attribute__((always_inline)) void
mm_block(int NR, int NW, float *restrict y, const uint16_t *restrict w, const float *restrict x,
         const float *restrict bias, int o, int r, int n_in, int n_out) {
    int n16 = n_in & ~15;
    __mmask16 tail = (__mmask16)((1u << (n_in & 15)) - 1);
    __m512 acc[4][4];
    const uint16_t *wr[4];
    const float *xr[4];
    for (int b = 0; b < NW; b++)
        wr[b] = w + (size_t)(o + b) * n_in;
    for (int a = 0; a < NR; a++) {
        xr[a] = x + (size_t)(r + a) * n_in;
        for (int b = 0; b < NW; b++)
            acc[a][b] = _mm512_setzero_ps();
    }
    for (int i = 0; i < n16; i += 16) {
        __m512 wv[4];
        for (int b = 0; b < NW; b++)
            wv[b] = load_bf16(wr[b] + i);
        for (int a = 0; a < NR; a++) {
            __m512 xv = _mm512_loadu_ps(xr[a] + i);
            for (int b = 0; b < NW; b++)
                acc[a][b] = _mm512_fmadd_ps(wv[b], xv, acc[a][b]);
        }
    }
    if (tail) {
        __m512 wv[4];
        for (int b = 0; b < NW; b++)
            wv[b] = load_bf16_tail(wr[b] + n16, tail);
        for (int a = 0; a < NR; a++) {
            __m512 xv = _mm512_maskz_loadu_ps(tail, xr[a] + n16);
            for (int b = 0; b < NW; b++)
                acc[a][b] = _mm512_fmadd_ps(wv[b], xv, acc[a][b]);
        }
    }
    for (int a = 0; a < NR; a++)
        for (int b = 0; b < NW; b++) {
            float s = _mm512_reduce_add_ps(acc[a][b]);
            y[(size_t)(r + a) * n_out + o + b] = bias ? s + bias[o + b] : s;
        }
}

static void mm_bf16(float *restrict y, const uint16_t *restrict w, const float *restrict x,
                    const float *restrict bias, int o0, int o1, int n_in, int n_out, int n_rows) {
    int o = o0;
    for (; o + 4 <= o1; o += 4) {
        int r = 0;
        for (; r + 4 <= n_rows; r += 4)
            mm_block(4, 4, y, w, x, bias, o, r, n_in, n_out);
        if (n_rows - r == 3) mm_block(3, 4, y, w, x, bias, o, r, n_in, n_out);
        if (n_rows - r == 2) mm_block(2, 4, y, w, x, bias, o, r, n_in, n_out);
        if (n_rows - r == 1) mm_block(1, 4, y, w, x, bias, o, r, n_in, n_out);
    }
    for (; o < o1; o++) {
        int r = 0;
        for (; r + 4 <= n_rows; r += 4)
            mm_block(4, 1, y, w, x, bias, o, r, n_in, n_out);
        for (; r < n_rows; r++)
            mm_block(1, 1, y, w, x, bias, o, r, n_in, n_out);
    }
}

static float dot(const float *a, const float *b, int n) {
    int n16 = n & ~15;
    __mmask16 tail = (__mmask16)((1u << (n & 15)) - 1);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n16; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (tail)
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a + n16),
                              _mm512_maskz_loadu_ps(tail, b + n16), acc);
    return _mm512_reduce_add_ps(acc);
}

static void axpy(float *restrict y, float a, const float *restrict x, int n) {
    int n16 = n & ~15;
    __mmask16 tail = (__mmask16)((1u << (n & 15)) - 1);
    __m512 av = _mm512_set1_ps(a);
    for (int i = 0; i < n16; i += 16)
        _mm512_storeu_ps(y + i,
                         _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (tail)
        _mm512_mask_storeu_ps(y + n16, tail,
                              _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(tail, x + n16),
                                              _mm512_maskz_loadu_ps(tail, y + n16)));
}

static double sumsq(const float *x, int n) {
    int n8 = n & ~7;
    __m512d acc = _mm512_setzero_pd();
    for (int i = 0; i < n8; i += 8) {
        __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        acc = _mm512_fmadd_pd(v, v, acc);
    }
    double s = _mm512_reduce_add_pd(acc);
    for (int i = n8; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

/* ---- vector exp / sin (Cephes-style minimax polynomials, ~1-2 ulp; checked in test_kernels) */

static inline __m512 exp16(__m512 x) {
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __m512 xc = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(89.0f)), _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_mask_mov_ps(_mm512_scalef_ps(p, n), nan, x);
}

/* sin²(x): quadrant sign is irrelevant after squaring. |x| ≥ 2¹⁶ lanes are left to sinf. */
static inline __m512 sin2_16(__m512 x, int *big) {
    __m512 j = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.636619772367581343f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(j, _mm512_set1_ps(1.5707963705062866f), x);
    r = _mm512_fnmadd_ps(j, _mm512_set1_ps(-4.371138828673793e-08f), r);
    r = _mm512_fnmadd_ps(j, _mm512_set1_ps(-1.7151245100058819e-15f), r);
    __m512 z = _mm512_mul_ps(r, r);
    __m512 ps =
        _mm512_fmadd_ps(_mm512_set1_ps(-1.9515295891e-4f), z, _mm512_set1_ps(8.3321608736e-3f));
    ps = _mm512_fmadd_ps(ps, z, _mm512_set1_ps(-1.6666654611e-1f));
    ps = _mm512_fmadd_ps(_mm512_mul_ps(ps, z), r, r);
    __m512 pc = _mm512_fmadd_ps(_mm512_set1_ps(2.443315711809948e-5f), z,
                                _mm512_set1_ps(-1.388731625493765e-3f));
    pc = _mm512_fmadd_ps(pc, z, _mm512_set1_ps(4.166664568298827e-2f));
    pc = _mm512_fmadd_ps(_mm512_mul_ps(pc, z), z,
                         _mm512_fnmadd_ps(_mm512_set1_ps(0.5f), z, _mm512_set1_ps(1.0f)));
    __mmask16 odd = _mm512_test_epi32_mask(_mm512_cvtps_epi32(j), _mm512_set1_epi32(1));
    __m512 sv = _mm512_mask_mov_ps(ps, odd, pc);
    *big = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(65536.0f), _CMP_NLT_UQ) != 0;
    return _mm512_mul_ps(sv, sv);
}

static void widen_bf16(float *restrict dst, const uint16_t *restrict src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, load_bf16(src + i));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, k, load_bf16_tail(src + i, k));
    }
}

static float maxf(const float *x, int n) {
    /* _mm512_max_ps returns its second operand when either is NaN: the running max stays. */
    __m512 m = _mm512_set1_ps(x[0]);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        m = _mm512_max_ps(_mm512_loadu_ps(x + i), m);
    float r = _mm512_reduce_max_ps(m);
    for (; i < n; i++)
        r = x[i] > r ? x[i] : r;
    return r;
}

/* The AVX2 loop 16 wide: the same polynomial (exp16 gives exp8's bits: 2^n applied exactly
 * either way) on the first n & ~7 values, expf on the rest, and the same four double partial
 * sums added in the same order. Softmax rows are then bit-identical to the AVX2 variant's for
 * every length; the speech encoder's causal attention has rows of every length, and the masked
 * polynomial tail this replaces made its codes depend on the variant. */
static inline __m256d add_4x2(__m256d acc, __m256 e8) {
    acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(e8)));
    return _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(e8, 1)));
}

static double exp_sub_sum(float *x, int n, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    const int n8 = n & ~7;
    __m256d acc = _mm256_setzero_pd();
    for (int i = 0; i < n8; i += 16) {
        __mmask16 k = n8 - i >= 16 ? 0xffff : 0x00ff;
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv));
        _mm512_mask_storeu_ps(x + i, k, e);
        acc = add_4x2(acc, _mm512_castps512_ps256(e));
        if (k == 0xffff) acc = add_4x2(acc, _mm512_extractf32x8_ps(e, 1));
    }
    double t[4];
    _mm256_storeu_pd(t, acc);
    double s = (t[0] + t[2]) + (t[1] + t[3]);
    for (int i = n8; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    return s;
}

static void silu_mul(float *y, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 gv = _mm512_maskz_loadu_ps(k, g + i);
        __m512 v = _mm512_div_ps(
            gv, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
        if (u) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, u + i));
        _mm512_mask_storeu_ps(y + i, k, v);
    }
}

static void snake(float *x, int n, const float *a, const float *inv_b) {
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 xv = _mm512_maskz_loadu_ps(k, x + i), av = _mm512_maskz_loadu_ps(k, a + i),
               bv = _mm512_maskz_loadu_ps(k, inv_b + i);
        int big;
        __m512 s2 = sin2_16(_mm512_mul_ps(av, xv), &big);
        if (big) {
            float t[16];
            _mm512_storeu_ps(t, s2);
            for (int l = 0; l < 16 && i + l < n; l++) {
                float s = sinf(a[i + l] * x[i + l]);
                if (fabsf(a[i + l] * x[i + l]) >= 65536.0f) t[l] = s * s;
            }
            s2 = _mm512_loadu_ps(t);
        }
        _mm512_mask_storeu_ps(x + i, k, _mm512_fmadd_ps(bv, s2, xv));
    }
}

static uint64_t xor64(const void *p, size_t n_bytes) {
    const unsigned char *b = p;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 256 <= n_bytes; i += 256) {
        a0 = _mm512_xor_si512(a0, _mm512_loadu_si512(b + i));
        a1 = _mm512_xor_si512(a1, _mm512_loadu_si512(b + i + 64));
        a2 = _mm512_xor_si512(a2, _mm512_loadu_si512(b + i + 128));
        a3 = _mm512_xor_si512(a3, _mm512_loadu_si512(b + i + 192));
    }
    __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    uint64_t lanes[8];
    _mm512_storeu_si512(lanes, a);
    uint64_t s = 0;
    for (int j = 0; j < 8; j++)
        s ^= lanes[j];
    return s ^ qvk_impl_scalar.xor64(b + i, n_bytes - i);
}

/* The ELU of the AVX2 file 16 wide: the same operations in the same order, so each element is
 * bit-identical to the AVX2 path (the remainder goes through it), and blocks with no negative value
 * are left alone. ELU was ~5 % of the speech encoder. */
static void elu(float *x, size_t n) {
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 ln2_hi = _mm512_set1_ps(0.693145751953125f);
    const __m512 ln2_lo = _mm512_set1_ps(1.428606765330187045e-06f);
    const __m512 lo = _mm512_set1_ps(-20.0f), zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    const float c[8] = {1.f / 40320.f, 1.f / 5040.f, 1.f / 720.f, 1.f / 120.f, 1.f / 24.f,
                        1.f / 6.f, 0.5f, 1.0f};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __mmask16 neg = _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ);
        if (!neg) continue;
        __m512 xc = _mm512_max_ps(_mm512_min_ps(v, zero), lo);
        __m512 kf = _mm512_roundscale_ps(_mm512_mul_ps(xc, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(kf, ln2_hi, xc);
        r = _mm512_fnmadd_ps(kf, ln2_lo, r);
        __m512 p = _mm512_set1_ps(c[0]);
        for (int j = 1; j < 7; j++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c[j]));
        p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r);          /* expm1(r) */
        __m512i ki = _mm512_cvtps_epi32(kf);
        __m512 s = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(ki, _mm512_set1_epi32(127)), 23));
        __m512 e = _mm512_fmadd_ps(s, p, _mm512_sub_ps(s, one));
        _mm512_storeu_ps(x + i, _mm512_mask_blend_ps(neg, v, e));
    }
    if (i < n) qvk_impl_avx2.elu(x + i, n - i);
}

const qvk_impl qvk_impl_avx512 = {
    .name = "avx512",
    .mv_bf16 = mv_bf16,
    .mvb_bf16 = mvb_bf16,
    .mm_bf16 = mm_bf16,
    .gemm_pack = qvk_gemm_pack_avx512,
    .gemm_bf16 = qvk_gemm_bf16_avx512,
    .fma_probe = qvk_fma_probe_avx512,
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
    .conv_c1 = qvk_conv_c1_avx512,
    .mix_rows = qvk_mix_rows_avx512,
    .gemm_p48 = qvk_gemm_p48_avx512,
    .gemm_p48_f16 = qvk_gemm_p48_f16_avx512,
};
