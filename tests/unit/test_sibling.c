/* test_sibling.c — voices that don't belong (checkpoint/sibling.c, voicefmt verify --model):
 * the row comparison on synthetic rows; the committed voices/ohenry.qvoice (synthetic Base)
 * against q06b-base and its CustomVoice sibling q06b-cv; and, on tiny checkpoints, a voice made
 * with tiny-base against tiny-cv (sibling), against a tiny model of another seed (foreign: verify
 * fails, --force passes, speak warns) and a voice without text-side rows (cannot tell: a warning).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "checkpoint/sibling.h"
#include "engine/model.h"
#include "include/qvoice.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"
#include "tests/unit/helpers/shell.h"
#include "tests/unit/helpers/tmpdir.h"
#include "voicefmt/qvf.h"

static char err[1024], why[512];

static void fill(float *x, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
    }
}

static void test_judge_rows(void **state) {
    (void)state;
    enum { H = 256, TH = 128 };
    float a[3 * H], b[3 * H], c[3 * H], fa[TH], fb[TH];
    fill(a, 3 * H, 1);
    fill(c, 3 * H, 99);
    fill(fa, TH, 5);
    /* a sibling: the same rows with low-bit noise (what a CustomVoice's projection gives) */
    for (int i = 0; i < 3 * H; i++) b[i] = a[i] * (1.0f + 1e-3f * ((i % 7) - 3));
    for (int i = 0; i < TH; i++) fb[i] = fa[i] * (1.0f - 1e-3f * ((i % 5) - 2));
    double cs;
    qvm_text_rows v = {a, fa, NULL}, m = {b, fb, NULL};
    assert_int_equal(qvm_sibling_judge(&v, &m, H, TH, &cs, why, sizeof why), QVM_KIN_SIBLING);
    printf("  perturbed rows: %s\n", why);
    assert_true(cs > 0.999);
    m.tpad = c; /* an unrelated checkpoint's TPAD */
    assert_int_equal(qvm_sibling_judge(&v, &m, H, TH, &cs, why, sizeof why), QVM_KIN_FOREIGN);
    printf("  unrelated rows: %s\n", why);
    assert_true(fabs(cs) < 0.3);
    assert_non_null(strstr(why, "TPAD"));
    /* one foreign row among matching ones decides */
    memcpy(c, b, sizeof c);
    fill(c + 2 * H, H, 7);
    m.tpad = c;
    assert_int_equal(qvm_sibling_judge(&v, &m, H, TH, &cs, why, sizeof why), QVM_KIN_FOREIGN);
    assert_non_null(strstr(why, "eos"));
    /* nothing on the voice side: cannot tell */
    qvm_text_rows none = {NULL, NULL, NULL};
    assert_int_equal(qvm_sibling_judge(&none, &m, H, TH, &cs, why, sizeof why), QVM_KIN_UNKNOWN);
    assert_non_null(strstr(why, "cannot tell"));
}

/* The model's text-side rows (as voicefmt verify --model computes them) judged against v's. */
static enum qvm_kinship judge_on(const char *dir, const qvf_voice *v, double *cs) {
    qv_model *m;
    if (qv_model_load(&m, dir)) fail_msg("%s", qv_last_error());
    int H = qv_model_hidden_size(m);
    float *tpad = malloc(3 * (size_t)H * sizeof(float));
    assert_non_null(tpad);
    assert_int_equal(qvm_textside_special(&m->text, &m->ck->cfg, NULL, tpad), 0);
    qvm_text_rows mine = {tpad, m->text.fc1_bias, m->text.fc2_bias};
    qvm_text_rows theirs = {v->tpad, v->wovr_h ? v->wovr_fc1_b : NULL,
                            v->wovr_h ? v->wovr_fc2_b : NULL};
    enum qvm_kinship k =
        qvm_sibling_judge(&theirs, &mine, H, qv_model_text_hidden_size(m), cs, why, sizeof why);
    printf("  %s: %s\n", dir, why);
    free(tpad);
    qv_model_free(m);
    return k;
}

static void test_ohenry_on_the_synthetic_pair(void **state) {
    (void)state;
    char base[512], cv[512];
    snprintf(base, sizeof base, "%s/q06b-base", test_cache_dir());
    snprintf(cv, sizeof cv, "%s/q06b-cv", test_cache_dir());
    if (access(base, R_OK) || access(cv, R_OK)) {
        printf("  no q06b models in %s: skipped\n", test_cache_dir());
        skip();
    }
    qvf_voice *v;
    assert_int_equal(qvf_read_file("voices/ohenry.qvoice", 0, &v, err, sizeof err), 0);
    assert_non_null(v->tpad);
    double cs;
    assert_int_equal(judge_on(base, v, &cs), QVM_KIN_SIBLING);
    assert_true(cs > 0.99999);
    assert_int_equal(judge_on(cv, v, &cs), QVM_KIN_SIBLING);
    assert_true(cs > 0.999);
    assert_int_equal(sh("bin/voicefmt verify --model %s voices/ohenry.qvoice", cv), 0);
    qvf_voice_free(v);
}

