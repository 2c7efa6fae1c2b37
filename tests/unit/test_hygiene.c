/* test_hygiene.c — clone/hygiene with generated audio: silence padding trimmed to the 20 ms
 * pre-roll, clipping fraction vs the analytic value, level normalisation and the peak cap, a
 * 2.5 s-voiced clip refused, the cleanest ICL window, transcript plausibility (refusal and
 * fallback), and a second "speaker" found with the tiny synthetic Base model's ECAPA (white
 * noise then a harmonic tone complex: random weights separate these robustly, real voices not).
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

#include "checkpoint/ckpt.h"
#include "tests/unit/helpers/models.h"

#include "features/speech_encoder.h"
#include "clone/hygiene.h"
#include "include/qvoice.h"
#include "tests/unit/helpers/models.h"

#define SR 24000
#define CLIP "tests/audio/en_ohenry_chenevert.wav"

static uint32_t g_rng = 1;
static float noise1(void) { /* uniform in [-1, 1) */
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)(g_rng >> 8) / 8388608.0f - 1.0f;
}

/* "speech": 150 Hz harmonic complex with a syllable envelope that never reaches zero */
static void speech(float *x, int64_t n, float amp, double t0) {
    for (int64_t i = 0; i < n; i++) {
        double t = t0 + (double)i / SR, e = 0.3 + 0.7 * pow(sin(M_PI * 3.0 * t), 2);
        x[i] += (float)(amp * e *
                        (sin(2 * M_PI * 150 * t) + 0.5 * sin(2 * M_PI * 300 * t) +
                         0.25 * sin(2 * M_PI * 450 * t)) /
                        1.75);
    }
}

/* syllables: 200 ms of speech, 100 ms of silence */
static void syllables(float *x, int64_t n, float amp) {
    for (int64_t a = 0; a < n; a += SR * 3 / 10) {
        int64_t len = SR / 5;
        if (a + len > n) len = n - a;
        speech(x + a, len, amp, (double)a / SR);
    }
}

