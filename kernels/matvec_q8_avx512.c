/* matvec_q8_avx512.c — int8 rows with VNNI: vpdpbusd takes unsigned × signed bytes, so x enters
 * as |x| and each weight byte is negated where x < 0 (one masked subtract per 64 bytes, shared by
 * the four rows streamed together; weights are within ±127, so negation cannot overflow).
 * Exact int32 per 128-element group, then one f32 FMA by the group's x scale. The next four
 * rows are prefetched as in matvec_avx512.c.
 */
#include <immintrin.h>

#include "q8.h"
#include "q8_impl.h"

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
        const int8_t *w0 = q + (size_t)r * n_in, *w1 = w0 + n_in, *w2 = w1 + n_in,
                     *w3 = w2 + n_in;
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
        float s0 = _mm512_reduce_add_ps(f0) * scale[r], s1 = _mm512_reduce_add_ps(f1) * scale[r + 1],
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
