/* test_engine_cli.c — bin/speak end to end on the tiny synthetic CustomVoice model
 * ($QVOICE_CACHE/tiny-cv): every preset speaker and every language give a WAV, the streamed WAV
 * (--stream -o) equals the one-shot WAV byte for byte, raw --stream equals the WAV data, a seed
 * gives identical audio for 1 and 3 threads, --dump-codes/--decode-codes round-trips, and the
 * error paths use the documented exit codes. Runs with cwd = repo root (bin/speak built by make).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static char model[1024], tmp[256];

static int run(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(cmd, sizeof cmd, "bin/speak -m %s ", model);
    vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static long file_bytes(const char *path) {
    struct stat sb;
    return stat(path, &sb) ? -1 : (long)sb.st_size;
}

static int same_file(const char *a, const char *b, long skip_a) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb && fseek(fa, skip_a, SEEK_SET) == 0;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static int setup(void **st) {
    (void)st;
    const char *cache = getenv("QVOICE_CACHE");
    snprintf(model, sizeof model, "%s/tiny-cv", cache ? cache : "cache");
    snprintf(tmp, sizeof tmp, "/tmp/qv_cli_%d", (int)getpid());
    if (mkdir(tmp, 0700)) return -1;
    return access("bin/speak", X_OK);
}

static int teardown(void **st) {
    (void)st;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *const SPEAKERS[] = {"serena",   "vivian", "uncle_fu", "ryan", "aiden",
                                       "ono_anna", "sohee",  "eric",     "dylan"};
static const char *const LANGS[] = {"auto",    "chinese",    "english", "german",
                                    "italian", "portuguese", "spanish", "japanese",
                                    "korean",  "french",     "russian"};

/* 11 runs pair the 9 speakers and 11 languages so that each occurs at least once. */
static void test_speakers_languages_stream(void **st) {
    (void)st;
    for (int i = 0; i < 11; i++) {
        const char *spk = SPEAKERS[i % 9], *lang = LANGS[i];
        char a[512], b[512], raw[512];
        snprintf(a, sizeof a, "%s/%s_%s.wav", tmp, spk, lang);
        snprintf(b, sizeof b, "%s/%s_%s_stream.wav", tmp, spk, lang);
        snprintf(raw, sizeof raw, "%s/%s_%s.raw", tmp, spk, lang);
        assert_int_equal(
            run("-q -s %s -l %s -t 'Hello world.' --max-frames 8 --seed 5 -o %s", spk, lang, a), 0);
        assert_int_equal(run("-q -s %s -l %s -t 'Hello world.' --max-frames 8 --seed 5 --stream "
                             "-o %s",
                             spk, lang, b),
                         0);
        assert_int_equal(run("-q -s %s -l %s -t 'Hello world.' --max-frames 8 --seed 5 --stream "
                             "> %s",
                             spk, lang, raw),
                         0);
        long n = file_bytes(a), n_raw = file_bytes(raw);
        printf("%-9s %-10s wav %ld bytes, stream wav %ld, raw %ld\n", spk, lang, n, file_bytes(b),
               n_raw);
        assert_true(n > 44 && n_raw > 0 && n_raw % (1920 * 2) == 0 && n_raw <= 8 * 1920 * 2);
        assert_true(same_file(a, b, 0));
        assert_true(same_file(a, raw, n - n_raw)); /* PCM-16 WAV data == raw s16le */
    }
}

static void test_threads_codes_roundtrip(void **st) {
    (void)st;
    char a[512], b[512], codes[512], c[512];
    snprintf(a, sizeof a, "%s/j1.wav", tmp);
    snprintf(b, sizeof b, "%s/j3.wav", tmp);
    snprintf(codes, sizeof codes, "%s/codes.txt", tmp);
    snprintf(c, sizeof c, "%s/decoded.wav", tmp);
    assert_int_equal(run("-q -s ryan -t 'Threads.' --max-seconds 0.8 --seed 9 -j 1 -o %s "
                         "--dump-codes %s",
                         a, codes),
                     0);
    assert_int_equal(run("-q -s ryan -t 'Threads.' --max-seconds 0.8 --seed 9 -j 3 -o %s", b), 0);
    assert_true(same_file(a, b, 0));
    assert_int_equal(run("-q --decode-codes %s -o %s", codes, c), 0);
    assert_true(same_file(a, c, 0));
}

