/* conv_avx512.c — conv.c's direct path for the speech encoder's 1-input-channel first conv (the
 * avx512 variant's conv_c1; the other variants have none and take the sgemm path).
 */
#include "kernels/kernels_impl.h"

#include <immintrin.h>

/* y[i, o] = Σ_j w[o, j]·win[i + j] for a 1-channel input (the speech encoder's first conv, k = 7):
 * an sgemm with K = 7 is mostly packing. One FMA chain per output from zero in tap order, which
 * is what the sgemm computes, so the bits are the same (checked by the codes golden). c_out must
 * be a multiple of 16, at most 256; k at most 16. */
void qvk_conv_c1_avx512(float *y, int64_t ldy, const float *win, int64_t n, const float *w, int k,
                        int c_out) {
    __m512 wt[16][16];   /* [tap][output block] */
    int nb = c_out / 16;
    for (int j = 0; j < k; j++)
        for (int b = 0; b < nb; b++) {
            float tmp[16];
            for (int l = 0; l < 16; l++) tmp[l] = w[(size_t)(b * 16 + l) * k + j];
            wt[j][b] = _mm512_loadu_ps(tmp);
        }
    for (int64_t i = 0; i < n; i++) {
        float *yr = y + (size_t)i * ldy;
        for (int b = 0; b < nb; b++) {
            __m512 acc = _mm512_setzero_ps();
            for (int j = 0; j < k; j++) acc = _mm512_fmadd_ps(_mm512_set1_ps(win[i + j]), wt[j][b], acc);
            _mm512_storeu_ps(yr + b * 16, acc);
        }
    }
}
