/* noise.h — white Gaussian noise at a given SNR, steady or swinging, the same sequence on every
 * machine: the watermark's "added noise" transformation (test_watermark, bench_watermark
 * --channels).
 */
#ifndef QV_TEST_NOISE_H
#define QV_TEST_NOISE_H

#include <stdint.h>

/* y[i] = x[i] + noise, its power snr_db under x's mean power (seeded LCG, Box-Muller). */
void add_white_noise(const float *x, float *y, int64_t n, double snr_db);
/* The same with noise that comes and goes: its power swing_db louder in the first period samples
 * than in the next, and so on, snr_db under x's mean power on average. */
void add_swinging_noise(const float *x, float *y, int64_t n, double snr_db, double swing_db,
                        int64_t period);

#endif