static void test_trim_padding(void **state) {
    (void)state;
    qvc_hygiene_params p = qvc_hygiene_default_params();
    int64_t n = (int64_t)(6.5 * SR);
    float *x = calloc((size_t)n, sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = 1e-4f * noise1();     /* -80 dBFS room tone */
    speech(x + SR, 4 * SR, 0.3f, 0); /* 1.0 .. 5.0 s */
    qvc_trim_report r;
    char err[256];
    assert_int_equal(qvc_trim_silence(&r, x, n, &p, err, sizeof err), 0);
    printf("  kept %.4f-%.4f s (expect 0.98-5.02), voiced %.2f s, threshold %.1f dBFS\n",
           (double)r.start / SR, (double)r.end / SR, r.voiced_seconds, r.threshold_dbfs);
    assert_true(llabs(r.start - (SR - 480)) <= 240);
    assert_true(llabs(r.end - (5 * SR + 480)) <= 240);
    assert_true(fabs(r.voiced_seconds - 4.0) <= 0.02);
    assert_true(fabs(r.lead_trimmed_s - 0.98) <= 0.01 && fabs(r.trail_trimmed_s - 1.48) <= 0.01);
    free(x);

    /* the bundled clip with 1 s of digital silence on both sides */
    qva_audio a;
    assert_int_equal(qva_audio_load(&a, CLIP, 12.0, err, sizeof err), 0);
    n = a.n_samples + 2 * SR;
    x = calloc((size_t)n, sizeof *x);
    memcpy(x + SR, a.samples, (size_t)a.n_samples * sizeof *x);
    assert_int_equal(qvc_trim_silence(&r, x, n, &p, err, sizeof err), 0);
    printf("  clip: cut %.3f s lead, %.3f s tail, %.2f s voiced of %.2f s\n", r.lead_trimmed_s,
           r.trail_trimmed_s, r.voiced_seconds, r.in_seconds);
    assert_true(r.lead_trimmed_s >= 0.98 && r.trail_trimmed_s >= 0.98);
    qvc_trim_report r2; /* trimming again leaves only the pre-roll */
    assert_int_equal(qvc_trim_silence(&r2, x + r.start, r.end - r.start, &p, err, sizeof err), 0);
    assert_true(r2.lead_trimmed_s <= 0.011 && r2.trail_trimmed_s <= 0.011);
    free(x);
    qva_audio_free(&a);

    x = calloc(SR, sizeof *x); /* nothing voiced: refused */
    assert_int_equal(qvc_trim_silence(&r, x, SR, &p, err, sizeof err), -1);
    printf("  %s\n", err);
    assert_non_null(strstr(err, "no speech found"));
    free(x);
}

static void test_clipping_and_level(void **state) {
    (void)state;
    qvc_hygiene_params p = qvc_hygiene_default_params();
    qvc_level_report r;
    char err[256];
    /* a 200 Hz sine of amplitude 1.05 clamped at ±1: clipped where |sin| >= 1/1.05 */
    int64_t n = 5 * SR;
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) {
        double v = 1.05 * sin(2 * M_PI * 200.0 * (double)i / SR + 0.1);
        x[i] = (float)(v > 1 ? 1 : v < -1 ? -1 : v);
    }
    double expect = 1.0 - 2.0 / M_PI * asin(QVA_CLIP_LEVEL / 1.05);
    assert_int_equal(qvc_level_normalize(&r, x, n, &p, err, sizeof err), 0);
    printf("  clipped fraction %.5f, analytic %.5f, |d| %.5f; gain %.2f dB peak-limited %d\n",
           r.clipped_fraction, expect, fabs(r.clipped_fraction - expect), r.gain_db,
           r.peak_limited);
    assert_true(fabs(r.clipped_fraction - expect) < 0.005);
    assert_true(r.clip_warning);
    assert_true(!r.peak_limited && r.gain_db < 0); /* attenuated to -20 LUFS */
    double lufs;
    assert_int_equal(qv_loudness_lufs(x, n, &lufs), 0);
    printf("  clipped sine: in %.2f LUFS, out %.2f LUFS (measured again %.3f)\n", r.in_lufs,
           r.out_lufs, lufs);
    assert_true(fabs(r.out_lufs + 20.0) < 1e-9 && fabs(lufs + 20.0) < 0.01);

    /* quiet speech at about -40 dBFS active: raised to -20 LUFS */
    memset(x, 0, (size_t)n * sizeof *x);
    speech(x, n, 0.012f, 0);
    assert_int_equal(qvc_level_normalize(&r, x, n, &p, err, sizeof err), 0);
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    double out_db = 10 * log10(s / (double)n);
    assert_int_equal(qv_loudness_lufs(x, n, &lufs), 0);
    printf("  quiet: in %.1f LUFS (active %.1f dBFS), gain %+.1f dB, out %.2f LUFS (measured "
           "%.3f; RMS %.2f dBFS)\n",
           r.in_lufs, r.in_active_dbfs, r.gain_db, r.out_lufs, lufs, out_db);
    assert_false(r.clip_warning);
    assert_int_equal(r.n_clipped, 0);
    assert_false(r.peak_limited);
    assert_true(fabs(lufs + 20.0) < 0.01);

    /* speech at -35 dBFS with a few full-scale clicks: the peak cap limits the gain */
    memset(x, 0, (size_t)n * sizeof *x);
    speech(x, n, 0.02f, 0);
    x[1000] = 0.9f;
    assert_int_equal(qvc_level_normalize(&r, x, n, &p, err, sizeof err), 0);
    printf("  peaky: gain %+.2f dB, peak %.2f dBFS, limited %d\n", r.gain_db, r.out_peak_dbfs,
           r.peak_limited);
    assert_true(r.peak_limited);
    assert_true(fabs(r.out_peak_dbfs + 1.0) < 1e-6);
    assert_true(fabsf(x[1000]) <= (float)pow(10, -1.0 / 20) + 1e-6f);
    free(x);
}

static void test_too_short(void **state) {
    (void)state;
    int64_t n = (int64_t)(6.5 * SR);
    float *x = calloc((size_t)n, sizeof *x);
    speech(x + SR, (int64_t)(2.5 * SR), 0.3f, 0); /* 2.5 s voiced in 6.5 s */
    qvc_hygiene_report r;
    char err[256] = "";
    assert_int_equal(qvc_hygiene_run(&r, x, n, NULL, 0, NULL, NULL, 0, NULL, err, sizeof err), -1);
    printf("  %s\n", err);
    assert_non_null(strstr(err, "only 2.50 s of voiced speech (3.0 s needed)"));
    assert_true(fabs(r.trim.voiced_seconds - 2.5) < 0.02);
    qvc_hygiene_report_free(&r);
    speech(x + (int64_t)(3.5 * SR), SR, 0.3f, 2.5); /* +1 s: 3.5 s voiced, accepted */
    assert_int_equal(qvc_hygiene_run(&r, x, n, NULL, 0, NULL, NULL, 0, NULL, err, sizeof err), 0);
    assert_true(fabs(r.trim.voiced_seconds - 3.5) < 0.02);
    assert_null(r.icl);
    assert_int_equal(r.n_clean, r.trim.end - r.trim.start);
    qvc_hygiene_report_free(&r);
    free(x);
}

