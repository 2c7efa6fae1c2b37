/* test_clone_cli.c — bin/clone end to end on the tiny synthetic Base ($QVOICE_CACHE/tiny-base):
 * reference hygiene as the user sees it (silence trimming, clipping fraction, too little speech,
 * a transcript far too long for the ICL window with and without --allow-xvector-fallback, a
 * second "speaker"), consent in META, --plot, --help/--version, no file left by any failure, and
 * the Base text-side bridge (TPAD = the engine's pad/bos/eos, WOVR = the Base tensors' bytes,
 * --no-wovr, v4 -> v3 -> v4 round trip, speak on tiny-cv with the v3 file).
 * Audio is generated (or cut from the bundled clip) into /tmp; reports are read from --json.
 */
#include <cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <sndfile.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "features/speech_encoder.h"
#include "engine/model.h"
#include "voicefmt/qvf.h"
#include "include/qvoice.h"
#include "checkpoint/safetensors.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/tmpdir.h"

#define CLIP "tests/audio/en_ohenry_chenevert.wav"
#define SR 24000

static char g_tiny[1024], g_dir[128];
static qva_audio g_clip;
static char *g_out, *g_err; /* stdout / stderr of the last run() */

static uint32_t g_rng = 7;
static float noise1(void) { /* uniform in [-1, 1) */
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)(g_rng >> 8) / 8388608.0f - 1.0f;
}

