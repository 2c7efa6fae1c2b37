/* test_watermark.c — the audio watermark (features/watermark.c, docs/provenance.md): a stream
 * marked in uneven blocks equals the whole signal marked; the mark stays 35 dB or more under
 * the speech in every third-octave band it uses (printed); the detector finds it in marked
 * speech, also after gain ±6 dB, resampling to 16 kHz and back and noise at 20 dB SNR (scores
 * printed), and not in unmarked speech, noise or tones; through MP3 64 kbit/s and Opus 32
 * kbit/s (lame, opusenc, sox from scripts/deps.sh) the scores are printed and unmarked audio must
 * stay unmarked; bad arguments are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fftw3.h>
#include <math.h>
#include <samplerate.h>

#include <sndfile.h>

#include "features/features.h"
#include "include/qvoice.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"

static const char *const clips[] = {"tests/audio/en_ohenry_chenevert.wav",
                                    "tests/audio/it_galatea_fasol.wav"};
static float *g_speech, *g_marked; /* both clips, one after the other */
static int64_t g_n;
static const uint32_t payload = 0x8abcdef1u;

static int setup(void **state) {
    if (tmpdir_setup(state)) return -1;
    qva_audio a[2];
    char err[512];
    for (int i = 0; i < 2; i++)
        if (qva_audio_load(&a[i], clips[i], 0, err, sizeof err)) return fprintf(stderr, "%s\n", err), -1;
    g_n = a[0].n_samples + a[1].n_samples;
    g_speech = malloc((size_t)g_n * sizeof *g_speech);
    g_marked = malloc((size_t)g_n * sizeof *g_marked);
    if (!g_speech || !g_marked) return -1;
    memcpy(g_speech, a[0].samples, (size_t)a[0].n_samples * sizeof(float));
    memcpy(g_speech + a[0].n_samples, a[1].samples, (size_t)a[1].n_samples * sizeof(float));
    qva_audio_free(&a[0]);
    qva_audio_free(&a[1]);
    memcpy(g_marked, g_speech, (size_t)g_n * sizeof *g_marked);
    qv_watermark *w;
    if (qv_watermark_new(&w, payload)) return -1;
    qv_watermark_apply(w, g_marked, g_n);
    qv_watermark_free(w);
    return 0;
}

static int teardown(void **state) {
    free(g_speech);
    free(g_marked);
    return tmpdir_teardown(state);
}

static qv_watermark_report detect(const float *x, int64_t n, const char *what) {
    qv_watermark_report r = qv_watermark_default_report();
    assert_int_equal(qv_watermark_detect(x, n, &r), QV_OK);
    printf("  %-34s best 3 s window %5.2f, whole %5.2f -> %s\n", what, r.score, r.score_all,
           r.present ? "present" : "not found");
    return r;
}

static void test_stream_equals_whole(void **state) {
    (void)state;
    float *y = malloc((size_t)g_n * sizeof *y);
    assert_non_null(y);
    memcpy(y, g_speech, (size_t)g_n * sizeof *y);
    qv_watermark *w;
    assert_int_equal(qv_watermark_new(&w, payload), QV_OK);
    static const int64_t cuts[] = {1, 7, 1000, 1920, 4095, 4096, 4097, 6143, 6145, 23999};
    int64_t at = 0;
    for (int i = 0; at < g_n; i++) {
        int64_t n = cuts[i % 10];
        if (n > g_n - at) n = g_n - at;
        qv_watermark_apply(w, y + at, n);
        at += n;
    }
    qv_watermark_free(w);
    assert_memory_equal(y, g_marked, (size_t)g_n * sizeof *y);
    free(y);
}

/* Power of the mark (marked − speech) and of the speech in third-octave bands, summed over
 * Hann frames of 2048. */
