/* conv_avx2.c — the AVX2 row additions of conv.c: a conv output's bias and a residual connection
 * (plain adds, so exact: the scalar loops give the same bits). Table entries of the avx2 and
 * avx512 variants.
 */
#include "kernels/kernels_impl.h"

#include <immintrin.h>

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
