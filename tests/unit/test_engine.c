/* test_engine.c — engine unit tests: sampler rules (§3.6), prompt layouts of every mode (§3.4) on
 * the tiny synthetic models ($QVOICE_CACHE/tiny-cv, tiny-base, tiny-vd), seeded determinism across
 * thread counts, API error paths. The numerics against the official outputs are in
 * test_engine_golden.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"

#include "engine/model.h"

/* ==== sampler ================================================================================ */

static void test_topk_keeps_ties(void **st) {
    (void)st;
    qve_rng rng;
    qve_rng_seed(&rng, 1);
    float work[4];
    int idx[4], hits[4] = {0};
    const qve_sample_params p = {1, 1.0f, 1.0f, 2};
    for (int i = 0; i < 3000; i++) {
        float l[4] = {5, 5, 5, 1};
        hits[qve_sample(l, 4, &p, &rng, work, idx)]++;
    }
    printf("top-k 2 over [5,5,5,1]: %d %d %d %d\n", hits[0], hits[1], hits[2], hits[3]);
    assert_int_equal(hits[3], 0);
    for (int i = 0; i < 3; i++)
        assert_true(hits[i] > 800);
}

static void test_topp(void **st) {
    (void)st;
    qve_rng rng;
    qve_rng_seed(&rng, 2);
    float work[3];
    int idx[3], hits[3] = {0};
    const qve_sample_params p = {1, 1.0f, 0.6f, 0};
    for (int i = 0; i < 2000; i++) {
        float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
        hits[qve_sample(l, 3, &p, &rng, work, idx)]++;
    }
    /* ascending cumulative mass 0.2 <= 0.4 is dropped, 0.5 > 0.4 is kept */
    assert_int_equal(hits[2], 0);
    assert_true(hits[0] > hits[1] && hits[1] > 500);
}

static void test_greedy_and_processing(void **st) {
    (void)st;
    float l[3072];
    uint8_t seen[3072] = {0};
    for (int i = 0; i < 3072; i++)
        l[i] = 0.5f;
    l[7] = 2.0f;     /* seen, positive: /2 -> 1.0 */
    l[9] = -1.0f;    /* seen, negative: *2 -> -2.0 */
    l[2150] = 10.0f; /* EOS */
    l[2500] = 50.0f; /* suppressed */
    seen[7] = seen[9] = 1;
    qve_talker_logits_process(l, 3072, seen, 2.0f, 1, 2150);
    assert_float_equal(l[7], 1.0f, 0);
    assert_float_equal(l[9], -2.0f, 0);
    assert_true(isinf(l[2150]) && l[2150] < 0);
    assert_true(isinf(l[2500]) && isinf(l[2048]) && isinf(l[3071]));
    assert_float_equal(l[2047], 0.5f, 0);
    const qve_sample_params g = {0, 1.0f, 1.0f, 0};
    float w[3072];
    int idx[3072];
    assert_int_equal(qve_sample(l, 3072, &g, NULL, w, idx), 7);
    l[2150] = 10.0f;
    qve_talker_logits_process(l, 3072, seen, 1.0f, 2, 2150); /* EOS allowed from frame 2 */
    assert_int_equal(qve_sample(l, 3072, &g, NULL, w, idx), 2150);
}

static void test_rng_repeatable(void **st) {
    (void)st;
    qve_rng a, b;
    qve_rng_seed(&a, 42);
    qve_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++) {
        double u = qve_rng_uniform(&a);
        assert_true(u >= 0 && u < 1);
        assert_true(u == qve_rng_uniform(&b));
    }
}

/* ==== prompts on the tiny models ============================================================= */

static const int32_t TEXT[] = {9707, 1879, 11, 419, 374, 264, 1273, 13};
#define N_TEXT 8

static qv_session *start(const qv_model *m, const qv_request *r, enum qv_status want) {
    qv_params p = qv_model_params(m);
    p.max_frames = 8;
    qv_session *s;
    assert_int_equal(qv_session_new(&s, m, &p), QV_OK);
    enum qv_status st = qv_session_start(s, r);
    if (st != want) fail_msg("start: %s (%s)", qv_strerror(st), qv_last_error());
    return s;
}

/* row i of the prefill == text row + codec row (a codec id, or vec when non-NULL) */
static void expect_row(const qv_session *s, int row, const float *text, int codec_id) {
    const int H = qv_model_hidden_size(s->m);
    float want[512];
    qve_talker_codec_embed(&s->m->talker, want, codec_id, 0);
    for (int i = 0; i < H; i++)
        want[i] += text[i];
    for (int i = 0; i < H; i++)
        assert_float_equal(s->prefill[(size_t)row * H + i], want[i], 1e-6);
}

