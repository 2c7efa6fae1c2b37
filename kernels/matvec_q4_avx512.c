/* matvec_q4_avx512.c — q4 rows with VNNI, two 64-groups per step. One 64-byte load holds the
 * packed values of groups g and g+1; masking gives the low nibbles (even elements of g | of g+1)
 * and a 16-bit shift plus mask the high ones (odd elements), so x is re-laid once per call as
 * [even g | even g+1] and [odd g | odd g+1] and two vpdpbusd (nibbles as the unsigned operand)
 * leave g's exact int32 sums in lanes 0–7 and g+1's in 8–15. One f32 FMA per pair scales them by
 * s·xs (two floats spread over the halves); the per-group s·xs and the bias terms b·Σx are
 * computed 16 groups at a time in vectors, not per group in scalar code. Eight rows share each x
 * load, and the next eight (contiguous) are prefetched into L2 as one linear stream, as in
 * matvec_q8_avx512.c (interleaved per-row prefetches into L1 left the kernel waiting on its
 * loads). An odd last group goes through the one-group form (32 bytes broadcast to both halves,
 * upper half shifted by 4). Several vectors (prefill, batched streams) go four rows × up to four
 * vectors per block, each row's nibbles unpacked once for all of them, with per (row, vector) the
 * same operations in the same order: the same bits as one vector at a time.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "kernels/q4_impl.h"

#define G QVK_Q4_GROUP
#define GB (G / 2) /* packed bytes per group */
#define ROWS 8 /* rows per block */

/* 16 bf16 values as f32. */
static inline __m512 bf16x16(const uint16_t *p) {
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

/* The first n (< 16) bf16 values as f32, the rest 0. */
static inline __m512 bf16xn(const uint16_t *p, int n) {
    __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1), p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

/* cs[g] = s[g]·xs[g] for one row's n_g groups; returns Σ_g b[g]·xsum[g] as a vector. */
static inline __m512 row_scales(float *restrict cs, const uint16_t *s, const uint16_t *b,
                                const float *xs, const float *xsum, int n_g) {
    __m512 c = _mm512_setzero_ps();
    int g = 0;
    for (; g + 16 <= n_g; g += 16) {
        _mm512_store_ps(cs + g, _mm512_mul_ps(bf16x16(s + g), _mm512_loadu_ps(xs + g)));
        c = _mm512_fmadd_ps(bf16x16(b + g), _mm512_loadu_ps(xsum + g), c);
    }
    if (g < n_g) {
        const __mmask16 k = (__mmask16)((1u << (n_g - g)) - 1);
        _mm512_mask_storeu_ps(cs + g, k,
                              _mm512_mul_ps(bf16xn(s + g, n_g - g), _mm512_maskz_loadu_ps(k, xs + g)));
        c = _mm512_fmadd_ps(bf16xn(b + g, n_g - g), _mm512_maskz_loadu_ps(k, xsum + g), c);
    }
    return c;
}

/* The scales and biases of rows [r, r + n) into L2, a block ahead of row_scales: they are two
 * streams of their own (MLX stores them as separate tensors), ~1/16 of the packed bytes each,
 * which the hardware prefetcher did not follow; without this the loads of row_scales were ~15 %
 * of the kernel's samples in a 1.7B 4-bit run. Clipped at the matrix's last row. */
static inline __attribute__((always_inline)) void prefetch_sb(const qvk_q4_mv *mv, int r, int n,
                                                              int n_g) {
    if (r + n > mv->n_out) n = mv->n_out - r;
    if (n <= 0) return;
    const size_t o = (size_t)r * n_g, len = (size_t)n * n_g * 2;
    for (size_t l = 0; l < len; l += 64) {
        __builtin_prefetch((const char *)(mv->s + o) + l, 0, 2);
        __builtin_prefetch((const char *)(mv->b + o) + l, 0, 2);
    }
}

/* [cs[0] ×8 | cs[1] ×8] */
static inline __m512 pair_scale(const float *cs) {
    const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m128 two = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)cs));
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(two));
}

/* One group's int32 sums (16 lanes), the one-group form. */
static inline __m512i dot_one(const uint8_t *p, __m512i x) {
    const __m512i shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
    v = _mm512_and_si512(_mm512_srlv_epi64(v, shift), _mm512_set1_epi8(15));
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), v, x);
}

/* Groups g and g+1's int32 sums (lanes 0–7 and 8–15). */
static inline __m512i dot_pair(const uint8_t *p, __m512i xe, __m512i xo) {
    const __m512i m = _mm512_set1_epi8(15);
    __m512i v = _mm512_loadu_si512((const void *)p);
    __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, m), xe);
    return _mm512_dpbusd_epi32(d, _mm512_and_si512(_mm512_srli_epi16(v, 4), m), xo);
}

/* NR rows from r through the pair layout xp (and xlast, an odd last group); pf: prefetch the
 * next block (the first x of a batch only: the others find it in cache). */
