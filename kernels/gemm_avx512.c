/* gemm_avx512.c — the prefill GEMM (gemm.c) with AVX-512 BF16. Each activation x is split into
 * two bf16 halves, hi = bf16(x) and lo = bf16(x − hi), and both are multiplied with the bf16
 * weights by vdpbf16ps: a product of two bf16 is exact in f32, so the sum is the f32 dot product
 * of W with x up to |x − hi − lo| ≤ 2⁻¹⁶|x| (bf16 rounds to 8 significant bits, twice;
 * measured ≈ 5× the f32 kernels' error on random data, 3e-5 on the goldens' logits, where
 * rounding x to bf16 alone moved them by 2e-2). One vdpbf16ps does the 16 multiply-adds of an
 * f32 FMA at the same rate, without widening W and reading half the bytes.
 *
 * X is packed once per call (gemm_pack: per row, per 32 inputs: 32 hi then 32 lo, zero-padded).
 * A tile is 4 rows of W (output columns) against up to TILE_ROWS rows of X, one 16-lane
 * accumulator per output; after the last input the 16 accumulators of 4 X rows × 4 W rows are
 * summed together (hsum16), each by the same lane tree. An output's arithmetic therefore never
 * depends on the tile it falls in, nor on the thread: bit-identical for any split.
 */
#include <immintrin.h>

#include "kernels/kernels_impl.h"

#define TILE_ROWS 6 /* X rows per tile: 24 accumulators + 4 W + 2 X registers of 32 */

void qvk_gemm_pack_avx512(void *restrict xp, const float *restrict x, int r0, int r1, int n_in) {
    const int nb = (n_in + 31) / 32;
    for (int r = r0; r < r1; r++) {
        const float *xr = x + (size_t)r * n_in;
        uint16_t *d = (uint16_t *)xp + (size_t)r * nb * 64;
        for (int i = 0; i < nb * 32; i += 16) {
            const int left = n_in - i;
            const __mmask16 m = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            const __m512 v = _mm512_maskz_loadu_ps(m, xr + i);
            const __m256bh hi = _mm512_cvtneps_pbh(v);
            const __m512 hf =
                _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)hi), 16));
            uint16_t *db = d + (size_t)(i / 32) * 64 + i % 32;
            _mm256_storeu_si256((__m256i *)db, (__m256i)hi);
            _mm256_storeu_si256((__m256i *)(db + 32),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(v, hf)));
        }
    }
}

/* Lane 4m + i of the result is the sum of v[m + 4i]'s 16 lanes, for every m, i by the same tree:
 * ((l + l⁺⁸) + (l⁺⁴ + l⁺¹²)) over l, then the pairs (0, 2) (1, 3), then their two sums. */
static inline __attribute__((always_inline)) __m512 hsum16(const __m512 *v) {
    __m512 t[8], u[4], s[2];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        t[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xee));
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        u[j] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0xdd));
#pragma GCC unroll 2
    for (int j = 0; j < 2; j++)
        s[j] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * j], u[2 * j + 1], 0x44),
                             _mm512_shuffle_ps(u[2 * j], u[2 * j + 1], 0xee));
    return _mm512_add_ps(_mm512_shuffle_ps(s[0], s[1], 0x88), _mm512_shuffle_ps(s[0], s[1], 0xdd));
}

/* Sums acc[a][b] for a < R (rows r + a) and stores the first nw of each row's 4 outputs. */
static inline __attribute__((always_inline)) void store_group(int R, __m512 acc[][4],
                                                              float *restrict y, int ldy,
                                                              const float *restrict bias, int o,
                                                              int nw, int r) {
    __m512 v[16];
#pragma GCC unroll 16
    for (int s = 0; s < 16; s++)
        v[s] = s % 4 < R ? acc[s % 4][s / 4] : _mm512_setzero_ps(); /* slot a + 4b → lane 4a + b */
    __m512 sum = hsum16(v);
    const __mmask8 m = (__mmask8)((1u << nw) - 1);
    if (bias) sum = _mm512_add_ps(sum, _mm512_broadcast_f32x4(_mm_maskz_loadu_ps(m, bias + o)));
    float *yr = y + (size_t)r * ldy + o;
    _mm_mask_storeu_ps(yr, m, _mm512_castps512_ps128(sum));
    if (R > 1) _mm_mask_storeu_ps(yr + ldy, m, _mm512_extractf32x4_ps(sum, 1));
    if (R > 2) _mm_mask_storeu_ps(yr + 2 * (size_t)ldy, m, _mm512_extractf32x4_ps(sum, 2));
    if (R > 3) _mm_mask_storeu_ps(yr + 3 * (size_t)ldy, m, _mm512_extractf32x4_ps(sum, 3));
}

