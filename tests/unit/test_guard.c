/* test_guard.c — engine/guard on synthetic code streams: budget formula, loops of several
 * periods (and no false alarm on a varied stream), near-silent runs from frame RMS, sticky
 * verdicts and messages.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "engine/guard.h"
#include "tests/unit/helpers/run.h"

static uint32_t rng = 12345;
static int32_t rnd_code(void) {
    rng = rng * 1664525u + 1013904223u;
    return (int32_t)(rng >> 8) % 2048;
}

/* Feeds n frames with c0 from f(t); returns the frame index (0-based) of the first non-OK
 * verdict, or -1. */
static int feed(qve_guard *g, int n, int32_t (*c0_of)(int), float rms) {
    int32_t codes[16];
    for (int t = 0; t < n; t++) {
        for (int k = 0; k < 16; k++)
            codes[k] = rnd_code();
        codes[0] = c0_of(t);
        if (qve_guard_frame(g, codes, rms) != QVE_GUARD_OK) return t;
    }
    return -1;
}

static int32_t c0_random(int t) {
    (void)t;
    return rnd_code();
}
static int32_t c0_const(int t) {
    return t < 10 ? rnd_code() : 7;
}
static int32_t c0_period5(int t) {
    return t < 20 ? rnd_code() : 100 + t % 5;
}
static int32_t c0_period20(int t) {
    return t < 3 ? rnd_code() : 300 + t % 20;
}

static void test_budget(void **state) {
    (void)state;
    qve_guard_params p = qve_guard_default_params();
    assert_int_equal(qve_guard_budget(0, &p), 25);
    assert_int_equal(qve_guard_budget(10, &p), 105);
    p.max_frames = 100;
    assert_int_equal(qve_guard_budget(10, &p), 100);
    qve_guard g;
    qve_guard_init(&g, 10, NULL);
    assert_string_equal(qve_guard_message(&g), "");
    rng = 1;
    int t = feed(&g, 500, c0_random, NAN);
    assert_int_equal(t, 105); /* frames 0..104 are within budget, the 106th is not */
    assert_int_equal(g.verdict, QVE_GUARD_BUDGET);
    printf("  %s\n", qve_guard_message(&g));
    assert_non_null(strstr(qve_guard_message(&g), "frame budget"));
    int32_t codes[16] = {0};
    assert_int_equal(qve_guard_frame(&g, codes, 0.1f), QVE_GUARD_BUDGET); /* sticky */
    assert_string_equal(qve_guard_verdict_name(QVE_GUARD_BUDGET), "budget");
}

/* Feeds c0_of to a fresh guard and expects a loop of the given period, tripped at frame t_trip
 * with its start at loop_start (-1: not checked). */
static void expect_loop(const char *what, int32_t (*c0_of)(int), int period, int loop_start,
                        int t_trip, qve_guard *g) {
    qve_guard_init(g, 1000, NULL);
    int t = feed(g, 2000, c0_of, NAN);
    printf("  %s: frame %d: %s\n", what, t, qve_guard_message(g));
    assert_int_equal(g->verdict, QVE_GUARD_LOOP);
    assert_int_equal(g->loop_period, period);
    assert_int_equal(t, t_trip);
    if (loop_start >= 0) assert_int_equal(g->loop_start, loop_start);
}

static void test_loops(void **state) {
    (void)state;
    qve_guard g;
    /* a constant c0 from frame 10: period 1 over loop_min_frames (38) frames */
    expect_loop("const", c0_const, 1, 10, 10 + 38 - 1, &g);
    /* period 5 from frame 20 */
    expect_loop("period 5", c0_period5, 5, -1, 20 + 38 - 1, &g);
    /* period 20: needs 3 repeats = 60 frames */
    expect_loop("period 20", c0_period20, 20, -1, 3 + 60 - 1, &g);
    assert_non_null(strstr(qve_guard_message(&g), "repeating code loop"));
    /* varied stream (random c0 in 2048 codes) over 2000 frames: no loop */
    qve_guard_init(&g, 1000, NULL);
    rng = 99;
    assert_int_equal(feed(&g, 2000, c0_random, NAN), -1);
    assert_int_equal(g.verdict, QVE_GUARD_OK);
}

