/* cloner.c — the public cloning API (qvoice.h): reference audio → hygiene → x-vector (mel +
 * ECAPA) and ICL codes (Mimi) → a voice with the Base text side (TPAD, WOVR: checkpoint/textside)
 * and identity, written atomically by voicefmt, optionally with a weight delta for a CustomVoice
 * target. Everything the run did goes into one JSON report (cJSON), from which the clone tool
 * prints its summary.
 */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/ckpt.h"
#include "checkpoint/fingerprint.h"
#include "checkpoint/config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/textside.h"
#include "features/speech_encoder.h"
#include "clone/hygiene.h"
#include "clone/plot.h"
#include "include/qvoice.h"
#include "util/api.h"
#include "util/fileio.h"
#include "util/sha256.h"
#include "voicefmt/qvf.h"

#define WOVR_CODEC_ROWS 2048 /* codebook rows a voice's WOVR carries (qvoice-format.md §8.3) */

struct qv_cloner {
    qvm_ckpt *ck; /* the Base checkpoint: config, identity, text side, WDELTA source */
    int n_threads;
    double load_s;
    qva_ecapa *ecapa;
    qvm_textside text;
    float *tpad;       /* [3][hidden], computed once */
    struct lazy *lazy; /* the speech encoder, loaded on first ICL use */
};

