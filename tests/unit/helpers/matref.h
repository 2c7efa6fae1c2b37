/* matref.h — the double-precision reference the quantized-matvec tests (int8, q4) measure against,
 * and the repeatable random inputs they draw.
 */
#ifndef QV_TEST_MATREF_H
#define QV_TEST_MATREF_H

#include <stdint.h>

/* Largest |y[r] − exact_r| / Σ_i |w_ri·x_i| over the rows, exact_r = bias[r] + Σ_i w_ri·x_i in
 * double with the bf16 weights w [n_out, n_in] widened exactly (absolute error for a zero row). */
double matref_worst_rel_err(const float *y, const uint16_t *w, const float *x, const float *bias,
                            int n_out, int n_in);

/* Uniform in [-1, 1) from the xorshift32 state *s (nonzero): the tests' repeatable inputs. */
float matref_rand(uint32_t *s);

#endif
