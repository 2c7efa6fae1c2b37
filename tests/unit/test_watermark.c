/* test_watermark.c — the audio watermark (features/watermark.c, docs/provenance.md): a stream
 * marked in uneven pieces equals the whole signal marked, its first block unmarked and given back
 * at once, every later sample as soon as its block is complete; the
 * mark stays 35 dB or more under the speech in every third-octave band it uses, wherever the
 * bands fall, on the clips (printed) and on six espeak-ng voices; over
 * the two bundled clips marked back to back, the share of 3 s excerpts (every 1 s) where it is
 * found and of 10 s excerpts (every 2 s) whose payload is recovered (each excerpt a few samples
 * before its second, so that they fall on every place of the detector's grid), as marked, after
 * gain ±6 dB and resampling to 16 kHz and back
 * (asserted at issue 28's goals: 99 % and 100 %), and after noise
 * at 20 dB SNR, MP3 64 kbit/s and Opus 32 kbit/s (lame, opusenc from scripts/deps.sh: every
 * 10 s payload after MP3 and noise asserted; the 3 s goal is not met there, nor either goal after
 * Opus, see docs/provenance.md; the whole 60 s after MP3 and after noise
 * must be found with its payload; the clips' figures there are asserted a little under what
 * they measure); the encoder's 16 kHz output (marked at 24 kHz, then resampled) is found
 * by voicefmt detect with its payload; a marked stretch between unmarked audio
 * is reported where it is, and a marked minute between unmarked speech after Opus 32 kbit/s
 * too (by the windows longer than 3 s); of unmarked audio (espeak-ng speech of 6 voices reading fixed texts,
 * as spoken and after MP3 64 kbit/s, cached under build/; the clips, also after MP3 and Opus;
 * noise, tones, sweeps, chords; over 30,000 3 s windows) no input is found as a whole and at most
 * 1 window in 10,000 (issue 28's bound); bad arguments are refused.
 * QVT_SPEECH=FILE measures the excerpt tables on the first 120 s of FILE in place of the clips,
 * printed, with no goal asserted (docs/provenance.md's espeak-ng figures: build/test_watermark/
 * 0.wav ... 5.wav, each run with QVT_FILTER=test_transformations and then test_codecs). */
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
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/noise.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/speech_text.h"
#include "tests/unit/helpers/tmpdir.h"

#define SR 24000
static const char *const clips[] = {"tests/audio/en_ohenry_chenevert.wav",
                                    "tests/audio/it_galatea_fasol.wav"};
static float *g_speech, *g_marked; /* both clips, one after the other (or QVT_SPEECH's) */
static int64_t g_n, g_split; /* g_split: where the second clip starts (g_n with QVT_SPEECH) */
static int g_clips = 1; /* 0: QVT_SPEECH's audio, measured only */

/* A goal of issue 28 on the clips; on QVT_SPEECH's audio the figures are printed, not asserted. */
#define assert_goal(x)                  \
    do {                                \
        if (g_clips) assert_true(x);    \
    } while (0)
static const uint32_t payload = 0x8abcdef1u;

static int setup(void **state) {
    if (tmpdir_setup(state)) return -1;
    qva_audio a[2];
    char err[512];
    const char *speech = getenv("QVT_SPEECH");
    if (speech) {
        if (qva_audio_load(&a[0], speech, 120.0, err, sizeof err))
            return fprintf(stderr, "%s\n", err), -1;
        g_clips = 0, g_n = g_split = a[0].n_samples, g_speech = a[0].samples;
        g_marked = malloc((size_t)g_n * sizeof *g_marked);
        if (!g_marked) return -1;
        memcpy(g_marked, g_speech, (size_t)g_n * sizeof *g_marked);
        return qv_watermark_mark(payload, g_marked, g_n) ? -1 : 0;
    }
    for (int i = 0; i < 2; i++)
        if (qva_audio_load(&a[i], clips[i], 0, err, sizeof err))
            return fprintf(stderr, "%s\n", err), -1;
    g_n = a[0].n_samples + a[1].n_samples, g_split = a[0].n_samples;
    g_speech = malloc((size_t)g_n * sizeof *g_speech);
    g_marked = malloc((size_t)g_n * sizeof *g_marked);
    if (!g_speech || !g_marked) return -1;
    memcpy(g_speech, a[0].samples, (size_t)a[0].n_samples * sizeof(float));
    memcpy(g_speech + a[0].n_samples, a[1].samples, (size_t)a[1].n_samples * sizeof(float));
    qva_audio_free(&a[0]);
    qva_audio_free(&a[1]);
    memcpy(g_marked, g_speech, (size_t)g_n * sizeof *g_marked);
    return qv_watermark_mark(payload, g_marked, g_n) ? -1 : 0;
}

static int teardown(void **state) {
    free(g_speech);
    free(g_marked);
    return tmpdir_teardown(state);
}

