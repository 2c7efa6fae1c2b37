/* test_speak_ux.c — speak's formats and flags (issue 15) on the tiny CustomVoice model: every
 * output format opens with libsndfile at 24 kHz mono with the WAV's length (exactly for the
 * lossless ones, within the codec's padding for Ogg Vorbis, Opus and MP3), -o - --format writes
 * the same bytes to a pipe as to a file, --loudness meets its target measured independently
 * with libebur128 (±0.5 LU) and --json reports it, each usage error exits 2 with one line on
 * stderr, --version reads "speak (qvoice) X.Y.Z", and a batch from stdin names a malformed
 * line's number. Runs with cwd = repo root.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>
#include <cmocka.h>
#include <ebur128.h>
#include <math.h>
#include <sndfile.h>

#include "include/qvoice.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"

static char speak[1200]; /* "bin/speak -m MODEL -s ryan --seed 3 --max-seconds 1 -q" */

static int group_setup(void **st) {
    if (tmpdir_setup(st)) return -1;
    const char *cache = test_cache_dir();
    snprintf(speak, sizeof speak,
             "bin/speak -m %s/tiny-cv -s ryan --seed 3 --max-seconds 1 -q -t 'Hello there.'",
             cache);
    return 0;
}

/* Opens path with libsndfile (raw s16le 24 kHz mono when raw) and reads it whole; *n frames. */
static float *read_audio(const char *path, int raw, SF_INFO *info) {
    memset(info, 0, sizeof *info);
    if (raw) {
        info->samplerate = 24000, info->channels = 1;
        info->format = SF_FORMAT_RAW | SF_FORMAT_PCM_16 | SF_ENDIAN_LITTLE;
    }
    SNDFILE *f = sf_open(path, SFM_READ, info);
    if (!f) fail_msg("%s: %s", path, sf_strerror(NULL));
    float *x = malloc((size_t)(info->frames > 0 ? info->frames : 1) * sizeof *x);
    assert_non_null(x);
    assert_int_equal(sf_readf_float(f, x, info->frames), info->frames);
    sf_close(f);
    return x;
}

static void test_formats(void **st) {
    (void)st;
    static const char *const ext[] = {"wav", "flac", "pcm", "ogg", "opus", "mp3"};
    SF_INFO ref;
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
        char name[16];
        snprintf(name, sizeof name, "a.%s", ext[i]);
        if (sh("%s -o %s", speak, tmp_path(name))) fail_msg("speak -o %s failed", name);
        SF_INFO info;
        free(read_audio(tmp_path(name), !strcmp(ext[i], "pcm"), &info));
        printf("  %-4s %6ld bytes, %ld frames at %d Hz\n", ext[i], file_bytes(tmp_path(name)),
               (long)info.frames, info.samplerate);
        assert_int_equal(info.samplerate, 24000);
        assert_int_equal(info.channels, 1);
        if (i == 0) ref = info;
        if (i < 3) /* lossless: the same samples */
            assert_int_equal(info.frames, ref.frames);
        else /* lossy: the encoder's delay and padding, at most two MP3 granules */
            assert_true(labs((long)(info.frames - ref.frames)) <= 2 * 1152);
        assert_true(ref.frames > 12000); /* about 1 s of audio */
    }
    /* raw PCM is the WAV's data, byte for byte */
    assert_int_equal(file_bytes(tmp_path("a.pcm")), ref.frames * 2);
    assert_int_equal(sh("tail -c %ld %s | cmp -s - %s", (long)ref.frames * 2, tmp_path("a.wav"),
                        tmp_path("a.pcm")),
                     0);
}

static void test_stdout(void **st) {
    (void)st;
    static const char *const fmt[] = {"wav", "flac", "mp3"};
    for (size_t i = 0; i < sizeof fmt / sizeof *fmt; i++) {
        char file[16], piped[24];
        snprintf(file, sizeof file, "f.%s", fmt[i]);
        snprintf(piped, sizeof piped, "piped.%s", fmt[i]);
        assert_int_equal(sh("%s -o %s", speak, tmp_path(file)), 0);
        assert_int_equal(sh("%s -o - --format %s | cat > %s", speak, fmt[i], tmp_path(piped)), 0);
        if (sh("cmp -s %s %s", tmp_path(file), tmp_path(piped)))
            fail_msg("-o - --format %s differs from -o %s", fmt[i], file);
    }
    /* --stream -o - --format pcm is the raw stream */
    assert_int_equal(sh("%s --stream -o - --format pcm | cat > %s", speak, tmp_path("s.pcm")), 0);
    assert_int_equal(sh("%s -o %s && cmp -s %s %s", speak, tmp_path("o.pcm"), tmp_path("o.pcm"),
                        tmp_path("s.pcm")),
                     0);
}

