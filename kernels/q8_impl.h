/* q8_impl.h — row kernels of the int8 matvec, one per ISA file (see q8.h for the arithmetic). */
#ifndef QV_Q8_IMPL_H
#define QV_Q8_IMPL_H

#include <stdint.h>

/* y[r] = scale[r] · Σ_g xs[g] · (Σ_{i in g} q[r, i]·xq[i]) (+ bias[r]) for r in [r0, r1). */
typedef void (*qvk_q8_rows_fn)(float *restrict y, const int8_t *restrict q,
                               const float *restrict scale, const int8_t *restrict xq,
                               const float *restrict xs, const float *restrict bias, int r0, int r1,
                               int n_in);

void qvk_q8_rows_scalar(float *restrict y, const int8_t *restrict q, const float *restrict scale,
                        const int8_t *restrict xq, const float *restrict xs,
                        const float *restrict bias, int r0, int r1, int n_in);
void qvk_q8_rows_avx2(float *restrict y, const int8_t *restrict q, const float *restrict scale,
                      const int8_t *restrict xq, const float *restrict xs,
                      const float *restrict bias, int r0, int r1, int n_in);
void qvk_q8_rows_avx512(float *restrict y, const int8_t *restrict q, const float *restrict scale,
                        const int8_t *restrict xq, const float *restrict xs,
                        const float *restrict bias, int r0, int r1, int n_in);

/* y[k·ldy + r] for vectors k < n_x (xq row stride n_in, xs row stride n_in / QVK_Q8_GROUP):
 * the rows kernel for several x at once, each weight load used for all, bit-identical to it.
 * xc: the per-lane corrections of qvk_q8_batch_corr_avx512 for the same xq. */
typedef void (*qvk_q8_rows_batch_fn)(float *restrict y, int ldy, const int8_t *restrict q,
                                     const float *restrict scale, const int8_t *restrict xq,
                                     const int32_t *restrict xc, const float *restrict xs, int n_x,
                                     const float *restrict bias, int r0, int r1, int n_in);
void qvk_q8_rows_batch_avx512(float *restrict y, int ldy, const int8_t *restrict q,
                              const float *restrict scale, const int8_t *restrict xq,
                              const int32_t *restrict xc, const float *restrict xs, int n_x,
                              const float *restrict bias, int r0, int r1, int n_in);
/* xc [n_x, n_in / QVK_Q8_GROUP, 16] for qvk_q8_rows_batch_avx512. */
void qvk_q8_batch_corr_avx512(int32_t *restrict xc, const int8_t *restrict xq, int n_x, int n_in);

/* qvk_q8_quantize_x with AVX-512, byte-identical to the portable loop for finite x. */
void qvk_q8_quantize_x_avx512(int8_t *restrict xq, float *restrict xs, const float *restrict x,
                              int n_in);

/* One bf16 weight row to int8 + scale (n a multiple of 16), byte-identical to the portable path. */
void qvk_q8_quantize_row_avx512(int8_t *restrict q, float *restrict scale,
                                const uint16_t *restrict w, int n);

#endif