static qv_watermark_report detect(const float *x, int64_t n) {
    qv_watermark_report r = qv_watermark_default_report();
    assert_int_equal(qv_watermark_detect(x, n, &r), QV_OK);
    return r;
}

/* The payload, from a marked range or, where the mark is present, the whole input's decoding
 * (what `voicefmt detect` shows for a file: a 10 s excerpt is one range or none). */
static int payload_found(const qv_watermark_report *r) {
    if (r->present && r->all.payload_ok && r->all.payload == payload) return 1;
    for (int i = 0; i < r->n_ranges; i++)
        if (r->ranges[i].payload_ok && r->ranges[i].payload == payload) return 1;
    return 0;
}

static void test_stream_equals_whole(void **state) {
    (void)state;
    enum { B = QV_WATERMARK_DELAY };
    float *y = malloc((size_t)g_n * sizeof *y), *out = malloc((24000 + B) * sizeof *out), tail[B];
    assert_non_null(y);
    assert_non_null(out);
    qv_watermark *w;
    assert_int_equal(qv_watermark_new(&w, payload), QV_OK);
    static const int64_t cuts[] = {1, 7, 1000, 1920, 2559, 2560, 2561, 4095, 6145, 23999};
    int64_t at = 0, done = 0;
    for (int i = 0; at < g_n; i++) {
        int64_t n = cuts[i % 10];
        if (n > g_n - at) n = g_n - at;
        const int64_t k = qv_watermark_apply(w, g_speech + at, n, out);
        at += n;
        /* the first block at once; later samples when their block is complete, not before */
        assert_int_equal(done + k, at <= B ? at : at - (at - B) % B);
        memcpy(y + done, out, (size_t)k * sizeof *y);
        done += k;
    }
    const int k = qv_watermark_flush(w, tail);
    assert_int_equal(k, g_n > B ? (g_n - B) % B : 0);
    memcpy(y + done, tail, (size_t)k * sizeof *y);
    qv_watermark_free(w);
    assert_memory_equal(y, g_speech, B * sizeof *y); /* the first block unmarked */
    assert_memory_equal(y, g_marked, (size_t)g_n * sizeof *y);
    free(y);
    free(out);
}

static float *load(const char *path, int64_t *n) {
    qva_audio a;
    char err[512];
    if (qva_audio_load(&a, path, 0, err, sizeof err)) fail_msg("%s", err);
    *n = a.n_samples;
    return a.samples;
}

static const char *const voices[] = {"en-us", "en+f3", "de", "fr+m3", "es+f2", "it"};

/* build/test_watermark/V.wav: espeak-ng voice V reading its own text at its own rate and pitch,
 * 4-5 minutes (made once, kept under build/); NULL when espeak-ng is missing. */
static const char *espeak_speech(int v) {
    static char path[64];
    if (sh("command -v espeak-ng >/dev/null") != 0) return NULL;
    assert_int_equal(sh("mkdir -p build/test_watermark"), 0);
    snprintf(path, sizeof path, "build/test_watermark/%d.txt", v);
    if (write_speech_text(path, (uint64_t)v + 1)) fail_msg("%s: cannot write", path);
    if (sh("test -s build/test_watermark/%d.wav || espeak-ng -v %s -s %d -p %d "
           "-f build/test_watermark/%d.txt -w build/test_watermark/%d.wav",
           v, voices[v], 140 + 12 * v, 35 + 6 * v, v, v) != 0)
        fail_msg("espeak-ng could not write build/test_watermark/%d.wav", v);
    snprintf(path, sizeof path, "build/test_watermark/%d.wav", v);
    return path;
}

/* Chords of 3 harmonic notes, changing every 0.5 s: a music-like sound of sparse spectrum. */
static void chords(float *y, int64_t n) {
    static const double root[] = {220.0, 246.9, 261.6, 293.7, 329.6, 349.2, 392.0};
    for (int64_t i = 0; i < n; i++) {
        double f0 = root[(i / (SR / 2)) % 7], v = 0.0, t = (double)i / SR;
        for (int k = 1; k <= 8; k++)
            v += (sin(2 * M_PI * f0 * k * t) + sin(2 * M_PI * f0 * 1.26 * k * t) +
                  sin(2 * M_PI * f0 * 1.5 * k * t)) / (k * 10.0);
        y[i] = (float)v;
    }
}

/* The mark's level: the power of marked − host against the host's in third-octave bands
 * (centres 125 Hz - 6.3 kHz), summed over Hann frames of 2048, in the standard bands and in
 * bands placed a 27th, two 27ths, ... eight 27ths of an octave higher (a harmonic sound's level
 * depends on where a band falls); a bin counts by the share of its 11.7 Hz a band covers, so a
 * band is exactly a third octave wide whatever its edges. The worst band in dB. The standard
 * bands are printed when asked. */
