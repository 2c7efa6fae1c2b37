/* matvec_q8_avx512.c — int8 rows with VNNI: vpdpbusd takes unsigned × signed bytes, so x enters
 * as |x| and each weight byte is negated where x < 0 (one masked subtract per 64 bytes, shared by
 * the four rows streamed together; weights are within ±127, so negation cannot overflow).
 * Exact int32 per 128-element group, then one f32 FMA by the group's x scale. The next four
 * rows are prefetched as in matvec_avx512.c.
 */
#include <immintrin.h>

#include "kernels/q8.h"
#include "kernels/q8_impl.h"

static inline __m512i signed_w(const int8_t *p, __mmask64 neg) {
    __m512i w = _mm512_loadu_si512((const void *)p);
    return _mm512_mask_sub_epi8(w, neg, _mm512_setzero_si512(), w);
}

void qvk_q8_rows_avx512(float *restrict y, const int8_t *restrict q, const float *restrict scale,
                        const int8_t *restrict xq, const float *restrict xs,
                        const float *restrict bias, int r0, int r1, int n_in) {
    const int n_g = n_in / QVK_Q8_GROUP;
    int r = r0;
    for (; r + 4 <= r1; r += 4) {
        const int8_t *w0 = q + (size_t)r * n_in, *w1 = w0 + n_in, *w2 = w1 + n_in, *w3 = w2 + n_in;
        const char *next = (const char *)(w3 + n_in);
        __m512 f0 = _mm512_setzero_ps(), f1 = f0, f2 = f0, f3 = f0;
        for (int g = 0; g < n_g; g++) {
            __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
            for (int i = g * QVK_Q8_GROUP; i < (g + 1) * QVK_Q8_GROUP; i += 64) {
                _mm_prefetch(next + i, _MM_HINT_T0);
                _mm_prefetch(next + (size_t)n_in + i, _MM_HINT_T0);
                _mm_prefetch(next + (size_t)2 * n_in + i, _MM_HINT_T0);
                _mm_prefetch(next + (size_t)3 * n_in + i, _MM_HINT_T0);
                __m512i xv = _mm512_loadu_si512((const void *)(xq + i));
                __mmask64 neg = _mm512_movepi8_mask(xv);
                __m512i xa = _mm512_abs_epi8(xv);
                a0 = _mm512_dpbusd_epi32(a0, xa, signed_w(w0 + i, neg));
                a1 = _mm512_dpbusd_epi32(a1, xa, signed_w(w1 + i, neg));
                a2 = _mm512_dpbusd_epi32(a2, xa, signed_w(w2 + i, neg));
                a3 = _mm512_dpbusd_epi32(a3, xa, signed_w(w3 + i, neg));
            }
            __m512 s = _mm512_set1_ps(xs[g]);
            f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), s, f0);
            f1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1), s, f1);
            f2 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a2), s, f2);
            f3 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a3), s, f3);
        }
        float s0 = _mm512_reduce_add_ps(f0) * scale[r],
              s1 = _mm512_reduce_add_ps(f1) * scale[r + 1],
              s2 = _mm512_reduce_add_ps(f2) * scale[r + 2],
              s3 = _mm512_reduce_add_ps(f3) * scale[r + 3];
        if (bias) s0 += bias[r], s1 += bias[r + 1], s2 += bias[r + 2], s3 += bias[r + 3];
        y[r] = s0, y[r + 1] = s1, y[r + 2] = s2, y[r + 3] = s3;
    }
    for (; r < r1; r++) {
        const int8_t *w0 = q + (size_t)r * n_in;
        __m512 f0 = _mm512_setzero_ps();
        for (int g = 0; g < n_g; g++) {
            __m512i a0 = _mm512_setzero_si512();
            for (int i = g * QVK_Q8_GROUP; i < (g + 1) * QVK_Q8_GROUP; i += 64) {
                __m512i xv = _mm512_loadu_si512((const void *)(xq + i));
                a0 = _mm512_dpbusd_epi32(a0, _mm512_abs_epi8(xv),
                                         signed_w(w0 + i, _mm512_movepi8_mask(xv)));
            }
            f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), _mm512_set1_ps(xs[g]), f0);
        }
        float s0 = _mm512_reduce_add_ps(f0) * scale[r];
        y[r] = bias ? s0 + bias[r] : s0;
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
