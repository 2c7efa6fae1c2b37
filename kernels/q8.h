/* q8.h — int8 weight matvecs for the decode path (prefix qvk_q8_): half the bytes of bf16.
 *
 * Weights: int8 per element, one f32 scale per row (absmax / 127, symmetric, quantized once at
 * load). Activations: quantized per call to int8 in groups of QVK_Q8_GROUP with one f32 scale per
 * group, so an outlier only coarsens its own group. Dot products are exact int32 per group (VNNI
 * vpdpbusd on AVX-512, maddubs on AVX2, plain C otherwise), then scaled and summed in f32. Rows
 * are split across the pool as in kernels.h, so results are bit-identical for any thread count.
 */
#ifndef QV_Q8_H
#define QV_Q8_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define QVK_Q8_GROUP 128 /* activation group; n_in must be a multiple of it */

/* q[n_out, n_in] = round(w / s_r), s_r = max|w[r, :]| / 127 (0 for an all-zero row); rows split
 * over the pool. Returns -1 (nothing written) when n_in is not a multiple of QVK_Q8_GROUP. */
int qvk_q8_quantize_bf16(qvk_pool *pool, int8_t *restrict q, float *restrict scale,
                         const uint16_t *restrict w, int n_out, int n_in);

/* The same for several matrices in one pool dispatch (a model's at session start: rows are
 * handed out in ~256 KB chunks, one pass per row while it is in L1). -1 (nothing written) if any
 * n_in is not a multiple of QVK_Q8_GROUP or above QVK_Q8_MAX_IN. */
typedef struct {
    int8_t *q;              /* [n_out, n_in] */
    float *scale;           /* [n_out] */
    const uint16_t *w;      /* [n_out, n_in] bf16 */
    int n_out, n_in;
} qvk_q8_quant;
int qvk_q8_quantize_multi(qvk_pool *pool, const qvk_q8_quant *m, int n);

typedef struct {
    float *y;           /* [n_out] */
    const int8_t *q;    /* [n_out, n_in] */
    const float *scale; /* [n_out] */
    const float *bias;  /* [n_out] or NULL */
    int n_out;
} qvk_q8_mv;

/* y = W·x (+ bias) for several int8 matrices sharing x[n_in] (QKV, gate/up) in one dispatch;
 * x is quantized once on the caller's stack (n_in <= QVK_Q8_MAX_IN). */
#define QVK_Q8_MAX_IN 16384
void qvk_q8_matvec_multi(qvk_pool *pool, const float *restrict x, int n_in, const qvk_q8_mv *mv,
                         int n_mv);
/* Several vectors x [n_x, n_in] through the same matrices, each mv.y being [n_x, n_out] (the
 * batched frame step, kernels.h qvk_matvec_bf16_batch): each x_k quantized on its own, every y_k
 * bit-identical to qvk_q8_matvec_multi of x_k alone. n_x·n_in <= QVK_Q8_BATCH_MAX_IN. */
#define QVK_Q8_BATCH_MAX_IN 65536
void qvk_q8_matvec_batch(qvk_pool *pool, const float *restrict x, int n_x, int n_in,
                         const qvk_q8_mv *mv, int n_mv);

/* The pieces, for tests: x -> int8 groups (xq[n_in], xs[n_in / QVK_Q8_GROUP]); and one row range
 * of one matrix through the variant "scalar", "avx2" or "avx512" (NULL = the one in use).
 * qvk_q8_rows returns -1 if that variant is unknown or unsupported here. */
void qvk_q8_quantize_x(int8_t *restrict xq, float *restrict xs, const float *restrict x, int n_in);
int qvk_q8_rows(const char *variant, float *restrict y, const int8_t *restrict q,
                const float *restrict scale, const int8_t *restrict xq, const float *restrict xs,
                const float *restrict bias, int r0, int r1, int n_in);

#endif
