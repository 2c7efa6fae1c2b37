/* voice.c — qv_voice: a voice file opened by path or name, checked against a model, and mapped
 * onto an utterance's request (voice_load.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "engine/voice_load.h"
#include "engine/voice_verify.h"
#include "util/api.h"
#include "util/sha256.h"
#include "voicefmt/qvf.h"

/* A voice file's id, hashed when first asked for: a synthesis never needs it, and a voice with a
 * weight delta is hundreds of MB (the server opens a library voice per request). */
struct voice_id {
    pthread_mutex_t mu;
    int done;
    char hex[65];
};

/* A voice file's ICL codes are the model's frames: one count, spelled by both public headers. */
_Static_assert(QVF_N_CODEBOOKS == QV_N_CODEBOOKS, "voice-file and engine codebook counts");

static enum qv_status voice_open(qv_voice **out, const char *path_or_name, char *err, size_t es) {
    *out = NULL;
    if (!path_or_name || !*path_or_name) {
        snprintf(err, es, "voice: empty name");
        return QV_E_VOICE;
    }
    qv_voice *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(err, es, "%s: out of memory", path_or_name);
        return QV_E_NOMEM;
    }
    if (qvf_voice_find(path_or_name, v->path, sizeof v->path, err, es)) {
        free(v);
        return QV_E_VOICE;
    }
    if (qvf_read_file(v->path, 0, &v->f, err, es)) {
        free(v);
        return QV_E_VOICE;
    }
    if (!(v->id = calloc(1, sizeof *v->id)) || pthread_mutex_init(&v->id->mu, NULL)) {
        free(v->id), v->id = NULL;
        snprintf(err, es, "%.400s: out of memory", v->path);
        qv_voice_free(v);
        return QV_E_NOMEM;
    }
    const qvf_voice *f = v->f;
    if (f->n_frames && f->codes) {
        const size_t n = (size_t)f->n_frames * QV_N_CODEBOOKS;
        if (!(v->codes = malloc(n * sizeof *v->codes))) {
            snprintf(err, es, "%.400s: out of memory", v->path);
            qv_voice_free(v);
            return QV_E_NOMEM;
        }
        for (size_t i = 0; i < n; i++)
            v->codes[i] = f->codes[i];
    }
    *out = v;
    return QV_OK;
}

void qv_voice_free(qv_voice *v) {
    if (!v) return;
    qvf_voice_free(v->f);
    free(v->codes);
    if (v->id) pthread_mutex_destroy(&v->id->mu);
    free(v->id);
    free(v);
}

const char *qv_voice_name(const qv_voice *v) {
    const char *s = qvf_meta_get(v->f, "name");
    return s ? s : "";
}
const char *qv_voice_language(const qv_voice *v) {
    const char *s = qvf_meta_get(v->f, "language");
    return s ? s : "";
}
const char *qv_voice_path(const qv_voice *v) {
    return v->path;
}
const char *qv_voice_id(const qv_voice *v) {
    struct voice_id *d = v->id;
    pthread_mutex_lock(&d->mu);
    uint8_t h[32];
    if (!d->done && !qvu_sha256_file(v->path, h)) qvu_sha256_hex(h, d->hex);
    d->done = 1; /* an unreadable file stays "" */
    pthread_mutex_unlock(&d->mu);
    return d->hex;
}
qv_provenance qv_provenance_of(const qv_model *m, const qv_voice *v, const char *speaker) {
    qv_provenance p = qv_provenance_default();
    if (m) qv_model_fingerprint(m, p.model_fingerprint);
    if (v)
        snprintf(p.voice_id, sizeof p.voice_id, "%s", qv_voice_id(v));
    else if (speaker && *speaker)
        snprintf(p.voice_id, sizeof p.voice_id, "speaker:%s", speaker);
    return p;
}
int qv_voice_has_icl(const qv_voice *v) {
    return v->codes && v->f->transcript;
}
int qv_voice_has_wdelta(const qv_voice *v) {
    return v->f->has_wdelta;
}

