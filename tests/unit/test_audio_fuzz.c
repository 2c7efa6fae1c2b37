/* test_audio_fuzz.c — the reader of uploaded reference audio (POST /v1/audio/voices →
 * qv_clone_run → qva_audio_load) on corrupt files: a bounded run of the ASan + UBSan fuzz harness
 * (tests/fuzz/fuzz_audio_load.c, built by the Makefile next to this binary's folder as
 * fuzz-asan/fuzz_audio_load), and the regression of what it found: libsndfile leaks libvorbis's
 * codec setup on an Ogg Vorbis file whose header packets are cut, so qva_audio_load refuses such a
 * file before libsndfile opens it.
 */
#include <setjmp.h>
#include <sndfile.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "features/features.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"

static char g_harness[1024];

/* 3.5 s of a tone as Ogg Vorbis at path; 0, or -1 when this libsndfile cannot write it. */
static int write_vorbis(const char *path) {
    SF_INFO info = {.samplerate = 24000, .channels = 1, .format = SF_FORMAT_OGG | SF_FORMAT_VORBIS};
    SNDFILE *f = sf_open(path, SFM_WRITE, &info);
    if (!f) return -1;
    static float x[84000];
    for (int i = 0; i < 84000; i++)
        x[i] = 0.3f * (float)((i * 7919) % 200 - 100) / 100.0f;
    sf_writef_float(f, x, 84000);
    sf_close(f);
    return 0;
}

/* Ogg pages: the offset of the n-th "OggS" in the file's bytes (0-based), or -1. */
static long page_at(const char *p, long len, int n) {
    for (long i = 0; i + 4 <= len; i++)
        if (!memcmp(p + i, "OggS", 4) && n-- == 0) return i;
    return -1;
}

static void test_harness_bounded(void **state) {
    (void)state;
    /* 7 formats x 60 mutations (fewer if a loaded machine makes them take over 5 minutes); the
     * harness exits non-zero on any sanitizer report (a leak included) and checks first that
     * every intact seed reads as audio */
    assert_int_equal(sh("%s --runs 420 --seconds 300 > %s 2>&1", g_harness, tmp_path("fuzz.out")),
                     0);
    assert_true(file_has(tmp_path("fuzz.out"), "mutated files (7 formats)"));
    assert_true(file_has(tmp_path("fuzz.out"), "no sanitizer report"));
}

static void test_vorbis_cut_headers_refused(void **state) {
    (void)state;
    const char *ogg = tmp_path("ok.ogg");
    if (write_vorbis(ogg)) skip();
    static char b[1 << 20];
    FILE *f = fopen(ogg, "rb");
    long n = (long)fread(b, 1, sizeof b, f);
    fclose(f);
    qva_audio a;
    char err[512];
    assert_int_equal(qva_audio_load(&a, ogg, QVA_DEFAULT_MAX_SECONDS, err, sizeof err), 0);
    qva_audio_free(&a);
    /* only the first page (the identification header): the comment and setup headers are
     * missing; the same after an ID3v2 tag (libsndfile skips it); the file cut inside the
     * second page */
    long second = page_at(b, n, 1);
    assert_true(second > 0);
    tmp_write(tmp_path("cut.ogg"), b, (size_t)second);
    static char id3[1 << 20];
    memcpy(id3,
           "ID3\x04\0\0\0\0\0\x05"
           "abcde",
           15);
    memcpy(id3 + 15, b, (size_t)second);
    tmp_write(tmp_path("id3cut.ogg"), id3, (size_t)second + 15);
    tmp_write(tmp_path("mid.ogg"), b, (size_t)second + 100);
    const char *cuts[] = {"cut.ogg", "id3cut.ogg", "mid.ogg"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(
            qva_audio_load(&a, tmp_path(cuts[i]), QVA_DEFAULT_MAX_SECONDS, err, sizeof err), -1);
        if (!strstr(err, cuts[i]) || !strstr(err, "Ogg Vorbis headers")) fail_msg("%s", err);
    }
    /* under LeakSanitizer: refused, nothing leaked (before the guard libsndfile lost 5.8 kB on
     * each of them) */
    assert_int_equal(sh("%s %s %s %s > %s 2>&1", g_harness, tmp_path("cut.ogg"),
                        tmp_path("id3cut.ogg"), tmp_path("mid.ogg"), tmp_path("replay.out")),
                     0);
    assert_int_equal(sh("test $(grep -c ': refused$' %s) = 3", tmp_path("replay.out")), 0);
}

int main(int argc, char **argv) {
    (void)argc;
    /* argv[0] is B/tests/test_audio_fuzz; the harness is B/fuzz-asan/fuzz_audio_load */
    snprintf(g_harness, sizeof g_harness, "%s", argv[0]);
    char *slash = strrchr(g_harness, '/');
    if (slash) *slash = 0;
    slash = strrchr(g_harness, '/');
    snprintf(slash ? slash + 1 : g_harness,
             sizeof g_harness - (size_t)(slash ? slash + 1 - g_harness : 0),
             "fuzz-asan/fuzz_audio_load");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_harness_bounded),
        cmocka_unit_test(test_vorbis_cut_headers_refused),
    };
    return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