/* Runs a shell command with stdout/stderr captured into g_out/g_err; returns the exit status. */
static int run(const char *fmt, ...) {
    char cmd[8192], full[8800], po[256], pe[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(po, sizeof po, "%s/stdout", g_dir);
    snprintf(pe, sizeof pe, "%s/stderr", g_dir);
    snprintf(full, sizeof full, "%s > %s 2> %s", cmd, po, pe);
    int st = system(full);
    free(g_out);
    free(g_err);
    g_out = tmp_read(po, NULL);
    g_err = tmp_read(pe, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void path(char *buf, size_t size, const char *name) { snprintf(buf, size, "%s/%s", g_dir, name); }

static void write_wav(const char *p, const float *x, int64_t n) {
    SF_INFO info = {.samplerate = SR, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_FLOAT};
    SNDFILE *sf = sf_open(p, SFM_WRITE, &info);
    assert_non_null(sf);
    assert_int_equal(sf_writef_float(sf, x, n), n);
    sf_close(sf);
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Number at a dotted path of the --json output ("hygiene.trim.start_s"); NAN if absent. */
static double jnum(const cJSON *j, const char *dotted) {
    char key[256];
    snprintf(key, sizeof key, "%s", dotted);
    const cJSON *o = j;
    for (char *k = strtok(key, "."); k && o; k = strtok(NULL, ".")) o = cJSON_GetObjectItemCaseSensitive(o, k);
    return o && cJSON_IsNumber(o) ? o->valuedouble : o && cJSON_IsBool(o) ? (double)cJSON_IsTrue(o) : NAN;
}

static cJSON *json_out(void) {
    cJSON *j = cJSON_Parse(g_out);
    if (!j) fprintf(stderr, "not JSON:\n%s\nstderr:\n%s\n", g_out, g_err);
    assert_non_null(j);
    return j;
}

static int setup(void **state) {
    (void)state;
    const char *cache = test_cache_dir();
    snprintf(g_tiny, sizeof g_tiny, "%s/tiny-base", cache);
    snprintf(g_dir, sizeof g_dir, "/tmp/test_clone_cli_%d", (int)getpid());
    mkdir(g_dir, 0700);
    char err[512];
    if (qva_audio_load(&g_clip, CLIP, 30.0, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    if (access("bin/clone", X_OK)) {
        fprintf(stderr, "test_clone_cli: bin/clone missing (run make)\n");
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    qva_audio_free(&g_clip);
    free(g_out);
    free(g_err);
    return 0;
}

static void test_help_version(void **state) {
    (void)state;
    assert_int_equal(run("bin/clone --help"), 0);
    const char *must[] = {"SYNOPSIS", "--no-hygiene", "--allow-xvector-fallback", "--speaker-threshold",
                          "--consent", "--plot", "(default 30)", "EXIT STATUS", "EXAMPLE"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
        if (!strstr(g_out, must[i])) fprintf(stderr, "--help lacks %s\n", must[i]);
        assert_non_null(strstr(g_out, must[i]));
    }
    assert_int_equal(run("bin/clone --version"), 0);
    assert_non_null(strstr(g_out, "clone (qvoice)"));
    assert_int_equal(run("bin/clone --speaker-threshold 2 -m x a.wav -o b.qvoice"), 2);
    assert_int_equal(run("bin/clone --no-hygiene --allow-xvector-fallback -m x a.wav -o b.qvoice"), 2);
}

/* 2 s of -80 dBFS room tone, 8 s of the clip, 3 s of room tone: the report says what was cut. */
static void test_silence_padding(void **state) {
    (void)state;
    int64_t lead = 2 * SR, body = 8 * SR, tail = 3 * SR, n = lead + body + tail;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = 1e-4f * noise1();
    for (int64_t i = 0; i < body; i++) x[lead + i] += g_clip.samples[SR + i];
    char wav[256], out[256];
    path(wav, sizeof wav, "padded.wav");
    path(out, sizeof out, "padded.qvoice");
    write_wav(wav, x, n);
    free(x);
    assert_int_equal(run("bin/clone -m %s %s -o %s --json", g_tiny, wav, out), 0);
    cJSON *j = json_out();
    double start = jnum(j, "hygiene.trim.start_s"), end = jnum(j, "hygiene.trim.end_s");
    printf("  padded 2 s + 8 s + 3 s: kept %.3f-%.3f s, %.2f s voiced\n", start, end,
           jnum(j, "hygiene.trim.voiced_s"));
    assert_true(start >= 1.9 && start <= 2.3);  /* the clip's own first 50 ms may be quiet */
    assert_true(end >= 9.6 && end <= 10.1);
    assert_true(jnum(j, "xvector_seconds") < 8.1);
    cJSON_Delete(j);
    /* the human summary says it too, META records it; --plot writes the spectrogram PNG */
    char png[256];
    path(png, sizeof png, "padded.png");
    assert_int_equal(run("bin/clone -m %s %s -o %s --plot %s", g_tiny, wav, out, png), 0);
    assert_non_null(strstr(g_out, "hygiene    trim: kept"));
    char *img = tmp_read(png, NULL);
    assert_memory_equal(img, "\x89PNG", 4);
    free(img);
    qvf_voice *v = NULL;
    char err[512];
    assert_int_equal(qvf_read_file(out, 0, &v, err, sizeof err), 0);
    assert_non_null(qvf_meta_get(v, "hygiene"));
    assert_non_null(strstr(qvf_meta_get(v, "hygiene"), "\"trim\""));
    qvf_voice_free(v);
    /* --no-hygiene: the clip as given */
    assert_int_equal(run("bin/clone -m %s %s -o %s --no-hygiene --json", g_tiny, wav, out), 0);
    j = json_out();
    assert_true(fabs(jnum(j, "xvector_seconds") - 13.0) < 1e-6);
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "hygiene");
    assert_true(cJSON_IsString(h) && !strcmp(h->valuestring, "off"));
    cJSON_Delete(j);
}

/* The clip ×6, hard-clipped at ±1: the clipped fraction is reported, with a warning. */
static void test_clipping(void **state) {
    (void)state;
    int64_t n = 12 * SR;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float v = 6.0f * g_clip.samples[i];
        x[i] = v > 1.0f ? 1.0f : v < -1.0f ? -1.0f : v;
    }
    char wav[256], out[256];
    path(wav, sizeof wav, "clipped.wav");
    path(out, sizeof out, "clipped.qvoice");
    write_wav(wav, x, n);
    free(x);
    assert_int_equal(run("bin/clone -m %s %s -o %s --json", g_tiny, wav, out), 0);
    cJSON *j = json_out();
    double cf = jnum(j, "hygiene.level.clipped_fraction");
    printf("  clipped clip: fraction %.5f, gain %.2f dB; stderr: %s", cf, jnum(j, "hygiene.level.gain_db"), g_err);
    assert_true(cf > 1e-3 && cf < 0.2);
    assert_true(jnum(j, "hygiene.level.clip_warning") == 1);
    assert_true(jnum(j, "hygiene.level.gain_db") < 0); /* loud: attenuated to the target */
    assert_non_null(strstr(g_err, "warning: clipping"));
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "warnings");
    assert_true(cJSON_GetArraySize(w) >= 1);
    cJSON_Delete(j);
}

/* Refusals: exit 1, "clone: FILE: problem", and no output file. */
static void test_refusals(void **state) {
    (void)state;
    char wav[256], out[256];
    path(out, sizeof out, "refused.qvoice");
    unlink(out);
    /* 2.5 s in all */
    path(wav, sizeof wav, "short.wav");
    write_wav(wav, g_clip.samples + SR, SR * 5 / 2);
    assert_int_equal(run("bin/clone -m %s %s -o %s", g_tiny, wav, out), 1);
    printf("  2.5 s: %s", g_err);
    assert_non_null(strstr(g_err, wav));
    assert_false(exists(out));
    /* 12 s with 2 s of speech in it: too little voiced speech */
    int64_t n = 12 * SR;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = 3e-4f * noise1();
    for (int64_t i = 0; i < 2 * SR; i++) x[5 * SR + i] += g_clip.samples[SR + i];
    path(wav, sizeof wav, "little.wav");
    write_wav(wav, x, n);
    assert_int_equal(run("bin/clone -m %s %s -o %s", g_tiny, wav, out), 1);
    printf("  2 s of speech in 12 s: %s", g_err);
    assert_non_null(strstr(g_err, "voiced speech"));
    assert_non_null(strstr(g_err, "trim: kept")); /* the steps that ran are shown */
    assert_false(exists(out));
    /* --json on failure: one object with ok=false and the error */
    assert_int_equal(run("bin/clone -m %s %s -o %s --json", g_tiny, wav, out), 1);
    cJSON *j = json_out();
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "ok")));
    assert_non_null(strstr(cJSON_GetObjectItemCaseSensitive(j, "error")->valuestring, "voiced"));
    cJSON_Delete(j);
    /* digital silence */
    memset(x, 0, sizeof(float) * (size_t)n);
    path(wav, sizeof wav, "silence.wav");
    write_wav(wav, x, n);
    assert_int_equal(run("bin/clone -m %s %s -o %s", g_tiny, wav, out), 1);
    printf("  silence: %s", g_err);
    assert_false(exists(out));
    free(x);
    /* output paths that cannot be written */
    assert_int_equal(run("bin/clone -m %s %s -o %s/no/such/dir/v.qvoice", g_tiny, CLIP, g_dir), 1);
    printf("  bad output: %s", g_err);
    assert_non_null(strstr(g_err, "does not exist"));
    assert_int_equal(run("bin/clone -m %s %s -o %s", g_tiny, CLIP, g_dir), 1);
    assert_non_null(strstr(g_err, "is a directory"));
    /* unreadable audio */
    path(wav, sizeof wav, "garbage.wav");
    FILE *f = fopen(wav, "wb");
    fputs("not audio at all", f);
    fclose(f);
    assert_int_equal(run("bin/clone -m %s %s -o %s", g_tiny, wav, out), 1);
    assert_true(!strncmp(g_err, "clone: ", 7) && strstr(g_err, wav));
    assert_false(exists(out));
    /* a CustomVoice model */
    assert_int_equal(run("bin/clone -m %.*s/tiny-cv %s -o %s", (int)(strlen(g_tiny) - 10), g_tiny,
                         CLIP, out), 1);
    assert_non_null(strstr(g_err, "Base model"));
    assert_false(exists(out));
}

/* 12 s of the clip: a fitting transcript gives ICL; one far too long is refused, or dropped with
 * --allow-xvector-fallback (x-vector kept). */
static void test_transcript(void **state) {
    (void)state;
    char wav[256], out[256];
    path(wav, sizeof wav, "twelve.wav");
    path(out, sizeof out, "twelve.qvoice");
    write_wav(wav, g_clip.samples, 12 * SR);
    const char *ok = "One dollar and eighty-seven cents. That was all. And sixty cents of it was in "
                     "pennies, saved one and two at a time by bulldozing the grocer.";
    assert_int_equal(run("bin/clone -m %s %s -o %s -t '%s' --json", g_tiny, wav, out, ok), 0);
    cJSON *j = json_out();
    printf("  fitting transcript: %.1f units/voiced s, %g ICL frames\n",
           jnum(j, "hygiene.transcript.units_per_voiced_s"), jnum(j, "icl_frames"));
    /* the whole 12 s clip (after trim) plus 0.5 s of silence */
    assert_true(jnum(j, "icl_frames") >= 150 && jnum(j, "icl_frames") <= 157);
    cJSON_Delete(j);
    char *longtext = malloc(4000);
    longtext[0] = 0;
    while (strlen(longtext) + strlen(ok) + 2 < 4000) strcat(strcat(longtext, ok), " ");
    unlink(out);
    char png[256];
    path(png, sizeof png, "refused.png");
    assert_int_equal(run("bin/clone -m %s %s -o %s -t '%s' --plot %s", g_tiny, wav, out, longtext, png), 1);
    printf("  long transcript: %s", g_err);
    assert_non_null(strstr(g_err, "far too long"));
    assert_non_null(strstr(g_err, "icl window:"));
    assert_false(exists(out));
    assert_false(exists(png)); /* no partial output, the plot included */
    assert_int_equal(run("bin/clone -m %s %s -o %s -t '%s' --allow-xvector-fallback --json", g_tiny,
                         wav, out, longtext), 0);
    free(longtext);
    j = json_out();
    assert_true(jnum(j, "icl_frames") == 0);
    assert_true(jnum(j, "hygiene.transcript.fallback_xvector_only") == 1);
    assert_non_null(strstr(g_err, "far too long"));
    cJSON_Delete(j);
    qvf_voice *v = NULL;
    char err[512];
    assert_int_equal(qvf_read_file(out, 0, &v, err, sizeof err), 0);
    assert_int_equal(v->n_frames, 0);
    assert_int_equal(v->enc_dim, 64);
    assert_non_null(strstr(qvf_meta_get(v, "hygiene"), "\"fallback_xvector_only\":true"));
    qvf_voice_free(v);
}

/* 10 s of white noise then 5 s of harmonic tones: random weights separate these (not real
 * voices), with the threshold raised to 0.99 (docs/robustness.md). */
static void test_second_speaker(void **state) {
    (void)state;
    int64_t n = 15 * SR, cut = 10 * SR;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < cut; i++) x[i] = 0.1f * noise1();
    for (int64_t i = cut; i < n; i++) {
        double t = (double)i / SR;
        x[i] = (float)(0.1 * (sin(2 * M_PI * 150 * t) + 0.5 * sin(2 * M_PI * 300 * t) +
                              0.3 * sin(2 * M_PI * 450 * t)));
    }
    char wav[256], out[256];
    path(wav, sizeof wav, "two.wav");
    path(out, sizeof out, "two.qvoice");
    write_wav(wav, x, n);
    free(x);
    assert_int_equal(run("bin/clone -m %s %s -o %s --speaker-threshold 0.99 --threads 2 --json", g_tiny,
                         wav, out), 0);
    cJSON *j = json_out();
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(
                                                           cJSON_GetObjectItemCaseSensitive(j, "hygiene"), "speakers"),
                                                       "flagged_s");
    printf("  noise|tones: min cos %.4f, %d flagged range(s); %s", jnum(j, "hygiene.speakers.min_cos"),
           cJSON_GetArraySize(fl), g_err);
    assert_true(cJSON_GetArraySize(fl) >= 1);
    double a = cJSON_GetArrayItem(cJSON_GetArrayItem(fl, 0), 0)->valuedouble;
    double b = cJSON_GetArrayItem(cJSON_GetArrayItem(fl, 0), 1)->valuedouble;
    assert_true(b > a && b > 8.0); /* the flagged range reaches into the tones */
    assert_non_null(strstr(g_err, "another speaker?"));
    /* windows shared across 2 threads or run on 1: the same vectors */
    double mc2 = jnum(j, "hygiene.speakers.min_cos");
    cJSON_Delete(j);
    assert_int_equal(run("bin/clone -m %s %s -o %s --speaker-threshold 0.99 --threads 1 --json", g_tiny,
                         wav, out), 0);
    j = json_out();
    printf("  min cos with 2 threads %.4f, with 1 thread %.4f\n", mc2, jnum(j, "hygiene.speakers.min_cos"));
    assert_true(jnum(j, "hygiene.speakers.min_cos") == mc2);
    cJSON_Delete(j);
    /* default threshold (0.5): no warning on random weights */
    assert_int_equal(run("bin/clone -m %s %s -o %s", g_tiny, wav, out), 0);
    assert_null(strstr(g_err, "another speaker?"));
}

