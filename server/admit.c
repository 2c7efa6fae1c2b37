/* admit.c — one admission path for all work: a synthesis and a clone upload each take one of the
 * --max-concurrency slots, waiting in the one queue of --max-queue; beyond it 429 + Retry-After.
 * A clone takes any free slot and leaves its synthesizer as it was.
 */
#include <stdlib.h>

#include "server/server_impl.h"

int qvs_params_equal(const qv_params *a, const qv_params *b) {
    return a->n_threads == b->n_threads && a->seed == b->seed && a->do_sample == b->do_sample &&
           a->temperature == b->temperature && a->top_k == b->top_k && a->top_p == b->top_p &&
           a->repetition_penalty == b->repetition_penalty && a->max_frames == b->max_frames &&
           a->quant == b->quant && a->subtalker_do_sample == b->subtalker_do_sample &&
           a->subtalker_temperature == b->subtalker_temperature &&
           a->subtalker_top_k == b->subtalker_top_k && a->subtalker_top_p == b->subtalker_top_p &&
           a->ignore_eos == b->ignore_eos;
}

int qvs_slot_take(qv_server *s, struct MHD_Connection *c, int model, const qv_params *p,
                  double deadline) {
    pthread_mutex_lock(&s->mu);
    int best = -1;
    for (;;) {
        int rank = 0; /* of best: 1 free, 2 same model, 3 same parameters too */
        for (int i = 0; i < s->n_slots && rank < 3; i++) {
            if (s->slots[i].busy) continue;
            const int r = model >= 0 && s->slots[i].synth && s->slots[i].model == model
                              ? 2 + qvs_params_equal(&s->slots[i].params, p)
                              : 1;
            if (r > rank) best = i, rank = r;
        }
        if (best >= 0) break;
        if (s->n_queued >= s->cfg.max_queue) {
            pthread_mutex_unlock(&s->mu);
            return -1;
        }
        s->n_queued++;
        qvs_wait_tick(s);
        s->n_queued--;
        if (s->draining == 2 || qvs_now_s() > deadline || qvs_peer_gone(c)) {
            pthread_mutex_unlock(&s->mu);
            return -2;
        }
    }
    s->slots[best].busy = 1;
    pthread_mutex_unlock(&s->mu);
    return best;
}

void qvs_slot_release(qv_server *s, int i) {
    pthread_mutex_lock(&s->mu);
    s->slots[i].busy = 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

enum MHD_Result qvs_reply_not_admitted(qv_server *s, struct MHD_Connection *c, req *q, int why,
                                       double deadline) {
    if (why == -1)
        return qvs_reply_error(c, q, MHD_HTTP_TOO_MANY_REQUESTS, "server_error", "busy", NULL,
                               "all %d slots busy and %d requests queued; retry later",
                               s->n_slots, s->cfg.max_queue);
    if (qvs_now_s() > deadline)
        return qvs_reply_error(c, q, MHD_HTTP_GATEWAY_TIMEOUT, "server_error", "timeout", NULL,
                               "no free slot within the time limit (%d s)", s->cfg.timeout_s);
    return MHD_NO; /* the client left or the server stops */
}
