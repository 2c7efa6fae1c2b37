/* batch.c — batched streams (qv_model_set_batching): concurrent sessions of one model advance
 * together frame by frame, so each weight matrix is read once per step for all of them.
 *
 * A rendezvous, so that callers (qv_synth, the server) keep their own frame loop on their own
 * thread: qv_session_next_frame posts the session and waits. When no step is running, the first
 * thread to post leads: it waits (bounded, QVE_BATCH_WAIT_MS, asleep on a condition variable,
 * never spinning against pool workers) until the sessions of the last step that are still
 * generating and those that posted meanwhile are all here, takes those on the same weights, runs
 * one step for them on its own pool and wakes them. A session gone is simply not in that step.
 * Sessions say whether they are generating or away (qve_batch_presence: their prefill, their
 * first audio) and the leader waits for them: stepped without them, each would later take a step
 * of its own at nearly the price of a full batch (traced at the start of 4 streams: steps of 1,
 * 3, 1, then 4; under load, a stream preempted past 5 ms then stepped alone).
 *
 * The step (qve_batch_step) is qve_session_frame for n sessions: code 0 per session (its own
 * sampler, RNG and parameters), the code predictor's passes in lockstep (qve_cp_frame_multi),
 * one talker token each at its own position on its own KV cache (qve_stack_forward_multi), the
 * codec head. Every row goes through the same operations as it would alone, so results are
 * bit-identical (tests/unit/test_batch_step.c). The streams' decoder threads run at idle
 * priority meanwhile (synth.c), so the step keeps its core.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/model.h"
#include "util/api.h"

/* How long a leader waits for the sessions it expects. They come back within microseconds
 * unless their thread was preempted or waits on its decoder (a stream's first frames): a step
 * of 4 int8 sessions of the 0.6B takes 100-300 ms, so a straggler costs a few percent at most. */
#define QVE_BATCH_WAIT_MS 5
/* How long a leader waits for generating sessions (qve_batch_presence HERE) that have not posted:
 * they are runnable, and only a busy machine keeps them off a core that long. */
#define QVE_BATCH_MEMBER_MS 50
/* How long a leader waits for sessions away (AWAY): a prefill (~0.3 s of 0.6B on 2 cores) or a
 * first block's decode (~0.1 s). A bound only against a session held up
 * elsewhere: while one is away its own work (prefill, decode) keeps the cores busy. */
#define QVE_BATCH_AWAY_MS 1000

_Static_assert(QV_BATCH_MAX_STREAMS <= QVK_BATCH_MAX, "the kernels' batch holds every stream");

typedef struct waiter { /* a posted session, on its thread's stack */
    qv_session *s;
    int32_t *codes;
    int *done;
    enum qv_status st;
    int ready;
    struct waiter *next;
} waiter;

struct qve_batcher {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC: a post, a step's end */
    int max_streams;
    int stepping;   /* a leader is gathering or running a step */
    int n_expected; /* sessions the next step should have (see lead) */
    int n_here, n_away; /* sessions HERE and AWAY (qve_batch_presence) */
    waiter *head, **tail;
    int n_waiting;
    int64_t n_steps, n_frames; /* steps run and the frames they served (qv_model_batch_stats) */
    qve_batch_scratch bs;
};

/* ==== setup ================================================================================== */

void qve_batcher_free(struct qve_batcher *b) {
    if (!b) return;
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    qve_batch_scratch_free(&b->bs);
    free(b);
}

enum qv_status qv_model_set_batching(qv_model *m, int max_streams) {
    if (!m) return qvu_fail(QV_E_INVALID, "qv_model_set_batching: no model");
    if (max_streams < 0 || max_streams > QV_BATCH_MAX_STREAMS)
        return qvu_failf(QV_E_INVALID, "max_streams: expected 0..%d, found %d",
                         QV_BATCH_MAX_STREAMS, max_streams);
    if (max_streams <= 1) {
        qve_batcher_free(m->batch);
        m->batch = NULL;
        return QV_OK;
    }
    if (m->batch) {
        m->batch->max_streams = max_streams;
        return QV_OK;
    }
    struct qve_batcher *b = calloc(1, sizeof *b);
    if (!b) return qvu_failf(QV_E_NOMEM, "%s: batching: out of memory", m->ck->dir);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&b->mu, NULL);
    b->max_streams = max_streams;
    b->tail = &b->head;
    if (qve_batch_scratch_init(&b->bs, &m->ck->cfg, QVK_BATCH_MAX)) {
        qve_batcher_free(b);
        return qvu_failf(QV_E_NOMEM, "%s: batch scratch for %d streams: out of memory", m->ck->dir,
                         max_streams);
    }
    m->batch = b;
    return QV_OK;
}

