/* matvec_q4_avx512.c — q4 rows with VNNI: a group's 32 packed bytes are broadcast to both halves
 * of a zmm, the upper half shifted right by 4, and masked to nibbles, which lines them up with
 * the de-interleaved x (even | odd); vpdpbusd takes them as the unsigned operand directly. Exact
 * int32 per 64-group, one f32 FMA by s·xs per group; four rows share each x load, and the next
 * four rows are prefetched as in matvec_q8_avx512.c.
 */
#include <immintrin.h>

#include "kernels/q4_impl.h"

#define GB (QVK_Q4_GROUP / 2) /* packed bytes per group */
#define BF qvk_bf16_to_f32_1

static inline __m512i nibbles(const uint8_t *p, __m512i shift, __m512i mask) {
    __m512i b = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_and_si512(_mm512_srlv_epi64(b, shift), mask);
}

void qvk_q4_rows_avx512(const qvk_q4_mv *mv, const int8_t *restrict xq, const float *restrict xs,
                        const float *restrict xsum, int r0, int r1, int n_in) {
    const int n_g = n_in / QVK_Q4_GROUP;
    const size_t rb = (size_t)n_in / 2; /* bytes per row */
    const __m512i shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    const __m512i mask = _mm512_set1_epi8(15);
    int r = r0;
    for (; r + 4 <= r1; r += 4) {
        const uint8_t *q0 = mv->q + (size_t)r * rb;
        const char *next = (const char *)(q0 + 4 * rb);
        const uint16_t *s0 = mv->s + (size_t)r * n_g, *b0 = mv->b + (size_t)r * n_g;
        __m512 f0 = _mm512_setzero_ps(), f1 = f0, f2 = f0, f3 = f0;
        float c0 = 0, c1 = 0, c2 = 0, c3 = 0; /* bias terms b·Σx */
        for (int g = 0; g < n_g; g++) {
            if (!(g & 1))
                for (int k = 0; k < 4; k++)
                    _mm_prefetch(next + k * rb + (size_t)g * GB, _MM_HINT_T0);
            const __m512i xv = _mm512_load_si512((const void *)(xq + g * QVK_Q4_GROUP));
            const uint8_t *qg = q0 + (size_t)g * GB;
            __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nibbles(qg, shift, mask), xv);
            __m512i d1 =
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), nibbles(qg + rb, shift, mask), xv);
            __m512i d2 =
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), nibbles(qg + 2 * rb, shift, mask), xv);
            __m512i d3 =
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), nibbles(qg + 3 * rb, shift, mask), xv);
            f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_set1_ps(BF(s0[g]) * xs[g]), f0);
            f1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_set1_ps(BF(s0[n_g + g]) * xs[g]),
                                 f1);
            f2 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d2),
                                 _mm512_set1_ps(BF(s0[2 * n_g + g]) * xs[g]), f2);
            f3 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d3),
                                 _mm512_set1_ps(BF(s0[3 * n_g + g]) * xs[g]), f3);
            c0 += BF(b0[g]) * xsum[g], c1 += BF(b0[n_g + g]) * xsum[g];
            c2 += BF(b0[2 * n_g + g]) * xsum[g], c3 += BF(b0[3 * n_g + g]) * xsum[g];
        }
        float y[4] = {_mm512_reduce_add_ps(f0) + c0, _mm512_reduce_add_ps(f1) + c1,
                      _mm512_reduce_add_ps(f2) + c2, _mm512_reduce_add_ps(f3) + c3};
        for (int k = 0; k < 4; k++)
            mv->y[r + k] = mv->bias ? y[k] + mv->bias[r + k] : y[k];
    }
    for (; r < r1; r++) {
        const uint8_t *q0 = mv->q + (size_t)r * rb;
        const uint16_t *s0 = mv->s + (size_t)r * n_g, *b0 = mv->b + (size_t)r * n_g;
        __m512 f0 = _mm512_setzero_ps();
        float c0 = 0;
        for (int g = 0; g < n_g; g++) {
            const __m512i xv = _mm512_load_si512((const void *)(xq + g * QVK_Q4_GROUP));
            __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                             nibbles(q0 + (size_t)g * GB, shift, mask), xv);
            f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_set1_ps(BF(s0[g]) * xs[g]), f0);
            c0 += BF(b0[g]) * xsum[g];
        }
        const float y = _mm512_reduce_add_ps(f0) + c0;
        mv->y[r] = mv->bias ? y + mv->bias[r] : y;
    }
}
