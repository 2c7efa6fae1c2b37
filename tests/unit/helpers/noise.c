/* noise.c — white Gaussian noise at a given SNR (noise.h). */
#include "tests/unit/helpers/noise.h"

#include <math.h>

void add_white_noise(const float *x, float *y, int64_t n, double snr_db) {
    add_swinging_noise(x, y, n, snr_db, 0.0, 0);
}

void add_swinging_noise(const float *x, float *y, int64_t n, double snr_db, double swing_db,
                        int64_t period) {
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) e += (double)x[i] * x[i];
    const double sd = n > 0 ? sqrt(e / (double)n / pow(10.0, snr_db / 10.0)) : 0.0;
    const double r = pow(10.0, swing_db / 10.0); /* loud / quiet power; their mean is 1 */
    const double loud = sqrt(2.0 * r / (1.0 + r)), quiet = sqrt(2.0 / (1.0 + r));
    uint64_t s = 12345;
    for (int64_t i = 0; i < n; i++) {
        double u1 = (double)((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 11);
        double u2 = (double)((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 11);
        u1 = u1 * 0x1.0p-53 + 1e-300, u2 *= 0x1.0p-53;
        const double g = period > 0 && (i / period) % 2 ? quiet : loud;
        y[i] = (float)(x[i] + g * sd * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
    }
}
