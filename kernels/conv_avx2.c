/* conv_avx2.c — the AVX2 row additions of conv.c: a conv output's bias and a residual connection
 * (plain adds, so exact: the scalar loops give the same bits), table entries of the avx2 and
 * avx512 variants; and the avx2 variant's f16-panel product (F16C).
 */
#include "kernels/kernels_impl.h"

#include <immintrin.h>
#include <string.h>

/* y[r, :n] += v[:n] for each of n_rows rows (row stride ldy): the bias of a conv output. */
void qvk_add_bias_avx2(float *y, int64_t ldy, const float *v, int64_t n_rows, int n) {
    for (int64_t r = 0; r < n_rows; r++) {
        float *yr = y + (size_t)r * ldy;
        int i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(yr + i, _mm256_add_ps(_mm256_loadu_ps(yr + i), _mm256_loadu_ps(v + i)));
        for (; i < n; i++) yr[i] += v[i];
    }
}

/* y[r, :n] += x[r, :n] (row strides ldy, ldx): a residual connection. */
void qvk_add_rows_avx2(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t n_rows, int n) {
    for (int64_t r = 0; r < n_rows; r++) {
        float *yr = y + (size_t)r * ldy;
        const float *xr = x + (size_t)r * ldx;
        int i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(yr + i, _mm256_add_ps(_mm256_loadu_ps(yr + i), _mm256_loadu_ps(xr + i)));
        for (; i < n; i++) yr[i] += xr[i];
    }
}

/* f16 48-column panels (conv.c's gemm_p48_f16 contract): 4 rows × 16 columns in 8 accumulators,
 * one FMA chain per element from zero with i in order, each panel value widened exactly by F16C:
 * the bits of the avx512 kernel. A last group of fewer rows repeats its last row and stores only
 * its own; the last panel stores only its n columns. */
void qvk_gemm_p48_f16_avx2(float *restrict y, int64_t ldy, const float *restrict x, int64_t ldx,
                           const uint16_t *restrict w, int k, int n_rows, int n) {
    for (int p = 0; p * 48 < n; p++) {
        const uint16_t *wp = w + (size_t)p * k * 48;
        for (int g = 0; g < 48 && p * 48 + g < n; g += 16) {
            const int nc = n - p * 48 - g < 16 ? n - p * 48 - g : 16;
            for (int r = 0; r < n_rows; r += 4) {
                const int nr = n_rows - r < 4 ? n_rows - r : 4;
                const float *xr[4];
                for (int a = 0; a < 4; a++)
                    xr[a] = x + (r + (a < nr ? a : nr - 1)) * ldx;
                __m256 c[4][2];
#pragma GCC unroll 4
                for (int a = 0; a < 4; a++)
                    c[a][0] = c[a][1] = _mm256_setzero_ps();
                for (int i = 0; i < k; i++) {
                    const uint16_t *wi = wp + (size_t)i * 48 + g;
                    const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wi));
                    const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wi + 8)));
#pragma GCC unroll 4
                    for (int a = 0; a < 4; a++) {
                        const __m256 xb = _mm256_set1_ps(xr[a][i]);
                        c[a][0] = _mm256_fmadd_ps(xb, w0, c[a][0]);
                        c[a][1] = _mm256_fmadd_ps(xb, w1, c[a][1]);
                    }
                }
                for (int a = 0; a < nr; a++) {
                    float t[16], *yr = y + (r + a) * ldy + p * 48 + g;
                    _mm256_storeu_ps(t, c[a][0]);
                    _mm256_storeu_ps(t + 8, c[a][1]);
                    memcpy(yr, t, (size_t)nc * sizeof *yr);
                }
            }
        }
    }
}