static double mark_level(const float *host, const float *marked, int64_t n, int print) {
    enum { N = 2048, PLACES = 9 };
    float *in = fftwf_alloc_real(N);
    fftwf_complex *out = fftwf_alloc_complex(N / 2 + 1);
    fftwf_plan p = fftwf_plan_dft_r2c_1d(N, in, out, FFTW_ESTIMATE);
    double pm[N / 2 + 1] = {0}, ps[N / 2 + 1] = {0};
    for (int64_t s = 0; s + N <= n; s += N / 2)
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < N; i++) {
                double wv = 0.5 - 0.5 * cos(2.0 * M_PI * i / N);
                in[i] = (float)(wv * (pass ? host[s + i] : marked[s + i] - host[s + i]));
            }
            fftwf_execute(p);
            for (int k = 0; k <= N / 2; k++) {
                double e = (double)out[k][0] * out[k][0] + (double)out[k][1] * out[k][1];
                (pass ? ps : pm)[k] += e;
            }
        }
    double worst = -INFINITY;
    if (print) printf("  mark power under the speech, third-octave bands:\n");
    for (int place = 0; place < PLACES; place++)
        for (int i = 0; i <= 17; i++) {
            const double fc = 125.0 * pow(2.0, (i + (double)place / PLACES) / 3.0);
            const double f0 = fc / pow(2.0, 1.0 / 6.0) * N / SR, f1 = fc * pow(2.0, 1.0 / 6.0) * N / SR;
            double m = 0.0, sp = 0.0;
            for (int k = (int)f0; k <= (int)f1 + 1 && k <= N / 2; k++) {
                const double share = fmin(k + 0.5, f1) - fmax(k - 0.5, f0);
                if (share > 0.0) m += share * pm[k], sp += share * ps[k];
            }
            double db = 10.0 * log10(m / sp);
            if (db > worst) worst = db;
            if (print && place == 0) printf("    %6.0f Hz  %6.1f dB\n", fc, db);
        }
    fftwf_destroy_plan(p);
    fftwf_free(in);
    fftwf_free(out);
    return worst;
}

/* The mark stays 35 dB under the speech in every band: the clips (or QVT_SPEECH's audio) and the
 * first minute of each espeak-ng voice, whose harmonics lie further apart than a third octave is
 * wide at low frequencies (not a few pure lines, as chords: docs/provenance.md). */
static void test_mark_level(void **state) {
    (void)state;
    double worst = mark_level(g_speech, g_marked, g_n, 1);
    printf("  worst band %.1f dB (goal <= -35; the bands above and eight placements between)\n", worst);
    assert_true(worst <= -35.0);
    if (!g_clips) return;
    if (sh("command -v espeak-ng >/dev/null") != 0)
        printf("  espeak-ng missing (scripts/deps.sh installs it): its voices are left out\n");
    for (int v = 0; v < 6 && sh("command -v espeak-ng >/dev/null") == 0; v++) {
        int64_t m;
        float *x = load(espeak_speech(v), &m);
        if (m > 60 * SR) m = 60 * SR;
        float *y = malloc((size_t)m * sizeof *y);
        assert_non_null(y);
        memcpy(y, x, (size_t)m * sizeof *y);
        assert_int_equal(qv_watermark_mark(payload, y, m), QV_OK);
        const double db = mark_level(x, y, m, 0);
        printf("  espeak-ng %s: worst band %.1f dB\n", voices[v], db);
        assert_true(db <= -35.0);
        free(x), free(y);
    }
}

typedef struct {
    int n3, found, n10, found10, decoded;
} shares;

/* Where the k-th of excerpts every `every` samples starts: an excerpt starts anywhere, so the
 * k-th one starts k mod 8 samples early and they fall on every place of the detector's search
 * grid (every 8 samples) and between; on the grid alone, they met its best case. */
static int64_t excerpt_start(int64_t k, int64_t every) { return k * every - k % 8; }

/* Shares of 3 s excerpts (every 1 s) found marked and of 10 s excerpts (every 2 s) found and
 * whose payload is recovered; printed, and asserted at the goals when strict. */
static shares excerpts(const float *x, int64_t n, const char *what, int strict) {
    int n3 = 0, found = 0, n10 = 0, found10 = 0, decoded = 0;
    double zmin = INFINITY;
    for (int64_t a = 0; a + 3 * SR <= n; a = excerpt_start(++n3, SR)) {
        qv_watermark_report r = detect(x + a, 3 * SR);
        found += r.present;
        if (r.score < zmin) zmin = r.score;
    }
    for (int64_t a = 0; a + 10 * SR <= n; a = excerpt_start(++n10, 2 * SR)) {
        qv_watermark_report r = detect(x + a, 10 * SR);
        decoded += payload_found(&r);
        found10 += r.present;
    }
    qv_watermark_report all = detect(x, n);
    printf("  %-27s 3 s: %3d/%3d found (lowest score %5.2f); 10 s: %2d/%2d found, payload "
           "%2d/%2d; whole: %6.2f%s\n", what, found, n3, zmin, found10, n10, decoded, n10, all.score_all,
           all.all.payload_ok && all.all.payload == payload ? ", payload" : "");
    if (strict) {
        assert_goal(found >= 0.99 * n3);
        assert_goal(decoded == n10);
    }
    return (shares){n3, found, n10, found10, decoded};
}

