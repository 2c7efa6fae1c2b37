/* voice.c — qv_voice: a voice file opened by path or name, checked against a model, and mapped
 * onto an utterance's request (voice_load.h).
 */
#include <math.h>
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

/* A voice's id (qv_voice_id). A file's is hashed when first asked for: a synthesis never needs
 * it, and a voice with a weight delta is hundreds of MB (the server opens a library voice per
 * request); a voice from memory or parts gets its id when made. */
struct voice_id {
    pthread_mutex_t mu;
    int done;
    char hex[72]; /* 64 hex digits, or "parts:" and 64 */
};

/* A voice file's ICL codes are the model's frames: one count, spelled by both public headers. */
_Static_assert(QVF_N_CODEBOOKS == QV_N_CODEBOOKS, "voice-file and engine codebook counts");

/* Takes f into a new voice named name: its ICL codes widened once to the engine's type; its id
 * is id (NULL: the file at name's, hashed on first use). */
static enum qv_status voice_adopt(qv_voice **out, qvf_voice *f, const char *name, void *bytes,
                                  const char *id, char *err, size_t es) {
    qv_voice *v = calloc(1, sizeof *v);
    struct voice_id *d = calloc(1, sizeof *d);
    int32_t *codes = NULL;
    const size_t n = f->codes ? (size_t)f->n_frames * QV_N_CODEBOOKS : 0;
    if (!v || !d || (n && !(codes = malloc(n * sizeof *codes))) ||
        pthread_mutex_init(&d->mu, NULL)) {
        snprintf(err, es, "%.400s: out of memory", name);
        free(v), free(d), free(codes);
        qvf_voice_free(f);
        free(bytes);
        return QV_E_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        codes[i] = f->codes[i];
    snprintf(v->path, sizeof v->path, "%s", name);
    if (id) snprintf(d->hex, sizeof d->hex, "%s", id), d->done = 1;
    v->f = f, v->codes = codes, v->bytes = bytes, v->id = d;
    *out = v;
    return QV_OK;
}

static enum qv_status voice_open(qv_voice **out, const char *path_or_name, char *err, size_t es) {
    *out = NULL;
    if (!path_or_name || !*path_or_name) {
        snprintf(err, es, "voice: empty name");
        return QV_E_VOICE;
    }
    char path[sizeof((qv_voice *)0)->path];
    qvf_voice *f;
    if (qvf_voice_find(path_or_name, path, sizeof path, err, es) ||
        qvf_read_file(path, 0, &f, err, es))
        return QV_E_VOICE;
    return voice_adopt(out, f, path, NULL, NULL, err, es);
}

static enum qv_status voice_open_memory(qv_voice **out, const void *data, size_t n_bytes,
                                        const char *name, char *err, size_t es) {
    *out = NULL;
    if (!name || !*name) name = "memory";
    if (!data || !n_bytes) {
        snprintf(err, es, "%.400s: no voice bytes", name);
        return QV_E_VOICE;
    }
    void *copy = malloc(n_bytes); /* the voice borrows tensor data from it */
    if (!copy) {
        snprintf(err, es, "%.400s: out of memory", name);
        return QV_E_NOMEM;
    }
    memcpy(copy, data, n_bytes);
    qvf_voice *f;
    uint8_t h[32];
    char id[65];
    if (qvf_read_mem(copy, n_bytes, name, 0, &f, err, es)) {
        free(copy);
        return QV_E_VOICE;
    }
    if (qvu_sha256(copy, n_bytes, h)) { /* the file's id: these are its bytes */
        snprintf(err, es, "%.400s: out of memory", name);
        qvf_voice_free(f);
        free(copy);
        return QV_E_NOMEM;
    }
    return voice_adopt(out, f, name, copy, qvu_hex(h, 32, id), err, es);
}

static enum qv_status voice_from_parts(qv_voice **out, const float *xvector, int dim,
                                       const int32_t *ref_codes, int n_ref_frames,
                                       const char *ref_text, const char *language, char *err,
                                       size_t es) {
    *out = NULL;
    if (!xvector || dim < 1) return snprintf(err, es, "parts: no x-vector"), QV_E_INVALID;
    if (n_ref_frames < 0 || (n_ref_frames && !ref_codes) || !(ref_text && *ref_text) != !n_ref_frames)
        return snprintf(err, es, "parts: ICL needs both reference codes and ref_text (or "
                                 "neither)"), QV_E_INVALID;
    for (int i = 0; i < dim; i++)
        if (!isfinite(xvector[i]))
            return snprintf(err, es, "parts: x-vector value %d is not finite", i), QV_E_INVALID;
    const size_t n = (size_t)n_ref_frames * QV_N_CODEBOOKS;
    for (size_t i = 0; i < n; i++)
        if (ref_codes[i] < 0 || ref_codes[i] >= QV_CODEBOOK_SIZE)
            return snprintf(err, es, "parts: reference code %d (frame %zu, codebook %zu) outside "
                                     "[0, 2048)", (int)ref_codes[i], i / QV_N_CODEBOOKS,
                            i % QV_N_CODEBOOKS), QV_E_INVALID;
    qvf_voice *f = qvf_voice_new();
    uint16_t *narrow = n ? malloc(n * sizeof *narrow) : NULL;
    int rc = !f || (n && !narrow) ? QVF_E_NOMEM : QVF_OK;
    for (size_t i = 0; !rc && i < n; i++)
        narrow[i] = (uint16_t)ref_codes[i];
    if (!rc) rc = qvf_voice_set_xvector(f, xvector, (uint32_t)dim);
    if (!rc && n) rc = qvf_voice_set_icl(f, ref_text, narrow, (uint32_t)n_ref_frames);
    if (!rc && language && *language) rc = qvf_meta_set(f, "language", language);
    free(narrow);
    if (rc) {
        qvf_voice_free(f);
        snprintf(err, es, "parts: %s", qvf_strerror(rc));
        return rc == QVF_E_NOMEM ? QV_E_NOMEM : rc == QVF_E_LIMIT ? QV_E_LIMIT : QV_E_INVALID;
    }
    /* no file: the id names what the voice is made of */
    qvu_sha256_ctx *c = qvu_sha256_begin();
    qvu_sha256_add(c, xvector, (size_t)dim * sizeof *xvector);
    qvu_sha256_add(c, ref_codes, n * sizeof *ref_codes);
    qvu_sha256_add(c, ref_text, ref_text ? strlen(ref_text) : 0);
    uint8_t h[32];
    char hex[65], id[72];
    if (qvu_sha256_end(c, h)) {
        qvf_voice_free(f);
        return snprintf(err, es, "parts: out of memory"), QV_E_NOMEM;
    }
    snprintf(id, sizeof id, "parts:%s", qvu_hex(h, 32, hex));
    return voice_adopt(out, f, "parts", NULL, id, err, es);
}

void qv_voice_free(qv_voice *v) {
    if (!v) return;
    qvf_voice_free(v->f);
    free(v->codes);
    free(v->bytes);
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
    if (!d->done && !qvu_sha256_file(v->path, h)) qvu_hex(h, 32, d->hex);
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

enum qv_status qv_voice_open_memory(qv_voice **out, const void *data, size_t n_bytes,
                                    const char *name) {
    char err[QVU_DETAIL_SIZE] = "";
    return qvu_fail(voice_open_memory(out, data, n_bytes, name, err, sizeof err), err);
}

enum qv_status qv_voice_from_parts(qv_voice **out, const float *xvector, int dim,
                                   const int32_t *ref_codes, int n_ref_frames,
                                   const char *ref_text, const char *language) {
    char err[QVU_DETAIL_SIZE] = "";
    return qvu_fail(voice_from_parts(out, xvector, dim, ref_codes, n_ref_frames, ref_text,
                                     language, err, sizeof err), err);
}

enum qv_status qv_voice_save(const qv_voice *v, const char *path) {
    char err[QVU_DETAIL_SIZE] = "";
    if (!v || !path) return qvu_fail(QV_E_INVALID, "qv_voice_save: NULL argument");
    const int rc = qvf_write_file(v->f, path, 4, err, sizeof err);
    return qvu_fail(!rc ? QV_OK : rc == QVF_E_NOMEM ? QV_E_NOMEM : rc == QVF_E_IO ? QV_E_IO
                                                                                  : QV_E_INVALID,
                    err);
}

const float *qv_voice_xvector(const qv_voice *v, int *dim) {
    *dim = (int)v->f->enc_dim;
    return v->f->xvector;
}
const int32_t *qv_voice_ref_codes(const qv_voice *v, int *n_frames) {
    *n_frames = v->codes ? (int)v->f->n_frames : 0;
    return v->codes;
}
const char *qv_voice_ref_text(const qv_voice *v) {
    return v->f->transcript;
}
const char *qv_voice_style(const qv_voice *v, int i, int *is_direction, float *strength) {
    if (i < 0 || i >= v->f->n_styles) return NULL;
    const qvf_style *s = &v->f->styles[i];
    if (is_direction) *is_direction = s->kind == QVF_STYLE_DIRECTION;
    if (strength) *strength = s->strength;
    return s->name;
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
