/* act_avx512.c — the ELU of act_avx2.c 16 wide: the same operations in the same order, so each
 * element is bit-identical to the AVX2 path (the remainder goes through it), and blocks with no
 * negative value are left alone. ELU was ~5 % of the speech encoder.
 */
#include "clone_impl.h"

#include <immintrin.h>

void qvc_elu_avx512(float *x, size_t n) {
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 ln2_hi = _mm512_set1_ps(0.693145751953125f);
    const __m512 ln2_lo = _mm512_set1_ps(1.428606765330187045e-06f);
    const __m512 lo = _mm512_set1_ps(-20.0f), zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    const float c[8] = {1.f / 40320.f, 1.f / 5040.f, 1.f / 720.f, 1.f / 120.f, 1.f / 24.f,
                        1.f / 6.f, 0.5f, 1.0f};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __mmask16 neg = _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ);
        if (!neg) continue;
        __m512 xc = _mm512_max_ps(_mm512_min_ps(v, zero), lo);
        __m512 kf = _mm512_roundscale_ps(_mm512_mul_ps(xc, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(kf, ln2_hi, xc);
        r = _mm512_fnmadd_ps(kf, ln2_lo, r);
        __m512 p = _mm512_set1_ps(c[0]);
        for (int j = 1; j < 7; j++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c[j]));
        p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r);          /* expm1(r) */
        __m512i ki = _mm512_cvtps_epi32(kf);
        __m512 s = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(ki, _mm512_set1_epi32(127)), 23));
        __m512 e = _mm512_fmadd_ps(s, p, _mm512_sub_ps(s, one));
        _mm512_storeu_ps(x + i, _mm512_mask_blend_ps(neg, v, e));
    }
    if (i < n) qvc_elu_avx2(x + i, n - i);
}

/* y[i, o] = Σ_j w[o, j]·win[i + j] for a 1-channel input (the speech encoder's first conv, k = 7):
 * an sgemm with K = 7 is mostly packing. One FMA chain per output from zero in tap order, which
 * is what the sgemm computes, so the bits are the same (checked by the codes golden). c_out must
 * be a multiple of 16, at most 256; k at most 16. */
void qvc_conv_c1_avx512(float *y, int64_t ldy, const float *win, int64_t n, const float *w, int k,
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