static inline __attribute__((always_inline)) void
rows_block(int NR, const qvk_q4_mv *mv, const int8_t *restrict xp, __m512i xlast,
           const float *restrict xs, const float *restrict xsum, int r, int n_in, int pf) {
    const int n_g = n_in / G, n_p = n_g / 2;
    const size_t rb = (size_t)n_in / 2; /* bytes per row */
    const uint8_t *q0 = mv->q + (size_t)r * rb;
    const char *next = (const char *)(q0 + (size_t)NR * rb);
    _Alignas(64) float cs[ROWS][QVK_Q4_MAX_IN / G];
    __m512 f[ROWS], c[ROWS];
    if (NR > 1 && pf) prefetch_sb(mv, r + NR, NR, n_g);
#pragma GCC unroll 8
    for (int k = 0; k < NR; k++) {
        c[k] = row_scales(cs[k], mv->s + (size_t)(r + k) * n_g, mv->b + (size_t)(r + k) * n_g, xs,
                          xsum, n_g);
        f[k] = _mm512_setzero_ps();
    }
    for (int p = 0; p < n_p; p++) {
        if (NR > 1 && pf) qvk_prefetch_l2(next + (size_t)p * NR * 2 * GB, NR * 2 * GB);
        const __m512i xe = _mm512_load_si512((const void *)(xp + 2 * p * G));
        const __m512i xo = _mm512_load_si512((const void *)(xp + 2 * p * G + G));
#pragma GCC unroll 8
        for (int k = 0; k < NR; k++) {
            __m512i d = dot_pair(q0 + k * rb + (size_t)p * 2 * GB, xe, xo);
            f[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), pair_scale(cs[k] + 2 * p), f[k]);
        }
    }
    if (n_g & 1)
#pragma GCC unroll 8
        for (int k = 0; k < NR; k++) {
            __m512i d = dot_one(q0 + k * rb + (size_t)(n_g - 1) * GB, xlast);
            f[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(cs[k][n_g - 1]), f[k]);
        }
#pragma GCC unroll 8
    for (int k = 0; k < NR; k++) {
        const float y = _mm512_reduce_add_ps(_mm512_add_ps(f[k], c[k]));
        mv->y[r + k] = mv->bias ? y + mv->bias[r + k] : y;
    }
}

void qvk_q4_pair_layout_avx512(int8_t *restrict xq, int n_x, int n_in) {
    const int n_g = n_in / G;
    for (int k = 0; k < n_x; k++)
        for (int p = 0; p < n_g / 2; p++) {
            int8_t *x = xq + (size_t)k * n_in + 2 * p * G;
            __m512i a = _mm512_load_si512((const void *)x);
            __m512i c = _mm512_load_si512((const void *)(x + G));
            _mm512_store_si512((void *)x, _mm512_shuffle_i64x2(a, c, 0x44));
            _mm512_store_si512((void *)(x + G), _mm512_shuffle_i64x2(a, c, 0xee));
        }
}

/* NR rows × NX vectors from row r (the prefill, batched streams): each row's nibbles are
 * unpacked once per pair of groups for all NX vectors. Per (row, vector) the operations and their
 * order are rows_block's (the same row_scales, dot_pair, FMA chain and reduction), so each result
 * is the one-vector kernel's bits. cs: [NR·NX][QVK_Q4_MAX_IN / G], 64-byte aligned. */
static inline __attribute__((always_inline)) void
block_nx(int NR, int NX, const qvk_q4_mv *mv, const int8_t *restrict xp, const __m512i *xlast,
         const float *restrict xs, const float *restrict xsum, int r, int n_in, float *restrict cs) {
    enum { MG = QVK_Q4_MAX_IN / G };
    const int n_g = n_in / G, n_p = n_g / 2;
    const size_t rb = (size_t)n_in / 2;
    const uint8_t *q0 = mv->q + (size_t)r * rb;
    const char *next = (const char *)(q0 + (size_t)NR * rb);
    const __m512i m = _mm512_set1_epi8(15);
    __m512 f[4][4], c[4][4];
    if (NR > 1) prefetch_sb(mv, r + NR, NR, n_g);
#pragma GCC unroll 4
    for (int k = 0; k < NR; k++)
#pragma GCC unroll 4
        for (int x = 0; x < NX; x++) {
            c[k][x] = row_scales(cs + (k * NX + x) * MG, mv->s + (size_t)(r + k) * n_g,
                                 mv->b + (size_t)(r + k) * n_g, xs + (size_t)x * n_g,
                                 xsum + (size_t)x * n_g, n_g);
            f[k][x] = _mm512_setzero_ps();
        }
    for (int p = 0; p < n_p; p++) {
        if (NR > 1) qvk_prefetch_l2(next + (size_t)p * NR * 2 * GB, NR * 2 * GB);
#pragma GCC unroll 4
        for (int k = 0; k < NR; k++) {
            const __m512i v = _mm512_loadu_si512((const void *)(q0 + k * rb + (size_t)p * 2 * GB));
            const __m512i lo = _mm512_and_si512(v, m);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    #pragma GCC unroll 4
        for (int x = 0; x < NX; x++) {
                const int8_t *xx = xp + (size_t)x * n_in + 2 * p * G;
                __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo,
                                                _mm512_load_si512((const void *)xx));
                d = _mm512_dpbusd_epi32(d, hi, _mm512_load_si512((const void *)(xx + G)));
                f[k][x] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d),
                                          pair_scale(cs + (k * NX + x) * MG + 2 * p), f[k][x]);
            }
        }
    }
    if (n_g & 1)
    #pragma GCC unroll 4
    for (int k = 0; k < NR; k++)
    #pragma GCC unroll 4
        for (int x = 0; x < NX; x++) {
                __m512i d = dot_one(q0 + k * rb + (size_t)(n_g - 1) * GB, xlast[x]);
                f[k][x] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d),
                                          _mm512_set1_ps(cs[(k * NX + x) * MG + n_g - 1]), f[k][x]);
            }