struct lazy {
    pthread_mutex_t lock;
    qva_speech_encoder *se;
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static qvk_pool *pool_for(int n_threads) {
    return n_threads > 1 ? qvk_pool_create(n_threads) : NULL;
}

/* ==== cloner ================================================================================ */

void qv_cloner_free(qv_cloner *c) {
    if (!c) return;
    qva_ecapa_free(c->ecapa);
    if (c->lazy) {
        qva_speech_encoder_free(c->lazy->se);
        pthread_mutex_destroy(&c->lazy->lock);
        free(c->lazy);
    }
    qvm_textside_free(&c->text);
    qvm_ckpt_free(c->ck);
    free(c->tpad);
    free(c);
}

static enum qv_status cloner_load(qv_cloner **out, const char *base_dir, int n_threads,
                                  char *err, size_t err_size) {
    *out = NULL;
    double t0 = now_s();
    qv_cloner *c = calloc(1, sizeof *c);
    if (c && !(c->lazy = calloc(1, sizeof *c->lazy))) {
        free(c);
        c = NULL;
    }
    if (!c) {
        snprintf(err, err_size, "%s: out of memory", base_dir);
        return QV_E_NOMEM;
    }
    pthread_mutex_init(&c->lazy->lock, NULL);
    c->n_threads = qv_threads_resolve(n_threads);
    enum qv_status st = QV_E_MODEL;
    if (!(c->ck = qvm_ckpt_open(base_dir, err, err_size))) goto fail;
    const qvm_model_config *cfg = &c->ck->cfg;
    /* the speaker encoder decides "is this a Base model?" (a CustomVoice one is refused there) */
    if (!(c->ecapa = qva_ecapa_load(c->ck, err, err_size)) ||
        qvm_textside_bind(&c->text, c->ck->st, cfg, err, err_size))
        goto fail;
    qvk_pool *pool = pool_for(c->n_threads);
    c->tpad = malloc(3 * (size_t)c->text.hidden * sizeof(float));
    int bad = !c->tpad || qvm_textside_special(&c->text, cfg, pool, c->tpad);
    qvk_pool_free(pool);
    if (bad) {
        snprintf(err, err_size, "%s: out of memory for TPAD", base_dir);
        st = QV_E_NOMEM;
        goto fail;
    }
    c->load_s = now_s() - t0;
    *out = c;
    return QV_OK;
fail:
    qv_cloner_free(c);
    return st;
}

enum qv_status qv_cloner_load(qv_cloner **out, const char *base_dir, int n_threads) {
    char err[QVU_DETAIL_SIZE] = "";
    if (!base_dir) return *out = NULL, qvu_fail(QV_E_INVALID, "qv_cloner_load: no directory");
    return qvu_fail(cloner_load(out, base_dir, n_threads, err, sizeof err), err);
}

void qv_cloner_fingerprint(const qv_cloner *c, uint8_t out[32]) {
    memcpy(out, c->ck->fingerprint, 32);
}

static const qva_speech_encoder *speech_encoder(const qv_cloner *c, char *err, size_t err_size) {
    pthread_mutex_lock(&c->lazy->lock);
    if (!c->lazy->se) c->lazy->se = qva_speech_encoder_load(c->ck, err, err_size);
    const qva_speech_encoder *se = c->lazy->se;
    pthread_mutex_unlock(&c->lazy->lock);
    return se;
}

qv_clone_request qv_clone_default_request(void) {
    qv_clone_request r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    r.max_seconds = QVA_DEFAULT_MAX_SECONDS;
    r.hygiene = 1;
    r.with_wovr = 1;
    r.icl_window = QV_ICL_FULL;
    r.speaker_threshold = qvc_hygiene_default_params().spk_threshold;
    return r;
}

enum qv_status qv_icl_window_parse(const char *s, qv_clone_request *r) {
    char *end;
    if (!s || !r) return qvu_fail(QV_E_INVALID, "qv_icl_window_parse: NULL argument");
    if (!strcmp(s, "full")) return r->icl_window = QV_ICL_FULL, QV_OK;
    if (!strcmp(s, "auto")) return r->icl_window = QV_ICL_AUTO, QV_OK;
    errno = 0;
    double a = strtod(s, &end), b = 0;
    const char *p = end + 1;
    int ok = !errno && end != s && *end == '-';
    if (ok) b = strtod(p, &end);
    if (!ok || errno || end == p || *end || !(a >= 0 && b > a && b <= 3600))
        return qvu_failf(QV_E_INVALID,
                         "ICL window '%.64s': expected full, auto or START-END seconds", s);
    r->icl_window = QV_ICL_RANGE, r->icl_start_s = a, r->icl_end_s = b;
    return QV_OK;
}

/* ==== one run =============================================================================== */

typedef struct {
    const qv_clone_request *r;
    const char *out, *label; /* output path (or NULL), the audio's name in messages */
    cJSON *j;                /* the report */
    cJSON *warnings;
    char *err;
    size_t err_size;
    enum qv_status st;
    char consent_sha256[65]; /* of r->consent_recording, hashed before any work */
} run;

static int fail(run *u, enum qv_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(u->err, u->err_size, fmt, ap);
    va_end(ap);
    u->st = st;
    return -1;
}

static void warn(run *u, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON_AddItemToArray(u->warnings, cJSON_CreateString(msg));
}

/* "reference: X" from the hygiene library becomes "AUDIO: X". */
static int audio_fail(run *u, enum qv_status st, const char *msg) {
    if (!strncmp(msg, "reference: ", 11)) msg += 11;
    return fail(u, st, "%s: %s", u->label, msg);
}

/* The output's directory must exist and be writable, and the output not be a directory: checked
 * before any work so a typo costs nothing. */
static int check_output(run *u, const char *out) {
    struct stat sb;
    if (!stat(out, &sb) && S_ISDIR(sb.st_mode))
        return fail(u, QV_E_IO, "%s: is a directory (expected a file path)", out);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return fail(u, QV_E_IO, "%.400s: directory %.400s does not exist", out, dir);
    if (access(dir, W_OK | X_OK))
        return fail(u, QV_E_IO, "%.400s: cannot write in %.400s (%s)", out, dir, strerror(errno));
    return 0;
}

static int file_sha256_hex(const char *path, char hex[65]) {
    uint8_t d[32];
    if (qvu_sha256_file(path, d)) return -1;
    qvu_hex(d, 32, hex);
    return 0;
}

/* The reentrant lookup: clones run concurrently on one cloner (qvoice-server's uploads), and
 * getpwuid's static record raced between them (ThreadSanitizer, test_parallel_clones). */
static void user_name(char *buf, size_t size) {
    const char *who = getenv("USER");
    struct passwd pwd, *pw = NULL;
    char rec[1024];
    if ((!who || !*who) && !getpwuid_r(geteuid(), &pwd, rec, sizeof rec, &pw) && pw)
        who = pw->pw_name;
    if (who && *who)
        snprintf(buf, size, "%s", who);
    else
        snprintf(buf, size, "uid %d", (int)geteuid());
}

static void model_id(qvf_model_id *id, const qvm_model_config *c, const uint8_t fp[32]) {
    memset(id, 0, sizeof *id);
    id->hidden_size = (uint32_t)c->talker.hidden_size;
    id->text_hidden_size = (uint32_t)c->text_hidden_size;
    id->enc_dim = c->has_speaker_encoder ? (uint32_t)c->enc_dim : 0;
    id->variant = c->variant;
    memcpy(id->fingerprint, fp, 32);
}

/* Samples → x-vector. */
static int xvector_of(const qva_ecapa *e, qvk_pool *pool, const float *x, int64_t n, float *xvec,
                      int *n_frames, char *err, size_t err_size) {
    *n_frames = qva_mel_n_frames(n);
    qva_mel *mel = qva_mel_create();
    float *m = malloc((size_t)(*n_frames > 0 ? *n_frames : 1) * QVA_MEL_BINS * sizeof(float));
    int rc = -1;
    if (!mel || !m)
        snprintf(err, err_size, "out of memory");
    else if (qva_mel_compute(mel, m, x, n))
        snprintf(err, err_size, "audio too short");
    else
        rc = qva_ecapa_forward(e, pool, xvec, m, *n_frames, err, err_size);
    free(m);
    qva_mel_free(mel);
    return rc;
}

/* META: name, language, creation, tool, source, hygiene, consent. */
static int set_meta(qvf_voice *v, const run *u, const qva_audio *a, int language_id,
                    const char *hygiene_json) {
    const qv_clone_request *r = u->r;
    char buf[256], base[256];
    int rc = 0;
    const char *name = r->name;
    if (!name && r->audio_path) {
        const char *s = strrchr(r->audio_path, '/');
        snprintf(base, sizeof base, "%s", s ? s + 1 : r->audio_path);
        char *dot = strrchr(base, '.');
        if (dot && dot != base) *dot = 0;
        name = base;
    }
    if (name) rc |= qvf_meta_set(v, "name", name);
    if (r->language) {
        rc |= qvf_meta_set(v, "language", r->language);
        snprintf(buf, sizeof buf, "%d", language_id);
        rc |= qvf_meta_set(v, "language_id", buf);
    }
    time_t now = time(NULL);
    struct tm tm;
    char when[64];
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    rc |= qvf_meta_set(v, "created_utc", when);
    snprintf(buf, sizeof buf, "qvoice clone %s", qv_version());
    rc |= qvf_meta_set(v, "tool", buf);
    char hex[65];
    if (r->audio_path && !file_sha256_hex(r->audio_path, hex))
        rc |= qvf_meta_set(v, "source_sha256", hex);
    snprintf(buf, sizeof buf, "%.3f", a->used_seconds);
    rc |= qvf_meta_set(v, "duration_s", buf);
    snprintf(buf, sizeof buf, "%d", a->src_rate_hz);
    rc |= qvf_meta_set(v, "source_sample_rate_hz", buf);
    snprintf(buf, sizeof buf, "%d", a->src_channels);
    rc |= qvf_meta_set(v, "source_channels", buf);
    snprintf(buf, sizeof buf, "%g", r->max_seconds);
    rc |= qvf_meta_set(v, "max_ref_duration_s", buf);
    rc |= qvf_meta_set(v, "hygiene", hygiene_json ? hygiene_json : "off");
    if (r->consent || r->consent_recording) {
        /* The consent record (docs/provenance.md): in META, so a signature covers it. */
        char who[128];
        user_name(who, sizeof who);
        rc |= qvf_meta_set(v, "consent.method", r->consent_recording ? "recording" : "typed");
        if (r->consent) rc |= qvf_meta_set(v, "consent.statement", r->consent);
        if (r->consent_speaker) rc |= qvf_meta_set(v, "consent.speaker", r->consent_speaker);
        if (r->consent_scope) rc |= qvf_meta_set(v, "consent.scope", r->consent_scope);
        rc |= qvf_meta_set(v, "consent.utc", when);
        rc |= qvf_meta_set(v, "consent.collected_by", who);
        if (r->consent_recording)
            rc |= qvf_meta_set(v, "consent.recording_sha256", u->consent_sha256);
    }
    return rc;
}

/* TPAD always; WOVR (copies of the Base text projection and codebook rows) unless left out. */
static int set_bridge(qvf_voice *v, const qv_cloner *c, int with_wovr) {
    const qvm_textside *t = &c->text;
    const size_t H = (size_t)t->hidden, TH = (size_t)t->text_hidden;
    const size_t cv =
        (size_t)t->codec_vocab < WOVR_CODEC_ROWS ? (size_t)t->codec_vocab : WOVR_CODEC_ROWS;
    if (!(v->tpad = malloc(3 * H * sizeof(float)))) return -1;
    memcpy(v->tpad, c->tpad, 3 * H * sizeof(float));
    v->tpad_hidden = (uint32_t)H;
    if (!with_wovr) return 0;
    if (!(v->wovr_fc1_w = malloc(TH * TH * 2)) || !(v->wovr_fc1_b = malloc(TH * 4)) ||
        !(v->wovr_fc2_w = malloc(H * TH * 2)) || !(v->wovr_fc2_b = malloc(H * 4)) ||
        !(v->wovr_codec = malloc(cv * H * 2)))
        return -1;
    memcpy(v->wovr_fc1_w, t->fc1, TH * TH * 2);
    memcpy(v->wovr_fc1_b, t->fc1_bias, TH * 4);
    memcpy(v->wovr_fc2_w, t->fc2, H * TH * 2);
    memcpy(v->wovr_fc2_b, t->fc2_bias, H * 4);
    memcpy(v->wovr_codec, t->codec_embedding, cv * H * 2);
    v->wovr_h = (uint32_t)H, v->wovr_th = (uint32_t)TH, v->wovr_cv = (uint32_t)cv;
    return 0;
}

static int is_delta_tensor(const qvm_tensor *t) {
    return !strncmp(t->name, "talker.", 7);
}

/* Streams every talker.* tensor of the Base checkpoint as a delta against the CustomVoice one:
 * bf16 matrices as bit deltas, 1-D tensors (norms, biases) raw f32 (qvoice-format.md §4.8). */
static int write_with_wdelta(const qvf_voice *v, const char *out, const qvm_st *base,
                             const qvm_st *cv, int *n_written, char *err, size_t err_size) {
    int n = 0;
    for (int i = 0; i < qvm_st_count(base); i++)
        n += is_delta_tensor(qvm_st_at(base, i));
    qvf_writer *w = NULL;
    if (qvf_writer_open(&w, out, v, (uint32_t)n, QVF_WKIND_DELTA, err, err_size)) return -1;
    for (int i = 0; i < qvm_st_count(base); i++) {
        const qvm_tensor *t = qvm_st_at(base, i);
        if (!is_delta_tensor(t)) continue;
        const qvm_tensor *tt = qvm_st_find(cv, t->name);
        uint64_t shape[4] = {0};
        for (int d = 0; d < t->n_dims; d++)
            shape[d] = (uint64_t)t->shape[d];
        qvf_tensor q;
        memset(&q, 0, sizeof q);
        int rc;
        if (t->dtype == QVM_DTYPE_BF16 && t->n_dims >= 2) {
            int same = tt && tt->dtype == QVM_DTYPE_BF16 && tt->n_bytes == t->n_bytes;
            rc = qvf_wdelta_encode(t->name, QVF_DTYPE_BF16, (uint32_t)t->n_dims, shape, t->data,
                                   same ? tt->data : NULL, 0, &q, err, err_size);
        } else {
            float *f = qvm_tensor_to_f32(t);
            if (!f) {
                snprintf(err, err_size, "%s: out of memory", out);
                qvf_writer_abort(w);
                return -1;
            }
            rc = qvf_wdelta_encode(t->name, QVF_DTYPE_F32, (uint32_t)t->n_dims, shape, f, NULL, 0,
                                   &q, err, err_size);
            qvk_free(f);
        }
        if (!rc) rc = qvf_writer_add_tensor(w, &q, err, err_size);
        qvf_tensor_free(&q);
        if (rc) {
            qvf_writer_abort(w);
            return -1;
        }
    }
    *n_written = n;
    return qvf_writer_commit(w, err, err_size) ? -1 : 0;
}

/* Payload bytes per chunk tag of the file just written (WDTN chunks summed), read back with
 * voicefmt's chunk walker so the report says what is on disk; files over 256 MB are not listed. */
static void add_sections(cJSON *j, const char *path, long long file_bytes) {
    if (file_bytes <= 0 || file_bytes > (256ll << 20)) return;
    size_t n = 0;
    char *buf = qvu_read_file(path, (size_t)file_bytes, &n, NULL, 0);
    enum { MAX_CHUNKS = 4200 }; /* ≤ 4096 WDTN + the fixed chunks */
    qvf_chunk_info *info = malloc(sizeof *info * MAX_CHUNKS);
    int n_chunks = 0;
    char err[256];
    cJSON *sec = cJSON_AddObjectToObject(j, "sections");
    if (sec && buf && info && n == (size_t)file_bytes &&
        !qvf_list_chunks(buf, n, path, info, MAX_CHUNKS, &n_chunks, err, sizeof err)) {
        for (int i = 0; i < n_chunks && i < MAX_CHUNKS; i++) {
            cJSON *s = cJSON_GetObjectItemCaseSensitive(sec, info[i].tag);
            if (!s) {
                s = cJSON_AddObjectToObject(sec, info[i].tag);
                cJSON_AddNumberToObject(s, "count", 0);
                cJSON_AddNumberToObject(s, "payload_bytes", 0);
            }
            cJSON *cnt = cJSON_GetObjectItemCaseSensitive(s, "count");
            cJSON *by = cJSON_GetObjectItemCaseSensitive(s, "payload_bytes");
            cJSON_SetNumberValue(cnt, cnt->valuedouble + 1);
            cJSON_SetNumberValue(by, by->valuedouble + (double)info[i].payload_bytes);
        }
    }
    free(info);
    free(buf);
}

/* --plot: the log-mel of the clip as loaded, the part the x-vector used (after trimming) and the
 * ICL window (used, or picked by --icl-window auto without a transcript) marked. */
static int write_plot(run *u, const qva_audio *a, const qvc_hygiene_report *h) {
    const char *png = u->r->plot_path;
    int nf = qva_mel_n_frames(a->n_samples);
    qva_mel *mel = qva_mel_create();
    float *m = malloc((size_t)(nf > 0 ? nf : 1) * QVA_MEL_BINS * sizeof(float));
    int rc = -1;
    if (!mel || !m || nf <= 0 || qva_mel_compute(mel, m, a->samples, a->n_samples)) {
        fail(u, QV_E_NOMEM, "%s: cannot compute the spectrogram (out of memory?)", png);
    } else {
        qvc_plot_marks k = {0, nf, 0, -1, 0};
        if (h && h->clean) {
            k.used_start = (int)(h->trim.start / QVA_MEL_HOP);
            k.used_end = (int)((h->trim.end + QVA_MEL_HOP - 1) / QVA_MEL_HOP);
            if (k.used_end > nf) k.used_end = nf;
            if (k.used_start >= k.used_end) k.used_start = k.used_end - 1;
        }
        if (h && h->has_window) { /* window offsets count from the trimmed clip's start */
            k.icl_start = (int)((h->trim.start + h->window.start) / QVA_MEL_HOP);
            k.icl_end = (int)((h->trim.start + h->window.end + QVA_MEL_HOP - 1) / QVA_MEL_HOP);
            k.icl_used = h->has_icl;
        }
        rc = qvc_plot_mel_png(png, m, nf, &k, u->err, u->err_size);
        if (rc) u->st = QV_E_IO;
    }
    free(m);
    qva_mel_free(mel);
    return rc;
}

static void add_audio(cJSON *j, const qva_audio *a, double max_seconds) {
    cJSON_AddStringToObject(j, "format", a->src_format);
    cJSON_AddNumberToObject(j, "source_sample_rate_hz", a->src_rate_hz);
    cJSON_AddNumberToObject(j, "source_channels", a->src_channels);
    cJSON_AddNumberToObject(j, "source_seconds", a->src_seconds);
    cJSON_AddNumberToObject(j, "seconds_used", a->used_seconds);
    cJSON_AddNumberToObject(j, "max_seconds", max_seconds);
    cJSON_AddBoolToObject(j, "truncated", a->truncated);
    cJSON_AddBoolToObject(j, "resampled", a->resampled);
    cJSON_AddNumberToObject(j, "clipped_fraction", a->clipped_fraction);
    cJSON_AddNumberToObject(j, "rms_dbfs", a->rms_dbfs);
    double lufs;
    if (!qv_loudness_lufs(a->samples, a->n_samples, &lufs) && isfinite(lufs))
        cJSON_AddNumberToObject(j, "loudness_lufs", round(lufs * 100) / 100);
}

/* The hygiene numbers and text of the steps that ran (also on failure). */
static void add_hygiene(cJSON *j, const qvc_hygiene_report *h, int ran) {
    if (!ran) return;
    char *hs = qvc_hygiene_json(h);
    cJSON *o = hs ? cJSON_Parse(hs) : NULL;
    free(hs);
    if (o) cJSON_AddItemToObject(j, "hygiene", o);
    char text[4096];
    qvc_hygiene_summary(h, text, sizeof text);
    cJSON_AddStringToObject(j, "hygiene_text", text);
}

static int check_request(run *u, const qv_cloner *c) {
    const qv_clone_request *r = u->r;
    if (!r->audio_path == !r->pcm)
        return fail(u, QV_E_INVALID, "clone request: give either audio_path or pcm");
    if (r->pcm && (r->n_samples <= 0 || r->sample_rate_hz <= 0))
        return fail(u, QV_E_INVALID, "clone request: pcm needs n_samples and sample_rate_hz > 0");
    if (!(r->max_seconds >= QVA_MIN_SECONDS && r->max_seconds <= 3600))
        return fail(u, QV_E_INVALID, "clone request: max_seconds %g outside 3..3600",
                    r->max_seconds);
    if (r->ref_text && !*r->ref_text)
        return fail(u, QV_E_INVALID, "%s: empty transcript", u->label);
    if (r->consent && !*r->consent)
        return fail(u, QV_E_INVALID, "clone request: empty consent statement");
    if ((r->consent_speaker && !*r->consent_speaker) || (r->consent_scope && !*r->consent_scope))
        return fail(u, QV_E_INVALID, "clone request: empty consent_speaker or consent_scope");
    if ((r->consent_speaker || r->consent_scope) && !r->consent && !r->consent_recording)
        return fail(u, QV_E_INVALID, "clone request: consent_speaker and consent_scope belong to "
                                     "a consent record (give consent or consent_recording)");
    if (r->consent_recording && file_sha256_hex(r->consent_recording, u->consent_sha256))
        return fail(u, QV_E_INVALID, "%.400s: cannot read the consent recording (%s)",
                    r->consent_recording, strerror(errno));
    if (!(r->speaker_threshold >= -1 && r->speaker_threshold <= 1))
        return fail(u, QV_E_INVALID, "clone request: speaker_threshold %g outside -1..1",
                    r->speaker_threshold);
    if (r->icl_window != QV_ICL_FULL && !r->hygiene)
        return fail(u, QV_E_INVALID, "clone request: an ICL window needs hygiene");
    if (r->icl_window == QV_ICL_RANGE && !(r->icl_end_s > r->icl_start_s && r->icl_start_s >= 0))
        return fail(u, QV_E_INVALID, "clone request: ICL window %g-%g s is empty", r->icl_start_s,
                    r->icl_end_s);
    if (!c) return fail(u, QV_E_INVALID, "clone request: no cloner");
    if (u->out && check_output(u, u->out)) return -1;
    if (r->plot_path && check_output(u, r->plot_path)) return -1;
    return 0;
}

static int language_id(run *u, const qvm_model_config *mc, const char *dir) {
    const char *lang = u->r->language;
    if (!lang || !strcasecmp(lang, "auto")) return 0;
    int id = qvm_language_id(mc, lang);
    if (id >= 0) return id;
    int n = snprintf(u->err, u->err_size, "%s/config.json: unknown language \"%s\" (expected auto",
                     dir, lang);
    for (int i = 0; i < mc->n_languages && n > 0 && (size_t)n < u->err_size; i++)
        if (!strstr(mc->codec_language_id[i].name, "dialect"))
            n += snprintf(u->err + n, u->err_size - (size_t)n, ", %s",
                          mc->codec_language_id[i].name);
    if (n > 0 && (size_t)n < u->err_size) snprintf(u->err + n, u->err_size - (size_t)n, ")");
    u->st = QV_E_LANGUAGE;
    return -1;
}

/* Warnings from the hygiene steps: usable, but the user should look (clipping, a dropped
 * transcript, an auto window, another voice). */
static void hygiene_warnings(run *u, const qva_audio *a, const qvc_hygiene_report *h) {
    if (h->level.clip_warning && !a->clip_warning)
        warn(u, "clipping (%.4f%% of samples at full scale)", 100.0 * h->level.clipped_fraction);
    if (h->transcript.fallback)
        warn(u, "%s; ICL dropped, x-vector only (allow_xvector_fallback)", h->transcript.reason);
    if (h->has_icl && h->window.mode == QVC_ICL_AUTO && !h->window.whole)
        warn(u,
             "ICL uses %.2f-%.2f s of the clip (the cleanest 10-15 s): the transcript must be "
             "of exactly those seconds",
             (double)(h->trim.start + h->window.start) / QVA_SAMPLE_RATE_HZ,
             (double)(h->trim.start + h->window.end) / QVA_SAMPLE_RATE_HZ);
    if (h->has_speaker && h->speaker.warning) {
        char ranges[256] = "";
        size_t w = 0;
        double ts = (double)h->trim.start / QVA_SAMPLE_RATE_HZ;
        for (int i = 0; i < h->speaker.n_ranges && w < sizeof ranges; i++)
            w += (size_t)snprintf(ranges + w, sizeof ranges - w, "%s%.1f-%.1f s", i ? ", " : "",
                                  ts + h->speaker.ranges[i].start_s,
                                  ts + h->speaker.ranges[i].end_s);
        warn(u, "another speaker? %s sound%s unlike the main voice (cosine < %.2f); cut %s out",
             ranges, h->speaker.n_ranges == 1 ? "s" : "", h->speaker.threshold,
             h->speaker.n_ranges == 1 ? "it" : "them");
    }
}

static enum qvc_icl_mode icl_mode(enum qv_icl_window w) {
    return w == QV_ICL_AUTO ? QVC_ICL_AUTO : w == QV_ICL_RANGE ? QVC_ICL_RANGE : QVC_ICL_FULL;
}

/* What one run makes, step by step (freed by work_free). */
typedef struct {
    qva_audio a;
    qvc_hygiene_report h;
    int hygiene_ran, want_icl, lang;
    const float *xv_in, *icl_in; /* what the x-vector and the ICL codes are computed from */
    int64_t n_xv, n_icl;
    char *hyg_json;
    float *xvec;
    int dim, n_mel;
    int32_t *codes;
    uint16_t *codes16;
    int n_frames;
    qvm_ckpt *cv; /* the weight-delta target, or NULL */
    qvf_voice *v;
} work;

static void work_free(work *w) {
    qva_audio_free(&w->a);
    qvc_hygiene_report_free(&w->h);
    free(w->hyg_json);
    free(w->xvec);
    free(w->codes);
    free(w->codes16);
    qvf_voice_free(w->v);
    qvm_ckpt_free(w->cv);
}

/* The weight-delta target (r->target_cv_dir): a CustomVoice / VoiceDesign model of the same
 * width as the Base model. */
static int open_target(run *u, const qv_cloner *c, work *w) {
    const char *dir = u->r->target_cv_dir;
    if (!(w->cv = qvm_ckpt_open(dir, u->err, u->err_size))) {
        u->st = QV_E_MODEL;
        return -1;
    }
    const int H = w->cv->cfg.talker.hidden_size, base_H = c->ck->cfg.talker.hidden_size;
    if (w->cv->cfg.variant == QVF_VARIANT_BASE)
        return fail(u, QV_E_INVALID,
                    "%s: the weight-delta target must be a CustomVoice (or VoiceDesign) model, "
                    "found a Base model",
                    dir);
    if (H != base_H)
        return fail(u, QV_E_INVALID, "%s: hidden size %d does not match the Base model's %d", dir,
                    H, base_H);
    return 0;
}

/* The reference as mono 24 kHz samples (a file, or the request's PCM cut to max_seconds). */
static int read_audio(run *u, work *w) {
    const qv_clone_request *r = u->r;
    qva_audio *a = &w->a;
    int64_t n_pcm = r->n_samples, n_max = (int64_t)(r->max_seconds * r->sample_rate_hz);
    if (r->pcm && n_pcm > n_max) n_pcm = n_max; /* in-memory audio: cut as the file reader does */
    int arc = r->audio_path ? qva_audio_load(a, r->audio_path, r->max_seconds, u->err, u->err_size)
                            : qva_audio_from_mono(a, r->pcm, n_pcm, r->sample_rate_hz, u->label,
                                                  u->err, u->err_size);
    if (arc) {
        u->st = QV_E_AUDIO;
        return -1;
    }
    if (r->pcm && n_pcm < r->n_samples) {
        a->src_seconds = (double)r->n_samples / r->sample_rate_hz;
        a->truncated = 1;
    }
    add_audio(u->j, a, r->max_seconds);
    if (a->truncated)
        warn(u, "%.2f s long, using the first %.2f s (max_seconds)", a->src_seconds,
             a->used_seconds);
    if (a->short_warning)
        warn(u, "only %.2f s of audio; 10-30 s gives a steadier voice", a->used_seconds);
    if (a->clip_warning)
        warn(u, "clipping (%.4f%% of samples at full scale)", 100.0 * a->clipped_fraction);
    w->xv_in = w->icl_in = a->samples;
    w->n_xv = w->n_icl = a->n_samples;
    return 0;
}

/* Hygiene (trim, loudness, ICL span, transcript, second speaker): narrows what the x-vector and
 * the ICL codes are computed from. */
static int run_hygiene(run *u, const qv_cloner *c, qvk_pool *pool, work *w) {
    const qv_clone_request *r = u->r;
    char e2[768];
    qva_mel *mel = qva_mel_create();
    if (!mel) return fail(u, QV_E_NOMEM, "%s: out of memory", u->label);
    qvc_hygiene_params hp = qvc_hygiene_default_params();
    hp.spk_threshold = r->speaker_threshold;
    hp.icl_mode = icl_mode(r->icl_window);
    hp.icl_start_s = r->icl_start_s, hp.icl_end_s = r->icl_end_s;
    hp.icl_max_s = QV_ICL_MAX_SECONDS;
    qvc_ecapa_ctx ec = {c->ecapa, mel, pool};
    qvc_hygiene_report *h = &w->h;
    w->hygiene_ran = 1;
    int hrc = qvc_hygiene_run(h, w->a.samples, w->a.n_samples, r->ref_text,
                              r->allow_xvector_fallback, qvc_ecapa_xvector, &ec,
                              qva_ecapa_dim(c->ecapa), &hp, e2, sizeof e2);
    qva_mel_free(mel);
    if (hrc)
        return audio_fail(
            u, h->has_transcript && !h->transcript.plausible ? QV_E_INVALID : QV_E_AUDIO, e2);
    hygiene_warnings(u, &w->a, h);
    if (h->transcript.fallback) w->want_icl = 0;
    w->xv_in = h->clean, w->n_xv = h->n_clean;
    w->icl_in = h->icl, w->n_icl = h->n_icl;
    if (!(w->hyg_json = qvc_hygiene_json(h)))
        return fail(u, QV_E_NOMEM, "%s: out of memory", u->label);
    return 0;
}

static int compute_xvector(run *u, const qv_cloner *c, qvk_pool *pool, work *w) {
    char e2[768];
    w->dim = qva_ecapa_dim(c->ecapa);
    if (!(w->xvec = malloc(sizeof(float) * (size_t)w->dim)))
        return fail(u, QV_E_NOMEM, "%s: out of memory", u->label);
    if (xvector_of(c->ecapa, pool, w->xv_in, w->n_xv, w->xvec, &w->n_mel, e2, sizeof e2))
        return audio_fail(u, QV_E_AUDIO, e2);
    cJSON_AddNumberToObject(u->j, "xvector_seconds", (double)w->n_xv / QVA_SAMPLE_RATE_HZ);
    cJSON_AddNumberToObject(u->j, "mel_frames", w->n_mel);
    cJSON_AddNumberToObject(u->j, "xvector_dim", w->dim);
    cJSON_AddNumberToObject(u->j, "xvector_norm", qva_l2norm(w->xvec, w->dim));
    return 0;
}

/* The ICL codes of w->icl_in (when the run keeps ICL). */
static int compute_codes(run *u, const qva_speech_encoder *se, qvk_pool *pool, work *w) {
    char e2[768];
    if (w->want_icl) {
        const int n_frames = qva_speech_encoder_n_frames(w->n_icl);
        w->codes = malloc(sizeof(int32_t) * QV_N_CODEBOOKS * (size_t)n_frames);
        w->codes16 = malloc(sizeof(uint16_t) * QV_N_CODEBOOKS * (size_t)n_frames);
        if (!w->codes || !w->codes16) return fail(u, QV_E_NOMEM, "%s: out of memory", u->label);
        if (qva_speech_encoder_encode(se, pool, w->codes, w->icl_in, w->n_icl, e2, sizeof e2))
            return audio_fail(u, QV_E_AUDIO, e2);
        for (size_t i = 0; i < (size_t)QV_N_CODEBOOKS * n_frames; i++)
            w->codes16[i] = (uint16_t)w->codes[i];
        w->n_frames = n_frames;
    }
    cJSON_AddNumberToObject(u->j, "icl_seconds",
                            w->want_icl ? (double)w->n_icl / QVA_SAMPLE_RATE_HZ : 0);
    cJSON_AddNumberToObject(u->j, "icl_frames", w->n_frames);
    if (w->n_frames) cJSON_AddStringToObject(u->j, "transcript", u->r->ref_text);
    return 0;
}

/* The voice in memory: identity, x-vector, ICL, metadata, TPAD/WOVR (and the plot). */
static int build_voice(run *u, const qv_cloner *c, work *w, int *plot_written) {
    const qv_clone_request *r = u->r;
    qvf_voice *v = w->v = qvf_voice_new();
    if (!v) return fail(u, QV_E_NOMEM, "out of memory");
    model_id(&v->source, &c->ck->cfg, c->ck->fingerprint);
    int qrc = qvf_voice_set_xvector(v, w->xvec, (uint32_t)w->dim);
    if (!qrc && w->n_frames)
        qrc = qvf_voice_set_icl(v, r->ref_text, w->codes16, (uint32_t)w->n_frames);
    if (!qrc) qrc = set_meta(v, u, &w->a, w->lang, w->hyg_json);
    if (qrc)
        return fail(u, QV_E_INVALID, "%s: %s (META values must be UTF-8, at most 64 KiB)",
                    u->out ? u->out : u->label, qvf_strerror(qrc));
    if (set_bridge(v, c, r->with_wovr)) return fail(u, QV_E_NOMEM, "out of memory for TPAD/WOVR");
    cJSON *meta = cJSON_AddObjectToObject(u->j, "meta");
    for (int i = 0; i < v->n_meta; i++)
        cJSON_AddStringToObject(meta, v->meta[i].key, v->meta[i].value);
    cJSON_AddBoolToObject(u->j, "tpad", v->tpad_hidden != 0);
    cJSON_AddBoolToObject(u->j, "wovr", v->wovr_h != 0);
    if (r->plot_path) {
        if (write_plot(u, &w->a, w->hygiene_ran ? &w->h : NULL)) return -1;
        *plot_written = 1;
        cJSON_AddStringToObject(u->j, "plot", r->plot_path);
    }
    return 0;
}

/* Writes the voice to u->out (with the weight delta when a target was given). */
static int write_voice(run *u, const qv_cloner *c, work *w) {
    if (w->cv) {
        int n_tensors = 0;
        model_id(&w->v->target, &w->cv->cfg, w->cv->fingerprint);
        if (write_with_wdelta(w->v, u->out, c->ck->st, w->cv->st, &n_tensors, u->err,
                              u->err_size)) {
            u->st = QV_E_IO;
            return -1;
        }
        cJSON_AddNumberToObject(u->j, "wdelta_tensors", n_tensors);
    } else if (qvf_write_file(w->v, u->out, QVF_FORMAT_VERSION, u->err, u->err_size)) {
        u->st = QV_E_IO;
        return -1;
    }
    struct stat sb;
    long long bytes = stat(u->out, &sb) ? 0 : (long long)sb.st_size;
    add_sections(u->j, u->out, bytes);
    cJSON_AddNumberToObject(u->j, "file_bytes", (double)bytes);
    return 0;
}

enum { T_AUDIO, T_HYGIENE, T_XVEC, T_CODES, T_WRITE, N_STEPS };

/* One clone: each step in turn (the report gets each one's time), the voice written last. */
static int clone_run(run *u, const qv_cloner *c, qvk_pool *pool, int *plot_written) {
    const qv_clone_request *r = u->r;
    work w = {.want_icl = r->ref_text != NULL};
    double ts[N_STEPS] = {0}, t = now_s();
    const qva_speech_encoder *se = NULL;
    int rc = -1;
    if ((w.lang = language_id(u, &c->ck->cfg, c->ck->dir)) < 0) goto done;
    if (r->target_cv_dir && open_target(u, c, &w)) goto done;
    if (w.want_icl && !(se = speech_encoder(c, u->err, u->err_size))) {
        u->st = QV_E_MODEL;
        goto done;
    }
    const int bad = read_audio(u, &w);
    ts[T_AUDIO] = now_s() - t, t = now_s();
    if (bad) goto done;
    if (!r->hygiene) cJSON_AddStringToObject(u->j, "hygiene", "off");
    else if (run_hygiene(u, c, pool, &w)) goto done;
    ts[T_HYGIENE] = r->hygiene ? now_s() - t : 0, t = now_s();
    if (compute_xvector(u, c, pool, &w)) goto done;
    ts[T_XVEC] = now_s() - t, t = now_s();
    if (compute_codes(u, se, pool, &w)) goto done;
    ts[T_CODES] = now_s() - t, t = now_s();
    if (build_voice(u, c, &w, plot_written) || (u->out && write_voice(u, c, &w))) goto done;
    ts[T_WRITE] = now_s() - t;
    rc = 0;
done:
    add_hygiene(u->j, &w.h, w.hygiene_ran);
    cJSON *tj = cJSON_AddObjectToObject(u->j, "timings_s");
    cJSON_AddNumberToObject(tj, "load", c->load_s);
    static const char *const names[N_STEPS] = {"audio", "hygiene", "mel_ecapa", "speech_encoder",
                                               "write"};
    for (int i = 0; i < N_STEPS; i++) cJSON_AddNumberToObject(tj, names[i], ts[i]);
    work_free(&w);
    return rc;
}

static enum qv_status clone_request(const qv_cloner *c, const qv_clone_request *r,
                                    const char *out_path, char **report_json, char *err,
                                    size_t err_size) {
    run u = {r,
             out_path,
             r->audio_path ? r->audio_path : "reference",
             cJSON_CreateObject(),
             NULL,
             err,
             err_size,
             QV_OK,
             ""};
    if (!u.j || !(u.warnings = cJSON_CreateArray())) {
        cJSON_Delete(u.j);
        snprintf(err, err_size, "out of memory");
        return QV_E_NOMEM;
    }
    cJSON_AddBoolToObject(u.j, "ok", 0);
    if (out_path) cJSON_AddStringToObject(u.j, "output", out_path);
    cJSON_AddStringToObject(u.j, "audio", u.label);
    if (c) cJSON_AddStringToObject(u.j, "model", c->ck->dir);
    int plot_written = 0;
    int rc = check_request(&u, c);
    if (!rc) {
        qvk_pool *pool = pool_for(c->n_threads);
        rc = clone_run(&u, c, pool, &plot_written);
        qvk_pool_free(pool);
        cJSON_AddNumberToObject(u.j, "threads", c->n_threads);
    }
    if (rc && plot_written) unlink(r->plot_path); /* no partial output: no voice, no plot */
    cJSON_AddItemToObject(u.j, "warnings", u.warnings);
    cJSON_ReplaceItemInObject(u.j, "ok", cJSON_CreateBool(!rc));
    if (rc) cJSON_AddStringToObject(u.j, "error", err);
    if (report_json) *report_json = cJSON_Print(u.j);
    cJSON_Delete(u.j);
    if (!rc && report_json && !*report_json) {
        snprintf(err, err_size, "out of memory for the report");
        return QV_E_NOMEM;
    }
    return rc ? (u.st != QV_OK ? u.st : QV_E_INVALID) : QV_OK;
}

enum qv_status qv_clone_run(const qv_cloner *c, const qv_clone_request *r, const char *out_path,
                            char **report_json) {
    if (report_json) *report_json = NULL;
    if (!r) return qvu_fail(QV_E_INVALID, "qv_clone_run: no request");
    if (r->struct_size != sizeof *r)
        return qvu_check_size("qv_clone_request", r->struct_size, sizeof *r);
    char err[QVU_DETAIL_SIZE] = "";
    return qvu_fail(clone_request(c, r, out_path, report_json, err, sizeof err), err);
}

/* ==== similarity ============================================================================ */

static enum qv_status xvector_of_path(const qv_cloner *c, const char *path, double max_seconds,
                                      float **xvec, int *dim, char *err, size_t err_size) {
    *xvec = NULL;
    /* by name or by magic: a server hands over a descriptor path (/proc/self/fd/N) */
    uint8_t head[4] = {0};
    FILE *f = fopen(path, "rb");
    size_t n_head = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    if (qvf_file_kind(path, head, n_head)) {
        qvf_voice *v = NULL;
        if (qvf_read_file(path, 0, &v, err, err_size)) return QV_E_VOICE;
        *dim = (int)v->enc_dim;
        *xvec = malloc(sizeof(float) * (v->enc_dim ? v->enc_dim : 1));
        if (*xvec) memcpy(*xvec, v->xvector, sizeof(float) * v->enc_dim);
        qvf_voice_free(v);
        if (*xvec) return QV_OK;
        snprintf(err, err_size, "%s: out of memory", path);
        return QV_E_NOMEM;
    }
    if (!c) {
        snprintf(err, err_size, "%s: an audio file needs a Base model to compute its x-vector",
                 path);
        return QV_E_INVALID;
    }
    qva_audio a;
    if (qva_audio_load(&a, path, max_seconds, err, err_size)) return QV_E_AUDIO;
    *dim = qva_ecapa_dim(c->ecapa);
    *xvec = malloc(sizeof(float) * (size_t)*dim);
    int nf;
    char e2[400];
    enum qv_status st = QV_OK;
    qvk_pool *pool = pool_for(c->n_threads);
    if (!*xvec) {
        snprintf(err, err_size, "%s: out of memory", path);
        st = QV_E_NOMEM;
    } else if (xvector_of(c->ecapa, pool, a.samples, a.n_samples, *xvec, &nf, e2, sizeof e2)) {
        snprintf(err, err_size, "%s: %s", path, e2);
        st = QV_E_AUDIO;
    }
    qvk_pool_free(pool);
    qva_audio_free(&a);
    return st;
}

static enum qv_status similarity(const qv_cloner *c, const char *a, const char *b,
                                 double max_seconds, double *cosine, char **report_json, char *err,
                                 size_t err_size) {
    float *xa = NULL, *xb = NULL;
    int da = 0, db = 0;
    enum qv_status st = xvector_of_path(c, a, max_seconds, &xa, &da, err, err_size);
    if (!st) st = xvector_of_path(c, b, max_seconds, &xb, &db, err, err_size);
    if (!st && da != db) {
        snprintf(err, err_size, "%s: x-vector size %d differs from %s's %d", b, db, a, da);
        st = QV_E_INVALID;
    }
    if (!st) {
        double cs = qvk_cosine(xa, xb, da);
        if (cosine) *cosine = cs;
        cJSON *j = report_json ? cJSON_CreateObject() : NULL;
        if (j) {
            cJSON_AddStringToObject(j, "a", a);
            cJSON_AddStringToObject(j, "b", b);
            cJSON_AddNumberToObject(j, "cosine", cs);
            cJSON_AddNumberToObject(j, "norm_a", qva_l2norm(xa, da));
            cJSON_AddNumberToObject(j, "norm_b", qva_l2norm(xb, db));
            cJSON_AddNumberToObject(j, "dim", da);
            *report_json = cJSON_Print(j);
            cJSON_Delete(j);
        }
        if (report_json && !*report_json) {
            snprintf(err, err_size, "out of memory for the report");
            st = QV_E_NOMEM;
        }
    }
    free(xa);
    free(xb);
    return st;
}

enum qv_status qv_clone_xvector(const qv_cloner *c, const char *path, double max_seconds,
                                float **xvec, int *dim) {
    if (!xvec || !dim) return qvu_fail(QV_E_INVALID, "qv_clone_xvector: NULL output");
    *xvec = NULL;
    if (!path) return qvu_fail(QV_E_INVALID, "qv_clone_xvector: NULL path");
    char err[QVU_DETAIL_SIZE] = "";
    return qvu_fail(xvector_of_path(c, path, max_seconds, xvec, dim, err, sizeof err), err);
}

enum qv_status qv_clone_similarity(const qv_cloner *c, const char *a, const char *b,
                                   double max_seconds, double *cosine, char **report_json) {
    if (report_json) *report_json = NULL;
    if (!a || !b) return qvu_fail(QV_E_INVALID, "qv_clone_similarity: NULL path");
    char err[QVU_DETAIL_SIZE] = "";
    return qvu_fail(similarity(c, a, b, max_seconds, cosine, report_json, err, sizeof err), err);
}
