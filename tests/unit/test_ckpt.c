/* test_ckpt.c — one opened model directory (checkpoint/ckpt.h): the handle reads what the
 * separate readers read (config, fingerprint), maps each safetensors file once and is refcounted;
 * a model (with its decoder and its one tokenizer) and a cloner (with ECAPA and the speech
 * encoder) each open model.safetensors once, counted with qvm_st_n_opened; bad directories are
 * refused with one line naming the file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "checkpoint/ckpt.h"
#include "checkpoint/fingerprint.h"
#include "engine/model.h"
#include "include/qvoice.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/tmpdir.h"
#include "tests/unit/helpers/run.h"

#define CLIP "tests/audio/en_ohenry_chenevert.wav"
#define TEXT12                                                                                     \
    "One dollar and eighty-seven cents. That was all. And sixty cents of it was in "               \
    "pennies, saved one and two at a time by bulldozing the grocer."

static char g_base[1024], g_cv[1024];

static int setup(void **state) {
    const char *cache = test_cache_dir();
    snprintf(g_base, sizeof g_base, "%s/tiny-base", cache);
    snprintf(g_cv, sizeof g_cv, "%s/tiny-cv", cache);
    return tmpdir_setup(state);
}

static void test_open(void **state) {
    (void)state;
    char err[512];
    const unsigned long n0 = qvm_st_n_opened();
    qvm_ckpt *ck = qvm_ckpt_open(g_base, err, sizeof err);
    if (!ck) fail_msg("%s", err);
    printf("  %s: %lu safetensors files opened\n", g_base, qvm_st_n_opened() - n0);
    assert_int_equal(qvm_st_n_opened() - n0, 2); /* model + speech tokenizer */
    /* the same config and fingerprint the separate readers give */
    qvm_model_config c;
    uint8_t fp[32];
    assert_int_equal(qvm_model_config_load(&c, g_base, err, sizeof err), 0);
    assert_memory_equal(&c, &ck->cfg, sizeof c);
    assert_int_equal(qvm_fingerprint_model(g_base, QVM_FINGERPRINT_TABLE, fp, err, sizeof err), 0);
    assert_memory_equal(fp, ck->fingerprint, 32);
    assert_non_null(qvm_st_find(ck->codec_st, "decoder.pre_conv.conv.weight"));
    /* refcounted: the last free releases */
    assert_ptr_equal(qvm_ckpt_ref(ck), ck);
    assert_int_equal(ck->n_refs, 2);
    qvm_ckpt_free(ck);
    assert_int_equal(ck->n_refs, 1);
    qvm_ckpt_free(ck);
    qvm_ckpt_free(NULL);
}

static void test_bad_dirs(void **state) {
    (void)state;
    char err[512] = "";
    assert_null(qvm_ckpt_open("/nonexistent-qvoice-model", err, sizeof err));
    printf("  missing: %s\n", err);
    assert_non_null(strstr(err, "/nonexistent-qvoice-model/config.json"));
    /* configs and weights, but no speech tokenizer */
    char cmd[4096];
    const char *dir = tmp_path("no-codec");
    snprintf(cmd, sizeof cmd, "mkdir %s && cp %s/*.json %s/model.safetensors %s/", dir, g_base,
             g_base, dir);
    assert_int_equal(system(cmd), 0);
    assert_null(qvm_ckpt_open(dir, err, sizeof err));
    printf("  no speech tokenizer: %s\n", err);
    assert_non_null(strstr(err, "speech_tokenizer/config.json"));
}

static int on_pcm(void *user, const float *pcm, int n) { /* counts the samples */
    (void)pcm;
    *(int64_t *)user += n;
    return 0;
}

/* A model: its decoder, its tokenizer and its sessions use the one opened directory, and two
 * sessions share one tokenizer. */
static void test_model_opens_once(void **state) {
    (void)state;
    const unsigned long n0 = qvm_st_n_opened();
    qv_model *m;
    if (qv_model_load(&m, g_cv)) fail_msg("%s", qv_last_error());
    qv_params p = qv_model_params(m);
    p.n_threads = 1, p.max_frames = 6;
    qv_synth *y;
    assert_int_equal(qv_synth_new(&y, m, &p), QV_OK);
    qv_synth_request r = qv_synth_default_request();
    r.text = "Hello there.", r.speaker = qv_model_speaker(m, 0);
    int64_t n_samples = 0;
    assert_int_equal(qv_synth_run(y, &r, on_pcm, &n_samples, NULL), QV_OK);
    assert_true(n_samples > 0);
    const struct qve_tok *tok = m->tok;
    assert_non_null(tok);
    qv_session *s;
    int32_t *ids;
    int n_ids;
    assert_int_equal(qv_session_new(&s, m, &p), QV_OK);
    assert_int_equal(qv_session_tokenize(s, "Hello.", &ids, &n_ids), QV_OK);
    assert_ptr_equal(m->tok, tok);
    free(ids);
    qv_session_free(s);
    qv_synth_free(y);
    printf("  model + decoder + 2 sessions: %lu safetensors files opened\n",
           qvm_st_n_opened() - n0);
    assert_int_equal(qvm_st_n_opened() - n0, 2);
    qv_model_free(m);
}

/* A cloner: ECAPA, the fingerprint, the text side and the speech encoder (ICL) share it. */
static void test_cloner_opens_once(void **state) {
    (void)state;
    char out[4200];
    snprintf(out, sizeof out, "%s", tmp_path("once.qvoice"));
    const unsigned long n0 = qvm_st_n_opened();
    qv_cloner *c;
    if (qv_cloner_load(&c, g_base, 1)) fail_msg("%s", qv_last_error());
    qv_clone_request r = qv_clone_default_request();
    r.audio_path = CLIP, r.ref_text = TEXT12, r.max_seconds = 12;
    r.icl_window = QV_ICL_FULL;
    if (qv_clone_run(c, &r, out, NULL)) fail_msg("%s", qv_last_error());
    qv_cloner_free(c);
    printf("  cloner + ICL clone: %lu safetensors files opened\n", qvm_st_n_opened() - n0);
    assert_int_equal(qvm_st_n_opened() - n0, 2);
}

QVT_MAIN(setup, tmpdir_teardown, test_open, test_bad_dirs, test_model_opens_once,
         test_cloner_opens_once)