#pragma GCC unroll 4
    for (int k = 0; k < NR; k++)
#pragma GCC unroll 4
        for (int x = 0; x < NX; x++) {
            const float y = _mm512_reduce_add_ps(_mm512_add_ps(f[k][x], c[k][x]));
            mv->y[(size_t)x * mv->n_out + r + k] = mv->bias ? y + mv->bias[r + k] : y;
        }
}

/* Rows [r0, r1) for NX (1..4) vectors: four rows at a time, then one. */
static inline __attribute__((always_inline)) void
blocks(int NX, const qvk_q4_mv *mv, const int8_t *restrict xp, const __m512i *xlast,
       const float *restrict xs, const float *restrict xsum, int r0, int r1, int n_in,
       float *restrict cs) {
    int r = r0;
    for (; r + 4 <= r1; r += 4)
        block_nx(4, NX, mv, xp, xlast, xs, xsum, r, n_in, cs);
    for (; r < r1; r++)
        block_nx(1, NX, mv, xp, xlast, xs, xsum, r, n_in, cs);
}

/* One vector: eight rows at a time (the decode path). Several: block_nx, four rows × up to four
 * vectors per block. */
void qvk_q4_rows_batch_avx512(const qvk_q4_mv *mv, const int8_t *restrict xp,
                              const float *restrict xs, const float *restrict xsum, int n_x, int r0,
                              int r1, int n_in) {
    const int n_g = n_in / G;
    __m512i xlast[QVK_Q4_BATCH_MAX_X];
    for (int k = 0; k < n_x; k++)
        xlast[k] = n_g & 1 ? _mm512_load_si512((const void *)(xp + (size_t)k * n_in + (n_g - 1) * G))
                           : _mm512_setzero_si512();
    if (n_x == 1) {
        int r = r0;
        for (; r + ROWS <= r1; r += ROWS)
            rows_block(ROWS, mv, xp, xlast[0], xs, xsum, r, n_in, 1);
        for (; r < r1; r++)
            rows_block(1, mv, xp, xlast[0], xs, xsum, r, n_in, 0);
        return;
    }
    _Alignas(64) float cs[4 * 4 * (QVK_Q4_MAX_IN / G)];
    for (int x0 = 0; x0 < n_x; x0 += 4) {
        qvk_q4_mv m = *mv;
        m.y = mv->y + (size_t)x0 * mv->n_out;
        const int8_t *xq = xp + (size_t)x0 * n_in;
        const float *xs_ = xs + (size_t)x0 * n_g, *xsum_ = xsum + (size_t)x0 * n_g;
        const __m512i *xl = xlast + x0;
        switch (n_x - x0 < 4 ? n_x - x0 : 4) {
        case 1: blocks(1, &m, xq, xl, xs_, xsum_, r0, r1, n_in, cs); break;
        case 2: blocks(2, &m, xq, xl, xs_, xsum_, r0, r1, n_in, cs); break;
        case 3: blocks(3, &m, xq, xl, xs_, xsum_, r0, r1, n_in, cs); break;
        default: blocks(4, &m, xq, xl, xs_, xsum_, r0, r1, n_in, cs); break;
        }
    }
}
void qvk_q4_rows_avx512(const qvk_q4_mv *mv, const int8_t *restrict xq, const float *restrict xs,
                        const float *restrict xsum, int r0, int r1, int n_in) {
    _Alignas(64) int8_t xp[QVK_Q4_MAX_IN];
    memcpy(xp, xq, (size_t)n_in);
    qvk_q4_pair_layout_avx512(xp, 1, n_in);
    qvk_q4_rows_batch_avx512(mv, xp, xs, xsum, 1, r0, r1, n_in);
}
