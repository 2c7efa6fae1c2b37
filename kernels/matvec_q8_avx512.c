/* matvec_q8_avx512.c — int8 rows with VNNI: vpdpbusd takes unsigned × signed bytes, so x enters
 * as |x| and each weight byte is negated where x < 0 (one masked subtract per 64 bytes, shared by
 * the rows streamed together; weights are within ±127, so negation cannot overflow).
 * Exact int32 per 128-element group, then one f32 FMA by the group's x scale. Eight rows at a
 * time, the next eight prefetched into L2.
 */
#include <immintrin.h>

#include "kernels/kernels_impl.h"
#include "kernels/q8.h"
#include "kernels/q8_impl.h"

#define Q8_ROWS 8 /* rows per block */

static inline __m512i signed_w(const int8_t *p, __mmask64 neg) {
    __m512i w = _mm512_loadu_si512((const void *)p);
    return _mm512_mask_sub_epi8(w, neg, _mm512_setzero_si512(), w);
}

/* NR rows sharing each x load; the next block (NR·n_in contiguous bytes) prefetched into L2,
 * NR lines per 64-byte step (qvk_prefetch_l2). */
static inline __attribute__((always_inline)) void
rows_block(int NR, float *restrict y, const int8_t *restrict q, const float *restrict scale,
           const int8_t *restrict xq, const float *restrict xs, const float *restrict bias, int r,
           int n_in) {
    const int8_t *wr = q + (size_t)r * n_in;
    const char *next = (const char *)(wr + (size_t)NR * n_in);
    __m512 f[Q8_ROWS];
#pragma GCC unroll 8
    for (int k = 0; k < NR; k++)
        f[k] = _mm512_setzero_ps();
    for (int g = 0; g < n_in / QVK_Q8_GROUP; g++) {
        __m512i a[Q8_ROWS];
#pragma GCC unroll 8
        for (int k = 0; k < NR; k++)
            a[k] = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int i = g * QVK_Q8_GROUP; i < (g + 1) * QVK_Q8_GROUP; i += 64) {
            if (NR > 1) qvk_prefetch_l2(next + (size_t)i * NR, NR * 64);
            __m512i xv = _mm512_loadu_si512((const void *)(xq + i));
            __mmask64 neg = _mm512_movepi8_mask(xv);
            __m512i xa = _mm512_abs_epi8(xv);
#pragma GCC unroll 8
            for (int k = 0; k < NR; k++)
                a[k] = _mm512_dpbusd_epi32(a[k], xa, signed_w(wr + (size_t)k * n_in + i, neg));
        }
        __m512 sg = _mm512_set1_ps(xs[g]);
#pragma GCC unroll 8
        for (int k = 0; k < NR; k++)
            f[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[k]), sg, f[k]);
    }
#pragma GCC unroll 8
    for (int k = 0; k < NR; k++) {
        float s = _mm512_reduce_add_ps(f[k]) * scale[r + k];
        y[r + k] = bias ? s + bias[r + k] : s;
    }
}

void qvk_q8_rows_avx512(float *restrict y, const int8_t *restrict q, const float *restrict scale,
                        const int8_t *restrict xq, const float *restrict xs,
                        const float *restrict bias, int r0, int r1, int n_in) {
    int r = r0;
    for (; r + Q8_ROWS <= r1; r += Q8_ROWS)
        rows_block(Q8_ROWS, y, q, scale, xq, xs, bias, r, n_in);
    for (; r < r1; r++)
        rows_block(1, y, q, scale, xq, xs, bias, r, n_in);
}

/* NR rows × NB vectors, x given as xu = x + 128 (unsigned, made once per call): vpdpbusd then
 * takes the weights as they are, Σ xu·w = Σ x·w + 128·Σ w, and the second term (one vpdpbusd of
 * 128s per row, shared by all NB) is subtracted per group. Each lane's int32 is the exact Σ x·w
 * of rows_block's lane, and the f32 steps are rows_block's: bit-identical. pf: prefetch the next
 * NR rows (first pass over these rows only). */
static inline __attribute__((always_inline)) void
rowsb_block(int NR, int NB, int pf, float *restrict y, int ldy, const int8_t *restrict q,
            const float *restrict scale, const uint8_t *restrict xu, const float *restrict xs,
            const float *restrict bias, int r, int n_in) {
    const int8_t *wr = q + (size_t)r * n_in;
    const char *next = (const char *)(wr + (size_t)NR * n_in);
    const int n_g = n_in / QVK_Q8_GROUP;
    const __m512i c128 = _mm512_set1_epi8((char)0x80);
    __m512 f[2][4];
#pragma GCC unroll 2
    for (int k = 0; k < NR; k++)
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++)
            f[k][b] = _mm512_setzero_ps();
    for (int g = 0; g < n_g; g++) {
        __m512i a[2][4], c[2];
#pragma GCC unroll 2
        for (int k = 0; k < NR; k++) {
            c[k] = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++)
                a[k][b] = _mm512_setzero_si512();
        }
#pragma GCC unroll 2
        for (int i = g * QVK_Q8_GROUP; i < (g + 1) * QVK_Q8_GROUP; i += 64) {
            if (pf) qvk_prefetch_l2(next + (size_t)i * NR, NR * 64);
            __m512i xv[4];
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++)
                xv[b] = _mm512_loadu_si512((const void *)(xu + (size_t)b * n_in + i));
