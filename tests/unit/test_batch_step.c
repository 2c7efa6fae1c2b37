/* test_batch_step.c — batched streams (engine/batch.c) give exactly what each session gives
 * alone: the batched matvec kernels (bf16, int8) for 1-8 vectors against the one-vector kernels
 * in every variant; the batched step (qve_batch_step) on 3-6 sessions with different prompts,
 * seeds, positions and frame caps against the same sessions run one by one — codes and the talker's
 * logits bit for bit, every frame — on the tiny model in every kernel variant, on the full-size
 * 0.6B in int8 and bf16 (the sizes where the int8 kernels run) and on the 1.7B (a code predictor
 * narrower than the talker, behind its mtp projection); then the rendezvous through the
 * public API (qv_model_set_batching, qv_synth on four threads): the same PCM as the syntheses
 * alone, and steps that served several streams; a session away from the rendezvous is waited
 * for. Models: $QVOICE_CACHE/tiny-cv, q06b-cv, q17b-cv.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "tests/unit/helpers/models.h"
#include "tests/unit/helpers/run.h"

#include "engine/model.h"
#include "kernels/q8.h"

#define N_SESS 6 /* more than the kernels' 4-vector blocks */
#define MAX_FRAMES 24

/* Session i: its own text (so its own prompt length and positions), speaker, seed and cap. */
static const char *const TEXTS[N_SESS] = {
    "Hello there.",
    "The quick brown fox jumps over the lazy dog, twice.",
    "One, two, three.",
    "A somewhat longer sentence to give this session many more prompt positions than others.",
    "Short.",
    "Five sessions and then six."};
static const char *const SPEAKERS[N_SESS] = {"ryan", "vivian", "ryan", "vivian", "ryan", "ryan"};

static qv_session *start(const qv_model *m, int i, int quant, int n_frames) {
    qv_params p = qv_model_params(m);
    p.seed = 1000 + (uint64_t)i;
    p.quant = quant;
    p.max_frames = n_frames - (i == 2 ? n_frames / 2 : 0); /* one leaves the batch early */
    p.ignore_eos = i != 1;                                 /* session 1 may end on its own */
    qv_session *s;
    assert_int_equal(qv_session_new(&s, m, &p), QV_OK);
    qv_request r = qv_default_request();
    r.text = TEXTS[i];
    r.speaker = SPEAKERS[i];
    r.language = "english";
    if (qv_session_start(s, &r)) fail_msg("start %d: %s", i, qv_last_error());
    return s;
}

typedef struct {
    int32_t codes[MAX_FRAMES][QV_N_CODEBOOKS];
    float *logits; /* [MAX_FRAMES][vocab] raw talker logits after each frame */
    int n;
} trace;

static void record(trace *t, const qv_session *s, const int32_t *codes) {
    const size_t V = (size_t)s->m->ck->cfg.talker.vocab_size;
    memcpy(t->codes[t->n], codes, sizeof t->codes[0]);
    memcpy(t->logits + (size_t)t->n * V, s->logits_raw, V * sizeof(float));
    t->n++;
}

