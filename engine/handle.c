/* handle.c — the public model handle (qv_model_load, qv_model_free) and the frame dispatch
 * (qv_session_next_frame): a session steps alone or through the model's batcher. They sit above
 * both session.c and batch.c, which steps sessions, so the files of engine/ call each other
 * top-down only.
 */
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint/ckpt.h"
#include "engine/model.h"
#include "util/api.h"

/* ==== model ================================================================================== */

enum qv_status qve_model_new(qv_model **out, qvm_ckpt *ck, char *err, size_t err_size) {
    *out = NULL;
    qvk_init();
    qv_model *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, err_size, "%s: out of memory", ck->dir);
        return QV_E_NOMEM;
    }
    if (qve_model_load(m, ck, err, err_size)) {
        qve_model_unload(m);
        free(m);
        return QV_E_MODEL;
    }
    *out = m;
    return QV_OK;
}

enum qv_status qv_model_load(qv_model **out, const char *dir) {
    *out = NULL;
    if (!dir) return qvu_fail(QV_E_INVALID, "qv_model_load: no directory");
    char err[QVU_DETAIL_SIZE] = "";
    qvm_ckpt *ck = qvm_ckpt_open(dir, err, sizeof err);
    if (!ck) return qvu_fail(QV_E_MODEL, err);
    const enum qv_status st = qve_model_new(out, ck, err, sizeof err);
    qvm_ckpt_free(ck); /* the model holds its own reference */
    return st ? qvu_fail(st, err) : QV_OK;
}

void qv_model_free(qv_model *m) {
    if (!m) return;
    qve_batcher_free(m->batch);
    qve_model_unload(m);
    free(m);
}

/* ==== frames ================================================================================= */

enum qv_status qv_session_next_frame(qv_session *s, int32_t codes[QV_N_CODEBOOKS], int *done) {
    const enum qv_status st = s->m->batch ? qve_batch_frame(s->m->batch, s, codes, done)
                                          : qve_session_frame(s, codes, done);
    return st ? qvu_fail(st, s->err) : st;
}
