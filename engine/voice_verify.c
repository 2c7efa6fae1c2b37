/* voice_verify.c — qv_voice_file_verify (include/qvoice.h): what `voicefmt verify --model`
 * checks, in the library so the tool needs only the public headers. Every problem is reported
 * (one line each, "PATH: problem"), not only the first, so one run shows all a voice lacks.
 * The model is loaded with qv_model_load (mmap; no synthesis state), which also checks it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/fingerprint.h"
#include "checkpoint/sibling.h"
#include "engine/model.h"
#include "engine/voice_load.h"
#include "engine/voice_verify.h"
#include "include/qvoice.h"
#include "util/api.h"
#include "voicefmt/qvf.h"

#define REPORT_BYTES 16384 /* a few dozen lines at most: every tensor of a delta can be named */

typedef struct {
    char *out;
    size_t size, used;
    const char *path;
    int n_bad; /* problems (warnings excluded) */
    char first[QVU_DETAIL_SIZE]; /* the first problem, for qv_last_error */
} report;

static void say(report *r, int problem, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(report *r, int problem, const char *fmt, ...) {
    r->n_bad += problem;
    if (problem && !r->first[0]) {
        int n = snprintf(r->first, sizeof r->first, "%s: ", r->path);
        va_list ap;
        va_start(ap, fmt);
        if (n > 0 && (size_t)n < sizeof r->first)
            vsnprintf(r->first + n, sizeof r->first - (size_t)n, fmt, ap);
        va_end(ap);
    }
    if (!r->out || r->used + 1 >= r->size) return;
    int n = snprintf(r->out + r->used, r->size - r->used, "%s%s: %s", r->used ? "\n" : "", r->path,
                     problem ? "" : "warning: ");
    if (n < 0 || r->used + (size_t)n >= r->size) return;
    r->used += (size_t)n;
    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(r->out + r->used, r->size - r->used, fmt, ap);
    va_end(ap);
    if (n > 0) r->used = r->used + (size_t)n < r->size ? r->used + (size_t)n : r->size - 1;
}

/* x-vector, TPAD and WOVR sizes against the model's. */
static void check_sizes(report *r, const qvf_voice *v, const qv_model *m, const char *dir) {
    const qvm_model_config *c = &m->ck->cfg;
    uint32_t h = (uint32_t)c->talker.hidden_size, th = (uint32_t)c->text_hidden_size;
    /* a Base model takes its speaker encoder's output, a CustomVoice one a row of H */
    uint32_t want_enc = c->has_speaker_encoder ? (uint32_t)c->enc_dim : h;
    if (v->enc_dim != want_enc)
        say(r, 1, "x-vector has %u floats, model %s expects %u", v->enc_dim, dir, want_enc);
    if (v->tpad_hidden && v->tpad_hidden != h)
        say(r, 1, "TPAD hidden %u, model %s has %u", v->tpad_hidden, dir, h);
    if (v->wovr_h && (v->wovr_h != h || v->wovr_th != th))
        say(r, 1, "WOVR h %u th %u, model %s has %u / %u", v->wovr_h, v->wovr_th, dir, h, th);
}

/* The weight delta's target: variant, hidden size, fingerprint, each tensor (deep: its hash). */
static void check_wdelta(report *r, const qvf_voice *v, const qv_model *m, const char *dir,
                         int deep) {
    static const uint8_t zero[32];
    enum qve_wdelta_action a;
    char err[768];
    if (qve_voice_wdelta_fits(m, v, &a, err, sizeof err)) { /* identity: the engine's own rule */
        say(r, 1, "%s", err);
        return;
    }
    if (a == QVE_WDELTA_SOURCE) return; /* m is the voice's source: the delta is not applied */
    if (!memcmp(v->target.fingerprint, zero, 32))
        say(r, 0, "WDELTA has no target fingerprint (legacy); only sizes checked");
    for (uint32_t i = 0; i < v->n_tensors; i++) {
        const qvf_tensor *t = &v->tensors[i];
        const qvm_tensor *mt = qvm_st_find(m->ck->st, t->name);
        if (!mt) {
            say(r, 1, "WDELTA tensor %s is not in model %s", t->name, dir);
            continue;
        }
        if (t->encoding == QVF_ENC_DELTA16_LZ4 &&
            (mt->dtype != QVM_DTYPE_BF16 || mt->n_bytes != t->raw_bytes)) {
            say(r, 1, "WDELTA tensor %s: %llu bf16 bytes, model has %zu bytes %s", t->name,
                (unsigned long long)t->raw_bytes, mt->n_bytes, qvm_dtype_name(mt->dtype));
            continue;
        }
        uint8_t hsh[32];
        if (deep && t->encoding == QVF_ENC_DELTA16_LZ4 && memcmp(t->target_sha256, zero, 32) &&
            (qvm_tensor_sha256(mt, hsh) || memcmp(hsh, t->target_sha256, 32)))
            say(r, 1, "WDELTA tensor %s: model tensor content differs from the delta's target",
                t->name);
    }
}

int qve_voice_kinship(const qv_model *m, const qvf_voice *v, char *why, size_t why_size) {
    const int H = m->ck->cfg.talker.hidden_size;
    float *tpad = malloc(3 * (size_t)H * sizeof(float));
    if (!tpad || qvm_textside_special(&m->text, &m->ck->cfg, NULL, tpad)) {
        free(tpad);
        return -1;
    }
    const qvm_text_rows mine = {tpad, m->text.fc1_bias, m->text.fc2_bias};
    const qvm_text_rows theirs = {v->tpad_hidden == (uint32_t)H ? v->tpad : NULL,
                                  v->wovr_th == (uint32_t)m->ck->cfg.text_hidden_size ? v->wovr_fc1_b : NULL,
                                  v->wovr_h == (uint32_t)H ? v->wovr_fc2_b : NULL};
    enum qvm_kinship k =
        qvm_sibling_judge(&theirs, &mine, H, m->ck->cfg.text_hidden_size, NULL, why, why_size);
    free(tpad);
    return (int)k;
}

/* The sibling check of qv_voice_file_verify; 1 if the voice is foreign (and not forced). */
static int check_sibling(report *r, const qvf_voice *v, const qv_model *m, const char *dir,
                         int force) {
    char why[320];
    int k = qve_voice_kinship(m, v, why, sizeof why);
    if (k < 0)
        say(r, 1, "out of memory");
    else if (k == QVM_KIN_FOREIGN)
        say(r, !force, "made with a checkpoint unrelated to %s%s: %s", dir,
            force ? " (allowed by force)" : "", why);
    else if (k == QVM_KIN_UNKNOWN)
        say(r, 0, "%s", why);
    return k == QVM_KIN_FOREIGN && !force;
}

enum qv_status qv_voice_file_verify(const char *model_dir, const char *voice_path, int flags,
                                    char **out) {
    *out = calloc(1, REPORT_BYTES);
    report r = {*out, REPORT_BYTES, 0, voice_path, 0, ""};
    char err[QVU_DETAIL_SIZE];
    qvf_voice *v;
    if (qvf_read_file(voice_path, 0, &v, err, sizeof err)) {
        if (*out) snprintf(*out, REPORT_BYTES, "%s", err);
        return qvu_fail(QV_E_VOICE, err);
    }
    qv_model *m;
    enum qv_status st = qv_model_load(&m, model_dir);
    if (st) {
        if (*out) snprintf(*out, REPORT_BYTES, "%s", qv_last_error());
        qvf_voice_free(v);
        return st;
    }
    check_sizes(&r, v, m, model_dir);
    if (!r.n_bad && v->has_wdelta) check_wdelta(&r, v, m, model_dir, flags & QV_VERIFY_DEEP);
    int foreign = 0;
    if (!r.n_bad) foreign = check_sibling(&r, v, m, model_dir, flags & QV_VERIFY_FORCE);
    qv_model_free(m);
    qvf_voice_free(v);
    st = r.n_bad == foreign && foreign ? QV_E_FOREIGN_VOICE : r.n_bad ? QV_E_VOICE : QV_OK;
    return qvu_fail(st, r.first);
}