/* n sessions alone, then the same sessions batched: identical codes and logits bit for bit. */
static void check_step(qv_model *m, int n, int quant, int n_frames) {
    const size_t V = (size_t)m->ck->cfg.talker.vocab_size;
    trace alone[N_SESS], batched[N_SESS];
    for (int i = 0; i < n; i++) {
        alone[i].n = batched[i].n = 0;
        alone[i].logits = malloc((size_t)n_frames * V * sizeof(float));
        batched[i].logits = malloc((size_t)n_frames * V * sizeof(float));
        qv_session *s = start(m, i, quant, n_frames);
        int32_t c[QV_N_CODEBOOKS];
        int done = 0;
        while (!qve_session_frame(s, c, &done) && !done)
            record(&alone[i], s, c);
        qv_session_free(s);
    }
    assert_int_equal(qv_model_set_batching(m, N_SESS), QV_OK);
    qv_session *s[N_SESS];
    for (int i = 0; i < n; i++)
        s[i] = start(m, i, quant, n_frames);
    qvk_pool *pool = qvk_pool_create(2);
    int live = n, max_batch = 0;
    while (live) {
        qv_session *on[N_SESS];
        int idx[N_SESS], k = 0;
        for (int i = 0; i < n; i++)
            if (s[i]) on[k] = s[i], idx[k++] = i;
        int32_t codes[N_SESS][QV_N_CODEBOOKS];
        int done[N_SESS];
        enum qv_status st[N_SESS];
        qve_batch_step(m->batch, on, k, pool, codes, done, st);
        if (k > max_batch) max_batch = k;
        for (int j = 0; j < k; j++) {
            assert_int_equal(st[j], QV_OK);
            if (done[j]) {
                qv_session_free(s[idx[j]]);
                s[idx[j]] = NULL;
                live--;
            } else {
                record(&batched[idx[j]], on[j], codes[j]);
            }
        }
    }
    assert_int_equal(max_batch, n);
    for (int i = 0; i < n; i++) {
        printf("  session %d: %d frames alone, %d batched\n", i, alone[i].n, batched[i].n);
        assert_int_equal(alone[i].n, batched[i].n);
        assert_true(alone[i].n > 0);
        assert_memory_equal(alone[i].codes, batched[i].codes,
                            (size_t)alone[i].n * sizeof alone[i].codes[0]);
        assert_memory_equal(alone[i].logits, batched[i].logits,
                            (size_t)alone[i].n * V * sizeof(float));
        free(alone[i].logits);
        free(batched[i].logits);
    }
    qvk_pool_free(pool);
    assert_int_equal(qv_model_set_batching(m, 0), QV_OK);
}

/* ==== kernels ================================================================================ */