enum qv_status qv_voice_open(qv_voice **out, const char *path_or_name) {
    char err[QVU_DETAIL_SIZE] = "";
    return qvu_fail(voice_open(out, path_or_name, err, sizeof err), err);
}

enum qv_status qv_voice_check(const qv_voice *v, const qv_model *m, char **warning) {
    char err[QVU_DETAIL_SIZE] = "";
    if (warning) *warning = NULL;
    if (!v || !m) return qvu_fail(QV_E_INVALID, "qv_voice_check: NULL argument");
    const enum qv_status st = qve_voice_check(v, m, 1, err, sizeof err);
    if (st || !err[0] || !warning) return qvu_fail(st, err);
    if (!(*warning = strdup(err))) return qvu_failf(QV_E_NOMEM, "%s: out of memory", v->path);
    return QV_OK;
}

enum qv_status qve_voice_check(const qv_voice *v, const qv_model *m, int with_delta, char *err,
                               size_t es) {
    const qvf_voice *f = v->f;
    const int H = m->ck->cfg.talker.hidden_size;
    enum qve_wdelta_action a;
    char e[768];
    /* the delta first: made for another checkpoint, that is the reason to name */
    if (with_delta && qve_voice_wdelta_fits(m, f, &a, e, sizeof e)) {
        snprintf(err, es, "%s: %s", v->path, e);
        return QV_E_VOICE;
    }
    if (!f->xvector || (int)f->enc_dim != H) {
        snprintf(err, es, "%s: x-vector of %u values, the model needs %d", v->path,
                 f->xvector ? f->enc_dim : 0, H);
        return QV_E_VOICE;
    }
    if (err && es) err[0] = 0;
    if (m->wdelta_on && !memcmp(m->wdelta_source, f->source.fingerprint, 32))
        return QV_OK; /* m carries the voice's delta: its text side is the source's */
    /* is the voice's source m's sibling? its text-side rows against m's own */
    int k = qve_voice_kinship(m, f, e, sizeof e);
    if (k < 0) return snprintf(err, es, "%s: out of memory", v->path), QV_E_NOMEM;
    if (k == QVM_KIN_UNKNOWN) snprintf(err, es, "%s: %s", v->path, e); /* a warning */
    if (k != QVM_KIN_FOREIGN) return QV_OK;
    snprintf(err, es, "%s: made with a checkpoint unrelated to %s: %s", v->path, m->ck->dir, e);
    return QV_E_FOREIGN_VOICE;
}

void qve_voice_request(const qv_voice *v, const qv_model *m, int use_icl, qv_request *r,
                       qv_text_bridge *bridge, char *warn, size_t ws) {
    const qvf_voice *f = v->f;
    const int H = m->ck->cfg.talker.hidden_size, TH = m->ck->cfg.text_hidden_size;
    const int bridged = m->wdelta_on && !memcmp(m->wdelta_source, f->source.fingerprint, 32);
    warn[0] = 0;
    r->speaker_vector = f->xvector;
    r->n_speaker_vector = H;
    if (!bridged && f->tpad && (int)f->tpad_hidden == H) r->text_special = f->tpad;
    if (use_icl && m->ck->cfg.variant == QVF_VARIANT_BASE && qv_voice_has_icl(v)) {
        r->ref_codes = v->codes;
        r->n_ref_frames = (int)f->n_frames;
        r->ref_text = f->transcript;
    }
    if (f->wovr_h && !bridged) {
        if ((int)f->wovr_h == H && (int)f->wovr_th == TH) {
            bridge->fc1_weight = f->wovr_fc1_w, bridge->fc1_bias = f->wovr_fc1_b;
            bridge->fc2_weight = f->wovr_fc2_w, bridge->fc2_bias = f->wovr_fc2_b;
            bridge->codec_rows = f->wovr_codec, bridge->n_codec_rows = (int)f->wovr_cv;
            bridge->struct_size = sizeof *bridge;
            r->bridge = bridge;
        } else {
            snprintf(warn, ws, "%s: model bridge for hidden %u/%u ignored (model %d/%d)", v->path,
                     f->wovr_h, f->wovr_th, H, TH);
        }
    }
}