#pragma GCC unroll 2
            for (int k = 0; k < NR; k++) {
                const __m512i w = _mm512_loadu_si512((const void *)(wr + (size_t)k * n_in + i));
                c[k] = _mm512_dpbusd_epi32(c[k], c128, w);
#pragma GCC unroll 4
                for (int b = 0; b < NB; b++)
                    a[k][b] = _mm512_dpbusd_epi32(a[k][b], xv[b], w);
            }
        }
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            const __m512 sg = _mm512_set1_ps(xs[(size_t)b * n_g + g]);
#pragma GCC unroll 2
            for (int k = 0; k < NR; k++)
                f[k][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a[k][b], c[k])), sg,
                                          f[k][b]);
        }
    }
#pragma GCC unroll 2
    for (int k = 0; k < NR; k++)
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            float s = _mm512_reduce_add_ps(f[k][b]) * scale[r + k];
            y[(size_t)b * ldy + r + k] = bias ? s + bias[r + k] : s;
        }
}

static inline __attribute__((always_inline)) void
rowsb_rows(int NR, float *restrict y, int ldy, const int8_t *restrict q,
           const float *restrict scale, const uint8_t *restrict xu, const float *restrict xs,
           int n_x, const float *restrict bias, int r, int n_in) {
    const int n_g = n_in / QVK_Q8_GROUP;
    for (int b = 0; b < n_x; b += 4) {
        float *yb = y + (size_t)b * ldy;
        const uint8_t *xb = xu + (size_t)b * n_in;
        const float *sb = xs + (size_t)b * n_g;
        switch (n_x - b < 4 ? n_x - b : 4) {
        case 1:
            rowsb_block(NR, 1, !b, yb, ldy, q, scale, xb, sb, bias, r, n_in);
            break;
        case 2:
            rowsb_block(NR, 2, !b, yb, ldy, q, scale, xb, sb, bias, r, n_in);
            break;
        case 3:
            rowsb_block(NR, 3, !b, yb, ldy, q, scale, xb, sb, bias, r, n_in);
            break;
        default:
            rowsb_block(NR, 4, !b, yb, ldy, q, scale, xb, sb, bias, r, n_in);
            break;
        }
    }
}

void qvk_q8_rows_batch_avx512(float *restrict y, int ldy, const int8_t *restrict q,
                              const float *restrict scale, const uint8_t *restrict xu,
                              const float *restrict xs, int n_x, const float *restrict bias, int r0,
                              int r1, int n_in) {
    int r = r0;
    for (; r + 2 <= r1; r += 2)
        rowsb_rows(2, y, ldy, q, scale, xu, xs, n_x, bias, r, n_in);
    for (; r < r1; r++)
        rowsb_rows(1, y, ldy, q, scale, xu, xs, n_x, bias, r, n_in);
}

/* One bf16 row to int8 + scale, the same IEEE operations as quantize_row in matvec_q8.c (absmax,
 * x·(127/amax), clamp, ±0.5, truncate), so the bytes are identical; n is a multiple of 16. */
void qvk_q8_quantize_row_avx512(int8_t *restrict q, float *restrict scale,
                                const uint16_t *restrict w, int n) {
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(w + i));
        __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        m = _mm512_max_ps(m, _mm512_abs_ps(x));
    }
    const float amax = _mm512_reduce_max_ps(m);
    *scale = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    const __m512 half = _mm512_set1_ps(0.5f), mhalf = _mm512_set1_ps(-0.5f);
    for (int i = 0; i < n; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(w + i));
        __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x, inv), lo), hi);
        __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
        v = _mm512_add_ps(v, _mm512_mask_blend_ps(neg, half, mhalf));
        _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(v)));
    }
}

/* Activations to int8 groups, the same IEEE operations as quantize_row in matvec_q8.c (absmax
 * ignoring NaN as fmaxf does, x·(127/amax), clamp, ±0.5, truncate): the same bytes and scales;
 * n_in a multiple of QVK_Q8_GROUP. */
void qvk_q8_quantize_x_avx512(int8_t *restrict xq, float *restrict xs, const float *restrict x,
                              int n_in) {
    const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    const __m512 half = _mm512_set1_ps(0.5f), mhalf = _mm512_set1_ps(-0.5f);
    for (int g = 0; g < n_in / QVK_Q8_GROUP; g++) {
        const float *xg = x + g * QVK_Q8_GROUP;
        __m512 m = _mm512_setzero_ps();
        for (int i = 0; i < QVK_Q8_GROUP; i += 16)
            m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xg + i)), m);
        const float amax = _mm512_reduce_max_ps(m);
        xs[g] = amax / 127.0f;
        const __m512 inv = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        for (int i = 0; i < QVK_Q8_GROUP; i += 16) {
            __m512 v =
                _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(xg + i), inv), lo), hi);
            __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
            v = _mm512_add_ps(v, _mm512_mask_blend_ps(neg, half, mhalf));
            _mm_storeu_si128((__m128i *)(xq + g * QVK_Q8_GROUP + i),
                             _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(v)));
        }
    }
}
