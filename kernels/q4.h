/* q4.h — 4-bit affine weight matvecs for the decode path (prefix qvk_q4_), MLX's layout.
 *
 * Weights (mx.quantize, mode "affine", group 64, bits 4): per row, groups of 64 values each with
 * a scale s and a bias b, w ≈ s·q + b with q in 0..15; q packed 8 per little-endian uint32, low
 * nibble first, so byte k of a group holds q[2k] (low) and q[2k+1] (high): 0.5625 bytes a weight
 * with s, b in bf16 (as MLX stores them for a bf16 model; read from the mmap as they are). Activations: quantized per call to int8 per 64-group (scale xs) and stored
 * de-interleaved (32 even, then 32 odd elements) so the nibbles meet their x without shuffles;
 * y = Σ_g s·xs·(Σ q·xq) + b·Σx, the integer part exact (VNNI vpdpbusd / AVX2 maddubs / C). Rows
 * are handed to the pool threads in chunks as for int8: bit-identical for any thread count.
 */
#ifndef QV_Q4_H
#define QV_Q4_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define QVK_Q4_GROUP 64     /* n_in must be a multiple of it */
#define QVK_Q4_MAX_IN 16384 /* x is prepared on the caller's stack */

/* One row of n_in values to q4: packed q[n_in / 2], bf16 s and b[n_in / 64]. s = (max − min)/15
 * and b = min, both rounded to bf16 before q = clamp(round((w − b)/s), 0, 15). n_in a multiple of
 * QVK_Q4_GROUP. */
void qvk_q4_quantize_row(uint8_t *restrict q, uint16_t *restrict s, uint16_t *restrict b,
                         const float *restrict w, int n_in);
/* Every row of a bf16 matrix through qvk_q4_quantize_row, rows split over the pool (q row stride
 * n_in / 2 bytes, s and b row stride n_in / 64). -1 (nothing written) when n_in is not a multiple
 * of QVK_Q4_GROUP or exceeds QVK_Q4_MAX_IN. */
int qvk_q4_quantize_bf16(qvk_pool *pool, uint8_t *restrict q, uint16_t *restrict s,
                         uint16_t *restrict b, const uint16_t *restrict w, int n_out, int n_in);
/* dst[n_rows, n_in] = s·q + b (the prefill path widens q4 matrices with it). */
void qvk_q4_dequantize(float *restrict dst, const uint8_t *restrict q, const uint16_t *restrict s,
                       const uint16_t *restrict b, size_t n_rows, int n_in);

typedef struct {
    float *y;          /* [n_out] */
    const uint8_t *q;  /* [n_out, n_in / 2] */
    const uint16_t *s; /* [n_out, n_in / 64] group scales, bf16 */
    const uint16_t *b; /* [n_out, n_in / 64] group biases, bf16 */
    const float *bias; /* [n_out] output bias or NULL */
    int n_out;
} qvk_q4_mv;

/* y = W·x (+ bias) for several q4 matrices sharing x[n_in] (QKV, gate/up) in one dispatch. */
void qvk_q4_matvec_multi(qvk_pool *pool, const float *restrict x, int n_in, const qvk_q4_mv *mv,
                         int n_mv);

/* Several vectors x [n_x, n_in] through the same matrices, each mv.y being [n_x, n_out] (the
 * prefill's linears, the batched frame step): each x_k prepared on its own, every y_k
 * bit-identical to qvk_q4_matvec_multi of x_k alone; a block of rows is read from memory once
 * for up to QVK_Q4_BATCH_MAX_X vectors. scratch: qvk_q4_batch_scratch(n_x, n_in) bytes, 64-byte
 * aligned; or NULL, then the vectors are prepared on the stack QVK_Q4_BATCH_MAX_IN bytes at a
 * time (the matrices read once per such share). n_mv <= 4. */
#define QVK_Q4_BATCH_MAX_IN 65536
#define QVK_Q4_BATCH_MAX_X 16
size_t qvk_q4_batch_scratch(int n_x, int n_in);
void qvk_q4_matvec_batch(qvk_pool *pool, const float *restrict x, int n_x, int n_in,
                         const qvk_q4_mv *mv, int n_mv, void *scratch);

/* The pieces, for tests: x -> xq[n_in] (de-interleaved int8, 64-byte aligned), xs and
 * xsum[n_in / 64]; one row
 * range through the variant "scalar", "avx2" or "avx512" (NULL = the one in use), -1 if that
 * variant is unknown or unsupported here. */
void qvk_q4_prepare_x(int8_t *restrict xq, float *restrict xs, float *restrict xsum,
                      const float *restrict x, int n_in);
int qvk_q4_rows(const char *variant, const qvk_q4_mv *mv, const int8_t *xq, const float *xs,
                const float *xsum, int r0, int r1, int n_in);

#endif
