/* test_server_replay.c — the HTTP fuzz targets inside `make test`: every file of
 * tests/fuzz/corpus/fuzz_speech_json/ and fuzz_upload/ through its target (an in-process server on
 * the tiny CustomVoice model, tests/fuzz/fuzz_server.h), then QV_HOSTILE_REQUESTS (10,000) mutated
 * copies of those files sent over loopback as speech and upload requests: every reply must be an
 * HTTP status, and none may name the voices or model directory (the target aborts otherwise).
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
#include <time.h>
#include <unistd.h>

#include "util/fileio.h"

#define LLVMFuzzerTestOneInput fuzz_speech_json_one
#include "tests/fuzz/fuzz_speech_json.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_upload_one
#include "tests/fuzz/fuzz_upload.c"
#undef LLVMFuzzerTestOneInput

typedef struct {
    uint8_t *b;
    size_t n;
} seed;

/* The files of tests/fuzz/corpus/<target>, each run through fn; *out keeps them. */
static int load(const char *target, int (*fn)(const uint8_t *, size_t), seed *out, int max) {
    char dir[256], path[600];
    snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", target);
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        uint8_t *b = (uint8_t *)qvu_read_file(path, (size_t)1 << 24, &len, NULL, 0);
        if (!b) continue;
        fn(b, len);
        out[n++] = (seed){b, len};
    }
    closedir(d);
    printf("replay: %-18s %4d corpus files\n", target, n);
    return n;
}

static uint64_t rng;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

/* A mutated copy of s in buf (up to cap bytes): bytes flipped or set to edge values, a cut, a
 * splice of bytes repeated. */
static size_t mutate(const seed *s, uint8_t *buf, size_t cap) {
    size_t n = s->n < cap ? s->n : cap;
    memcpy(buf, s->b, n);
    int k = 1 + (int)(next() % 8);
    for (int i = 0; i < k && n; i++) {
        size_t at = next() % n;
        switch (next() % 5) {
        case 0: buf[at] ^= (uint8_t)(1u << (next() % 8)); break;
        case 1: buf[at] = "\0\xff\"{}[]:,\\\n-9e"[next() % 15]; break;
        case 2: n = at + 1; break;
        case 3: { /* repeat a run */
            size_t len = 1 + next() % 64;
            if (at + len <= n && n + len <= cap) {
                memmove(buf + at + len, buf + at, n - at);
                n += len;
            }
            break;
        }
        default: buf[at] = (uint8_t)next(); break;
        }
    }
    return n;
}

static void test_corpus_and_hostile_requests(void **state) {
    (void)state;
    qv_server *s = fuzz_server(); /* exits with a message without $QVOICE_CACHE/tiny-cv */
    static seed speech[256], upload[256];
    int ns = load("fuzz_speech_json", fuzz_speech_json_one, speech, 256);
    int nu = load("fuzz_upload", fuzz_upload_one, upload, 256);
    assert_true(ns > 0 && nu > 0);
    const char *env = getenv("QV_HOSTILE_REQUESTS");
    int total = env ? atoi(env) : 10000, status[6] = {0};
    rng = (uint64_t)time(NULL) | 1;
    printf("hostile requests: %d, seed %llu\n", total, (unsigned long long)rng);
    static uint8_t buf[1 << 20];
    for (int i = 0; i < total; i++) {
        int up = i % 2;
        const seed *sd = up ? &upload[next() % (uint32_t)nu] : &speech[next() % (uint32_t)ns];
        size_t n = mutate(sd, buf, sizeof buf);
        int st = up ? fuzz_post(s, "/v1/audio/voices", "multipart/form-data; boundary=qvfuzz", buf,
                                n)
                    : fuzz_post(s, "/v1/audio/speech", "application/json", buf, n);
        status[st / 100]++;
    }
    printf("hostile requests: no reply %d, 2xx %d, 4xx %d, 5xx %d; no server path in any\n",
           status[0], status[2], status[4], status[5]);
    assert_int_equal(status[0] + status[2] + status[4] + status[5], total);
    assert_true(status[4] > total / 2); /* most mutations are refused, each with a status */
    for (int i = 0; i < ns; i++)
        free(speech[i].b);
    for (int i = 0; i < nu; i++)
        free(upload[i].b);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_corpus_and_hostile_requests)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    qv_server_free(fuzz_server());
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", fuzz_voices_dir);
    if (fuzz_voices_dir[0] && system(cmd)) rc = 1;
    return rc;
}
