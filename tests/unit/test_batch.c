/* test_batch.c — `speak --batch jobs.jsonl` (docs/batch.md) on the tiny CustomVoice model: one
 * JSON result line per job in input order, a failing job (unknown speaker, malformed JSON) does
 * not stop the batch nor leave an output file, the good jobs' audio is written, and the exit
 * status is 1 because a job failed (0 when none did); a job's audio is byte-identical to a single
 * speak run with the same seed. Runs with cwd = repo root.
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

#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"

static char model[1100];

static int group_setup(void **st) {
    if (tmpdir_setup(st)) return -1;
    const char *cache = test_cache_dir();
    snprintf(model, sizeof model, "%s/tiny-cv", cache);
    return 0;
}

/* The n-th line (0-based) of the file as JSON, or NULL. */
static cJSON *json_line(const char *path, int n) {
    static char line[4096];
    FILE *f = fopen(path, "r");
    cJSON *j = NULL;
    for (int i = 0; f && fgets(line, sizeof line, f); i++)
        if (i == n) {
            j = cJSON_Parse(line);
            break;
        }
    if (f) fclose(f);
    return j;
}

static int is_ok(const cJSON *j) { return cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")); }

static void test_batch_with_failing_lines(void **st) {
    (void)st;
    const char *jobs = tmp_path("jobs.jsonl");
    FILE *f = fopen(jobs, "w");
    assert_non_null(f);
    fprintf(f, "{\"text\": \"One.\", \"speaker\": \"ryan\", \"seed\": 1, \"output\": \"%s\"}\n"
               "{\"text\": \"Two.\", \"speaker\": \"nobody\", \"output\": \"%s\"}\n"
               "{\"text\": \"Three.\", \"speaker\": \n"
               "\n"
               "{\"text\": \"Four.\", \"speaker\": \"eric\", \"language\": \"english\", "
               "\"output\": \"%s\"}\n",
            tmp_path("1.wav"), tmp_path("2.wav"), tmp_path("4.flac"));
    fclose(f);
    const char *out = tmp_path("results.jsonl");
    int rc = sh("bin/speak -m %s --threads 2 --max-seconds 0.5 --batch %s > %s 2> %s", model, jobs,
                out, tmp_path("stderr"));
    assert_int_equal(rc, 1); /* some job failed */
    cJSON *r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = json_line(out, i);
        if (!r[i]) fail_msg("result line %d missing or not JSON (%s)", i + 1, out);
    }
    assert_null(json_line(out, 4)); /* the blank line is no job */
    assert_true(is_ok(r[0]));
    assert_false(is_ok(r[1]));
    assert_false(is_ok(r[2]));
    assert_true(is_ok(r[3]));
    assert_int_equal(cJSON_GetObjectItem(r[0], "line")->valueint, 1);
    assert_int_equal(cJSON_GetObjectItem(r[3], "line")->valueint, 5);
    assert_non_null(strstr(cJSON_GetObjectItem(r[1], "error")->valuestring, "nobody"));
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(r[0], "rtf")));
    assert_true(file_bytes(tmp_path("1.wav")) > 44);
    assert_true(file_bytes(tmp_path("4.flac")) > 0);
    assert_int_equal(file_bytes(tmp_path("2.wav")), -1);
    /* one model load for all jobs, same audio as one speak run per job */
    assert_int_equal(sh("bin/speak -m %s -q --threads 1 --max-seconds 0.5 --seed 1 -s ryan -t 'One.' "
                        "-o %s && cmp -s %s %s",
                        model, tmp_path("single.wav"), tmp_path("single.wav"), tmp_path("1.wav")),
                     0);
    for (int i = 0; i < 4; i++) cJSON_Delete(r[i]);
}

static void test_batch_all_ok_and_usage(void **st) {
    (void)st;
    const char *jobs = tmp_path("ok.jsonl");
    FILE *f = fopen(jobs, "w");
    assert_non_null(f);
    fprintf(f, "{\"text\": \"Hi.\", \"speaker\": \"ryan\", \"output\": \"%s\"}\n", tmp_path("ok.wav"));
    fclose(f);
    assert_int_equal(sh("bin/speak -m %s --max-seconds 0.3 --batch %s > /dev/null 2>&1", model,
                        jobs), 0);
    assert_int_equal(sh("bin/speak -m %s --batch %s > /dev/null 2>&1", model,
                        tmp_path("missing.jsonl")), 2);
    assert_int_equal(sh("bin/speak -m %s -t x --batch %s > /dev/null 2>&1", model, jobs), 2);
}

QVT_MAIN(group_setup, tmpdir_teardown, test_batch_with_failing_lines, test_batch_all_ok_and_usage)
