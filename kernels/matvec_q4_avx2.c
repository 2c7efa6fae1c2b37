/* matvec_q4_avx2.c — q4 rows on AVX2: low and high nibbles of a group's 32 bytes meet the even
 * and odd halves of the de-interleaved x in two maddubs (nibble ≤ 15, so a pair sum is at most
 * 2·15·127 and the sum of both fits int16), madd by ones widens to int32: exact per 64-group,
 * then one f32 FMA by s·xs. Two rows at a time.
 */
#include <immintrin.h>

#include "kernels/q4_impl.h"

#define GB (QVK_Q4_GROUP / 2)
#define BF qvk_bf16_to_f32_1

static inline __m256i dot64(const uint8_t *p, __m256i xe, __m256i xo) {
    const __m256i mask = _mm256_set1_epi8(15);
    __m256i b = _mm256_loadu_si256((const __m256i *)p);
    __m256i lo = _mm256_and_si256(b, mask), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), mask);
    __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void qvk_q4_rows_avx2(const qvk_q4_mv *mv, const int8_t *restrict xq, const float *restrict xs,
                      const float *restrict xsum, int r0, int r1, int n_in) {
    const int n_g = n_in / QVK_Q4_GROUP;
    const size_t rb = (size_t)n_in / 2;
    int r = r0;
    for (; r + 2 <= r1; r += 2) {
        const uint8_t *q0 = mv->q + (size_t)r * rb;
        const uint16_t *s0 = mv->s + (size_t)r * n_g, *b0 = mv->b + (size_t)r * n_g;
        __m256 f0 = _mm256_setzero_ps(), f1 = f0;
        float c0 = 0, c1 = 0;
        for (int g = 0; g < n_g; g++) {
            const __m256i xe = _mm256_load_si256((const __m256i *)(xq + g * QVK_Q4_GROUP));
            const __m256i xo = _mm256_load_si256((const __m256i *)(xq + g * QVK_Q4_GROUP + GB));
            __m256i d0 = dot64(q0 + (size_t)g * GB, xe, xo);
            __m256i d1 = dot64(q0 + rb + (size_t)g * GB, xe, xo);
            f0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_set1_ps(BF(s0[g]) * xs[g]), f0);
            f1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_set1_ps(BF(s0[n_g + g]) * xs[g]),
                                 f1);
            c0 += BF(b0[g]) * xsum[g], c1 += BF(b0[n_g + g]) * xsum[g];
        }
        const float y0 = hsum(f0) + c0, y1 = hsum(f1) + c1;
        mv->y[r] = mv->bias ? y0 + mv->bias[r] : y0;
        mv->y[r + 1] = mv->bias ? y1 + mv->bias[r + 1] : y1;
    }
    for (; r < r1; r++) {
        const uint8_t *q0 = mv->q + (size_t)r * rb;
        const uint16_t *s0 = mv->s + (size_t)r * n_g, *b0 = mv->b + (size_t)r * n_g;
        __m256 f0 = _mm256_setzero_ps();
        float c0 = 0;
        for (int g = 0; g < n_g; g++) {
            const __m256i xe = _mm256_load_si256((const __m256i *)(xq + g * QVK_Q4_GROUP));
            const __m256i xo = _mm256_load_si256((const __m256i *)(xq + g * QVK_Q4_GROUP + GB));
            f0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot64(q0 + (size_t)g * GB, xe, xo)),
                                 _mm256_set1_ps(BF(s0[g]) * xs[g]), f0);
            c0 += BF(b0[g]) * xsum[g];
        }
        const float y = hsum(f0) + c0;
        mv->y[r] = mv->bias ? y + mv->bias[r] : y;
    }
}