/* After Opus no 3 s excerpt keeps the mark (docs/provenance.md): how long an excerpt a platform
 * needs, as the shares of excerpts of 15 s to 90 s (every 5 s) found and with their payload. */
static void long_excerpts(const float *x, int64_t n, const char *what) {
    static const int len[] = {15, 30, 45, 60, 90};
    printf("  %-27s", what);
    for (size_t i = 0; i < sizeof len / sizeof *len && len[i] * SR <= n; i++) {
        int k = 0, found = 0, decoded = 0;
        for (int64_t a = 0; a + len[i] * SR <= n; a += 5 * SR, k++) {
            qv_watermark_report r = detect(x + a, len[i] * SR);
            found += r.present, decoded += payload_found(&r);
        }
        printf(" %d s: %d/%d found, payload %d;", len[i], found, k, decoded);
    }
    printf("\n");
}

/* Noise at 20 dB SNR (swing_db: 10 dB louder in one second than in the next) under each clip's
 * own power: the English clip is 4.4 dB quieter than the Italian one, and under the two clips'
 * mean power its noise would stand 17.3 dB under it. */
static void add_noise(const float *x, float *y, double swing_db) {
    add_swinging_noise(x, y, g_split, 20.0, swing_db, SR);
    add_swinging_noise(x + g_split, y + g_split, g_n - g_split, 20.0, swing_db, SR);
}

static void test_transformations(void **state) {
    (void)state;
    float *y = malloc((size_t)g_n * sizeof *y), *lo = malloc((size_t)g_n * sizeof *lo);
    assert_non_null(y);
    assert_non_null(lo);
    excerpts(g_marked, g_n, "marked", 1); /* excerpts on and off the search grid alike */
    for (int g = -1; g <= 1; g += 2) {
        double gain = pow(10.0, g * 6.0 / 20.0);
        for (int64_t i = 0; i < g_n; i++) y[i] = (float)(g_marked[i] * gain);
        excerpts(y, g_n, g < 0 ? "gain -6 dB" : "gain +6 dB", 1);
    }
    SRC_DATA d = {.data_in = g_marked, .input_frames = (long)g_n, .data_out = lo,
                  .output_frames = (long)g_n, .src_ratio = 16000.0 / 24000.0};
    assert_int_equal(src_simple(&d, SRC_SINC_MEDIUM_QUALITY, 1), 0);
    SRC_DATA u = {.data_in = lo, .input_frames = d.output_frames_gen, .data_out = y,
                  .output_frames = (long)g_n, .src_ratio = 24000.0 / 16000.0};
    assert_int_equal(src_simple(&u, SRC_SINC_MEDIUM_QUALITY, 1), 0);
    excerpts(y, u.output_frames_gen, "resampled 16 kHz and back", 1);
    add_noise(g_marked, y, 0.0);
    /* the detector weighs each vote by what the noise leaves of it where the excerpt has pauses
       to measure the noise in: 52/58 3 s excerpts found (those missed lie where a clip is
       quieter than its mean), every 10 s excerpt found and its payload recovered (espeak-ng's
       six voices: 707/708 and 336/336, docs/provenance.md) */
    const shares noisy = excerpts(y, g_n, "white noise at 20 dB SNR", 0);
    assert_goal(noisy.found >= 0.85 * noisy.n3);
    assert_goal(noisy.found10 == noisy.n10);
    assert_goal(noisy.decoded == noisy.n10);
    qv_watermark_report r = detect(y, g_n); /* the whole 60 s: score about 33, the payload */
    assert_goal(r.score_all >= 2.0 * QV_WATERMARK_PRESENT);
    assert_goal(r.all.payload_ok && r.all.payload == payload);
    add_noise(g_speech, y, 0.0);
    assert_false(detect(y, g_n).present);
    /* noise that comes and goes, 10 dB louder in one second than in the next (20 dB SNR on
       average): an excerpt's floor is its quieter noise, which weighs the loud seconds down less
       than their noise would, but more than plain weights do (52/58 found, 26/26 payloads; the
       clips' count moves by two with the payload, whose symbols share the level's budget) */
    add_noise(g_marked, y, 10.0);
    const shares swing = excerpts(y, g_n, "noise 20 dB, 10 dB swing", 0);
    assert_goal(swing.found >= 0.85 * swing.n3);
    assert_goal(swing.found10 == swing.n10);
    assert_goal(swing.decoded == swing.n10);
    add_noise(g_speech, y, 10.0);
    assert_false(detect(y, g_n).present);
    free(lo);
    free(y);
}