static void test_window(void **state) {
    (void)state;
    qvc_hygiene_params p = qvc_hygiene_default_params();
    /* 30 s of syllables: 0-14 s louder but under noise (SNR ≈ 15 dB, gaps filled: 100 %
     * "voiced"), 14-30 s clean */
    int64_t n = 30 * SR, noisy = 14 * SR;
    float *x = calloc((size_t)n, sizeof *x);
    syllables(x, n, 0.3f);
    for (int64_t i = 0; i < noisy; i++)
        x[i] = 1.6f * x[i] + 0.05f * noise1();
    for (int64_t i = noisy; i < n; i++)
        x[i] += 1e-4f * noise1();
    qvc_window_report r;
    char err[256];
    assert_int_equal(qvc_pick_window(&r, x, n, &p, err, sizeof err), 0);
    printf("  window %.2f-%.2f s, %.0f%% voiced, SNR %.1f dB, clipped %.5f, score %.3f\n",
           (double)r.start / SR, (double)r.end / SR, 100 * r.voiced_fraction, r.snr_db,
           r.clipped_fraction, r.score);
    assert_false(r.whole);
    assert_true(r.start >= noisy);
    double len = (double)(r.end - r.start) / SR;
    assert_true(len >= 10.0 - 1e-9 && len <= 15.0 + 1e-9);
    assert_true(r.snr_db > 40 && r.clipped_fraction == 0);
    int64_t ne;
    float *w = qvc_window_extract(&r, x, &ne);
    assert_non_null(w);
    assert_int_equal(ne, r.end - r.start + SR / 2);
    for (int64_t i = r.end - r.start; i < ne; i++)
        assert_true(w[i] == 0.0f);
    assert_memory_equal(w, x + r.start, (size_t)(r.end - r.start) * sizeof *w);
    free(w);
    /* clipped (x4, clamped) from 16 s on, clean before: the window avoids the clipping */
    memset(x, 0, (size_t)n * sizeof *x);
    syllables(x, n, 0.3f);
    for (int64_t i = 16 * SR; i < n; i++)
        x[i] = fmaxf(-1.0f, fminf(1.0f, 4.0f * x[i]));
    assert_int_equal(qvc_pick_window(&r, x, n, &p, err, sizeof err), 0);
    printf("  clipped after 16 s: window %.2f-%.2f s, clipped %.5f\n", (double)r.start / SR,
           (double)r.end / SR, r.clipped_fraction);
    assert_true(r.end <= 16 * SR && r.clipped_fraction == 0);
    /* shorter than 15 s: the whole input */
    assert_int_equal(qvc_pick_window(&r, x + noisy, 12 * SR, &p, err, sizeof err), 0);
    assert_true(r.whole && r.start == 0 && r.end == 12 * SR);
    free(x);
}

static void test_transcript(void **state) {
    (void)state;
    qvc_hygiene_params p = qvc_hygiene_default_params();
    int nc;
    /* letters 1, CJK ideographs 3, digits 3; spaces and punctuation 0 */
    assert_true(fabs(qvc_text_units("Hi, \xe4\xbd\xa0\xe5\xa5\xbd 12!", &nc) - 14.0) < 1e-12);
    assert_int_equal(nc, 6);
    assert_true(qvc_text_units("bad \xc3", NULL) < 0);

    qvc_transcript_report r;
    char err[512] = "";
    const char *ok = "The quick brown fox jumps over the lazy dog while the cat sleeps soundly "
                     "by the warm fire, dreaming of mice and long summer afternoons.";
    assert_int_equal(qvc_check_transcript(&r, ok, 8.0, 0, &p, err, sizeof err), 0);
    printf("  plausible: %.1f units/s\n", r.units_per_s);
    assert_true(r.plausible);
    char big[1201];
    for (int i = 0; i < 1200; i++)
        big[i] = i % 6 == 5 ? ' ' : 'a' + i % 26;
    big[1200] = 0;
    assert_int_equal(qvc_check_transcript(&r, big, 8.0, 0, &p, err, sizeof err), -1);
    printf("  %s\n", err);
    assert_non_null(strstr(err, "far too long"));
    assert_non_null(strstr(err, "1000 letter-equivalents"));
    assert_int_equal(qvc_check_transcript(&r, big, 8.0, 1, &p, err, sizeof err), 1);
    assert_true(r.fallback && !r.plausible);
    assert_int_equal(qvc_check_transcript(&r, "Yes.", 8.0, 0, &p, err, sizeof err), -1);
    assert_non_null(strstr(err, "far too short"));

    /* through the chain: a 12 s clip with a transcript far too long for its window */
    int64_t n = 12 * SR;
    float *x = calloc((size_t)n, sizeof *x);
    syllables(x, n, 0.3f);
    qvc_hygiene_report h;
    assert_int_equal(qvc_hygiene_run(&h, x, n, big, 0, NULL, NULL, 0, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "far too long"));
    assert_null(h.icl);
    qvc_hygiene_report_free(&h);
    assert_int_equal(qvc_hygiene_run(&h, x, n, big, 1, NULL, NULL, 0, NULL, err, sizeof err), 0);
    assert_true(h.transcript.fallback && !h.has_icl && !h.icl);
    qvc_hygiene_report_free(&h);
    assert_int_equal(qvc_hygiene_run(&h, x, n, ok, 0, NULL, NULL, 0, NULL, err, sizeof err), 0);
    assert_true(h.has_icl && h.window.whole);
    assert_int_equal(h.n_icl, h.n_clean + SR / 2);
    char sum[1024];
    qvc_hygiene_summary(&h, sum, sizeof sum);
    printf("%s", sum);
    assert_non_null(strstr(sum, "icl window:"));
    qvc_hygiene_report_free(&h);
    free(x);
}