/* Beyond 300 frames the decoder switches to the reference's chunking: streaming must still match.
 */
static void test_long_stream(void **st) {
    (void)st;
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/long.wav", tmp);
    snprintf(b, sizeof b, "%s/long_stream.wav", tmp);
    assert_int_equal(run("-q -s ryan -t 'Long.' --max-frames 340 --seed 2 --no-guard -o %s", a), 0);
    assert_int_equal(run("-q -s ryan -t 'Long.' --max-frames 340 --seed 2 --no-guard --stream -o %s", b), 0);
    printf("long: %ld bytes\n", file_bytes(a));
    assert_true(file_bytes(a) > 44 + 301 * 1920 * 2);
    assert_true(same_file(a, b, 0));
}

/* 0.6B CustomVoice: --instruct is dropped with a warning unless --force-instruct. */
static void test_instruct_policy(void **st) {
    (void)st;
    char a[512], b[512], c[512], warn[512];
    snprintf(a, sizeof a, "%s/plain.wav", tmp);
    snprintf(b, sizeof b, "%s/dropped.wav", tmp);
    snprintf(c, sizeof c, "%s/forced.wav", tmp);
    snprintf(warn, sizeof warn, "%s/warn.txt", tmp);
    assert_int_equal(run("-q -s ryan -t 'Hi.' --max-frames 6 --greedy -o %s", a), 0);
    assert_int_equal(
        run("-s ryan -t 'Hi.' -i 'Whisper.' --max-frames 6 --greedy -o %s 2> %s", b, warn), 0);
    assert_int_equal(run("-q -s ryan -t 'Hi.' -i 'Whisper.' --force-instruct --max-frames 6 "
                         "--greedy -o %s",
                         c),
                     0);
    assert_true(same_file(a, b, 0));
    assert_false(same_file(a, c, 0));
    FILE *f = fopen(warn, "r");
    char line[512] = "";
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_non_null(strstr(line, "warning"));
}

static void test_errors_and_info(void **st) {
    (void)st;
    assert_int_equal(run("--help > /dev/null"), 0);
    assert_int_equal(run("--version > /dev/null"), 0);
    assert_int_equal(run("--bogus 2> /dev/null"), 2);
    assert_int_equal(run("--threads 0 -t x 2> /dev/null"), 2);
    assert_int_equal(run("-s nobody -t x 2> /dev/null"), 1);
    assert_int_equal(run("-s ryan -l klingon -t x 2> /dev/null"), 1);
    assert_int_equal(run("-t x 2> /dev/null"), 1); /* CustomVoice needs a speaker */
    assert_int_equal(run("-s ryan -t x -o %s/x.mp3 2> /dev/null", tmp), 2);
    char out[512], cmd[1024], line[512];
    snprintf(out, sizeof out, "%s/list.txt", tmp);
    assert_int_equal(run("--list-speakers > %s", out), 0);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    int n = 0;
    while (fgets(line, sizeof line, f))
        n++;
    fclose(f);
    assert_int_equal(n, 9);
    snprintf(cmd, sizeof cmd, "--tokens -t 'Hello world, this is a test.' > %s", out);
    assert_int_equal(run("%s", cmd), 0);
    f = fopen(out, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_string_equal(line, "9707 1879 11 419 374 264 1273 13\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_speakers_languages_stream),
        cmocka_unit_test(test_threads_codes_roundtrip),
        cmocka_unit_test(test_long_stream),
        cmocka_unit_test(test_instruct_policy),
        cmocka_unit_test(test_errors_and_info),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