/* A voice made with tiny-base: its TPAD rows are tiny-base's (as clone computes them). */
static void write_tiny_voice(const char *path, int with_tpad) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tiny-base", test_cache_dir());
    qv_model *m;
    if (qv_model_load(&m, dir)) fail_msg("%s", qv_last_error());
    int H = qv_model_hidden_size(m);
    qvf_voice *v = qvf_voice_new();
    assert_non_null(v);
    float x[4096];
    fill(x, H, 3);
    assert_int_equal(qvf_voice_set_xvector(v, x, (uint32_t)H), 0);
    if (with_tpad) {
        v->tpad = malloc(3 * (size_t)H * sizeof(float));
        assert_non_null(v->tpad);
        assert_int_equal(qvm_textside_special(&m->text, &m->ck->cfg, NULL, v->tpad), 0);
        v->tpad_hidden = (uint32_t)H;
    }
    assert_int_equal(qvf_write_file(v, path, QVF_FORMAT_VERSION, err, sizeof err), 0);
    qvf_voice_free(v);
    qv_model_free(m);
}

static void test_tiny_foreign_voice(void **state) {
    (void)state;
    char base[512], cv[512], other[512], tok[512];
    snprintf(base, sizeof base, "%s/tiny-base", test_cache_dir());
    snprintf(cv, sizeof cv, "%s/tiny-cv", test_cache_dir());
    snprintf(tok, sizeof tok, "%s/npm/tokenizer-qwen3/package/models", test_cache_dir());
    if (access(base, R_OK) || access(cv, R_OK) || access(tok, R_OK)) {
        printf("  no tiny models in %s: skipped\n", test_cache_dir());
        skip();
    }
    /* an unrelated checkpoint of the same size: tiny-base's config, another seed */
    snprintf(other, sizeof other, "%s/other-seed", tmp_dir);
    assert_int_equal(sh("%s -t %s -c tests/golden/configs/q06b-base --tiny "
                        "--seed-model 9 %s >/dev/null",
                        test_built("tools/mkmodel"), tok, other),
                     0);
    const char *voice = tmp_path("tiny.qvoice"), *bare = tmp_path("bare.qvoice");
    write_tiny_voice(voice, 1);
    write_tiny_voice(bare, 0);
    qvf_voice *v;
    assert_int_equal(qvf_read_file(voice, 0, &v, err, sizeof err), 0);
    double cs;
    assert_int_equal(judge_on(cv, v, &cs), QVM_KIN_SIBLING);
    assert_int_equal(judge_on(other, v, &cs), QVM_KIN_FOREIGN);
    assert_true(cs < 0.9);
    qvf_voice_free(v);
    const char *log = tmp_path("verify.log");
    assert_int_equal(sh("bin/voicefmt verify --model %s %s 2>%s", cv, voice, log), 0);
    assert_int_equal(sh("bin/voicefmt verify --model %s %s 2>%s", other, voice, log), 1);
    assert_true(file_has(log, "made with a checkpoint unrelated to"));
    assert_int_equal(sh("bin/voicefmt verify --force --model %s %s 2>%s", other, voice, log), 0);
    assert_true(file_has(log, "warning: made with a checkpoint unrelated to"));
    assert_true(file_has(log, "(allowed by force)"));
    /* speak takes it with a warning (qv_voice_check: QV_E_FOREIGN_VOICE, forced) */
    assert_int_equal(sh("bin/speak -m %s -v %s -t Hello --no-guard --max-frames 3 -o %s 2>%s",
                        other, voice, tmp_path("o.wav"), log),
                     0);
    assert_true(file_has(log, "warning: ") && file_has(log, "made with a checkpoint unrelated to"));
    /* no TPAD, no WOVR: cannot tell, which is a warning and not a failure */
    assert_int_equal(sh("bin/voicefmt verify --model %s %s 2>%s", other, bare, log), 0);
    assert_true(file_has(log, "warning: no TPAD or WOVR rows: cannot tell"));
}

QVT_MAIN(tmpdir_setup, tmpdir_teardown, test_judge_rows, test_ohenry_on_the_synthetic_pair,
         test_tiny_foreign_voice)