static void test_prompt_customvoice(void **st) {
    (void)st;
    qv_model *m = test_model_load("tiny-cv");
    qv_request r = qv_default_request();
    r.text_ids = TEXT, r.n_text_ids = N_TEXT, r.speaker = "Ryan", r.language = "english";
    qv_session *s = start(m, &r, QV_OK);
    assert_int_equal(s->n_prefill, N_TEXT + 11); /* worked example (a) */
    assert_int_equal(s->n_queue, 0);
    expect_row(s, 5, s->pad, 2050);
    expect_row(s, 7, s->pad, 3061);
    qv_session_free(s);

    r.language = NULL; /* auto, no dialect: nothink layout, one position shorter */
    s = start(m, &r, QV_OK);
    assert_int_equal(s->n_prefill, N_TEXT + 10);
    expect_row(s, 3, s->pad, 2155);
    qv_session_free(s);

    r.speaker = "eric"; /* dialect rule: auto -> sichuan_dialect with the think layout */
    s = start(m, &r, QV_OK);
    assert_int_equal(s->n_prefill, N_TEXT + 11);
    expect_row(s, 3, s->pad, 2154);
    expect_row(s, 5, s->pad, 2062);
    qv_session_free(s);
    r.language = "english"; /* a non-Chinese language keeps its own id */
    s = start(m, &r, QV_OK);
    expect_row(s, 5, s->pad, 2050);
    qv_session_free(s);

    r.speaker = "nobody";
    s = start(m, &r, QV_E_SPEAKER);
    assert_non_null(strstr(qv_last_error(), "ryan"));
    qv_session_free(s);
    r.speaker = "ryan", r.language = "sichuan_dialect";
    s = start(m, &r, QV_E_LANGUAGE);
    assert_non_null(strstr(qv_last_error(), "english"));
    qv_session_free(s);
    r.language = "english", r.layout = QV_LAYOUT_STREAMING;
    s = start(m, &r, QV_OK);
    assert_int_equal(s->n_prefill, 3 + 6 + 1);
    assert_int_equal(s->n_queue, N_TEXT);
    qv_session_free(s);
    qv_model_free(m);
}

static void test_prompt_voicedesign(void **st) {
    (void)st;
    qv_model *m = test_model_load("tiny-vd");
    qv_request r = qv_default_request();
    r.text_ids = TEXT, r.n_text_ids = N_TEXT;
    r.instruct = "A calm voice.";
    qv_session *s = start(m, &r, QV_OK);
    int32_t *ids;
    int n;
    assert_int_equal(qv_session_tokenize(s, "A calm voice.", &ids, &n), QV_OK);
    free(ids);
    /* worked example (e): M instruct ids (n + 5 with the template) + 3 + 4 + (N+1) + 1 */
    assert_int_equal(s->n_prefill, n + 5 + 3 + 4 + N_TEXT + 2);
    qv_session_free(s);
    qv_model_free(m);
}

static void test_prompt_base(void **st) {
    (void)st;
    qv_model *m = test_model_load("tiny-base");
    const int H = qv_model_hidden_size(m);
    float vec[512];
    for (int i = 0; i < H; i++)
        vec[i] = 0.01f * (float)i;
    qv_request r = qv_default_request();
    r.text_ids = TEXT, r.n_text_ids = N_TEXT, r.language = "english";
    r.speaker_vector = vec, r.n_speaker_vector = H;
    qv_session *s = start(m, &r, QV_OK); /* Base default: streaming */
    assert_int_equal(s->n_prefill, 10);
    assert_int_equal(s->n_queue, N_TEXT);
    for (int i = 0; i < H; i++) /* speaker slot: PAD + raw vector */
        assert_float_equal(s->prefill[(size_t)7 * H + i], s->pad[i] + vec[i], 1e-6);
    qv_session_free(s);

    r.n_speaker_vector = H - 1;
    s = start(m, &r, QV_E_INVALID);
    qv_session_free(s);
    r.n_speaker_vector = H;

    int32_t ref[5 * 16];
    for (int i = 0; i < 5 * 16; i++)
        ref[i] = (i * 37) % 2048;
    const int32_t ref_text[] = {3966, 17692, 323};
    r.ref_codes = ref, r.n_ref_frames = 5, r.ref_text_ids = ref_text, r.n_ref_text_ids = 3;
    s = start(m, &r, QV_OK); /* Lt = 3+8+1 = 12 > Lc = 6: Lc positions, 6 queued */
    assert_int_equal(s->n_prefill, 9 + 6);
    assert_int_equal(s->n_queue, 6);
    qv_session_free(s);
    r.n_ref_frames = 4, r.n_ref_text_ids = 0;
    r.n_text_ids = 2; /* Lt = 3 <= Lc = 5: text padded, nothing queued */
    s = start(m, &r, QV_OK);
    assert_int_equal(s->n_prefill, 9 + 5);
    assert_int_equal(s->n_queue, 0);
    qv_session_free(s);
    r.layout = QV_LAYOUT_NON_STREAMING;
    s = start(m, &r, QV_OK);
    assert_int_equal(s->n_prefill, 9 + 3 + 5);
    qv_session_free(s);
    ref[3] = 2048;
    s = start(m, &r, QV_E_INVALID);
    qv_session_free(s);
    qv_model_free(m);
}

