/* test_fft.c — features/fft.c, the one owner of FFTW planning. FFTW's planner calls are wrapped
 * here (the test defines them; each forwards to libfftw3f through RTLD_NEXT) to count how many run
 * at once and to hold each one open a little, so an unserialised planner shows deterministically
 * rather than as rare heap corruption. N_THREADS threads each create, run and free mel contexts
 * N_ITERS times: no two planner calls overlap, and every log-mel is the bits of one made alone.
 */
#include <dlfcn.h>
#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "features/features.h"
#include "tests/unit/helpers/run.h"

#define N_THREADS 4
#define N_ITERS 40
#define N_SAMPLES 4800 /* 0.2 s: 19 frames, one FFT batch */

static atomic_int g_inside, g_overlaps, g_calls;

static void enter(void) {
    if (atomic_fetch_add(&g_inside, 1) > 0) atomic_fetch_add(&g_overlaps, 1);
    atomic_fetch_add(&g_calls, 1);
    nanosleep(&(struct timespec){0, 500000}, NULL); /* widen the window: 0.5 ms */
}

static void leave(void) {
    atomic_fetch_sub(&g_inside, 1);
}

fftwf_plan fftwf_plan_many_dft_r2c(int rank, const int *n, int howmany, float *in,
                                   const int *inembed, int istride, int idist, fftwf_complex *out,
                                   const int *onembed, int ostride, int odist, unsigned flags) {
    fftwf_plan (*real)(int, const int *, int, float *, const int *, int, int, fftwf_complex *,
                       const int *, int, int, unsigned);
    *(void **)&real = dlsym(RTLD_NEXT, "fftwf_plan_many_dft_r2c");
    enter();
    fftwf_plan p = real ? real(rank, n, howmany, in, inembed, istride, idist, out, onembed,
                               ostride, odist, flags)
                        : NULL;
    leave();
    return p;
}

void fftwf_destroy_plan(fftwf_plan p) {
    void (*real)(fftwf_plan);
    *(void **)&real = dlsym(RTLD_NEXT, "fftwf_destroy_plan");
    enter();
    if (real) real(p);
    leave();
}

static float g_x[N_SAMPLES];
static float *g_ref; /* [nf × 128] the log-mel computed alone */
static int g_nf;

typedef struct {
    int mismatches, failures;
} worker;

static void *hammer(void *p) {
    worker *w = p;
    float *mel = malloc(sizeof(float) * (size_t)g_nf * QVA_MEL_BINS);
    for (int i = 0; mel && i < N_ITERS; i++) {
        qva_mel *m = qva_mel_create();
        if (!m || qva_mel_compute(m, mel, g_x, N_SAMPLES))
            w->failures++;
        else if (memcmp(mel, g_ref, sizeof(float) * (size_t)g_nf * QVA_MEL_BINS))
            w->mismatches++;
        qva_mel_free(m);
    }
    if (!mel) w->failures++;
    free(mel);
    return NULL;
}

static void test_concurrent_plans(void **state) {
    (void)state;
    for (int i = 0; i < N_SAMPLES; i++)
        g_x[i] = (float)(0.3 * sin(0.05 * i) + 0.1 * sin(0.31 * i + 1.0));
    g_nf = qva_mel_n_frames(N_SAMPLES);
    assert_true(g_nf > 0);
    g_ref = malloc(sizeof(float) * (size_t)g_nf * QVA_MEL_BINS);
    qva_mel *m = qva_mel_create();
    assert_non_null(m);
    assert_int_equal(qva_mel_compute(m, g_ref, g_x, N_SAMPLES), 0);
    qva_mel_free(m);
    assert_int_equal(atomic_load(&g_calls), 2); /* the wrappers are the ones called */
    pthread_t th[N_THREADS];
    worker w[N_THREADS] = {{0}};
    for (int t = 0; t < N_THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, hammer, &w[t]), 0);
    for (int t = 0; t < N_THREADS; t++)
        pthread_join(th[t], NULL);
    int bad = 0;
    for (int t = 0; t < N_THREADS; t++)
        bad += w[t].mismatches + w[t].failures;
    printf("  %d threads x %d mel contexts: %d planner calls, %d overlapping, %d results differ\n",
           N_THREADS, N_ITERS, atomic_load(&g_calls), atomic_load(&g_overlaps), bad);
    assert_int_equal(atomic_load(&g_overlaps), 0);
    assert_int_equal(bad, 0);
    free(g_ref);
}

QVT_MAIN(NULL, NULL, test_concurrent_plans)