/* Integrated loudness of a file, measured here with libebur128. */
static double measure_lufs(const char *path) {
    SF_INFO info;
    float *x = read_audio(path, 0, &info);
    ebur128_state *s = ebur128_init(1, (unsigned long)info.samplerate, EBUR128_MODE_I);
    double lufs = 0;
    assert_non_null(s);
    assert_int_equal(ebur128_add_frames_float(s, x, (size_t)info.frames), EBUR128_SUCCESS);
    assert_int_equal(ebur128_loudness_global(s, &lufs), EBUR128_SUCCESS);
    ebur128_destroy(&s);
    free(x);
    return lufs;
}

static void test_loudness(void **st) {
    (void)st;
    const double targets[] = {-16, -30};
    for (int i = 0; i < 2; i++) {
        const char *wav = tmp_path(i ? "l30.wav" : "l16.wav"), *js = tmp_path("l.json");
        assert_int_equal(sh("%s --loudness %g --json -o %s > %s", speak, targets[i], wav, js), 0);
        const double got = measure_lufs(wav);
        FILE *f = fopen(js, "r");
        char line[2048] = "";
        assert_non_null(f);
        assert_non_null(fgets(line, sizeof line, f));
        fclose(f);
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        const cJSON *rep = cJSON_GetObjectItem(j, "loudness_lufs");
        assert_true(cJSON_IsNumber(rep));
        printf("  --loudness %g: measured %.2f LUFS, --json says %.2f\n", targets[i], got,
               rep->valuedouble);
        assert_true(fabs(got - targets[i]) <= 0.5);
        assert_true(fabs(rep->valuedouble - targets[i]) <= 0.5);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")));
        assert_string_equal(cJSON_GetObjectItem(j, "output")->valuestring, wav);
        assert_true(cJSON_GetObjectItem(j, "frames")->valueint > 0);
        cJSON_Delete(j);
    }
}

/* Runs speak with args; asserts exit 2 and exactly one stderr line containing needle. */
static void usage(const char *args, const char *needle) {
    const char *log = tmp_path("usage.log");
    int rc = sh("%s %s > /dev/null 2> %s", speak, args, log);
    if (rc != 2) fail_msg("speak %s: exit %d, expected 2", args, rc);
    if (!file_has(log, needle)) fail_msg("speak %s: no '%s' in stderr", args, needle);
    assert_int_equal(sh("test $(wc -l < %s) -eq 1 && grep -q '^speak: ' %s", log, log), 0);
}

static void test_usage_errors(void **st) {
    (void)st;
    usage("", "nowhere to put the audio");
    usage("--bogus -o x.wav", "unknown option '--bogus'");
    usage("-Z -o x.wav", "unknown option '-Z'");
    usage("-o", "option '-o' needs an argument");
    usage("-o x.mp4", "x.mp4: unknown extension");
    usage("-o -", "give --format");
    usage("-o - --format aiff", "--format: expected");
    usage("--format wav", "needs -o");
    usage("--stream -o - --format wav", "--format pcm");
    usage("--stream --loudness -20", "not with --stream");
    usage("--loudness 3 -o x.wav", "--loudness: expected");
    usage("--json -o - --format wav", "--json");
    usage("--threads -2 -o x.wav", "--threads");
    usage("--batch - -o x.wav", "--batch");
    usage("--speed 5 -o x.wav", "--speed: expected");
    usage("--speed 2 --dump-codes x.codes", "--speed");
}

static void test_version(void **st) {
    (void)st;
    const char *out = tmp_path("version");
    assert_int_equal(sh("bin/speak --version > %s", out), 0);
    FILE *f = fopen(out, "r");
    char line[128] = "";
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_string_equal(line, "speak (qvoice) " QV_VERSION_STRING "\n");
}

/* Jobs from stdin; a malformed line is a failed job and stderr names its line number. */
static void test_batch_stdin(void **st) {
    (void)st;
    const char *cache = test_cache_dir();
    const char *res = tmp_path("res.jsonl"), *log = tmp_path("batch.log");
    int rc = sh(
        "printf '%%s\\n' '{\"text\": \"Hello there.\", \"speaker\": \"ryan\", \"output\": \"%s\"}' "
        "'{\"text\": \"Hi.\", ' | bin/speak -m %s/tiny-cv --max-seconds 1 --loudness -20 "
        "--batch - > %s 2> %s",
        tmp_path("b.opus"), cache, res, log);
    assert_int_equal(rc, 1);
    assert_true(file_has(res, "\"line\":1,\"ok\":true"));
    assert_true(file_has(res, "\"line\":2,\"ok\":false,\"error\":\"not valid JSON"));
    assert_true(file_has(res, "\"loudness_lufs\":"));
    assert_true(file_has(log, "-: line 2: not valid JSON"));
    SF_INFO info;
    free(read_audio(tmp_path("b.opus"), 0, &info));
    assert_int_equal(info.samplerate, 24000);
}

QVT_MAIN(group_setup, tmpdir_teardown, test_usage_errors, test_version, test_formats, test_stdout,
         test_loudness, test_batch_stdin)
