/* test_jobs.c — the library's batch runner (engine/jobs.c) on the tiny CustomVoice model: a job's
 * result line and file, a failing line that writes nothing and does not stop the next, blank lines,
 * a job's own seed (for that job only), and the 0.6B-style instruct rule's warning in the result.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "include/qvoice.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"

static qv_model *g_m;
static char g_dir[64];

static int setup(void **st) {
    (void)st;
    const char *cache = test_cache_dir();
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tiny-cv", cache);
    snprintf(g_dir, sizeof g_dir, "/tmp/qv_test_jobs_%d", (int)getpid());
    if (qv_model_load(&g_m, dir)) return fprintf(stderr, "%s\n", qv_last_error()), -1;
    return mkdir(g_dir, 0700);
}

static int teardown(void **st) {
    (void)st;
    qv_model_free(g_m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd);
}

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void test_lines(void **st) {
    (void)st;
    qv_params p = qv_model_params(g_m);
    p.n_threads = 1;
    qv_jobs_options o = qv_jobs_default_options();
    o.request.speaker = "ryan"; /* the default of a job naming none */
    o.request.max_seconds = 0.8;
    qv_jobs *j;
    o.struct_size = 8; /* built against another qvoice.h */
    assert_int_equal(qv_jobs_new(&j, g_m, &p, &o), QV_E_ABI);
    assert_null(j);
    assert_non_null(strstr(qv_last_error(), "qv_jobs_options.struct_size"));
    o.struct_size = sizeof o;
    assert_int_equal(qv_jobs_new(&j, g_m, &p, &o), 0);
    char line[512], a[128], b[128], *res;
    snprintf(a, sizeof a, "%s/a.wav", g_dir);
    snprintf(b, sizeof b, "%s/b.wav", g_dir);

    snprintf(line, sizeof line, "{\"text\": \"Hello there.\", \"output\": \"%s\"}\n", a);
    assert_int_equal(qv_jobs_run_line(j, 1, line, &res), QV_OK);
    printf("  %s\n", res);
    assert_non_null(strstr(res, "{\"line\":1,\"ok\":true,\"output\":"));
    assert_non_null(strstr(res, "\"frames\":"));
    qv_free(res);
    assert_true(file_size(a) > 44);

    snprintf(line, sizeof line, "{\"text\": \"Hi.\", \"output\": \"%s\", \"colour\": 1}", b);
    assert_int_equal(qv_jobs_run_line(j, 2, line, &res), QV_E_INVALID);
    assert_string_equal(qv_last_error(), "colour: unknown field");
    assert_non_null(strstr(res, "\"ok\":false,\"error\":\"colour: unknown field\""));
    qv_free(res);
    assert_int_equal(file_size(b), -1); /* nothing written */

    assert_int_equal(qv_jobs_run_line(j, 3, " \t\r\n", &res), QV_OK);
    assert_null(res);

    /* its own seed (a new synthesizer) and an instruction, which the 0.6B CustomVoice model drops
     * with a warning in the result */
    snprintf(
        line, sizeof line,
        "{\"text\": \"Hello there.\", \"output\": \"%s\", \"seed\": 9, \"instruct\": \"Whisper.\"}",
        b);
    assert_int_equal(qv_jobs_run_line(j, 4, line, &res), QV_OK);
    printf("  %s\n", res);
    assert_non_null(strstr(res, "\"warning\":\"instruct ignored"));
    qv_free(res);
    assert_true(file_size(b) > 44);

    /* a job without "seed" after one with its own: the base seed again, so the first job's file
     * comes out the same */
    char c[128], cmd[320];
    snprintf(c, sizeof c, "%s/c.wav", g_dir);
    snprintf(line, sizeof line, "{\"text\": \"Hello there.\", \"output\": \"%s\"}", c);
    assert_int_equal(qv_jobs_run_line(j, 5, line, &res), QV_OK);
    qv_free(res);
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, c);
    assert_int_equal(system(cmd), 0);
    qv_jobs_free(j);
}

/* A whole jobs file: results in order, counts, the failure's status returned. */
static void test_file(void **st) {
    (void)st;
    qv_params p = qv_model_params(g_m);
    p.n_threads = 1;
    qv_jobs_options o = qv_jobs_default_options();
    o.request.max_seconds = 0.4;
    qv_jobs *j;
    assert_int_equal(qv_jobs_new(&j, g_m, &p, &o), 0);
    char text[512];
    snprintf(text, sizeof text,
             "{\"text\": \"One.\", \"speaker\": \"ryan\", \"output\": \"%s/1.flac\"}\n\n"
             "not json\n"
             "{\"text\": \"Two.\", \"speaker\": \"nobody\", \"output\": \"%s/2.wav\"}\n",
             g_dir, g_dir);
    FILE *in = fmemopen(text, strlen(text), "r");
    int n_jobs, n_failed;
    assert_int_equal(qv_jobs_run_file(j, in, NULL, NULL, &n_jobs, &n_failed), QV_E_SPEAKER);
    assert_non_null(strstr(qv_last_error(), "nobody")); /* the last failure's detail */
    fclose(in);
    assert_int_equal(n_jobs, 3);
    assert_int_equal(n_failed, 2);
    char path[128];
    snprintf(path, sizeof path, "%s/1.flac", g_dir);
    assert_true(file_size(path) > 0);
    qv_jobs_free(j);
}

QVT_MAIN(setup, teardown, test_lines, test_file)
