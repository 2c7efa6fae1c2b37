/* fft.h — the one owner of FFTW planning (fft.c). FFTW's planner is not thread-safe: creating or
 * destroying any plan touches process-wide planner state, and only fftwf_execute* on an existing
 * plan may run concurrently (FFTW manual §5.4, "Thread safety"). Every plan of the library is made
 * and destroyed through these two calls, which serialise on one process-wide mutex, so clones,
 * hygiene windows and syntheses may build mel contexts on any threads at once.
 * Included by features/ files only.
 */
#ifndef QV_FEATURES_FFT_H
#define QV_FEATURES_FFT_H

#include <fftw3.h>

/* howmany real transforms of length n, contiguous in in[howmany × n] → out[howmany × (n/2+1)],
 * FFTW_ESTIMATE (in and out are not touched). NULL if FFTW cannot plan it. Thread-safe. */
fftwf_plan qva_fft_plan_r2c(int n, int howmany, float *in, fftwf_complex *out);

/* One inverse real transform of length n, in[n/2+1] → out[n], unnormalised, FFTW_ESTIMATE (it
 * overwrites in when executed). NULL if FFTW cannot plan it. Thread-safe. */
fftwf_plan qva_fft_plan_c2r(int n, fftwf_complex *in, float *out);

/* Destroys a plan from qva_fft_plan_r2c or qva_fft_plan_c2r; NULL is a no-op. Thread-safe. */
void qva_fft_destroy(fftwf_plan p);

#endif