/* The ICL span rule: full = the whole trimmed clip (capped), auto = the cleanest 10-15 s (picked
 * without a transcript too), range = given seconds of the input; refusals carry the numbers. */
static void test_icl_span(void **state) {
    (void)state;
    qvc_hygiene_params p = qvc_hygiene_default_params();
    char err[512];
    int64_t n = 24 * SR;
    float *x = calloc((size_t)n, sizeof *x);
    syllables(x, n, 0.3f);
    qvc_hygiene_report h;
    /* full: the whole trimmed clip */
    assert_int_equal(qvc_hygiene_run(&h, x, n, "word word word word word word word word word "
                     "word word word word word word word word word word word word word word word "
                     "word word word word word word word word word word word word word word word "
                     "word word word word word", 0, NULL, NULL, 0, &p, err, sizeof err), 0);
    assert_true(h.has_window && h.has_icl && h.window.whole && h.window.mode == QVC_ICL_FULL);
    assert_int_equal(h.n_icl, h.n_clean + SR / 2);
    qvc_hygiene_report_free(&h);
    /* full over the cap: refused with the numbers */
    p.icl_max_s = 20;
    assert_int_equal(qvc_hygiene_run(&h, x, n, "word word", 0, NULL, NULL, 0, &p, err,
                                     sizeof err), -1);
    printf("  over the cap: %s\n", err);
    assert_non_null(strstr(err, "over the 20 s ICL cap"));
    qvc_hygiene_report_free(&h);
    /* auto without a transcript: a 10-15 s window, no ICL */
    p.icl_mode = QVC_ICL_AUTO;
    assert_int_equal(qvc_hygiene_run(&h, x, n, NULL, 0, NULL, NULL, 0, &p, err, sizeof err), 0);
    double len = (double)(h.window.end - h.window.start) / SR;
    printf("  auto: %.2f-%.2f s\n", (double)(h.trim.start + h.window.start) / SR,
           (double)(h.trim.start + h.window.end) / SR);
    assert_true(h.has_window && !h.has_transcript && !h.has_icl && !h.icl);
    assert_true(len >= 10 - 0.011 && len <= 15 + 0.011);
    qvc_hygiene_report_free(&h);
    /* range: seconds of the input, intersected with the trim */
    p.icl_mode = QVC_ICL_RANGE, p.icl_start_s = 5, p.icl_end_s = 11;
    assert_int_equal(qvc_hygiene_run(&h, x, n, "word word word word word word word word word "
                     "word word word word", 0, NULL, NULL, 0, &p, err, sizeof err), 0);
    assert_true(h.has_icl && h.window.mode == QVC_ICL_RANGE);
    assert_int_equal(h.trim.start + h.window.start, 5 * SR);
    assert_int_equal(h.trim.start + h.window.end, 11 * SR);
    assert_int_equal(h.n_icl, 6 * SR + SR / 2);
    qvc_hygiene_report_free(&h);
    p.icl_start_s = 30, p.icl_end_s = 40; /* outside the clip */
    assert_int_equal(qvc_hygiene_run(&h, x, n, "word", 0, NULL, NULL, 0, &p, err, sizeof err), -1);
    printf("  outside: %s\n", err);
    assert_non_null(strstr(err, "ICL window 30.00-40.00 s holds 0.00 s"));
    qvc_hygiene_report_free(&h);
    free(x);
}