/* The README's clone example as written: the bundled 30 s clip with the transcript of all of it
 * (the story's opening paragraph; the words were not checked by ear: see scripts/demo.sh). The
 * ICL span is the whole trimmed clip; the same transcript against the auto window is refused with
 * the numbers, and --icl-window auto without a transcript reports the span to transcribe. */
#define FULL_TRANSCRIPT                                                                            \
    "One dollar and eighty-seven cents. That was all. And sixty cents of it was in pennies. "   \
    "Pennies saved one and two at a time by bulldozing the grocer and the vegetable man and the " \
    "butcher until one's cheeks burned with the silent imputation of parsimony that such close " \
    "dealing implied. Three times Della counted it. One dollar and eighty-seven cents. And the " \
    "next day would be Christmas. There was clearly nothing to do but flop down on the shabby " \
    "little couch and howl. So Della did it. Which instigates the moral reflection that life is " \
    "made up of sobs, sniffles, and smiles, with sniffles predominating."
static void test_readme_example(void **state) {
    (void)state;
    char out[256];
    path(out, sizeof out, "me.qvoice");
    assert_int_equal(run("bin/clone -m %s %s -t \"%s\" -l English --consent \"I agree to my voice "
                         "being cloned.\" -o %s --json", g_tiny, CLIP, FULL_TRANSCRIPT, out), 0);
    cJSON *j = json_out();
    double a = jnum(j, "hygiene.icl_window.start_s"), b = jnum(j, "hygiene.icl_window.end_s");
    printf("  README example: ICL span %.2f-%.2f s (%s), %.2f s voiced, %.1f letters/voiced s, "
           "%g frames; loudness %.1f LUFS -> %.1f LUFS\n", a, b,
           cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(
               cJSON_GetObjectItemCaseSensitive(j, "hygiene"), "icl_window"), "mode")->valuestring,
           jnum(j, "hygiene.icl_window.voiced_s"), jnum(j, "hygiene.transcript.units_per_voiced_s"),
           jnum(j, "icl_frames"), jnum(j, "loudness_lufs"), jnum(j, "hygiene.level.out_lufs"));
    assert_true(a < 0.1 && b > 29.9);                     /* the whole clip (trimmed) */
    assert_true(jnum(j, "icl_frames") >= 380 && jnum(j, "icl_frames") <= 382); /* + 0.5 s */
    assert_true(jnum(j, "hygiene.transcript.plausible") == 1);
    assert_true(fabs(jnum(j, "hygiene.level.out_lufs") + 20.0) < 1e-3);
    assert_true(jnum(j, "loudness_lufs") < -20.0);
    cJSON_Delete(j);
    qvf_voice *v = NULL;
    char err[512];
    assert_int_equal(qvf_read_file(out, 0, &v, err, sizeof err), 0);
    assert_string_equal(v->transcript, FULL_TRANSCRIPT);
    qvf_voice_free(v);
    /* the same transcript for the auto window: refused, with the numbers */
    unlink(out);
    assert_int_equal(run("bin/clone -m %s %s -t \"%s\" --icl-window auto -o %s", g_tiny, CLIP,
                         FULL_TRANSCRIPT, out), 1);
    printf("  auto window: %s", g_err);
    assert_non_null(strstr(g_err, "icl window:"));
    assert_non_null(strstr(g_err, "(auto)"));
    assert_non_null(strstr(g_err, "485 letter-equivalents"));
    assert_non_null(strstr(g_err, "far too long"));
    assert_false(exists(out));
    /* auto without a transcript: the span is printed with the request for its transcript */
    assert_int_equal(run("bin/clone -m %s %s --icl-window auto", g_tiny, CLIP), 0);
    printf("  %s", g_out);
    assert_non_null(strstr(g_out, "ICL window: "));
    assert_non_null(strstr(g_out, "give the transcript of exactly these seconds"));
    assert_non_null(strstr(g_out, "--icl-window "));
    /* a given range */
    assert_int_equal(run("bin/clone -m %s %s --icl-window 0-15 -t \"%s\" -o %s --json", g_tiny,
                         CLIP, "One dollar and eighty-seven cents. That was all. And sixty cents "
                         "of it was in pennies. Pennies saved one and two at a time by bulldozing "
                         "the grocer and the vegetable man and the butcher until one's cheeks "
                         "burned with the silent imputation of parsimony that such close dealing "
                         "implied.", out), 0);
    j = json_out();
    assert_true(fabs(jnum(j, "hygiene.icl_window.end_s") - 15.0) < 1e-3);
    assert_true(jnum(j, "icl_frames") >= 193 && jnum(j, "icl_frames") <= 194); /* 15 s + 0.5 s */
    cJSON_Delete(j);
    /* flags: -j is --threads everywhere, unknown options in one line */
    assert_int_equal(run("bin/clone -j x -m %s %s -o %s", g_tiny, CLIP, out), 2);
    assert_non_null(strstr(g_err, "--threads"));
    assert_int_equal(run("bin/clone --bogus -m %s %s -o %s", g_tiny, CLIP, out), 2);
    assert_string_equal(g_err, "clone: unknown option '--bogus' (see clone --help)\n");
    assert_int_equal(run("bin/clone --icl-window 5 -m %s %s -o %s", g_tiny, CLIP, out), 2);
}