static void test_silence(void **state) {
    (void)state;
    qve_guard g;
    int32_t codes[16];
    qve_guard_init(&g, 1000, NULL);
    /* 30 loud frames, then room tone at -45 dBFS: above the absolute -55 but 39 dB under the
     * loudest frame (-6 dBFS) */
    int t, v = QVE_GUARD_OK;
    for (t = 0; t < 200 && v == QVE_GUARD_OK; t++) {
        for (int k = 0; k < 16; k++)
            codes[k] = rnd_code();
        float rms = t < 30 ? 0.5f : (float)pow(10.0, -45.0 / 20.0);
        v = qve_guard_frame(&g, codes, rms);
    }
    printf("  frame %d: %s\n", t - 1, qve_guard_message(&g));
    assert_int_equal(v, QVE_GUARD_SILENCE);
    assert_int_equal(t - 1, 30 + 38 - 1);
    assert_non_null(strstr(qve_guard_message(&g), "near-silence"));
    /* speech pauses shorter than 38 frames reset the run; NAN frames skip the check */
    qve_guard_init(&g, 1000, NULL);
    for (t = 0; t < 600; t++) {
        for (int k = 0; k < 16; k++)
            codes[k] = rnd_code();
        float rms = t % 60 < 25 ? 0.2f : t % 60 < 55 ? 1e-5f : NAN;
        assert_int_equal(qve_guard_frame(&g, codes, rms), QVE_GUARD_OK);
    }
    /* pure digital silence from the start */
    qve_guard_init(&g, 1000, NULL);
    for (t = 0; t < 38; t++) {
        for (int k = 0; k < 16; k++)
            codes[k] = rnd_code();
        v = qve_guard_frame(&g, codes, 0.0f);
    }
    assert_int_equal(v, QVE_GUARD_SILENCE);

    /* the same rule over decoded audio: 1 s of tone, 4 s of -70 dBFS hiss, 1 s of tone */
    enum { SPF = 1920, NF = 75 };
    static float wav[NF * SPF];
    for (int i = 0; i < NF * SPF; i++) {
        int f = i / SPF;
        wav[i] = f < 12 || f >= 62 ? 0.3f * sinf(0.05f * (float)i)
                                   : 3e-4f * (float)((i * 7919) % 13 - 6) / 6.0f;
    }
    qve_guard_init(&g, 1000, NULL);
    assert_int_equal(qve_guard_audio(&g, wav, 0, NF, SPF), QVE_GUARD_SILENCE);
    printf("  audio: %s\n", qve_guard_message(&g));
    assert_int_equal(g.silence_start, 12);
    qve_guard_init(&g, 1000, NULL);
    assert_int_equal(qve_guard_audio(&g, wav, 0, 12 + 37, SPF), QVE_GUARD_OK); /* 2.96 s: fine */
    /* fed in the decoder's blocks (1, 1, 2, 4, 8, ... frames): the same verdict and start */
    qve_guard_init(&g, 1000, NULL);
    int f = 0, v2 = QVE_GUARD_OK;
    for (int nb = 1; f < NF && v2 == QVE_GUARD_OK; nb = nb < 8 && f > 0 ? 2 * nb : nb) {
        int n = f + nb > NF ? NF - f : nb;
        v2 = qve_guard_audio(&g, wav + (size_t)f * SPF, f, n, SPF);
        f += n;
    }
    assert_int_equal(v2, QVE_GUARD_SILENCE);
    assert_int_equal(g.silence_start, 12);
}

QVT_MAIN(NULL, NULL, test_budget, test_loops, test_silence)