static void test_text_bridge(void **st) {
    (void)st;
    qv_model *m = test_model_load("tiny-base");
    const int H = qv_model_hidden_size(m);
    int32_t ref[3 * 16];
    for (int i = 0; i < 3 * 16; i++)
        ref[i] = (i * 91) % 2048;
    qv_request r = qv_default_request();
    r.text_ids = TEXT, r.n_text_ids = N_TEXT, r.ref_codes = ref, r.n_ref_frames = 3;
    qv_session *a = start(m, &r, QV_OK);
    /* identity bridge (the model's own weights): bit-identical prompt */
    qv_text_bridge b = {sizeof b,           m->talker.fc1,      m->talker.fc1_bias,
                        m->talker.fc2,      m->talker.fc2_bias, m->talker.codec_embedding,
                        2048};
    r.bridge = &b;
    qv_session *s = start(m, &r, QV_OK);
    assert_int_equal(s->n_prefill, a->n_prefill);
    assert_memory_equal(s->prefill, a->prefill, (size_t)a->n_prefill * H * sizeof(float));
    qv_session_free(s);
    /* zeroed codebook rows: the ICL frame positions lose their codec part, nothing else moves */
    uint16_t *zero = calloc((size_t)2048 * H, sizeof(uint16_t));
    b.codec_rows = zero;
    s = start(m, &r, QV_OK);
    const size_t first_frame = (size_t)(s->n_prefill - 3) * H; /* streaming: last 3 = F(R_j) */
    assert_memory_equal(s->prefill, a->prefill, first_frame * sizeof(float));
    assert_memory_not_equal(s->prefill + first_frame, a->prefill + first_frame, (size_t)H * 4);
    qv_session_free(s);
    b.n_codec_rows = 4000;
    s = start(m, &r, QV_E_INVALID);
    qv_session_free(s);
    free(zero);
    qv_session_free(a);
    qv_model_free(m);
}

/* ==== generation ============================================================================= */

static int generate(const qv_model *m, int n_threads, uint64_t seed, int32_t *out, int max) {
    qv_params p = qv_model_params(m);
    p.n_threads = n_threads, p.seed = seed, p.max_frames = max;
    qv_session *s;
    assert_int_equal(qv_session_new(&s, m, &p), QV_OK);
    qv_request r = qv_default_request();
    r.text = "Hello world, this is a test.", r.speaker = "vivian";
    assert_int_equal(qv_session_start(s, &r), QV_OK);
    int n = 0, done = 0;
    while (!qv_session_next_frame(s, out + (size_t)n * 16, &done) && !done)
        n++;
    assert_int_equal(qv_session_n_frames(s), n);
    qv_session_free(s);
    return n;
}

static void test_seed_determinism(void **st) {
    (void)st;
    qv_model *m = test_model_load("tiny-cv");
    static int32_t a[40 * 16], b[40 * 16], c[40 * 16];
    int na = generate(m, 1, 7, a, 40), nb = generate(m, 3, 7, b, 40), nc = generate(m, 1, 8, c, 40);
    printf("frames: seed 7 x1 thread %d, x3 threads %d, seed 8 %d\n", na, nb, nc);
    assert_true(na >= 2); /* EOS is blocked for the first two frames */
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, (size_t)na * 16 * sizeof(int32_t));
    assert_true(nc != na || memcmp(a, c, (size_t)na * 16 * sizeof(int32_t)));
    for (int i = 0; i < na * 16; i++)
        assert_true(a[i] >= 0 && a[i] < 2048);
    qv_model_free(m);
}

static void test_api_errors(void **st) {
    (void)st;
    qv_model *m = test_model_load("tiny-cv");
    qv_params p = qv_model_params(m);
    qv_session *s;
    assert_int_equal(qv_session_new(&s, m, &p), QV_OK);
    int32_t codes[16];
    int done;
    assert_int_equal(qv_session_next_frame(s, codes, &done), QV_E_STATE);
    qv_request r = qv_default_request();
    assert_int_equal(qv_session_start(s, &r), QV_E_INVALID);
    qv_session_free(s);
    p.temperature = 0;
    assert_int_equal(qv_session_new(&s, m, &p), QV_E_INVALID);
    assert_null(s);
    assert_string_equal(qv_strerror(QV_E_SPEAKER), "unknown speaker");
    assert_string_equal(qv_strerror((enum qv_status)999), "unknown status");
    qv_model_free(m);
    assert_int_equal(qv_model_load(&m, "/nonexistent"), QV_E_MODEL);
    assert_null(m);
}

QVT_MAIN(NULL, NULL, test_topk_keeps_ties, test_topp, test_greedy_and_processing,
         test_rng_repeatable, test_prompt_customvoice, test_prompt_voicedesign, test_prompt_base,
         test_text_bridge, test_seed_determinism, test_api_errors)