static void test_consent(void **state) {
    (void)state;
    char out[256];
    path(out, sizeof out, "consent.qvoice");
    assert_int_equal(run("USER=tester bin/clone -m %s %s -o %s --consent 'I, the speaker, agree.' "
                         "--consent-speaker 'Henry Chenevert' --consent-scope 'audiobook narration'",
                         g_tiny, CLIP, out), 0);
    qvf_voice *v = NULL;
    char err[512];
    assert_int_equal(qvf_read_file(out, 0, &v, err, sizeof err), 0);
    assert_string_equal(qvf_meta_get(v, "consent.method"), "typed");
    assert_string_equal(qvf_meta_get(v, "consent.statement"), "I, the speaker, agree.");
    assert_string_equal(qvf_meta_get(v, "consent.speaker"), "Henry Chenevert");
    assert_string_equal(qvf_meta_get(v, "consent.scope"), "audiobook narration");
    assert_string_equal(qvf_meta_get(v, "consent.collected_by"), "tester");
    assert_null(qvf_meta_get(v, "consent.recording_sha256"));
    const char *when = qvf_meta_get(v, "consent.utc");
    assert_non_null(when);
    assert_int_equal(strlen(when), 20);
    assert_int_equal(when[19], 'Z');
    qvf_voice_free(v);
    assert_int_equal(run("bin/voicefmt inspect %s", out), 0);
    assert_non_null(strstr(g_out, "consent: typed, speaker Henry Chenevert, scope audiobook narration"));
    assert_non_null(strstr(g_out, "collected by tester"));
    assert_non_null(strstr(g_out, "statement: \"I, the speaker, agree.\""));
    /* a recording: its SHA-256 (of the bundled clip, as the consent recording here) is stored */
    assert_int_equal(run("bin/clone -m %s %s -o %s --consent-recording %s --consent-speaker H",
                         g_tiny, CLIP, out, CLIP), 0);
    assert_int_equal(qvf_read_file(out, 0, &v, err, sizeof err), 0);
    assert_string_equal(qvf_meta_get(v, "consent.method"), "recording");
    const char *sha = qvf_meta_get(v, "consent.recording_sha256");
    assert_non_null(sha);
    assert_string_equal(sha, qvf_meta_get(v, "source_sha256"));
    qvf_voice_free(v);
    /* a speaker or scope without a statement or recording is no record */
    assert_int_equal(run("bin/clone -m %s %s -o %s --consent-speaker H", g_tiny, CLIP, out), 2);
    assert_int_equal(run("bin/clone -m %s %s -o %s --consent-recording /nonexistent.wav", g_tiny,
                         CLIP, out), 1);
    assert_non_null(strstr(g_err, "/nonexistent.wav: cannot read the consent recording"));
}

