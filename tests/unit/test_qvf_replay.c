/* test_qvf_replay.c — the standalone replay of the fuzz targets inside `make test`: every file of
 * tests/fuzz/corpus/<target>/ goes through that target, every tests/hostile/<dir>/ file through
 * fuzz_<dir> when that target exists, and tests/hostile/qvf/ files must fail with the code listed
 * in its expected.txt. A target aborts or trips a sanitizer (make asan) on a bad input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "util/fileio.h"
#include "voicefmt/qvf.h"

#define LLVMFuzzerTestOneInput fuzz_qvf_read_one
#include "tests/fuzz/fuzz_qvf_read.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_legacy_read_one
#include "tests/fuzz/fuzz_legacy_read.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_roundtrip_one
#include "tests/fuzz/fuzz_roundtrip.c"
#undef LLVMFuzzerTestOneInput
#if __has_include("../fuzz/fuzz_safetensors.c")
#define LLVMFuzzerTestOneInput fuzz_safetensors_one
#include "tests/fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#define HAVE_FUZZ_SAFETENSORS 1
#endif
#if __has_include("../fuzz/fuzz_tokenizer.c")
#define LLVMFuzzerTestOneInput fuzz_tokenizer_one
#include "tests/fuzz/fuzz_tokenizer.c"
#undef LLVMFuzzerTestOneInput
#define HAVE_FUZZ_TOKENIZER 1
#endif
#define LLVMFuzzerTestOneInput fuzz_tok_cache_one
#include "tests/fuzz/fuzz_tok_cache.c"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/qvf_sample.h"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_watermark_one
#include "tests/fuzz/fuzz_watermark.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_markup_one
#include "tests/fuzz/fuzz_markup.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_voice_accept_one
#include "tests/fuzz/fuzz_voice_accept.c"
#undef LLVMFuzzerTestOneInput

typedef int (*target_fn)(const uint8_t *, size_t);
static const struct {
    const char *name;
    target_fn fn;
} targets[] = {
    {"fuzz_qvf_read", fuzz_qvf_read_one},       {"fuzz_legacy_read", fuzz_legacy_read_one},
    {"fuzz_roundtrip", fuzz_roundtrip_one},     {"fuzz_tok_cache", fuzz_tok_cache_one},
    {"fuzz_watermark", fuzz_watermark_one},
    {"fuzz_markup", fuzz_markup_one},
    {"fuzz_voice_accept", fuzz_voice_accept_one},
#ifdef HAVE_FUZZ_SAFETENSORS
    {"fuzz_safetensors", fuzz_safetensors_one},
#endif
#ifdef HAVE_FUZZ_TOKENIZER
    {"fuzz_tokenizer", fuzz_tokenizer_one},
#endif
};
#define N_TARGETS (sizeof targets / sizeof targets[0])

/* Targets that need external data (the tokenizer target loads a model's tokenizer once and aborts
 * without one) are replayed only when that data is there. fuzz_voice_accept checks every voice
 * against the tiny model, which make test always builds: without it the test fails, it does not
 * pass the corpus unchecked. */
static int target_ready(const char *name) {
    const char *cache = test_cache_dir();
    char p[1024];
    if (!strcmp(name, "fuzz_voice_accept")) {
        snprintf(p, sizeof p, "%s/tiny-cv/config.json", cache);
        if (access(p, R_OK)) fail_msg("%s: missing: fuzz_voice_accept needs the tiny model", p);
        return 1;
    }
    if (strcmp(name, "fuzz_tokenizer")) return 1;
    if (getenv("QVOICE_TOK_DIR")) return 1;
    snprintf(p, sizeof p, "%s/tiny-cv/vocab.json", cache);
    if (!access(p, R_OK)) return 1;
    snprintf(p, sizeof p, "%s/tokref/vm", cache);
    if (!access(p, R_OK)) return 1;
    printf("replay: %s skipped (no tokenizer in $QVOICE_CACHE)\n", name);
    return 0;
}

static uint8_t *slurp(const char *path, size_t *n) {
    return (uint8_t *)qvu_read_file(path, (size_t)1 << 30, n, NULL, 0);
}

/* Runs fn over every regular file of dir; returns the number of files. */
static int replay_dir(const char *dir, target_fn fn) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "expected.txt")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        uint8_t *b = slurp(path, &len);
        if (!b) continue;
        fn(b, len);
        free(b);
        n++;
    }
    closedir(d);
    return n;
}