void qv_model_batch_stats(const qv_model *m, int64_t *n_steps, int64_t *n_frames) {
    *n_steps = *n_frames = 0;
    if (!m->batch) return;
    pthread_mutex_lock(&m->batch->mu);
    *n_steps = m->batch->n_steps;
    *n_frames = m->batch->n_frames;
    pthread_mutex_unlock(&m->batch->mu);
}

/* ==== the step =============================================================================== */

/* Sessions that can share a step: the same talker layers, codec head and code predictor. */
static int same_weights(const qv_session *a, const qv_session *b) {
    return a->tw.stack.layers == b->tw.stack.layers && a->cp.w == b->cp.w &&
           !memcmp(&a->tw.codec_head, &b->tw.codec_head, sizeof a->tw.codec_head);
}

void qve_batch_step(struct qve_batcher *b, qv_session *const *s, int n, qvk_pool *pool,
                    int32_t (*codes)[QV_N_CODEBOOKS], int *done, enum qv_status *st) {
    if (n == 1) {
        st[0] = qve_session_frame(s[0], codes[0], &done[0]);
        return;
    }
    const qve_batch_scratch *bs = &b->bs;
    qv_session *on[QVK_BATCH_MAX];
    int idx[QVK_BATCH_MAX], c0[QVK_BATCH_MAX], k = 0;
    for (int i = 0; i < n; i++) { /* code 0; sessions that end here leave the step */
        int c;
        if (qve_session_frame_begin(s[i], &c, &done[i], &st[i]))
            on[k] = s[i], idx[k] = i, c0[k++] = c;
    }
    if (!k) return;
    const qv_model *m = on[0]->m;
    const int H = m->ck->cfg.talker.hidden_size, V = m->ck->cfg.talker.vocab_size;
    qve_cp_state *cps[QVK_BATCH_MAX];
    const qve_talker *tw[QVK_BATCH_MAX];
    void *ctx[QVK_BATCH_MAX];
    qve_stack_state *ts[QVK_BATCH_MAX];
    int pos[QVK_BATCH_MAX];
    int32_t frame[QVK_BATCH_MAX][QV_N_CODEBOOKS];
    for (int i = 0; i < k; i++) {
        cps[i] = &on[i]->cp, tw[i] = &on[i]->tw, ctx[i] = on[i], ts[i] = &on[i]->talker;
        memcpy(bs->z + (size_t)i * H, on[i]->z_frame, (size_t)H * sizeof(float));
    }
    qve_cp_frame_multi(cps, k, m, tw, pool, bs->z, c0, frame, qve_session_pick_cp, ctx, bs);
    for (int i = 0; i < k; i++) {
        qve_session_frame_input(on[i], frame[i]);
        memcpy(bs->x + (size_t)i * H, on[i]->x, (size_t)H * sizeof(float));
        pos[i] = on[i]->pos++;
    }
    qve_stack_forward_multi(ts, k, pool, bs->x, pos, bs);
    const qvm_stack_config *c = &on[0]->tw.stack.cfg;
    for (int i = 0; i < k; i++) { /* qve_talker_head, row by row up to the matvec */
        memcpy(on[i]->x, bs->x + (size_t)i * H, (size_t)H * sizeof(float));
        qvk_rmsnorm(on[i]->z, on[i]->x, on[i]->tw.stack.norm, H, c->rms_norm_eps);
        memcpy(bs->h + (size_t)i * H, on[i]->z, (size_t)H * sizeof(float));
    }
    qve_matvec_batch(pool, bs->h, k, H, &(qve_mv){bs->logits, &on[0]->tw.codec_head, NULL, V}, 1);
    for (int i = 0; i < k; i++) {
        memcpy(on[i]->logits_raw, bs->logits + (size_t)i * V, (size_t)V * sizeof(float));
        memcpy(codes[idx[i]], frame[i], sizeof frame[i]);
    }
}

/* ==== rendezvous ============================================================================= */

static struct timespec after_ms(const struct timespec *t, long ms) {
    struct timespec u = *t;
    u.tv_sec += ms / 1000;
    u.tv_nsec += ms % 1000 * 1000000L;
    if (u.tv_nsec >= 1000000000L) u.tv_sec++, u.tv_nsec -= 1000000000L;
    return u;
}