static void test_mark_level(void **state) {
    (void)state;
    enum { N = 2048 };
    float *in = fftwf_alloc_real(N);
    fftwf_complex *out = fftwf_alloc_complex(N / 2 + 1);
    fftwf_plan p = fftwf_plan_dft_r2c_1d(N, in, out, FFTW_ESTIMATE);
    double pm[N / 2 + 1] = {0}, ps[N / 2 + 1] = {0};
    for (int64_t s = 0; s + N <= g_n; s += N / 2)
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < N; i++) {
                double wv = 0.5 - 0.5 * cos(2.0 * M_PI * i / N);
                in[i] = (float)(wv * (pass ? g_speech[s + i] : g_marked[s + i] - g_speech[s + i]));
            }
            fftwf_execute(p);
            for (int k = 0; k <= N / 2; k++) {
                double e = (double)out[k][0] * out[k][0] + (double)out[k][1] * out[k][1];
                (pass ? ps : pm)[k] += e;
            }
        }
    double worst = -INFINITY;
    printf("  mark power under the speech, third-octave bands:\n");
    for (double fc = 500.0; fc <= 6400.0; fc *= pow(2.0, 1.0 / 3.0)) {
        int k0 = (int)ceil(fc / pow(2.0, 1.0 / 6.0) * N / 24000.0), k1 = (int)(fc * pow(2.0, 1.0 / 6.0) * N / 24000.0);
        double m = 0.0, sp = 0.0;
        for (int k = k0; k <= k1; k++) m += pm[k], sp += ps[k];
        double db = 10.0 * log10(m / sp);
        if (db > worst) worst = db;
        printf("    %6.0f Hz  %6.1f dB\n", fc, db);
    }
    printf("  worst band %.1f dB (goal <= -35)\n", worst);
    assert_true(worst <= -35.0);
    fftwf_destroy_plan(p);
    fftwf_free(in);
    fftwf_free(out);
}