/* ---- second speaker with the tiny synthetic Base ECAPA ------------------------------------ */

static qva_ecapa *g_ecapa;
static qva_mel *g_mel;

static int setup_ecapa(void **state) {
    (void)state;
    const char *cache = test_cache_dir();
    char dir[1024], err[512];
    snprintf(dir, sizeof dir, "%s/tiny-base", cache);
    qvm_ckpt *ck_g_ecapa = test_ckpt_open(dir);
    g_ecapa = qva_ecapa_load(ck_g_ecapa, err, sizeof err);
    qvm_ckpt_free(ck_g_ecapa);
    if (!g_ecapa) printf("  %s (run make models)\n", err);
    g_mel = qva_mel_create();
    return 0;
}

static int teardown_ecapa(void **state) {
    (void)state;
    qva_ecapa_free(g_ecapa);
    qva_mel_free(g_mel);
    return 0;
}

static void test_second_speaker(void **state) {
    (void)state;
    assert_non_null(g_ecapa); /* the synthetic model is part of `make test` */
    qvc_ecapa_ctx ctx = {g_ecapa, g_mel, NULL};
    int dim = qva_ecapa_dim(g_ecapa);
    qvc_hygiene_params p = qvc_hygiene_default_params();
    /* random weights map everything to nearby vectors (cosines 0.97-0.9995 measured), so the
     * test threshold is 0.99 instead of the default 0.5 meant for a trained encoder */
    p.spk_threshold = 0.99;
    int64_t n = 15 * SR, cut = 10 * SR;
    float *x = calloc((size_t)n, sizeof *x);
    for (int64_t i = 0; i < cut; i++)
        x[i] = 0.1f * noise1();
    for (int64_t i = cut; i < n; i++) {
        double t = (double)i / SR;
        x[i] = (float)(0.1 * (sin(2 * M_PI * 150 * t) + 0.5 * sin(2 * M_PI * 300 * t) +
                              0.3 * sin(2 * M_PI * 450 * t)));
    }
    qvc_speaker_report r;
    char err[512];
    assert_int_equal(qvc_speaker_scan(&r, x, n, dim, qvc_ecapa_xvector, &ctx, &p, err, sizeof err),
                     0);
    printf("  noise|tones: %d windows, main %d other %d, centroid cos %.4f, min cos %.4f\n",
           r.n_scored, r.n_main, r.n_other, r.centroid_cos, r.min_cos);
    for (int i = 0; i < r.n_ranges; i++)
        printf("  flagged %.1f-%.1f s (cos %.4f)\n", r.ranges[i].start_s, r.ranges[i].end_s,
               r.ranges[i].min_cos);
    assert_int_equal(r.n_windows, 9);
    assert_true(r.warning);
    assert_int_equal(r.n_ranges, 1);
    assert_true(r.ranges[0].start_s >= 7.5 - 1e-9 && r.ranges[0].start_s <= 10.5 + 1e-9);
    assert_true(fabs(r.ranges[0].end_s - 15.0) < 1e-9);
    assert_true(r.ranges[0].min_cos < 0.99);
    free(x);

    /* one real voice: nothing flagged; and the whole chain with the scan */
    qva_audio a;
    assert_int_equal(qva_audio_load(&a, CLIP, 15.0, err, sizeof err), 0);
    qvc_hygiene_report h;
    assert_int_equal(qvc_hygiene_run(&h, a.samples, a.n_samples, NULL, 0, qvc_ecapa_xvector, &ctx,
                                     dim, &p, err, sizeof err),
                     0);
    printf("  one voice: %d windows, min cos %.4f\n", h.speaker.n_scored, h.speaker.min_cos);
    assert_true(h.has_speaker && h.speaker.n_scored >= 5);
    assert_false(h.speaker.warning);
    char sum[2048];
    qvc_hygiene_summary(&h, sum, sizeof sum);
    printf("%s", sum);
    char *js = qvc_hygiene_json(&h);
    assert_non_null(js);
    printf("  META hygiene: %s\n", js);
    assert_non_null(strstr(js, "\"speakers\""));
    free(js);
    qvc_hygiene_report_free(&h);
    qva_audio_free(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trim_padding),
        cmocka_unit_test(test_clipping_and_level),
        cmocka_unit_test(test_too_short),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_icl_span),
        cmocka_unit_test(test_transcript),
        cmocka_unit_test_setup_teardown(test_second_speaker, setup_ecapa, teardown_ecapa),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