static void test_replay_corpus(void **state) {
    (void)state;
    int total = 0;
    for (size_t i = 0; i < N_TARGETS; i++) {
        if (!target_ready(targets[i].name)) continue;
        char dir[256];
        snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", targets[i].name);
        int n = replay_dir(dir, targets[i].fn);
        printf("replay: %-18s %4d corpus files\n", targets[i].name, n);
        total += n;
    }
    assert_true(total > 0);
}

static void test_replay_hostile_dirs(void **state) {
    (void)state;
    DIR *d = opendir("tests/hostile");
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char dir[512], want[300];
        snprintf(dir, sizeof dir, "tests/hostile/%s", e->d_name);
        snprintf(want, sizeof want, "fuzz_%s", e->d_name);
        for (size_t i = 0; i < N_TARGETS; i++) {
            int match = !strcmp(targets[i].name, want) ||
                        (!strcmp(e->d_name, "qvf") && strcmp(targets[i].name, "fuzz_safetensors") &&
                         strcmp(targets[i].name, "fuzz_tokenizer"));
            if (match && target_ready(targets[i].name))
                printf("replay: %-18s %4d files of %s\n", targets[i].name,
                       replay_dir(dir, targets[i].fn), dir);
        }
    }
    closedir(d);
}

static void test_hostile_qvf_expected(void **state) {
    (void)state;
    FILE *f = fopen("tests/hostile/qvf/expected.txt", "r");
    assert_non_null(f);
    char line[512];
    int n = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        char file[256], code[64];
        if (line[0] == '#' || sscanf(line, "%255s %63s", file, code) != 2) continue;
        char path[512], err[512];
        snprintf(path, sizeof path, "tests/hostile/qvf/%s", file);
        qvf_voice *v = NULL;
        int rc = qvf_read_file(path, 0, &v, err, sizeof err);
        if (!rc) rc = qvf_sample_decode_all(v, err, sizeof err);
        qvf_voice_free(v);
        if (strcmp(qvf_errname(rc), code)) {
            printf("%s: got %s (%s), expected %s\n", file, qvf_errname(rc), rc ? err : "", code);
            bad++;
        }
        n++;
    }
    fclose(f);
    printf("hostile/qvf: %d files, %d with the wrong code\n", n, bad);
    assert_true(n > 40);
    assert_int_equal(bad, 0);
}

/* Every voice shipped in voices/ must read and decode cleanly (as `voicefmt verify` on each). */
static void test_shipped_voices(void **state) {
    (void)state;
    DIR *d = opendir("voices");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (qvf_file_kind(e->d_name, NULL, 0) != QVF_KIND_QVOICE) continue;
        char path[512], err[512];
        snprintf(path, sizeof path, "voices/%s", e->d_name);
        qvf_voice *v = NULL;
        int rc = qvf_read_file(path, 0, &v, err, sizeof err);
        if (!rc) rc = qvf_sample_decode_all(v, err, sizeof err);
        qvf_voice_free(v);
        if (rc) fail_msg("%s", err);
        n++;
    }
    if (d) closedir(d);
    printf("voices/: %d .qvoice files verified\n", n);
}

static void test_voice_find(void **state) {
    (void)state;
    char path[512], err[256];
    assert_int_equal(
        qvf_voice_find("tests/hostile/qvf/trailing.qvoice", path, sizeof path, err, sizeof err), 0);
    assert_string_equal(path, "tests/hostile/qvf/trailing.qvoice");
    setenv("QVOICE_PATH", "/nonexistent:tests/fuzz/corpus/fuzz_qvf_read", 1);
    assert_int_equal(qvf_voice_find("lite_v4", path, sizeof path, err, sizeof err), 0);
    assert_string_equal(path, "tests/fuzz/corpus/fuzz_qvf_read/lite_v4.qvoice");
    assert_int_equal(qvf_voice_find("no_such_voice_xyz", path, sizeof path, err, sizeof err),
                     QVF_E_IO);
    assert_non_null(strstr(err, "QVOICE_PATH"));
    unsetenv("QVOICE_PATH");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_corpus),        cmocka_unit_test(test_replay_hostile_dirs),
        cmocka_unit_test(test_hostile_qvf_expected), cmocka_unit_test(test_shipped_voices),
        cmocka_unit_test(test_voice_find),
    };
    return cmocka_run_group_tests_name("qvf_replay", tests, NULL, NULL);
}