/* acc[a][b] += (hi + lo of X row a)·(W row b) over one block of 32 inputs. */
static inline __attribute__((always_inline)) void step(int R, __m512 acc[][4], const __m512bh *wv,
                                                       const uint16_t *xa, size_t xs) {
#pragma GCC unroll 8
    for (int a = 0; a < R; a++, xa += xs) {
        const __m512bh xh = (__m512bh)_mm512_loadu_si512(xa);
        const __m512bh xl = (__m512bh)_mm512_loadu_si512(xa + 32);
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++) {
            acc[a][b] = _mm512_dpbf16_ps(acc[a][b], xh, wv[b]);
            acc[a][b] = _mm512_dpbf16_ps(acc[a][b], xl, wv[b]);
        }
    }
}

/* Outputs [o, o + nw) (nw ≤ 4; missing W rows repeat row o and are not stored) of X rows
 * [r, r + R). */
static inline __attribute__((always_inline)) void
tile(int R, float *restrict y, int ldy, const uint16_t *restrict w, const uint16_t *restrict xp,
     const float *restrict bias, int o, int nw, int r, int n_in) {
    const int nb = n_in / 32, tail = n_in % 32;
    const size_t xs = (size_t)(n_in + 31) / 32 * 64;
    const uint16_t *wr[4], *xr = xp + (size_t)r * xs;
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++)
        wr[b] = w + (size_t)(o + (b < nw ? b : 0)) * n_in;
    __m512 acc[TILE_ROWS][4];
#pragma GCC unroll 8
    for (int a = 0; a < R; a++)
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++)
            acc[a][b] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __m512bh wv[4];
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++)
            wv[b] = (__m512bh)_mm512_loadu_si512(wr[b] + (size_t)i * 32);
        if (r == 0) /* the next 4 W rows into L2 while these come in (95 % vs 87 % of peak) */
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++)
                qvk_prefetch_l2((const char *)(wr[b] + 4 * (size_t)n_in + (size_t)i * 32), 64);
        step(R, acc, wv, xr + (size_t)i * 64, xs);
    }
    if (tail) {
        const __mmask32 m = (__mmask32)((1u << tail) - 1);
        __m512bh wv[4];
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++)
            wv[b] = (__m512bh)_mm512_maskz_loadu_epi16(m, wr[b] + (size_t)nb * 32);
        step(R, acc, wv, xr + (size_t)nb * 64, xs);
    }
    store_group(R < 4 ? R : 4, acc, y, ldy, bias, o, nw, r);
    if (R > 4) store_group(R - 4, acc + 4, y, ldy, bias, o, nw, r + 4);
}

void qvk_gemm_bf16_avx512(float *restrict y, int ldy, const uint16_t *restrict w,
                          const void *restrict xp, const float *restrict bias, int o0, int o1,
                          int n_rows, int n_in) {
    for (int o = o0; o < o1; o += 4) {
        const int nw = o1 - o < 4 ? o1 - o : 4;
        int r = 0;
        for (; r + TILE_ROWS <= n_rows; r += TILE_ROWS)
            tile(TILE_ROWS, y, ldy, w, xp, bias, o, nw, r, n_in);
        switch (n_rows - r) {
        case 5:
            tile(5, y, ldy, w, xp, bias, o, nw, r, n_in);
            break;
        case 4:
            tile(4, y, ldy, w, xp, bias, o, nw, r, n_in);
            break;
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

/* 12 independent zmm FMA chains (latency 4 × the 2 pipes' width, with room) per round. */
uint64_t qvk_fma_probe_avx512(long n_iter) {
    __m512 a[12];
    const __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
#pragma GCC unroll 12
    for (int k = 0; k < 12; k++)
        a[k] = _mm512_set1_ps((float)k);
    for (long i = 0; i < n_iter; i++)
#pragma GCC unroll 12
        for (int k = 0; k < 12; k++)
            a[k] = _mm512_fmadd_ps(a[k], m, c);
    __m512 s = a[0];
    for (int k = 1; k < 12; k++)
        s = _mm512_add_ps(s, a[k]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (uint64_t)n_iter * 12 * 16;
}
