/* test_stretch.c — speed (features/stretch.c, qv_synth_request.speed): the output lasts exactly
 * round(n / speed) samples, whatever the block sizes; a voiced tone keeps its pitch (F0 by
 * autocorrelation within 2 %) and its spectral centroid (within 10 %) from 0.25x to 4x; a
 * synthesis at speed 2 is half as long as at 1 with its centroid kept, streamed or whole; speeds
 * outside 0.25..4 are refused.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "features/features.h"
#include "include/qvoice.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"

typedef struct {
    float *x;
    int64_t n, cap;
} buf;

static int collect(void *user, const float *x, int n) {
    buf *b = user;
    test_pcm_append(&b->x, &b->n, &b->cap, x, n);
    return 0;
}

/* 3 s of a 180 Hz voice-like tone: 6 harmonics falling off, a slow loudness swell. */
static float *voiced(int64_t n) {
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) {
        const double t = (double)i / QV_SAMPLE_RATE_HZ;
        double v = 0;
        for (int h = 1; h <= 6; h++)
            v += sin(2 * M_PI * 180.0 * h * t) / h;
        x[i] = (float)(0.2 * v * (0.6 + 0.4 * sin(2 * M_PI * 1.5 * t)));
    }
    return x;
}

/* F0 in Hz of x's middle 0.2 s: the autocorrelation's highest peak in 70..500 Hz. */
static double f0(const float *x, int64_t n) {
    const int64_t w = QV_SAMPLE_RATE_HZ / 5, at = n / 2 - w / 2;
    int best = 0;
    double top = -1;
    for (int lag = QV_SAMPLE_RATE_HZ / 500; lag <= QV_SAMPLE_RATE_HZ / 70; lag++) {
        double s = 0;
        for (int64_t i = 0; i < w; i++)
            s += (double)x[at + i] * x[at + i + lag];
        if (s > top) top = s, best = lag;
    }
    return (double)QV_SAMPLE_RATE_HZ / best;
}

/* Spectral centroid in Hz of x: a Hann-windowed DFT of 2048 samples every 4096, averaged by
 * magnitude (bins every 2, to 12 kHz). */
static double centroid(const float *x, int64_t n) {
    const int w = 2048;
    double num = 0, den = 0;
    for (int64_t at = 0; at + w <= n; at += 2 * w)
        for (int k = 1; k < w / 2; k += 2) {
            double re = 0, im = 0;
            for (int i = 0; i < w; i++) {
                const double h = 0.5 - 0.5 * cos(2 * M_PI * i / (w - 1));
                re += h * x[at + i] * cos(2 * M_PI * k * i / w);
                im -= h * x[at + i] * sin(2 * M_PI * k * i / w);
            }
            const double mag = sqrt(re * re + im * im);
            num += mag * k * QV_SAMPLE_RATE_HZ / w;
            den += mag;
        }
    return den > 0 ? num / den : 0;
}

/* x[n] stretched by speed, given in blocks of block samples. */
static buf stretch(const float *x, int64_t n, double speed, int64_t block) {
    buf b = {0};
    qva_stretch *t = qva_stretch_new(speed);
    assert_non_null(t);
    for (int64_t i = 0; i < n; i += block) {
        const int64_t k = n - i < block ? n - i : block;
        assert_int_equal(qva_stretch_run(t, x + i, k, i + k == n, collect, &b), 0);
    }
    qva_stretch_free(t);
    return b;
}

static void test_tone(void **st) {
    (void)st;
    const int64_t n = 3 * QV_SAMPLE_RATE_HZ;
    float *x = voiced(n);
    const double f_in = f0(x, n), c_in = centroid(x, n);
    assert_true(fabs(f_in - 180) < 2);
    const double speeds[] = {0.25, 0.5, 1.5, 2, 4};
    for (size_t i = 0; i < sizeof speeds / sizeof *speeds; i++) {
        buf b = stretch(x, n, speeds[i], 4800);
        const double f = f0(b.x, b.n), c = centroid(b.x, b.n);
        printf("  speed %.2f: %lld -> %lld samples, F0 %.1f Hz (in %.1f), centroid %.0f Hz (in "
               "%.0f)\n",
               speeds[i], (long long)n, (long long)b.n, f, f_in, c, c_in);
        assert_int_equal(b.n, llround((double)n / speeds[i]));
        assert_true(fabs(f / f_in - 1) < 0.02);
        assert_true(fabs(c / c_in - 1) < 0.10);
        free(b.x);
    }
    /* the same stretch fed one small block at a time (a stream) has the same length */
    buf a = stretch(x, n, 2, n), s = stretch(x, n, 2, 333);
    assert_int_equal(a.n, s.n);
    free(a.x), free(s.x), free(x);
    assert_null(qva_stretch_new(0.2));
    assert_null(qva_stretch_new(4.5));
    assert_null(qva_stretch_new(NAN));
}

/* One synthesis on tiny-cv at speed, streamed (whole = 0) or whole chunks. */
static enum qv_status say(qv_model *m, double speed, int whole, buf *out) {
    qv_params p = qv_model_params(m);
    p.seed = 5, p.max_frames = 60, p.n_threads = 1;
    qv_synth *s;
    assert_int_equal(qv_synth_new(&s, m, &p), QV_OK);
    qv_synth_request r = qv_synth_default_request();
    r.text = "A sentence to speak at some speed, and a little more of it.";
    r.speaker = "serena";
    r.speed = speed;
    r.whole_chunks = whole;
    memset(out, 0, sizeof *out);
    enum qv_status rc = qv_synth_run(s, &r, collect, out, NULL);
    qv_synth_free(s);
    return rc;
}

static void test_synth(void **st) {
    (void)st;
    qv_model *m = test_model_load("tiny-cv");
    buf one, two, two_stream, bad;
    assert_int_equal(say(m, 1, 1, &one), QV_OK);
    assert_int_equal(say(m, 2, 1, &two), QV_OK);
    assert_int_equal(say(m, 2, 0, &two_stream), QV_OK);
    const double c1 = centroid(one.x, one.n), c2 = centroid(two.x, two.n);
    printf("  tiny-cv: %lld samples at 1x, %lld at 2x (%lld streamed); centroid %.0f / %.0f Hz\n",
           (long long)one.n, (long long)two.n, (long long)two_stream.n, c1, c2);
    assert_true(one.n > QV_SAMPLE_RATE_HZ);
    assert_int_equal(two.n, llround(one.n / 2.0));
    assert_int_equal(two_stream.n, two.n);
    assert_true(fabs(c2 / c1 - 1) < 0.15);
    assert_int_equal(say(m, 4.5, 1, &bad), QV_E_INVALID);
    assert_non_null(strstr(qv_last_error(), "speed 4.5"));
    assert_int_equal(say(m, 0, 1, &bad), QV_E_INVALID);
    free(one.x), free(two.x), free(two_stream.x), free(bad.x);
    qv_model_free(m);
}

QVT_MAIN(NULL, NULL, test_tone, test_synth)
