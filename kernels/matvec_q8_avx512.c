/* matvec_q8_avx512.c — int8 rows with VNNI: vpdpbusd takes unsigned × signed bytes, so x enters
 * as |x| and each weight byte is negated where x < 0 (one masked subtract per 64 bytes, shared by
 * the rows streamed together; weights are within ±127, so negation cannot overflow).
 * Exact int32 per 128-element group, then one f32 FMA by the group's x scale. Eight rows at a
 * time, the next eight prefetched into L2. The batched kernel (several x) flips the weights to
 * unsigned instead, so its per-byte work does not grow with the number of x (rowsb_block).
 */
#include <immintrin.h>

#include "kernels/kernels_impl.h"
#include "kernels/q8.h"
#include "kernels/q8_impl.h"

#define Q8_ROWS 8 /* rows per block */
#define Q8_PF_BYTES 8192 /* the batched kernel's prefetch distance */

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

/* NR rows × NB vectors. vpdpbusd multiplies unsigned by signed bytes: here the weight bytes
 * enter flipped to unsigned (w ^ 0x80 = w + 128, one xor per 64 bytes shared by all NB) and x
 * as it is, so a lane sums Σ w·x + 128·Σ x. The second term depends on x alone: xc holds its
 * negation per vector, group and lane (qvk_q8_batch_corr_avx512, once per call), and each
 * group's accumulators start from it. Each lane's int32 is then the exact Σ x·w of
 * rows_block's lane, and the f32 steps are rows_block's: bit-identical. pf: prefetch for the
 * rows ~8 KB ahead (first pass over these rows only; a shorter distance left the rows' loads
 * waiting on memory). */
static inline __attribute__((always_inline)) void
rowsb_block(int NR, int NB, int pf, float *restrict y, int ldy, const int8_t *restrict q,
            const float *restrict scale, const int8_t *restrict xq, const int32_t *restrict xc,
            const float *restrict xs, const float *restrict bias, int r, int n_in) {
    const int8_t *wr = q + (size_t)r * n_in;
    const size_t blk = (size_t)NR * n_in;
    const char *ahead = (const char *)(wr + blk * ((Q8_PF_BYTES + blk - 1) / blk));
    const int n_g = n_in / QVK_Q8_GROUP;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 f[2][4];
#pragma GCC unroll 2
    for (int k = 0; k < NR; k++)
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++)
            f[k][b] = _mm512_setzero_ps();
    for (int g = 0; g < n_g; g++) {
        __m512i a[2][4];
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            const __m512i c = _mm512_loadu_si512((const void *)(xc + ((size_t)b * n_g + g) * 16));
#pragma GCC unroll 2
            for (int k = 0; k < NR; k++)
                a[k][b] = c;
        }
#pragma GCC unroll 2
        for (int i = g * QVK_Q8_GROUP; i < (g + 1) * QVK_Q8_GROUP; i += 64) {
            if (pf) qvk_prefetch_l2(ahead + (size_t)i * NR, NR * 64);
            __m512i xv[4];
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++)
                xv[b] = _mm512_loadu_si512((const void *)(xq + (size_t)b * n_in + i));
#pragma GCC unroll 2
            for (int k = 0; k < NR; k++) {
                const __m512i wu = _mm512_xor_si512(
                    _mm512_loadu_si512((const void *)(wr + (size_t)k * n_in + i)), flip);
#pragma GCC unroll 4
                for (int b = 0; b < NB; b++)
                    a[k][b] = _mm512_dpbusd_epi32(a[k][b], wu, xv[b]);
            }
        }
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            const __m512 sg = _mm512_set1_ps(xs[(size_t)b * n_g + g]);
#pragma GCC unroll 2
            for (int k = 0; k < NR; k++)
                f[k][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[k][b]), sg, f[k][b]);
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
           const float *restrict scale, const int8_t *restrict xq, const int32_t *restrict xc,
           const float *restrict xs, int n_x, const float *restrict bias, int r, int n_in) {
    const int n_g = n_in / QVK_Q8_GROUP;
    for (int b = 0; b < n_x; b += 4) {
        float *yb = y + (size_t)b * ldy;
        const int8_t *xb = xq + (size_t)b * n_in;
        const int32_t *cb = xc + (size_t)b * n_g * 16;
        const float *sb = xs + (size_t)b * n_g;
        switch (n_x - b < 4 ? n_x - b : 4) {
        case 1:
            rowsb_block(NR, 1, !b, yb, ldy, q, scale, xb, cb, sb, bias, r, n_in);
            break;
        case 2:
            rowsb_block(NR, 2, !b, yb, ldy, q, scale, xb, cb, sb, bias, r, n_in);
            break;
        case 3:
            rowsb_block(NR, 3, !b, yb, ldy, q, scale, xb, cb, sb, bias, r, n_in);
            break;
        default:
            rowsb_block(NR, 4, !b, yb, ldy, q, scale, xb, cb, sb, bias, r, n_in);
            break;
        }
    }
}

void qvk_q8_rows_batch_avx512(float *restrict y, int ldy, const int8_t *restrict q,
                              const float *restrict scale, const int8_t *restrict xq,
                              const int32_t *restrict xc, const float *restrict xs, int n_x,
                              const float *restrict bias, int r0, int r1, int n_in) {
    int r = r0;
    for (; r + 2 <= r1; r += 2)
        rowsb_rows(2, y, ldy, q, scale, xq, xc, xs, n_x, bias, r, n_in);
    for (; r < r1; r++)
        rowsb_rows(1, y, ldy, q, scale, xq, xc, xs, n_x, bias, r, n_in);
}

/* xc[v, g, lane] = −128 · Σ x_v over the 8 bytes the lane takes in group g (4 per 64-byte
 * step): vpdpbusd of bytes 128 (unsigned) by x, negated. */
void qvk_q8_batch_corr_avx512(int32_t *restrict xc, const int8_t *restrict xq, int n_x, int n_in) {
    const __m512i c128 = _mm512_set1_epi8((char)0x80);
    for (size_t v = 0; v < (size_t)n_x; v++)
        for (int g = 0; g < n_in / QVK_Q8_GROUP; g++) {
            __m512i s = _mm512_setzero_si512();
            for (int i = g * QVK_Q8_GROUP; i < (g + 1) * QVK_Q8_GROUP; i += 64)
                s = _mm512_dpbusd_epi32(s, c128,
                                        _mm512_loadu_si512((const void *)(xq + v * n_in + i)));
            _mm512_storeu_si512((void *)(xc + (v * (n_in / QVK_Q8_GROUP) + g) * 16),
                                _mm512_sub_epi32(_mm512_setzero_si512(), s));
        }
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
