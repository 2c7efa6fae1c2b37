/* q4_impl.h — row kernels of the q4 matvec, one per ISA file (see q4.h for the arithmetic). */
#ifndef QV_Q4_IMPL_H
#define QV_Q4_IMPL_H

#include "kernels/q4.h"

/* mv->y[r] = Σ_g s[r,g]·xs[g]·(Σ_{i in g} q[r,i]·xq[i]) + b[r,g]·xsum[g] (+ bias[r]), r0 <= r < r1. */
typedef void (*qvk_q4_rows_fn)(const qvk_q4_mv *mv, const int8_t *restrict xq,
                               const float *restrict xs, const float *restrict xsum, int r0,
                               int r1, int n_in);

void qvk_q4_rows_scalar(const qvk_q4_mv *mv, const int8_t *restrict xq, const float *restrict xs,
                        const float *restrict xsum, int r0, int r1, int n_in);
void qvk_q4_rows_avx2(const qvk_q4_mv *mv, const int8_t *restrict xq, const float *restrict xs,
                      const float *restrict xsum, int r0, int r1, int n_in);
void qvk_q4_rows_avx512(const qvk_q4_mv *mv, const int8_t *restrict xq, const float *restrict xs,
                        const float *restrict xsum, int r0, int r1, int n_in);

/* The batched AVX-512 form: xp holds n_x prepared vectors (n_in apart) re-laid in place by
 * qvk_q4_pair_layout_avx512 ([even g | even g+1 | odd g | odd g+1] per pair of groups, an odd
 * last group as prepared); y_k = mv->y + k·n_out. n_x <= QVK_Q4_BATCH_MAX_X. */
void qvk_q4_pair_layout_avx512(int8_t *restrict xq, int n_x, int n_in);
void qvk_q4_rows_batch_avx512(const qvk_q4_mv *mv, const int8_t *restrict xp,
                              const float *restrict xs, const float *restrict xsum, int n_x, int r0,
                              int r1, int n_in);

#endif