static void write_wav(const char *path, const float *x, int64_t n) {
    SF_INFO si = {.samplerate = SR, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_PCM_16};
    SNDFILE *f = sf_open(path, SFM_WRITE, &si);
    assert_non_null(f);
    assert_int_equal(sf_writef_float(f, x, n), n);
    sf_close(f);
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
                        "&& opusenc --quiet --bitrate 32 m.wav m.opus "
                        "&& opusdec --quiet m.opus mo.wav "
                        "&& opusenc --quiet --bitrate 32 u.wav u.opus "
                        "&& opusdec --quiet u.opus uo.wav",
                        tmp_dir),
                     0);
    static const char *const files[] = {"m.mp3", "mo.wav", "u.mp3", "uo.wav"};
    static const char *const what[] = {"MP3 64 kbit/s", "Opus 32 kbit/s"};
    for (int i = 0; i < 4; i++) {
        int64_t n;
        float *x = load(tmp_path(files[i]), &n);
        const shares got = i < 2 ? excerpts(x, n, what[i], 0) : (shares){0};
        if (i >= 2) assert_false(detect(x, n).present);
        if (i == 0) { /* MP3: 57/58 of the clips' 3 s excerpts found (espeak-ng's six voices:
                       * 695/708; excerpts off the search grid lose most, and the count moves by
                       * two with the payload), 26/26 10 s payloads (espeak-ng: 336/336), the
                       * whole 60 s with its payload (score about 40) */
            assert_goal(got.found >= 0.93 * got.n3);
            assert_goal(got.decoded == got.n10);
            qv_watermark_report r = detect(x, n);
            assert_goal(r.score_all >= 3.0 * QV_WATERMARK_PRESENT);
            assert_goal(r.all.payload_ok && r.all.payload == payload);
        }
        if (i == 1) { /* Opus: no 3 s excerpt, but the whole 60 s (score about 8; espeak-ng's
                       * 120 s 11-22, five of six with the payload) */
            long_excerpts(x, n, "Opus 32 kbit/s, longer");
            assert_goal(detect(x, n).present);
        }
        free(x);
    }
}

/* After Opus 32 kbit/s no 3 s window keeps the mark, but longer ones do: a marked minute of
 * espeak-ng speech (each of the six voices) between 75 s of unmarked speech on each side is one
 * range, holding most of the marked minute (found in windows longer than 3 s; docs/provenance.md). */
static void test_long_after_opus(void **state) {
    (void)state;
    if (sh("command -v espeak-ng opusenc opusdec >/dev/null") != 0) {
        printf("  espeak-ng/opus-tools missing (scripts/deps.sh installs them): skipped\n");
        skip();
    }
    for (int v = 0; v < 6; v++) {
        int64_t n;
        float *x = load(espeak_speech(v), &n);
        assert_true(n >= 210 * SR);
        assert_int_equal(qv_watermark_mark(payload, x + 75 * SR, 60 * SR), QV_OK);
        write_wav(tmp_path("long.wav"), x, 210 * SR);
        free(x);
        assert_int_equal(sh("cd %s && opusenc --quiet --bitrate 32 long.wav long.opus && "
                            "opusdec --quiet long.opus long.o.wav", tmp_dir),
                         0);
        x = load(tmp_path("long.o.wav"), &n);
        qv_watermark_report r = detect(x, n);
        printf("  espeak-ng %-6s best 3 s window %.2f, the whole %.2f;", voices[v], r.score,
               r.score_all);
        for (int i = 0; i < r.n_ranges; i++)
            printf(" range %.2f - %.2f s (score %.2f, payload %s)", r.ranges[i].start_s,
                   r.ranges[i].end_s, r.ranges[i].score,
                   r.ranges[i].payload_ok && r.ranges[i].payload == payload ? "ok" : "not found");
        printf("\n");
        /* one range holding most of the marked minute: after Opus a block's vote is weak, and
         * where the mark ends is known to some seconds, now and then to 25 (it: 75.5-160.3 s) */
        assert_int_equal(r.n_ranges, 1);
        const double a = r.ranges[0].start_s, b = r.ranges[0].end_s;
        assert_true(fmin(b, 135.0) - fmax(a, 75.0) >= 45.0 && b - a <= 90.0);
        free(x);
    }
}

/* sample_rate 16000 (docs/server.md): the encoder marks at 24 kHz, then resamples; the 16 kHz
 * WAV it writes is read by voicefmt detect (resampled to 24 kHz on input) with the payload the
 * provenance names, as the 24 kHz file is. */
/* qvoice's own lossy outputs (the one encoder, what speak and the server write): the marked
 * clips encoded as MP3, Ogg Vorbis and Opus at the encoder's bitrates and decoded by libsndfile
 * keep the mark: 98 % of 3 s excerpts (Ogg Vorbis at its best rate at 24 kHz mono, 99 kbit/s, 57
 * of 58; MP3 and Opus 58), every 10 s payload. */
