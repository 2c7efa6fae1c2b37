/* gemm_avx2.c — the prefill GEMM (gemm.c) with AVX2 + FMA: bf16 weights widened exactly in
 * registers (even elements by a shift, odd ones by a mask: no shuffle) and multiplied with f32 x by
 * FMA, so every product is the f32 path's. X is packed once per call (gemm_pack: per row, per 16
 * inputs: the 8 even then the 8 odd values, zero-padded) to match. A tile is 2 rows of W against
 * up to 4 rows of X, one 8-lane accumulator per output; after the last input the 8 accumulators are
 * summed together (hsum8), each by the same lane tree, so an output never depends on its tile or
 * thread (bit-identical for any split).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_impl.h"

#define TILE_ROWS 4 /* X rows per tile: 8 accumulators + 4 W + 2 X of the 16 ymm registers */

void qvk_gemm_pack_avx2(void *restrict xp, const float *restrict x, int r0, int r1, int n_in) {
    const int n16 = (n_in + 15) / 16 * 16;
    for (int r = r0; r < r1; r++) {
        const float *xr = x + (size_t)r * n_in;
        float *d = (float *)xp + (size_t)r * n16;
        for (int i = 0; i < n16; i += 2) {
            d[i / 16 * 16 + i % 16 / 2] = i < n_in ? xr[i] : 0;
            d[i / 16 * 16 + 8 + i % 16 / 2] = i + 1 < n_in ? xr[i + 1] : 0;
        }
    }
}

/* Lane p of the result is the sum of v[p < 4 ? 2p : 2(p − 4) + 1]'s 8 lanes, each by the same
 * tree ((l + l⁺⁴) + (l⁺² + l⁺⁶)) + ((l⁺¹ + l⁺⁵) + (l⁺³ + l⁺⁷)). */
static inline __attribute__((always_inline)) __m256 hsum8(const __m256 *v) {
    __m256 t[4], u[2];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        t[j] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * j], v[2 * j + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * j], v[2 * j + 1], 0x31));
#pragma GCC unroll 2
    for (int j = 0; j < 2; j++)
        u[j] = _mm256_add_ps(_mm256_shuffle_ps(t[2 * j], t[2 * j + 1], 0x44),
                             _mm256_shuffle_ps(t[2 * j], t[2 * j + 1], 0xee));
    return _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], 0x88), _mm256_shuffle_ps(u[0], u[1], 0xdd));
}

/* acc[a][b] += (X row a)·(W row b) over one block of 16 inputs (w: 16 bf16 of each W row). */
static inline __attribute__((always_inline)) void step(int R, __m256 acc[][2], const __m256i *w,
                                                       const float *xa, size_t xs) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256 we[2], wo[2];
#pragma GCC unroll 2
    for (int b = 0; b < 2; b++) {
        we[b] = _mm256_castsi256_ps(_mm256_slli_epi32(w[b], 16));
        wo[b] = _mm256_castsi256_ps(_mm256_and_si256(w[b], hi));
    }
#pragma GCC unroll 4
    for (int a = 0; a < R; a++, xa += xs) {
        const __m256 xe = _mm256_loadu_ps(xa), xo = _mm256_loadu_ps(xa + 8);
#pragma GCC unroll 2
        for (int b = 0; b < 2; b++) {
            acc[a][b] = _mm256_fmadd_ps(xe, we[b], acc[a][b]);
            acc[a][b] = _mm256_fmadd_ps(xo, wo[b], acc[a][b]);
        }
    }
}

/* Outputs [o, o + nw) (nw ≤ 2; a missing W row repeats row o and is not stored) of X rows
 * [r, r + R). */
static inline __attribute__((always_inline)) void
tile(int R, float *restrict y, int ldy, const uint16_t *restrict w, const float *restrict xp,
     const float *restrict bias, int o, int nw, int r, int n_in) {
    const int nb = n_in / 16, tail = n_in % 16;
    const size_t xs = (size_t)(n_in + 15) / 16 * 16;
    const uint16_t *wr[2] = {w + (size_t)o * n_in, w + (size_t)(o + (nw > 1)) * n_in};
    const float *xr = xp + (size_t)r * xs;
    __m256 acc[TILE_ROWS][2];
#pragma GCC unroll 4
    for (int a = 0; a < R; a++)
        acc[a][0] = acc[a][1] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const __m256i wv[2] = {_mm256_loadu_si256((const __m256i *)(wr[0] + (size_t)i * 16)),
                               _mm256_loadu_si256((const __m256i *)(wr[1] + (size_t)i * 16))};
        if (r == 0) /* the next 2 W rows into L2 while these come in */
            for (int b = 0; b < 2; b++)
                qvk_prefetch_l2((const char *)(wr[b] + 2 * (size_t)n_in + (size_t)i * 16), 32);
        step(R, acc, wv, xr + (size_t)i * 16, xs);
    }
    if (tail) {
        uint16_t t[2][16] = {{0}};
        memcpy(t[0], wr[0] + (size_t)nb * 16, (size_t)tail * 2);
        memcpy(t[1], wr[1] + (size_t)nb * 16, (size_t)tail * 2);
        const __m256i wv[2] = {_mm256_loadu_si256((const __m256i *)t[0]),
                               _mm256_loadu_si256((const __m256i *)t[1])};
        step(R, acc, wv, xr + (size_t)nb * 16, xs);
    }
    __m256 v[8];
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) /* slot of row a, W row b: lane q = 2a + b */
        v[q < 4 ? 2 * q : 2 * (q - 4) + 1] = q / 2 < R ? acc[q / 2][q % 2] : _mm256_setzero_ps();
    float s[8];
    _mm256_storeu_ps(s, hsum8(v));
    for (int a = 0; a < R; a++)
        for (int b = 0; b < nw; b++)
            y[(size_t)(r + a) * ldy + o + b] = bias ? s[2 * a + b] + bias[o + b] : s[2 * a + b];
}

void qvk_gemm_bf16_avx2(float *restrict y, int ldy, const uint16_t *restrict w,
                        const void *restrict xp, const float *restrict bias, int o0, int o1,
                        int n_rows, int n_in) {
    for (int o = o0; o < o1; o += 2) {
        const int nw = o1 - o < 2 ? o1 - o : 2;
        int r = 0;
        for (; r + TILE_ROWS <= n_rows; r += TILE_ROWS)
            tile(TILE_ROWS, y, ldy, w, xp, bias, o, nw, r, n_in);
        switch (n_rows - r) {
        case 3:
            tile(3, y, ldy, w, xp, bias, o, nw, r, n_in);
            break;
        case 2:
            tile(2, y, ldy, w, xp, bias, o, nw, r, n_in);
            break;
        case 1:
            tile(1, y, ldy, w, xp, bias, o, nw, r, n_in);
            break;
        default:
            break;
        }
    }
}

/* 12 independent ymm FMA chains per round (latency 4 × 2 pipes, with room). */
uint64_t qvk_fma_probe_avx2(long n_iter) {
    __m256 a[12];
    const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
#pragma GCC unroll 12
    for (int k = 0; k < 12; k++)
        a[k] = _mm256_set1_ps((float)k);
    for (long i = 0; i < n_iter; i++)
#pragma GCC unroll 12
        for (int k = 0; k < 12; k++)
            a[k] = _mm256_fmadd_ps(a[k], m, c);
    __m256 s = a[0];
    for (int k = 1; k < 12; k++)
        s = _mm256_add_ps(s, a[k]);
    float t[8];
    _mm256_storeu_ps(t, s);
    volatile float sink = t[0];
    (void)sink;
    return (uint64_t)n_iter * 12 * 8;
}
