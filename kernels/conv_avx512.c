/* conv_avx512.c — the avx512 variant's conv entries: the speech encoder's 1-input-channel first
 * conv (conv_c1), the Winograd transforms (mix_rows), the 48-column panel products with f32 or f16
 * panels (gemm_p48, gemm_p48_f16).
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
 * per lane block, each output an FMA chain over the coefficients in j order. With the shape known
 * at compile time (F(5, 7): 11 × 11 in, 5 × 11 out; F(4, 2): 5 × 5, 4 × 5) the x rows stay in
 * registers and the chains interleave; there zero coefficients are not skipped: fma(0, x, acc) is
 * acc for finite x (acc starts at +0 and never becomes −0), so the bits are the same. */
static inline __attribute__((always_inline)) void mix_fixed(const int rows, const int cols,
                                                             float *restrict y, int64_t ldy,
                                                             const float *a,
                                                             const float *restrict x, int64_t ldx,
                                                             int n) {
    for (int l = 0; l < n; l += 16) {
        __mmask16 mk = n - l >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - l)) - 1);
        __m512 xv[16];
#pragma GCC unroll 16
        for (int j = 0; j < cols; j++)
            xv[j] = _mm512_maskz_loadu_ps(mk, x + j * ldx + l);
#pragma GCC unroll 16
        for (int i = 0; i < rows; i++) {
            __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 16
            for (int j = 0; j < cols; j++)
                acc = _mm512_fmadd_ps(_mm512_set1_ps(a[i * cols + j]), xv[j], acc);
            _mm512_mask_storeu_ps(y + i * ldy + l, mk, acc);
        }
    }
}

void qvk_mix_rows_avx512(float *restrict y, int64_t ldy, const float *a, int rows, int cols,
                         const float *restrict x, int64_t ldx, int n) {
    if (rows == 11 && cols == 11) {
        mix_fixed(11, 11, y, ldy, a, x, ldx, n);
        return;
    }
    if (rows == 5 && cols == 11) {
        mix_fixed(5, 11, y, ldy, a, x, ldx, n);
        return;
    }
    if (rows == 5 && cols == 5) {
        mix_fixed(5, 5, y, ldy, a, x, ldx, n);
        return;
    }
    if (rows == 4 && cols == 5) {
        mix_fixed(4, 5, y, ldy, a, x, ldx, n);
        return;
    }
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
 * elements) stays in L2 while every group of 8 rows passes over it. A last group of up to 4 rows
 * runs as 4 × 48 (12 accumulators; the Winograd convs' tile counts often leave 1–4 rows over),
 * one of 5–7 as 8; a short group repeats its last row and stores only its own. The last panel
 * stores only its n columns. f16 panels are widened on load (exact), then the same FMAs run in the
 * same order: the bits of f32 panels holding the same values, whatever the grouping. */
static inline __attribute__((always_inline)) __m512 panel_load(const void *restrict w, size_t at,
                                                              int f16) {
    if (f16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + at)));
    return _mm512_loadu_ps((const float *)w + at);
}

/* Not auto-vectorised: GCC 12 put the row pointers below into vector registers, and the FMAs then
 * read two of the three panel vectors from the stack (measured: the decoder 15 % slower). */
#define NO_AUTOVEC __attribute__((optimize("no-tree-vectorize")))

/* Rows [r, r + nr) (nr ≤ R) of panel p against its k·48 weights at w + wp. */
static inline __attribute__((always_inline)) NO_AUTOVEC void
p48_rows(const int R, float *restrict y, int64_t ldy, const float *restrict x, int64_t ldx,
         const void *restrict w, size_t wp, int f16, int k, int r, int nr, const __mmask16 *mk) {
    const float *xr[8];
    for (int a = 0; a < R; a++)
        xr[a] = x + (r + (a < nr ? a : nr - 1)) * ldx;
    __m512 c[8][3];
#pragma GCC unroll 8
    for (int a = 0; a < R; a++)
        c[a][0] = c[a][1] = c[a][2] = _mm512_setzero_ps();
    for (int i = 0; i < k; i++) {
        __m512 w0 = panel_load(w, wp + (size_t)i * 48, f16);
        __m512 w1 = panel_load(w, wp + (size_t)i * 48 + 16, f16);
        __m512 w2 = panel_load(w, wp + (size_t)i * 48 + 32, f16);
#pragma GCC unroll 8
        for (int a = 0; a < R; a++) {
            __m512 xb = _mm512_set1_ps(xr[a][i]);
            c[a][0] = _mm512_fmadd_ps(xb, w0, c[a][0]);
            c[a][1] = _mm512_fmadd_ps(xb, w1, c[a][1]);
            c[a][2] = _mm512_fmadd_ps(xb, w2, c[a][2]);
        }
    }
    float *yr = y + r * ldy;
    for (int a = 0; a < nr; a++) {
        _mm512_mask_storeu_ps(yr + a * ldy, mk[0], c[a][0]);
        _mm512_mask_storeu_ps(yr + a * ldy + 16, mk[1], c[a][1]);
        _mm512_mask_storeu_ps(yr + a * ldy + 32, mk[2], c[a][2]);
    }
}

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
        float *yp = y + p * 48;
        for (int r = 0; r < n_rows; r += 8) {
            int nr = n_rows - r < 8 ? n_rows - r : 8;
            if (nr <= 4) p48_rows(4, yp, ldy, x, ldx, w, wp, f16, k, r, nr, mk);
            else p48_rows(8, yp, ldy, x, ldx, w, wp, f16, k, r, nr, mk);
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
