/* matvec_q8_avx2.c — int8 rows on AVX2: maddubs(|x|, sign(w, x)) gives int16 pair sums (at most
 * 2·127·127, no saturation since weights and x are within ±127), madd by ones widens to int32.
 * Exact int32 per 128-element group, then one f32 FMA by the group's x scale; two rows at a time.
 */
#include <immintrin.h>

#include "kernels/q8.h"
#include "kernels/q8_impl.h"

static inline __m256i dot32(__m256i acc, __m256i xa, __m256i xv, const int8_t *w) {
    __m256i wv = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)w), xv);
    __m256i p16 = _mm256_maddubs_epi16(xa, wv);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void qvk_q8_rows_avx2(float *restrict y, const int8_t *restrict q, const float *restrict scale,
                      const int8_t *restrict xq, const float *restrict xs,
                      const float *restrict bias, int r0, int r1, int n_in) {
    const int n_g = n_in / QVK_Q8_GROUP;
    int r = r0;
    for (; r + 2 <= r1; r += 2) {
        const int8_t *w0 = q + (size_t)r * n_in, *w1 = w0 + n_in;
        __m256 f0 = _mm256_setzero_ps(), f1 = f0;
        for (int g = 0; g < n_g; g++) {
            __m256i a0 = _mm256_setzero_si256(), a1 = a0;
            for (int i = g * QVK_Q8_GROUP; i < (g + 1) * QVK_Q8_GROUP; i += 32) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + i));
                __m256i xa = _mm256_abs_epi8(xv);
                a0 = dot32(a0, xa, xv, w0 + i);
                a1 = dot32(a1, xa, xv, w1 + i);
            }
            __m256 s = _mm256_set1_ps(xs[g]);
            f0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0), s, f0);
            f1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a1), s, f1);
        }
        float s0 = hsum(f0) * scale[r], s1 = hsum(f1) * scale[r + 1];
        if (bias) s0 += bias[r], s1 += bias[r + 1];
        y[r] = s0, y[r + 1] = s1;
    }
    for (; r < r1; r++) {
        const int8_t *w0 = q + (size_t)r * n_in;
        __m256 f0 = _mm256_setzero_ps();
        for (int g = 0; g < n_g; g++) {
            __m256i a0 = _mm256_setzero_si256();
            for (int i = g * QVK_Q8_GROUP; i < (g + 1) * QVK_Q8_GROUP; i += 32) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + i));
                a0 = dot32(a0, _mm256_abs_epi8(xv), xv, w0 + i);
            }
            f0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0), _mm256_set1_ps(xs[g]), f0);
        }
        float s0 = hsum(f0) * scale[r];
        y[r] = bias ? s0 + bias[r] : s0;
    }
}