static void test_own_codecs(void **state) {
    (void)state;
    static const int formats[] = {QV_FORMAT_MP3, QV_FORMAT_OGG, QV_FORMAT_OPUS};
    qv_provenance prov = qv_provenance_default();
    prov.watermark = 0; /* the samples are marked already */
    for (int i = 0; i < 3; i++) {
        uint8_t *bytes;
        size_t nb;
        char path[512], what[64];
        enum qv_status st = qv_audio_encode(formats[i], g_marked, g_n, &prov, &bytes, &nb);
        if (st == QV_E_UNSUPPORTED) continue; /* this libsndfile cannot write it */
        assert_int_equal(st, QV_OK);
        snprintf(path, sizeof path, "%s", tmp_path(qv_format_name(formats[i])));
        tmp_write(path, bytes, nb);
        qv_free(bytes);
        int64_t n;
        float *x = load(path, &n);
        snprintf(what, sizeof what, "qvoice %s, %.0f kbit/s", qv_format_name(formats[i]),
                 8.0 * (double)nb / ((double)g_n / SR) / 1000.0);
        const shares got = excerpts(x, n, what, 0);
        assert_goal(got.found >= 0.98 * got.n3); /* Ogg Vorbis at its best, 99 kbit/s: 57/58 */
        assert_goal(got.decoded == got.n10);
        free(x);
    }
}

static void test_output_rate(void **state) {
    (void)state;
    qv_provenance p = qv_provenance_default();
    snprintf(p.voice_id, sizeof p.voice_id, "speaker:ryan");
    const uint32_t want = qv_watermark_payload(p.voice_id, p.model_fingerprint);
    double score[2];
    for (int k = 0; k < 2; k++) {
        const int hz = k ? 16000 : SR;
        uint8_t *b;
        size_t nb;
        assert_int_equal(qv_audio_encode_at(QV_FORMAT_WAV, hz, g_speech, g_n, &p, &b, &nb), 0);
        FILE *f = fopen(tmp_path("rate.wav"), "wb");
        assert_true(f && fwrite(b, 1, nb, f) == nb);
        fclose(f);
        qv_free(b);
        qv_watermark_report r = qv_watermark_default_report();
        assert_int_equal(qv_watermark_detect_file(tmp_path("rate.wav"), 0, &r), QV_OK);
        printf("  written at %d Hz: score %.1f, payload %08x%s\n", hz, r.score_all, r.all.payload,
               r.all.payload_ok ? " (ok)" : "");
        assert_true(r.present && r.all.payload_ok && r.all.payload == want);
        score[k] = r.score_all;
        assert_int_equal(sh("bin/voicefmt detect --json %s > %s", tmp_path("rate.wav"),
                            tmp_path("rate.json")), 0);
        char hex[32];
        snprintf(hex, sizeof hex, "\"%08x\"", want); /* the payload, in hex */
        assert_true(file_has(tmp_path("rate.json"), hex));
    }
    assert_true(score[1] > 0.8 * score[0]);
}

/* 10 s unmarked, 20 s marked, 10 s unmarked: one range, about where the marked part is; two
 * outputs joined: two ranges, one payload each. */
static void test_concatenation(void **state) {
    (void)state;
    const int64_t n = 40 * SR;
    float *y = malloc((size_t)n * sizeof *y);
    assert_non_null(y);
    memcpy(y, g_speech + 35 * SR, 10 * SR * sizeof *y);
    memcpy(y + 10 * SR, g_marked + 5 * SR, 20 * SR * sizeof *y);
    memcpy(y + 30 * SR, g_speech + 45 * SR, 10 * SR * sizeof *y);
    qv_watermark_report r = detect(y, n);
    for (int i = 0; i < r.n_ranges; i++)
        printf("  range %.2f - %.2f s, score %.2f, payload %s %08x\n", r.ranges[i].start_s,
               r.ranges[i].end_s, r.ranges[i].score, r.ranges[i].payload_ok ? "ok" : "not found",
               r.ranges[i].payload);
    assert_int_equal(r.n_ranges, 1);
    assert_true(fabs(r.ranges[0].start_s - 10.0) <= 1.5);
    assert_true(fabs(r.ranges[0].end_s - 30.0) <= 1.5);
    assert_true(payload_found(&r));
    /* two outputs joined, each marked on its own (the first 20.05 s long, so the second's grid
     * is not the first's): two ranges, each with its own payload */
    const int64_t n1 = 20 * SR + 1234, n2 = n - n1;
    memcpy(y, g_speech, (size_t)(n1 + n2) * sizeof *y);
    assert_int_equal(qv_watermark_mark(payload, y, n1), QV_OK);
    assert_int_equal(qv_watermark_mark(payload ^ 0x00ff00ffu, y + n1, n2), QV_OK);
    r = detect(y, n1 + n2);
    for (int i = 0; i < r.n_ranges; i++)
        printf("  joined: range %.2f - %.2f s, score %.2f, payload %s %08x\n", r.ranges[i].start_s,
               r.ranges[i].end_s, r.ranges[i].score, r.ranges[i].payload_ok ? "ok" : "not found",
               r.ranges[i].payload);
    assert_int_equal(r.n_ranges, 2);
    assert_true(r.ranges[0].payload_ok && r.ranges[0].payload == payload);
    assert_true(r.ranges[1].payload_ok && r.ranges[1].payload == (payload ^ 0x00ff00ffu));
    assert_true(fabs(r.ranges[0].end_s - 20.05) <= 1.5 && fabs(r.ranges[1].start_s - 20.05) <= 1.5);
    free(y);
}