static void test_detects_marked_speech(void **state) {
    (void)state;
    qv_watermark_report r = detect(g_marked, g_n, "marked speech, 60 s");
    assert_true(r.present);
    assert_true(r.score_all >= 5.0);
    float *y = malloc((size_t)g_n * sizeof *y);
    assert_non_null(y);
    for (int g = -1; g <= 1; g += 2) {
        double gain = pow(10.0, g * 6.0 / 20.0);
        for (int64_t i = 0; i < g_n; i++) y[i] = (float)(g_marked[i] * gain);
        r = detect(y, g_n, g < 0 ? "gain -6 dB" : "gain +6 dB");
        assert_true(r.present);
    }
    /* white noise at 20 dB SNR (of the whole signal), fixed seed */
    double e = 0.0;
    for (int64_t i = 0; i < g_n; i++) e += (double)g_marked[i] * g_marked[i];
    double sd = sqrt(e / (double)g_n / 100.0);
    uint64_t s = 12345;
    for (int64_t i = 0; i < g_n; i++) {
        double u1 = ((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 11) * 0x1.0p-53 + 1e-300;
        double u2 = ((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 11) * 0x1.0p-53;
        y[i] = (float)(g_marked[i] + sd * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
    }
    detect(y, g_n, "noise at 20 dB SNR (seed 12345)");
    /* 24 kHz -> 16 kHz -> 24 kHz */
    float *lo = malloc((size_t)g_n * sizeof *lo);
    assert_non_null(lo);
    SRC_DATA d = {.data_in = g_marked, .input_frames = (long)g_n, .data_out = lo,
                  .output_frames = (long)g_n, .src_ratio = 16000.0 / 24000.0};
    assert_int_equal(src_simple(&d, SRC_SINC_MEDIUM_QUALITY, 1), 0);
    SRC_DATA u = {.data_in = lo, .input_frames = d.output_frames_gen, .data_out = y,
                  .output_frames = (long)g_n, .src_ratio = 24000.0 / 16000.0};
    assert_int_equal(src_simple(&u, SRC_SINC_MEDIUM_QUALITY, 1), 0);
    r = detect(y, u.output_frames_gen, "resampled 16 kHz and back");
    assert_true(r.present);
    free(lo);
    free(y);
}

static void test_unmarked_is_not_found(void **state) {
    (void)state;
    qv_watermark_report r = detect(g_speech, g_n, "unmarked speech, 60 s");
    assert_false(r.present);
    int64_t n = 30 * 24000;
    float *y = malloc((size_t)n * sizeof *y);
    assert_non_null(y);
    uint64_t s = 99;
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)(0.1 * ((double)((s = s * 6364136223846793005ull + 1) >> 11) * 0x1.0p-53 - 0.5));
    r = detect(y, n, "white noise, 30 s");
    assert_false(r.present);
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)(0.2 * sin(2.0 * M_PI * 1000.0 * i / 24000.0) + 0.1 * sin(2.0 * M_PI * 2637.0 * i / 24000.0));
    r = detect(y, n, "tones 1000 + 2637 Hz, 30 s");
    assert_false(r.present);
    for (int64_t i = 0; i < n; i++) {
        double t = (double)i / 24000.0;
        y[i] = (float)(0.3 * sin(2.0 * M_PI * (200.0 * t + 100.0 * t * t)));
    }
    r = detect(y, n, "sweep 200 Hz - 6.2 kHz, 30 s");
    assert_false(r.present);
    free(y);
}

static void write_wav(const char *path, const float *x, int64_t n) {
    SF_INFO si = {.samplerate = 24000, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_PCM_16};
    SNDFILE *f = sf_open(path, SFM_WRITE, &si);
    assert_non_null(f);
    assert_int_equal(sf_writef_float(f, x, n), n);
    sf_close(f);
}

static qv_watermark_report detect_file(const char *name, const char *what) {
    qv_watermark_report r = qv_watermark_default_report();
    enum qv_status st = qv_watermark_detect_file(tmp_path(name), 0, &r);
    if (st) fprintf(stderr, "%s\n", qv_last_error());
    assert_int_equal(st, QV_OK);
    printf("  %-34s best 3 s window %5.2f, whole %5.2f -> %s\n", what, r.score, r.score_all,
           r.present ? "present" : "not found");
    return r;
}

static void test_codecs(void **state) {
    (void)state;
    if (sh("command -v lame opusenc opusdec >/dev/null") != 0) {
        printf("  lame/opus-tools missing (scripts/deps.sh installs them): skipped\n");
        skip();
    }
    write_wav(tmp_path("m.wav"), g_marked, g_n);
    write_wav(tmp_path("u.wav"), g_speech, g_n);
    assert_int_equal(sh("cd %s && lame --quiet -b 64 m.wav m.mp3 && lame --quiet -b 64 u.wav u.mp3 "
                        "&& opusenc --quiet --bitrate 32 m.wav m.opus && opusdec --quiet m.opus mo.wav "
                        "&& opusenc --quiet --bitrate 32 u.wav u.opus && opusdec --quiet u.opus uo.wav",
                        tmp_dir),
                     0);
    detect_file("m.mp3", "marked, MP3 64 kbit/s");
    detect_file("mo.wav", "marked, Opus 32 kbit/s");
    assert_false(detect_file("u.mp3", "unmarked, MP3 64 kbit/s").present);
    assert_false(detect_file("uo.wav", "unmarked, Opus 32 kbit/s").present);
}

static void test_arguments(void **state) {
    (void)state;
    qv_watermark_report r = qv_watermark_default_report();
    assert_int_equal(qv_watermark_detect(NULL, 10, &r), QV_E_INVALID);
    assert_int_equal(qv_watermark_detect(g_speech, g_n, NULL), QV_E_ABI);
    r.struct_size = 4;
    assert_int_equal(qv_watermark_detect(g_speech, g_n, &r), QV_E_ABI);
    assert_non_null(strstr(qv_last_error(), "qv_watermark_report"));
    r = qv_watermark_default_report();
    assert_int_equal(qv_watermark_detect(g_speech, 100, &r), QV_OK); /* too short to say */
    assert_false(r.present);
    float nan_buf[8192];
    for (int i = 0; i < 8192; i++) nan_buf[i] = i % 3 ? NAN : INFINITY;
    assert_int_equal(qv_watermark_detect(nan_buf, 8192, &r), QV_OK);
    assert_false(r.present);
    assert_int_equal(qv_watermark_detect_file("tests/audio/missing.wav", 0, &r), QV_E_AUDIO);
    assert_non_null(strstr(qv_last_error(), "missing.wav"));
    uint32_t a = qv_watermark_payload("voice", "model"), b = qv_watermark_payload("voice", "model2");
    assert_true(a & QV_WATERMARK_SYNTHETIC);
    assert_int_equal(a, qv_watermark_payload("voice", "model"));
    assert_int_not_equal(a, b);
    assert_int_equal(qv_watermark_payload(NULL, NULL), qv_watermark_payload("", ""));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_equals_whole),
        cmocka_unit_test(test_mark_level),
        cmocka_unit_test(test_detects_marked_speech),
        cmocka_unit_test(test_unmarked_is_not_found),
        cmocka_unit_test(test_codecs),
        cmocka_unit_test(test_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