/* max |a - b| over n floats; *same = bit-identical. */
static double max_abs_diff(const float *a, const float *b, size_t n, int *same) {
    double m = 0;
    *same = !memcmp(a, b, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        if (fabs((double)a[i] - b[i]) > m) m = fabs((double)a[i] - b[i]);
    return m;
}

static void assert_same_bridge(const qvf_voice *a, const qvf_voice *b) {
    assert_int_equal(a->tpad_hidden, b->tpad_hidden);
    assert_memory_equal(a->tpad, b->tpad, 12 * (size_t)a->tpad_hidden);
    assert_int_equal(a->wovr_h, b->wovr_h);
    assert_int_equal(a->wovr_th, b->wovr_th);
    assert_int_equal(a->wovr_cv, b->wovr_cv);
    size_t h = a->wovr_h, th = a->wovr_th;
    assert_memory_equal(a->wovr_fc1_w, b->wovr_fc1_w, 2 * th * th);
    assert_memory_equal(a->wovr_fc1_b, b->wovr_fc1_b, 4 * th);
    assert_memory_equal(a->wovr_fc2_w, b->wovr_fc2_w, 2 * h * th);
    assert_memory_equal(a->wovr_fc2_b, b->wovr_fc2_b, 4 * h);
    assert_memory_equal(a->wovr_codec, b->wovr_codec, 2 * (size_t)a->wovr_cv * h);
}

/* TPAD is what the engine computes for PAD/BOS/EOS on the Base model (bit for bit), WOVR holds
 * the Base tensors' bytes; --no-wovr leaves WOVR out; v4 -> v3 -> v4 keeps every field; tiny-cv
 * speaks with the v3 file. */
static void test_bridge(void **state) {
    (void)state;
    char out[256], nowovr[256], v3[256], v4[256], wav[256], err[512];
    path(out, sizeof out, "bridge.qvoice");
    path(nowovr, sizeof nowovr, "nowovr.qvoice");
    path(v3, sizeof v3, "bridge3.qvoice");
    path(v4, sizeof v4, "bridge4.qvoice");
    path(wav, sizeof wav, "bridge.wav");
    assert_int_equal(run("bin/clone -m %s %s -o %s -H -s 4 -t 'Hello there, this is a test.' --json",
                         g_tiny, CLIP, out), 0);
    cJSON *j = json_out();
    assert_true(jnum(j, "tpad") == 1 && jnum(j, "wovr") == 1);
    assert_true(jnum(j, "sections.TPAD.payload_bytes") > 0 && jnum(j, "sections.WOVR.payload_bytes") > 0);
    cJSON_Delete(j);

    qv_model *m = NULL;
    assert_int_equal(qv_model_load(&m, g_tiny), 0);
    const size_t H = (size_t)m->ck->cfg.talker.hidden_size, TH = (size_t)m->ck->cfg.text_hidden_size;
    qvf_voice *v = NULL;
    assert_int_equal(qvf_read_file(out, 0, &v, err, sizeof err), 0);
    assert_int_equal(v->tpad_hidden, H);
    assert_int_equal(v->wovr_h, H);
    assert_int_equal(v->wovr_th, TH);
    assert_int_equal(v->wovr_cv, 2048);
    assert_true(v->n_frames > 0);

    /* TPAD vs the engine: the model's text side (checkpoint/textside, which the engine's prompt
       projection runs through), and a session's PAD and EOS rows (a 1-token Base prompt: 7
       projected rows, the same direct kernel as the 3-row call) */
    float *ref = malloc(3 * H * sizeof(float));
    assert_int_equal(qvm_textside_special(&m->text, &m->ck->cfg, NULL, ref), 0);
    int same;
    double d = max_abs_diff(v->tpad, ref, 3 * H, &same);
    printf("TPAD vs the model's qvm_textside_special: max |d| %g, bit-identical %d\n", d, same);
    assert_true(same);
    qv_params p = qv_model_params(m);
    qv_session *s = NULL;
    assert_int_equal(qv_session_new(&s, m, &p), QV_OK);
    qv_request r = qv_default_request();
    const int32_t text_id[1] = {1000};
    r.text_ids = text_id, r.n_text_ids = 1;
    r.speaker_vector = v->xvector, r.n_speaker_vector = (int)H;
    assert_int_equal(qv_session_start(s, &r), QV_OK);
    double dp = max_abs_diff(v->tpad, s->pad, H, &same);
    int same_eos;
    assert_int_equal(s->n_queue, 1);
    double de = max_abs_diff(v->tpad + 2 * H, s->queue, H, &same_eos);
    printf("TPAD vs session PAD / EOS: max |d| %g / %g, bit-identical %d / %d\n", dp, de, same, same_eos);
    assert_true(same && same_eos);
    qv_session_free(s);
    free(ref);

    /* WOVR vs the Base checkpoint's tensors */
    qvm_st *st = qvm_st_open_dir(g_tiny, "model", err, sizeof err);
    assert_non_null(st);
    const char *names[5] = {"talker.text_projection.linear_fc1.weight",
                            "talker.text_projection.linear_fc1.bias",
                            "talker.text_projection.linear_fc2.weight",
                            "talker.text_projection.linear_fc2.bias",
                            "talker.model.codec_embedding.weight"};
    const void *got[5] = {v->wovr_fc1_w, v->wovr_fc1_b, v->wovr_fc2_w, v->wovr_fc2_b, v->wovr_codec};
    for (int i = 0; i < 5; i++) {
        const qvm_tensor *t = qvm_st_find(st, names[i]);
        assert_non_null(t);
        if (i == 1 || i == 3) {
            float *f = qvm_tensor_to_f32(t);
            assert_non_null(f);
            assert_memory_equal(got[i], f, (i == 1 ? TH : H) * sizeof(float));
            qvk_free(f);
        } else {
            size_t n = i == 0 ? 2 * TH * TH : i == 2 ? 2 * H * TH : 2 * 2048 * H;
            assert_true(t->n_bytes >= n);
            assert_memory_equal(got[i], t->data, n);
        }
    }
    qvm_st_close(st);
    qv_model_free(m);

    /* --no-wovr: TPAD only */
    assert_int_equal(run("bin/clone -m %s %s -o %s -H -s 4 --no-wovr", g_tiny, CLIP, nowovr), 0);
    qvf_voice *n = NULL;
    assert_int_equal(qvf_read_file(nowovr, 0, &n, err, sizeof err), 0);
    assert_int_equal(n->tpad_hidden, H);
    assert_memory_equal(n->tpad, v->tpad, 12 * H);
    assert_int_equal(n->wovr_h, 0);
    struct stat a, b;
    assert_int_equal(stat(out, &a), 0);
    assert_int_equal(stat(nowovr, &b), 0);
    printf("voice with WOVR %lld bytes, without %lld bytes\n", (long long)a.st_size, (long long)b.st_size);
    assert_true(b.st_size + (off_t)(2 * TH * TH + 2 * H * TH + 2 * 2048 * H) < a.st_size);
    qvf_voice_free(n);

    /* v4 -> v3 -> v4 keeps x-vector, ICL, META, TPAD, WOVR */
    assert_int_equal(run("bin/voicefmt convert --to v3 -o %s %s", v3, out), 0);
    assert_int_equal(run("bin/voicefmt convert --to v4 -o %s %s", v4, v3), 0);
    const char *files[2] = {v3, v4};
    for (int f = 0; f < 2; f++) {
        qvf_voice *w = NULL;
        assert_int_equal(qvf_read_file(files[f], 0, &w, err, sizeof err), 0);
        assert_int_equal(w->file_version, f ? 4 : 3);
        assert_int_equal(w->enc_dim, v->enc_dim);
        assert_memory_equal(w->xvector, v->xvector, 4 * (size_t)v->enc_dim);
        assert_int_equal(w->n_frames, v->n_frames);
        assert_memory_equal(w->codes, v->codes, 2 * QVF_N_CODEBOOKS * (size_t)v->n_frames);
        assert_string_equal(w->transcript, v->transcript);
        for (int i = 0; i < v->n_meta; i++) {
            const char *val = qvf_meta_get(w, v->meta[i].key);
            if (!val) fprintf(stderr, "META %s lost in %s\n", v->meta[i].key, files[f]);
            assert_non_null(val);
            assert_string_equal(val, v->meta[i].value);
        }
        assert_same_bridge(v, w);
        qvf_voice_free(w);
    }
    qvf_voice_free(v);

    /* the CustomVoice model speaks with the v3 file (its TPAD/WOVR are applied) */
    char cv[1100];
    snprintf(cv, sizeof cv, "%.1000s/../tiny-cv", g_tiny);
    assert_int_equal(run("bin/speak -q -m %s --voice %s -t 'Hello world.' --max-frames 4 -o %s", cv, v3, wav), 0);
    assert_true(exists(wav));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_version), cmocka_unit_test(test_silence_padding),
        cmocka_unit_test(test_clipping),     cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_transcript),   cmocka_unit_test(test_second_speaker),
        cmocka_unit_test(test_consent),
        cmocka_unit_test(test_readme_example),      cmocka_unit_test(test_bridge),
    };
    return cmocka_run_group_tests_name("clone_cli", tests, setup, teardown);
}