/* Marked output whose quietest frames are no noise floor: the synthetic checkpoint's speech, 4.48 s
 * of steady, noise-like sound whose first 100 ms are 13 dB under the rest (weighed as noise, its
 * every vote went to 0), as it comes out and faded in and out by 0.3 s (after marking, as an
 * editor or a player does); 6 s of the clips faded the same. */
static void test_fades(void **state) {
    (void)state;
    qv_model *m = test_model_load("tiny-cv");
    qv_params p = qv_model_params(m);
    p.max_frames = 56, p.n_threads = 1;
    qv_synth *sy;
    assert_int_equal(qv_synth_new(&sy, m, &p), QV_OK);
    qv_synth_request r = qv_synth_default_request();
    r.text = "A short answer, spoken by a preset voice, then faded in and out by a player.";
    r.speaker = "ryan";
    qv_pcm_buffer out = {.struct_size = sizeof out};
    assert_int_equal(qv_synth_run(sy, &r, qv_pcm_collect, &out, NULL), QV_OK);
    qv_synth_free(sy);
    qv_model_free(m);
    assert_int_equal(qv_watermark_mark(payload, out.pcm, out.n), QV_OK);
    for (int c = 0; c < 3; c++) {
        const int64_t len = c == 2 ? 6 * SR : out.n, k = c ? 3 * SR / 10 : 0;
        float *x = malloc((size_t)len * sizeof *x);
        assert_non_null(x);
        memcpy(x, c == 2 ? g_marked + 20 * SR : out.pcm, (size_t)len * sizeof *x);
        for (int64_t i = 0; i < k; i++) {
            x[i] *= (float)i / (float)k;
            x[len - 1 - i] *= (float)i / (float)k;
        }
        qv_watermark_report rep = detect(x, len);
        printf("  %-44s %s, score %5.2f, payload %s\n",
               c == 0   ? "tiny-cv speech, 4.48 s, as it comes out"
               : c == 1 ? "the same, faded in and out by 0.3 s"
                        : "the clips, 6 s, faded in and out by 0.3 s",
               rep.present ? "found" : "not found", rep.score, payload_found(&rep) ? "ok" : "no");
        assert_true(rep.present && payload_found(&rep));
        free(x);
    }
    qv_free(out.pcm);
}

/* Unmarked audio of many kinds, as one long signal per kind: the detector scores every 3 s
 * window (one every 107 ms block). Issue 28 allows 1 window in 10,000 found: the windows in and
 * around a range found are detected one by one and counted; the whole input must not be found,
 * nor a range by the windows longer than 3 s alone (a range none of whose 3 s windows is found).
 * The espeak-ng speech is made once into build/test_watermark/ (the test runs from the repo
 * root; remove the directory to remake it). */
typedef struct {
    int64_t windows, found, long_only; /* long_only: ranges no 3 s window of which is found */
    double zmax;
} null_tally;

static void null_run(const float *x, int64_t n, const char *what, null_tally *t) {
    qv_watermark_report r = detect(x, n);
    const int64_t windows = n / QV_WATERMARK_DELAY - 26, w = 3 * SR;
    int64_t found = 0;
    for (int i = 0; i < r.n_ranges; i++) {
        const int64_t before = found;
        for (int64_t a = (int64_t)((r.ranges[i].start_s - 3.0) * SR);
             a + w <= (int64_t)((r.ranges[i].end_s + 3.0) * SR); a += QV_WATERMARK_DELAY)
            if (a >= 0 && a + w <= n) found += detect(x + a, w).present;
        t->long_only += found == before; /* found by the longer windows alone */
    }
    printf("  %-34s %6.0f s, %5lld windows: best %5.2f, %lld found\n", what, (double)n / SR,
           (long long)(windows > 0 ? windows : 0), r.score, (long long)found);
    assert_true(r.score_all < QV_WATERMARK_PRESENT);
    assert_int_equal(r.ranges_dropped, 0);
    if (r.score > t->zmax) t->zmax = r.score;
    t->windows += windows > 0 ? windows : 0, t->found += found;
}

