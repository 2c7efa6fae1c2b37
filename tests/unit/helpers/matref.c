/* matref.c — see matref.h. */
#include <math.h>
#include <stddef.h>

#include "kernels/kernels.h"
#include "tests/unit/helpers/matref.h"

double matref_worst_rel_err(const float *y, const uint16_t *w, const float *x, const float *bias,
                            int n_out, int n_in) {
    double worst = 0;
    for (int r = 0; r < n_out; r++) {
        double exact = bias[r], mag = 0;
        for (int i = 0; i < n_in; i++) {
            double t = (double)qvk_bf16_to_f32_1(w[(size_t)r * n_in + i]) * x[i];
            exact += t, mag += fabs(t);
        }
        double e = mag > 0 ? fabs(y[r] - exact) / mag : fabs(y[r] - exact);
        if (e > worst) worst = e;
    }
    return worst;
}

float matref_rand(uint32_t *s) {
    *s ^= *s << 13, *s ^= *s >> 17, *s ^= *s << 5;
    return (float)(*s >> 8) / 16777216.0f * 2 - 1;
}
