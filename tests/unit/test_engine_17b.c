/* test_engine_17b.c — the 1.7B synthetic checkpoints ($QVOICE_CACHE/q17b-cv, q17b-base; built by
 * QVOICE_MODELS_17B=1 scripts/models.sh full) load and generate a few frames through the
 * small_to_mtp_projection path (talker 2048 wide, code predictor 1024). No official outputs exist
 * for 1.7B: the check is that the projection is bound, the prompt has the §3.4 length, logits are
 * finite and codes are valid. Skipped when the checkpoints are absent.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "engine/model.h"
#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"

static qv_model *load_or_skip(const char *name) {
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/%s", test_cache_dir(), name);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat sb;
    if (stat(path, &sb)) {
        printf("%s: absent, skipped (QVOICE_MODELS_17B=1 scripts/models.sh full)\n", dir);
        return NULL;
    }
    qv_model *m;
    if (qv_model_load(&m, dir)) fail_msg("%s", qv_last_error());
    return m;
}

static void generate(qv_model *m, const qv_request *r, int want_prefill) {
    assert_int_equal(qv_model_hidden_size(m), 2048);
    assert_non_null(m->cp.mtp_proj.bf16);
    assert_non_null(m->cp.mtp_bias);
    qv_params p = qv_model_params(m);
    p.do_sample = p.subtalker_do_sample = 0;
    p.max_frames = 3;
    p.n_threads = 2;
    qv_session *s;
    assert_int_equal(qv_session_new(&s, m, &p), QV_OK);
    if (qv_session_start(s, r)) fail_msg("start: %s", qv_last_error());
    assert_int_equal(s->n_prefill, want_prefill);
    int n = 0, done = 0;
    int32_t codes[16];
    while (!qv_session_next_frame(s, codes, &done) && !done) {
        for (int g = 0; g < 16; g++)
            assert_true(codes[g] >= 0 && codes[g] < 2048);
        for (int i = 0; i < 15 * 2048; i++)
            assert_true(isfinite(s->cp.logits[i]));
        for (int i = 0; i < 3072; i++)
            assert_true(isfinite(s->logits_raw[i]));
        printf("%s frame %d: %d %d %d ... %d\n", qv_model_type(m), n, codes[0], codes[1], codes[2],
               codes[15]);
        n++;
    }
    assert_int_equal(n, 3);
    qv_session_free(s);
}

static const int32_t TEXT[] = {9707, 1879, 11, 419, 374, 264, 1273, 13};

static void test_17b_customvoice(void **st) {
    (void)st;
    qv_model *m = load_or_skip("q17b-cv");
    if (!m) skip();
    qv_request r = qv_default_request();
    r.text_ids = TEXT, r.n_text_ids = 8, r.speaker = "ryan", r.language = "english";
    r.instruct = "Speak slowly."; /* instruct block: supported on 1.7B */
    int32_t *ids;
    int n;
    qv_session *s;
    qv_params p = qv_model_params(m);
    assert_int_equal(qv_session_new(&s, m, &p), QV_OK);
    assert_int_equal(qv_session_tokenize(s, "Speak slowly.", &ids, &n), QV_OK);
    free(ids);
    qv_session_free(s);
    generate(m, &r, n + 5 + 8 + 11);
    qv_model_free(m);
}

static void test_17b_base_xvector(void **st) {
    (void)st;
    qv_model *m = load_or_skip("q17b-base");
    if (!m) skip();
    static float vec[2048];
    for (int i = 0; i < 2048; i++)
        vec[i] = 0.3f * sinf(0.01f * (float)i);
    qv_request r = qv_default_request();
    r.text_ids = TEXT, r.n_text_ids = 8, r.language = "english";
    r.speaker_vector = vec, r.n_speaker_vector = 2048;
    generate(m, &r, 10);
    qv_model_free(m);
}

QVT_MAIN(NULL, NULL, test_17b_customvoice, test_17b_base_xvector)
