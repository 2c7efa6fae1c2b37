/* conv_avx512.c — the avx512 variant's conv entries: the speech encoder's 1-input-channel first
 * conv (conv_c1), the Winograd transforms (mix_rows), the 48-column panel products with f32 or f16
 * panels (gemm_p48, gemm_p48_f16) and the tiled transpose.
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

/* The Winograd transforms (conv.c's mix_rows_scalar): 16 lanes at a time, every x row loaded once
 * per lane block, each output an FMA chain over the nonzero coefficients in j order. */
void qvk_mix_rows_avx512(float *restrict y, int64_t ldy, const float *a, int rows, int cols,
                         const float *restrict x, int64_t ldx, int n) {
    __m512 xv[32];
    for (int l = 0; l < n; l += 16) {
        __mmask16 mk = n - l >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - l)) - 1);
        for (int j = 0; j < cols; j++)
            xv[j] = _mm512_maskz_loadu_ps(mk, x + j * ldx + l);
        for (int i = 0; i < rows; i++) {
            __m512 acc = _mm512_setzero_ps();
            for (int j = 0; j < cols; j++) {
                float c = a[i * cols + j];
                if (c != 0.0f) acc = _mm512_fmadd_ps(_mm512_set1_ps(c), xv[j], acc);
            }
            _mm512_mask_storeu_ps(y + i * ldy + l, mk, acc);
        }
    }
}

/* 8 rows × 48 columns of y in 24 accumulators over the whole k (one FMA chain per element, i in
 * order): per i, three panel vectors and eight broadcasts of x feed 24 FMAs. The panel (k·48
 * elements) stays in L2 while every group of 8 rows passes over it. A last group of fewer rows
 * repeats its last row and stores only its own; the last panel stores only its n columns. f16
 * panels are widened on load (exact), then the same FMAs run in the same order: the bits of f32
 * panels holding the same values. */
static inline __attribute__((always_inline)) __m512 panel_load(const void *restrict w, size_t at,
                                                              int f16) {
    if (f16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + at)));
    return _mm512_loadu_ps((const float *)w + at);
}

/* Not auto-vectorised: GCC 12 put the row pointers below into vector registers, and the FMAs then
 * read two of the three panel vectors from the stack (measured: the decoder 15 % slower). */
#define NO_AUTOVEC __attribute__((optimize("no-tree-vectorize")))
static inline __attribute__((always_inline)) NO_AUTOVEC void
gemm_p48(float *restrict y, int64_t ldy, const float *restrict x, int64_t ldx,
         const void *restrict w, int f16, int k, int n_rows, int n) {
    for (int p = 0; p * 48 < n; p++) {
        const size_t wp = (size_t)p * k * 48;
        int nc = n - p * 48 < 48 ? n - p * 48 : 48;
        __mmask16 mk[3];
        for (int v = 0; v < 3; v++) {
            int m = nc - v * 16;
            mk[v] = m >= 16 ? (__mmask16)0xffff : m <= 0 ? 0 : (__mmask16)((1u << m) - 1);
        }
        for (int r = 0; r < n_rows; r += 8) {
            int nr = n_rows - r < 8 ? n_rows - r : 8;
            const float *xr[8];
            for (int a = 0; a < 8; a++)
                xr[a] = x + (r + (a < nr ? a : nr - 1)) * ldx;
            __m512 c[8][3];
#pragma GCC unroll 8
            for (int a = 0; a < 8; a++)
                c[a][0] = c[a][1] = c[a][2] = _mm512_setzero_ps();
            for (int i = 0; i < k; i++) {
                __m512 w0 = panel_load(w, wp + (size_t)i * 48, f16);
                __m512 w1 = panel_load(w, wp + (size_t)i * 48 + 16, f16);
                __m512 w2 = panel_load(w, wp + (size_t)i * 48 + 32, f16);
#pragma GCC unroll 8
                for (int a = 0; a < 8; a++) {
                    __m512 xb = _mm512_set1_ps(xr[a][i]);
                    c[a][0] = _mm512_fmadd_ps(xb, w0, c[a][0]);
                    c[a][1] = _mm512_fmadd_ps(xb, w1, c[a][1]);
                    c[a][2] = _mm512_fmadd_ps(xb, w2, c[a][2]);
                }
            }
            float *yr = y + r * ldy + p * 48;
            for (int a = 0; a < nr; a++) {
                _mm512_mask_storeu_ps(yr + a * ldy, mk[0], c[a][0]);
                _mm512_mask_storeu_ps(yr + a * ldy + 16, mk[1], c[a][1]);
                _mm512_mask_storeu_ps(yr + a * ldy + 32, mk[2], c[a][2]);
            }
        }
    }
}

NO_AUTOVEC void qvk_gemm_p48_avx512(float *restrict y, int64_t ldy, const float *restrict x, int64_t ldx,
                         const float *restrict w, int k, int n_rows, int n) {
    gemm_p48(y, ldy, x, ldx, w, 0, k, n_rows, n);
}

NO_AUTOVEC void qvk_gemm_p48_f16_avx512(float *restrict y, int64_t ldy, const float *restrict x, int64_t ldx,
                             const uint16_t *restrict w, int k, int n_rows, int n) {
    gemm_p48(y, ldy, x, ldx, w, 1, k, n_rows, n);
}

/* conv.c's transpose: dst[c·ldd + r] = src[r·lds + c] (+ bias[c]) in 16 × 16 register tiles
 * (unpack, then shuffles within and across 128-bit lanes); the ragged edges go element by
 * element. Exact copies (and one exact add per element), so every variant gives the same bits. */
void qvk_transpose_avx512(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds,
                          int rows, int cols, const float *bias) {
    int r16 = rows / 16 * 16, c16 = cols / 16 * 16;
    for (int r0 = 0; r0 < r16; r0 += 16)
        for (int c0 = 0; c0 < c16; c0 += 16) {
            __m512 r[16], t[16];
            for (int i = 0; i < 16; i++)
                r[i] = _mm512_loadu_ps(src + (size_t)(r0 + i) * lds + c0);
            for (int i = 0; i < 8; i++) {
                t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
                t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
            }
            for (int i = 0; i < 4; i++) {
                r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
                r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
                r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
                r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
            }
            for (int j = 0; j < 4; j++) {
                t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
                t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
                t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
                t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
            }
            for (int j = 0; j < 4; j++) {
                r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
                r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xDD);
                r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
                r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xDD);
            }
            for (int c = 0; c < 16; c++) {
                __m512 v = bias ? _mm512_add_ps(r[c], _mm512_set1_ps(bias[c0 + c])) : r[c];
                _mm512_storeu_ps(dst + (size_t)(c0 + c) * ldd + r0, v);
            }
        }
    for (int c = 0; c < cols; c++) {
        float *d = dst + (size_t)c * ldd;
        const float b = bias ? bias[c] : 0.0f;
        for (int r = c < c16 ? r16 : 0; r < rows; r++)
            d[r] = bias ? src[(size_t)r * lds + c] + b : src[(size_t)r * lds + c];
    }
}