/* Gathers the sessions of a step (b->mu held, released while it runs) and runs it. Expected are
 * the sessions of the last step still generating plus those that posted during it; a session
 * that does not come within QVE_BATCH_WAIT_MS is not waited for again (it is no longer
 * expected after this step). Sessions that said they generate are waited for longer
 * (qve_batch_presence). */
static void lead(struct qve_batcher *b, waiter *me) {
    b->stepping = 1;
    const int want = b->n_expected < b->max_streams ? b->n_expected : b->max_streams;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const struct timespec until = after_ms(&now, QVE_BATCH_WAIT_MS);
    const struct timespec member_until = after_ms(&now, QVE_BATCH_MEMBER_MS);
    struct timespec away_until = after_ms(&now, QVE_BATCH_AWAY_MS);
    /* each kind of wait ends at its own bound; the posted HERE sessions are among n_waiting */
    int wait_away = 1, wait_here = 1, wait_expected = 1, n_away = b->n_away;
    while (b->n_waiting < b->max_streams) {
        const struct timespec *u = wait_away && b->n_away                 ? &away_until
                                   : wait_here && b->n_waiting < b->n_here ? &member_until
                                   : wait_expected && b->n_waiting < want  ? &until
                                                                           : NULL;
        if (!u) break;
        if (pthread_cond_timedwait(&b->cv, &b->mu, u) == ETIMEDOUT) {
            if (u == &away_until) wait_away = 0;
            if (u == &member_until) wait_here = 0;
            if (u == &until) wait_expected = 0;
        }
        if (b->n_away < n_away) { /* one came back: the others may be next in turn */
            clock_gettime(CLOCK_MONOTONIC, &now);
            away_until = after_ms(&now, QVE_BATCH_AWAY_MS);
        }
        n_away = b->n_away;
    }
    waiter *w[QVK_BATCH_MAX];
    int n = 0;
    for (waiter **p = &b->head; *p && n < b->max_streams;) {
        if (*p == me || same_weights((*p)->s, me->s)) {
            w[n++] = *p;
            *p = (*p)->next;
        } else {
            p = &(*p)->next;
        }
    }
    b->tail = &b->head;
    while (*b->tail)
        b->tail = &(*b->tail)->next;
    b->n_waiting -= n;
    pthread_mutex_unlock(&b->mu);
    qv_session *s[QVK_BATCH_MAX] = {0};
    int32_t codes[QVK_BATCH_MAX][QV_N_CODEBOOKS];
    int done[QVK_BATCH_MAX];
    enum qv_status st[QVK_BATCH_MAX];
    for (int i = 0; i < n; i++)
        s[i] = w[i]->s;
    qve_batch_step(b, s, n, me->s->pool, codes, done, st);
    pthread_mutex_lock(&b->mu);
    int alive = 0;
    for (int i = 0; i < n; i++) {
        w[i]->st = st[i];
        *w[i]->done = done[i];
        if (!st[i] && !done[i]) memcpy(w[i]->codes, codes[i], sizeof codes[i]);
        alive += !st[i] && !done[i];
        w[i]->ready = 1;
    }
    b->n_steps++;
    b->n_frames += n;
    b->n_expected = alive + b->n_waiting;
    b->stepping = 0;
    pthread_cond_broadcast(&b->cv);
}

enum qv_status qve_batch_frame(struct qve_batcher *b, qv_session *s, int32_t codes[QV_N_CODEBOOKS],
                               int *done) {
    waiter me = {s, codes, done, QV_OK, 0, NULL};
    pthread_mutex_lock(&b->mu);
    if (s->batch_presence == QVE_BATCH_AWAY) /* back */
        s->batch_presence = QVE_BATCH_HERE, b->n_away--, b->n_here++;
    *b->tail = &me;
    b->tail = &me.next;
    b->n_waiting++;
    if (b->stepping) pthread_cond_broadcast(&b->cv); /* a leader may be gathering */
    while (!me.ready) {
        if (!b->stepping)
            lead(b, &me);
        else
            pthread_cond_wait(&b->cv, &b->mu);
    }
    pthread_mutex_unlock(&b->mu);
    return me.st;
}

void qve_batch_presence(struct qve_batcher *b, qv_session *s, enum qve_batch_presence p) {
    pthread_mutex_lock(&b->mu);
    b->n_here -= s->batch_presence == QVE_BATCH_HERE;
    b->n_away -= s->batch_presence == QVE_BATCH_AWAY;
    s->batch_presence = p;
    b->n_here += p == QVE_BATCH_HERE;
    b->n_away += p == QVE_BATCH_AWAY;
    pthread_cond_broadcast(&b->cv); /* a leader may be waiting for it */
    pthread_mutex_unlock(&b->mu);
}