static void test_false_positives(void **state) {
    (void)state;
    null_tally nt = {0};
    if (sh("command -v espeak-ng >/dev/null") == 0) {
        for (int v = 0; v < 6; v++) {
            char path[64], what[64];
            snprintf(path, sizeof path, "%s", espeak_speech(v));
            snprintf(what, sizeof what, "espeak-ng %s", voices[v]);
            int64_t n;
            float *x = load(path, &n), *y = malloc((size_t)n * sizeof *y);
            assert_non_null(y);
            null_run(x, n, what, &nt);
            /* with white noise at 20 dB SNR: the detector then weighs the votes by what the
               noise leaves of them, and few loud tiles carry a window */
            add_white_noise(x, y, n, 20.0);
            snprintf(what, sizeof what, "espeak-ng %s, noise 20 dB SNR", voices[v]);
            null_run(y, n, what, &nt);
            free(x), free(y);
            /* the same speech after MP3 64 kbit/s: a codec's frames must not look like a mark */
            if (sh("command -v lame >/dev/null") != 0) continue;
            if (sh("test -s build/test_watermark/%d.mp3 || lame --quiet -b 64 "
                   "build/test_watermark/%d.wav build/test_watermark/%d.mp3", v, v, v) != 0)
                fail_msg("lame could not write build/test_watermark/%d.mp3", v);
            snprintf(path, sizeof path, "build/test_watermark/%d.mp3", v);
            snprintf(what, sizeof what, "espeak-ng %s, MP3 64 kbit/s", voices[v]);
            x = load(path, &n);
            null_run(x, n, what, &nt);
            free(x);
        }
    } else {
        printf("  espeak-ng missing (scripts/deps.sh installs it): its speech is left out\n");
    }
    null_run(g_speech, g_n, "the bundled clips", &nt);
    const int64_t n = 120 * SR;
    float *y = malloc((size_t)n * sizeof *y);
    assert_non_null(y);
    uint64_t s = 99;
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)(0.1 * ((double)((s = s * 6364136223846793005ull + 1) >> 11) * 0x1.0p-53 -
                              0.5));
    null_run(y, n, "white noise", &nt);
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)(0.2 * sin(2.0 * M_PI * 1000.0 * i / SR) +
                       0.1 * sin(2.0 * M_PI * 2637.0 * i / SR));
    null_run(y, n, "tones 1000 + 2637 Hz", &nt);
    for (int64_t i = 0; i < n; i++) {
        double t = (double)(i % (30 * SR)) / SR;
        y[i] = (float)(0.3 * sin(2.0 * M_PI * (200.0 * t + 100.0 * t * t)));
    }
    null_run(y, n, "sweeps 200 Hz - 6.2 kHz", &nt);
    chords(y, n);
    null_run(y, n, "chords", &nt);
    free(y);
    printf("  %lld 3 s windows of unmarked audio, %lld found; best score %.2f (presence %.1f); %lld "
           "ranges found by windows longer than 3 s alone\n",
           (long long)nt.windows, (long long)nt.found, nt.zmax, QV_WATERMARK_PRESENT,
           (long long)nt.long_only);
    assert_true(nt.found * 10000 <= nt.windows);
    assert_int_equal(nt.long_only, 0);
    if (sh("command -v espeak-ng >/dev/null") == 0) assert_true(nt.windows >= 10000);
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
    static float nan_buf[48000];
    for (int i = 0; i < 48000; i++) nan_buf[i] = i % 3 ? NAN : INFINITY;
    assert_int_equal(qv_watermark_detect(nan_buf, 48000, &r), QV_OK);
    assert_false(r.present);
    assert_int_equal(qv_watermark_mark(payload, NULL, 10), QV_E_INVALID);
    qv_watermark *w = (qv_watermark *)&r; /* the detector takes the synthetic flag as known */
    assert_int_equal(qv_watermark_new(&w, payload & ~QV_WATERMARK_SYNTHETIC), QV_E_INVALID);
    assert_null(w);
    assert_non_null(strstr(qv_last_error(), "synthetic flag"));
    assert_int_equal(qv_watermark_mark(payload & ~QV_WATERMARK_SYNTHETIC, nan_buf, 10), QV_E_INVALID);
    assert_int_equal(qv_watermark_mark(payload, nan_buf, 0), QV_OK);
    assert_int_equal(qv_watermark_detect_file("tests/audio/missing.wav", 0, &r), QV_E_AUDIO);
    assert_non_null(strstr(qv_last_error(), "missing.wav"));
    uint32_t a = qv_watermark_payload("voice", "model");
    uint32_t b = qv_watermark_payload("voice", "model2");
    assert_true(a & QV_WATERMARK_SYNTHETIC);
    assert_int_equal(a, qv_watermark_payload("voice", "model"));
    assert_int_not_equal(a, b);
    assert_int_equal(qv_watermark_payload(NULL, NULL), qv_watermark_payload("", ""));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_equals_whole),
        cmocka_unit_test(test_mark_level),
        cmocka_unit_test(test_transformations),
        cmocka_unit_test(test_codecs),
        cmocka_unit_test(test_long_after_opus),
        cmocka_unit_test(test_own_codecs),
        cmocka_unit_test(test_output_rate),
        cmocka_unit_test(test_concatenation),
        cmocka_unit_test(test_fades),
        cmocka_unit_test(test_false_positives),
        cmocka_unit_test(test_arguments),
    };
    if (getenv("QVT_FILTER")) cmocka_set_test_filter(getenv("QVT_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
