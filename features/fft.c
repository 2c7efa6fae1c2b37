/* fft.c — FFTW plans created and destroyed under one process-wide mutex (fft.h says why). The
 * lock covers only planning; executing a plan needs none, so concurrent mel computations do not
 * serialise here.
 */
#include "features/fft.h"

#include <pthread.h>

static pthread_mutex_t g_planner = PTHREAD_MUTEX_INITIALIZER;

fftwf_plan qva_fft_plan_r2c(int n, int howmany, float *in, fftwf_complex *out) {
    int nn = n, bins = n / 2 + 1;
    pthread_mutex_lock(&g_planner);
    fftwf_plan p = fftwf_plan_many_dft_r2c(1, &nn, howmany, in, NULL, 1, n, out, NULL, 1, bins,
                                           FFTW_ESTIMATE);
    pthread_mutex_unlock(&g_planner);
    return p;
}

void qva_fft_destroy(fftwf_plan p) {
    if (!p) return;
    pthread_mutex_lock(&g_planner);
    fftwf_destroy_plan(p);
    pthread_mutex_unlock(&g_planner);
}

fftwf_plan qva_fft_plan_c2r(int n, fftwf_complex *in, float *out) {
    pthread_mutex_lock(&g_planner);
    fftwf_plan p = fftwf_plan_dft_c2r_1d(n, in, out, FFTW_ESTIMATE);
    pthread_mutex_unlock(&g_planner);
    return p;
}