static float frand(unsigned *r) {
    *r = *r * 1103515245u + 12345u;
    return (float)((*r >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* Every n_x from 1 to QVK_BATCH_MAX, odd row counts and a bf16 tail: each y_k of the batched
 * kernels equals the one-vector kernel's on x_k, bit for bit, in every variant. */
static void test_kernels_batch_equal_alone(void **st) {
    (void)st;
    enum { N_OUT = 37, N_IN_BF = 1000, N_IN_Q8 = 384 };
    unsigned r = 1;
    uint16_t *w = malloc((size_t)N_OUT * N_IN_BF * 2);
    float *wf = malloc((size_t)N_OUT * N_IN_Q8 * sizeof(float));
    int8_t *q = malloc((size_t)N_OUT * N_IN_Q8);
    float scale[N_OUT], bias[N_OUT];
    static float x[QVK_BATCH_MAX * N_IN_BF], y[QVK_BATCH_MAX * N_OUT], y1[N_OUT];
    float *xq8 = malloc((size_t)QVK_BATCH_MAX * N_IN_Q8 * sizeof(float));
    for (int i = 0; i < N_OUT * N_IN_BF; i++)
        qvk_f32_to_bf16(&w[i], (float[]){frand(&r)}, 1);
    for (int i = 0; i < N_OUT * N_IN_Q8; i++)
        wf[i] = frand(&r);
    uint16_t *wb = malloc((size_t)N_OUT * N_IN_Q8 * 2);
    qvk_f32_to_bf16(wb, wf, (size_t)N_OUT * N_IN_Q8);
    assert_int_equal(qvk_q8_quantize_bf16(NULL, q, scale, wb, N_OUT, N_IN_Q8), 0);
    for (int i = 0; i < N_OUT; i++)
        bias[i] = frand(&r);
    for (int i = 0; i < QVK_BATCH_MAX * N_IN_BF; i++)
        x[i] = frand(&r);
    for (int i = 0; i < QVK_BATCH_MAX * N_IN_Q8; i++)
        xq8[i] = 3 * frand(&r);
    qvk_pool *pool = qvk_pool_create(2);
    const char *was = qvk_variant();
    static const char *const variants[] = {"scalar", "avx2", "avx512"};
    int8_t xq_ref[N_IN_Q8], xq_v[N_IN_Q8];
    float xs_ref[N_IN_Q8 / QVK_Q8_GROUP], xs_v[N_IN_Q8 / QVK_Q8_GROUP];
    assert_int_equal(qvk_set_variant("scalar"), 0);
    qvk_q8_quantize_x(xq_ref, xs_ref, xq8, N_IN_Q8);
    for (int v = 0; v < 3; v++) {
        if (qvk_set_variant(variants[v])) continue;
        qvk_q8_quantize_x(xq_v, xs_v, xq8, N_IN_Q8); /* the activations' bytes in every variant */
        assert_memory_equal(xq_v, xq_ref, sizeof xq_ref);
        assert_memory_equal(xs_v, xs_ref, sizeof xs_ref);
        for (int n = 1; n <= QVK_BATCH_MAX; n++) {
            qvk_mv mv = {y, w, bias, N_OUT};
            qvk_matvec_bf16_batch(pool, x, n, N_IN_BF, &mv, 1);
            for (int k = 0; k < n; k++) {
                qvk_matvec_bf16(NULL, y1, w, x + (size_t)k * N_IN_BF, bias, N_OUT, N_IN_BF);
                assert_memory_equal(y + (size_t)k * N_OUT, y1, sizeof y1);
            }
            qvk_q8_mv m8 = {y, q, scale, n % 2 ? bias : NULL, N_OUT};
            qvk_q8_matvec_batch(pool, xq8, n, N_IN_Q8, &m8, 1);
            for (int k = 0; k < n; k++) {
                qvk_q8_mv one = {y1, q, scale, m8.bias, N_OUT};
                qvk_q8_matvec_multi(NULL, xq8 + (size_t)k * N_IN_Q8, N_IN_Q8, &one, 1);
                assert_memory_equal(y + (size_t)k * N_OUT, y1, sizeof y1);
            }
        }
    }
    assert_int_equal(qvk_set_variant(was), 0);
    qvk_pool_free(pool);
    free(w), free(wf), free(wb), free(q), free(xq8);
}

/* ==== the batched step ======================================================================= */

static void test_step_tiny_every_variant(void **st) {
    (void)st;
    qv_model *m = test_model_load("tiny-cv");
    const char *was = qvk_variant();
    static const char *const variants[] = {"scalar", "avx2", "avx512"};
    for (int v = 0; v < 3; v++) {
        if (qvk_set_variant(variants[v])) continue;
        printf("tiny-cv, %s, %d sessions:\n", variants[v], N_SESS);
        check_step(m, N_SESS, QV_QUANT_BF16, MAX_FRAMES);
        printf("tiny-cv q4, %s, 3 sessions:\n", variants[v]);
        check_step(m, 3, QV_QUANT_Q4, MAX_FRAMES);
    }
    assert_int_equal(qvk_set_variant(was), 0);
    qv_model_free(m);
}

/* Under ThreadSanitizer (make tsan) the full-size comparisons are skipped: they run one thread
 * (nothing shared to check) and would take tens of minutes there; the tiny model runs the same
 * code. */
#ifdef __SANITIZE_THREAD__
#define SKIP_UNDER_TSAN() skip()
#else
#define SKIP_UNDER_TSAN() ((void)0)
#endif

static void test_step_06b_int8_bf16(void **st) {
    (void)st;
    SKIP_UNDER_TSAN();
    qv_model *m = test_model_load("q06b-cv");
    printf("q06b-cv, int8, 5 sessions:\n");
    check_step(m, 5, QV_QUANT_INT8, 4);
    printf("q06b-cv, bf16, 3 sessions:\n");
    check_step(m, 3, QV_QUANT_BF16, 4);
    qv_model_free(m);
}

/* The 1.7B: a code predictor narrower than the talker, behind small_to_mtp_projection. */
static void test_step_17b(void **st) {
    (void)st;
    SKIP_UNDER_TSAN();
    qv_model *m = test_model_load("q17b-cv");
    printf("q17b-cv, bf16, 2 sessions:\n");
    check_step(m, 2, QV_QUANT_BF16, 3);
    qv_model_free(m);
}

/* ==== the rendezvous through qv_synth ======================================================== */

typedef struct {
    qv_model *m;
    int i;
    float *x;
    int64_t n, cap;
    enum qv_status st;
} job;

static int on_pcm(void *user, const float *x, int n) {
    job *j = user;
    test_pcm_append(&j->x, &j->n, &j->cap, x, n);
    return 0;
}

static void *run_job(void *arg) {
    job *j = arg;
    qv_params p = qv_model_params(j->m);
    p.seed = 7 + (uint64_t)j->i;
    p.n_threads = 2;
    p.max_frames = 30;
    qv_synth *y;
    j->st = qv_synth_new(&y, j->m, &p);
    if (j->st) return NULL;
    qv_synth_request r = qv_synth_default_request();
    r.text = TEXTS[j->i];
    r.speaker = SPEAKERS[j->i];
    r.language = "english";
    r.whole_chunks = j->i == 3; /* one whole-chunk synthesis among the streams */
    j->st = qv_synth_run(y, &r, on_pcm, j, NULL);
    if (j->st) fprintf(stderr, "synth %d: %s\n", j->i, qv_last_error());
    qv_synth_free(y);
    return NULL;
}

#define N_SYNTH 4

static void run_all(qv_model *m, job *jobs, int threaded) {
    pthread_t t[N_SYNTH];
    for (int i = 0; i < N_SYNTH; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].m = m, jobs[i].i = i;
        if (!threaded)
            run_job(&jobs[i]);
        else
            assert_int_equal(pthread_create(&t[i], NULL, run_job, &jobs[i]), 0);
    }
    for (int i = 0; threaded && i < N_SYNTH; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < N_SYNTH; i++)
        assert_int_equal(jobs[i].st, QV_OK);
}

static void test_rendezvous_synth(void **st) {
    (void)st;
    qv_model *m = test_model_load("tiny-cv");
    job alone[N_SYNTH], together[N_SYNTH];
    run_all(m, alone, 0);
    assert_int_equal(qv_model_set_batching(m, 9), QV_E_INVALID);
    assert_string_equal(qv_last_error(), "max_streams: expected 0..8, found 9");
    assert_int_equal(qv_model_set_batching(m, N_SYNTH), QV_OK);
    run_all(m, together, 1);
    int64_t steps, frames;
    qv_model_batch_stats(m, &steps, &frames);
    printf("4 syntheses on 4 threads: %lld frames in %lld steps\n", (long long)frames,
           (long long)steps);
    assert_true(frames > steps); /* some steps served several streams */
    for (int i = 0; i < N_SYNTH; i++) {
        assert_int_equal(alone[i].n, together[i].n);
        assert_true(alone[i].n > 0);
        assert_memory_equal(alone[i].x, together[i].x, (size_t)alone[i].n * sizeof(float));
        free(alone[i].x);
        free(together[i].x);
    }
    qv_model_free(m);
}

/* A session away (qve_batch_presence: prefilling, or waiting for its first audio) is waited for:
 * the leader that posted first does not step alone after QVE_BATCH_WAIT_MS but takes both
 * sessions in one step when the away one posts 300 ms later. */
typedef struct {
    qv_session *s;
    int32_t codes[QV_N_CODEBOOKS];
    int done;
    enum qv_status st;
} poster;

static void *post(void *arg) {
    poster *p = arg;
    p->st = qv_session_next_frame(p->s, p->codes, &p->done);
    return NULL;
}

static void test_rendezvous_waits_for_away(void **st) {
    (void)st;
    qv_model *m = test_model_load("tiny-cv");
    assert_int_equal(qv_model_set_batching(m, 4), QV_OK);
    poster a = {start(m, 0, QV_QUANT_BF16, 8), {0}, 0, QV_OK};
    poster b = {start(m, 1, QV_QUANT_BF16, 8), {0}, 0, QV_OK};
    qve_batch_presence(m->batch, b.s, QVE_BATCH_AWAY);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, post, &a), 0);
    nanosleep(&(struct timespec){0, 300000000L}, NULL); /* a leads and waits for b */
    post(&b);
    pthread_join(t, NULL);
    assert_int_equal(a.st, QV_OK);
    assert_int_equal(b.st, QV_OK);
    int64_t steps, frames;
    qv_model_batch_stats(m, &steps, &frames);
    assert_int_equal(steps, 1);
    assert_int_equal(frames, 2);
    qv_session_free(a.s);
    qv_session_free(b.s);
    qv_model_free(m);
}

QVT_MAIN(NULL, NULL, test_kernels_batch_equal_alone, test_step_tiny_every_variant,
         test_step_06b_int8_bf16, test_step_17b, test_rendezvous_synth,
         test_rendezvous_waits_for_away)
