/* voices.c — the voice library over HTTP: DIR/<sha256>.qvoice files listed, described, downloaded,
 * deleted, and created by a multipart upload (reference audio cloned on the --clone-model Base,
 * or a .qvoice verified like `voicefmt verify --model`) into the library's index (library.c).
 * New files appear by rename only; temporaries start with '.', carry their writer's PID and are
 * removed at start when that process is gone (qvs_voices_clean).
 */
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server/server_impl.h"
#include "util/fileio.h"
#include "util/sha256.h"
#include "voicefmt/qvf.h"

#define FIELD_MAX_BYTES 16384 /* name, transcript, language, consent, description, icl_window */
#define NAME_MAX_BYTES 128

/* 1 when p starts with the decimal id of a process that no longer exists. */
static int dead_pid(const char *p) {
    char *end;
    long pid = strtol(p, &end, 10);
    return end != p && pid > 0 && kill((pid_t)pid, 0) && errno == ESRCH;
}

/* Temporaries carry their writer's PID: ours .upload-PID-XXXXXX and .new-PID-XXXXXX, the atomic
 * writer's .NAME.tmp.PID.N. A directory shared by running servers keeps theirs. */
void qvs_voices_clean(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[4096];
    const char *t;
    while ((e = readdir(d)))
        if ((!strncmp(e->d_name, ".upload-", 8) && dead_pid(e->d_name + 8)) ||
            (!strncmp(e->d_name, ".new-", 5) && dead_pid(e->d_name + 5)) ||
            (e->d_name[0] == '.' && (t = strstr(e->d_name, ".tmp.")) && dead_pid(t + 5))) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    if (!strstr(dir, "/.textside")) { /* the shared text sides' writer's temporaries */
        snprintf(path, sizeof path, "%s/.textside", dir);
        qvs_voices_clean(path);
    }
}

/* vLLM-Omni's description of an uploaded voice (its list and its upload reply) from qvoice's
 * (library.c describe): consent is the consent statement; what is stored is a voice file. */
static cJSON *vllm_entry(const cJSON *d) {
    cJSON *o = cJSON_CreateObject();
    static const char *const same[][2] = {{"id", "id"},
                                          {"name", "name"},
                                          {"consent", "consent_statement"},
                                          {"created_at", "created_at"},
                                          {"file_size", "bytes"},
                                          {"ref_text", "ref_text"},
                                          {"speaker_description", "speaker_description"}};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(d, same[i][1]);
        if (x) cJSON_AddItemToObject(o, same[i][0], cJSON_Duplicate(x, 1));
    }
    cJSON_AddStringToObject(o, "mime_type", "application/octet-stream");
    return o;
}

/* vLLM-Omni's "Voice 'NAME' not found", with its success and detail beside OpenAI's error. */
static enum MHD_Result voice_not_found(struct MHD_Connection *c, req *q, const char *id) {
    return qvs_reply_error_omni(c, q, MHD_HTTP_NOT_FOUND, "invalid_request_error",
                                "voice_not_found", "voice_id", "Voice '%s' not found", id);
}

enum MHD_Result qvs_voices_get(qv_server *s, struct MHD_Connection *c, req *q, const char *id) {
    if (!id) { /* vLLM-Omni's shape: "voices" names the presets of each model and the library
                  voices, "uploaded_voices" describes the library's as vLLM-Omni does; "data"
                  holds qvoice's full descriptions under OpenAI's list key */
        cJSON *o = cJSON_CreateObject(), *sp = cJSON_AddArrayToObject(o, "voices");
        cJSON_AddStringToObject(o, "object", "list");
        for (int i = 0; i < s->n_models; i++)
            for (int k = 0; k < qv_model_n_speakers(s->models[i].model); k++) {
                const char *name = qv_model_speaker(s->models[i].model, k);
                int dup = 0;
                cJSON *x;
                cJSON_ArrayForEach(x, sp) dup |= !strcmp(x->valuestring, name);
                if (!dup) cJSON_AddItemToArray(sp, cJSON_CreateString(name));
            }
        cJSON *data = qvs_library_describe(s, q->key, NULL);
        if (!data) {
            cJSON_Delete(o);
            return qvs_reply_json(c, q, 500, NULL);
        }
        cJSON *uploaded = cJSON_CreateArray(), *x;
        cJSON_ArrayForEach(x, data) cJSON_AddItemToArray(uploaded, vllm_entry(x));
        cJSON_ArrayForEach(x, data) {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(x, "name"));
            const char *vid = cJSON_GetStringValue(cJSON_GetObjectItem(x, "id"));
            if (name || vid)
                cJSON_AddItemToArray(sp, cJSON_CreateString(name && name[0] ? name : vid));
        }
        cJSON_AddItemToObject(o, "data", data);
        cJSON_AddItemToObject(o, "uploaded_voices", uploaded);
        char *body = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        return qvs_reply_json(c, q, 200, body);
    }
    const char *dl = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "download");
    if (dl && strcmp(dl, "0") && strcmp(dl, "false")) {
        qvs_voice_ref vr;
        if (qvs_voice_lookup(s, q->key, id, &vr)) return voice_not_found(c, q, id);
        int fd = open(vr.path, O_RDONLY | O_CLOEXEC);
        qvs_voice_ref_close(&vr);
        struct stat st;
        if (fd < 0 || fstat(fd, &st)) {
            if (fd >= 0) close(fd);
            return voice_not_found(c, q, id);
        }
        struct MHD_Response *r = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
        if (!r) {
            close(fd);
            return MHD_NO;
        }
        char disp[128];
        snprintf(disp, sizeof disp, "attachment; filename=\"%s.qvoice\"", vr.id);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_DISPOSITION, disp);
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        q->status = MHD_HTTP_OK;
        return ret;
    }
    cJSON *o = qvs_library_describe(s, q->key, id);
    if (!o) return voice_not_found(c, q, id);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return qvs_reply_json(c, q, 200, body);
}

enum MHD_Result qvs_voices_delete(qv_server *s, struct MHD_Connection *c, req *q, const char *id) {
    char vid[65];
    int st = qvs_library_remove(s, q->key, id, vid);
    if (st == 404) return voice_not_found(c, q, id);
    if (st == 403)
        return qvs_reply_error(c, q, 403, "invalid_request_error", "permission_denied",
                               "voice_id", "voice %s: uploaded by another key", id);
    if (st)
        return qvs_reply_error(c, q, 500, "server_error", "io_error", NULL,
                               "voice %s: cannot delete it", id);
    /* OpenAI's deleted-object shape and vLLM-Omni's success and message */
    cJSON *o = cJSON_CreateObject();
    char msg[200];
    snprintf(msg, sizeof msg, "Voice '%.150s' deleted successfully", id);
    cJSON_AddStringToObject(o, "id", vid);
    cJSON_AddStringToObject(o, "object", "voice");
    cJSON_AddBoolToObject(o, "deleted", 1);
    cJSON_AddBoolToObject(o, "success", 1);
    cJSON_AddStringToObject(o, "message", msg);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return qvs_reply_json(c, q, 200, body);
}

/* ==== upload ================================================================================= */

enum { F_NAME, F_TRANSCRIPT, F_LANGUAGE, F_CONSENT, F_DESCRIPTION, F_ICL_WINDOW, N_FIELDS };

struct upload {
    qv_server *s;
    char tmp[4096]; /* the uploaded file, DIR/.upload-PID-XXXXXX */
    int fd;
    uint64_t n_bytes;
    char filename[256];
    uint8_t magic[4];
    bytes field[N_FIELDS];
    int status; /* an error found while parsing (reply at the end) */
    char why[256];
};

void qvs_upload_free(struct upload *u) {
    if (!u) return;
    if (u->fd >= 0) close(u->fd);
    if (u->tmp[0]) unlink(u->tmp);
    for (int i = 0; i < N_FIELDS; i++)
        free(u->field[i].p);
    free(u);
}

static int field_index(const char *key) {
    static const char *const names[][2] = {{"name", NULL},
                                           {"transcript", "ref_text"},
                                           {"language", NULL},
                                           {"consent", NULL},
                                           {"speaker_description", "description"},
                                           {"icl_window", NULL}};
    for (int i = 0; i < N_FIELDS; i++)
        if (!strcmp(key, names[i][0]) || (names[i][1] && !strcmp(key, names[i][1]))) return i;
    return -1;
}

static int is_file_field(const char *key) { /* vLLM-Omni's name first */
    return !strcmp(key, "audio_sample") || !strcmp(key, "audio") || !strcmp(key, "file");
}

static enum MHD_Result on_part(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *filename, const char *content_type,
                               const char *transfer_encoding, const char *data, uint64_t off,
                               size_t size) {
    struct upload *u = cls;
    if (!key) return MHD_YES; /* a part with no name (libmicrohttpd passes NULL): not ours */
    if (is_file_field(key)) {
        if (u->fd < 0 || (off == 0 && u->n_bytes)) {
            if (u->tmp[0]) { /* a second file part (off 0: a part's first bytes) */
                u->status = 400;
                snprintf(u->why, sizeof u->why, "%s: one audio file per upload", key);
                return MHD_NO;
            }
            snprintf(u->tmp, sizeof u->tmp, "%s/.upload-%d-XXXXXX", u->s->voices_dir,
                     (int)getpid());
            if ((u->fd = mkstemp(u->tmp)) < 0) {
                u->tmp[0] = 0;
                u->status = 500;
                snprintf(u->why, sizeof u->why, "%s: %s", u->s->voices_dir, strerror(errno));
                return MHD_NO;
            }
            snprintf(u->filename, sizeof u->filename, "%s", filename ? filename : "");
        }
        if (u->n_bytes + size > (uint64_t)u->s->cfg.max_upload_mb << 20) {
            u->status = 413;
            snprintf(u->why, sizeof u->why, "%s: upload exceeds %d MB", key,
                     u->s->cfg.max_upload_mb);
            return MHD_NO;
        }
        for (size_t i = 0; i < size && u->n_bytes + i < 4; i++)
            u->magic[u->n_bytes + i] = (uint8_t)data[i];
        for (size_t done = 0; done < size;) {
            ssize_t w = write(u->fd, data + done, size - done);
            if (w <= 0) {
                u->status = 500;
                snprintf(u->why, sizeof u->why, "upload: %s", strerror(errno));
                return MHD_NO;
            }
            done += (size_t)w;
        }
        u->n_bytes += size;
        return MHD_YES;
    }
    int f = field_index(key);
    if (f < 0) return MHD_YES; /* unknown fields are ignored, like unknown JSON keys */
    if (u->field[f].len + size > FIELD_MAX_BYTES) {
        u->status = 400;
        snprintf(u->why, sizeof u->why, "%s: longer than %d bytes", key, FIELD_MAX_BYTES);
        return MHD_NO;
    }
    if (qvs_bytes_add(&u->field[f], data, size)) return MHD_NO;
    return MHD_YES;
}

enum MHD_Result qvs_upload_begin(qv_server *s, struct MHD_Connection *c, req *q) {
    struct upload *u = calloc(1, sizeof *u);
    if (!u) return MHD_NO;
    u->s = s;
    u->fd = -1;
    q->up = u;
    if (!(q->pp = MHD_create_post_processor(c, 64 * 1024, on_part, u)))
        return qvs_reply_error(c, q, 400, "invalid_request_error", "invalid_content_type", NULL,
                               "POST /v1/audio/voices: expected a multipart/form-data body");
    return MHD_YES;
}

/* An error found while the body arrives (too big, a second file, a long field) is answered at
 * once and the connection closed: the rest of the body is never read. */
enum MHD_Result qvs_upload_data(struct MHD_Connection *c, req *q, const char *data,
                                size_t *size) {
    struct upload *u = q->up;
    if (MHD_post_process(q->pp, data, *size) != MHD_YES && !u->status) {
        u->status = 400;
        snprintf(u->why, sizeof u->why, "multipart body: malformed");
    }
    *size = 0;
    if (u->status)
        return qvs_reply_cut(c, q, u->status,
                             u->status >= 500 ? "server_error" : "invalid_request_error",
                             "invalid_upload", NULL, "%s", u->why);
    return MHD_YES;
}

/* Field f as a NUL-terminated string, or NULL when absent or empty. */
static const char *field(struct upload *u, int f) {
    if (!u->field[f].len || qvs_bytes_add(&u->field[f], "", 1)) return NULL;
    u->field[f].len--;
    return (const char *)u->field[f].p;
}

/* Puts the finished voice file src into the library (qvs_library_add) and removes src; replies
 * with its description and the report. made: the server made the file (cloned it, or rewrote an
 * upload), so it signs it with its key, when it has one. */
static enum MHD_Result store(qv_server *s, struct MHD_Connection *c, req *q, const char *src,
                             const char *name, cJSON *report, int made) {
    char id[65], replaced[65], why[256], err[512];
    size_t n;
    char *b = qvu_read_file(src, (size_t)s->cfg.max_upload_mb << 21, &n, err, sizeof err);
    unlink(src);
    void *sig = NULL;
    size_t n_sig;
    if (b && made && s->sign_key &&
        qvf_sign(b, n, src, s->sign_key, s->cfg.signer ? s->cfg.signer : "", (uint64_t)time(NULL),
                 &sig, &n_sig, err, sizeof err)) {
        free(b);
        cJSON_Delete(report);
        return qvs_reply_error(c, q, 500, "server_error", "sign_failed", NULL, "%s",
                               qvs_without_path(err, src));
    }
    if (sig) free(b), b = sig, n = n_sig;
    cJSON *o = NULL;
    int st = b ? qvs_library_add(s, q->key, (const uint8_t *)b, n, name, id, replaced, &o, why,
                                 sizeof why)
               : 500;
    free(b);
    if (st) {
        cJSON_Delete(report);
        if (!b) snprintf(why, sizeof why, "cannot read the new voice");
        return qvs_reply_error(c, q, st, st == 403 ? "invalid_request_error" : "server_error",
                               st == 403   ? "permission_denied"
                               : st == 507 ? "library_full"
                                           : "io_error",
                               st == 403 ? "name" : NULL, "%s", why);
    }
    /* qvoice's description, plus vLLM-Omni's success and voice */
    cJSON_AddBoolToObject(o, "success", 1);
    cJSON_AddItemToObject(o, "voice", vllm_entry(o));
    if (replaced[0]) cJSON_AddStringToObject(o, "replaced", replaced);
    if (report) cJSON_AddItemToObject(o, "report", report);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return qvs_reply_json(c, q, 200, body);
}

/* The signature of an uploaded voice file b[n]: one that does not verify (an edit after
 * signing) is refused, and with trusted keys so is a file not signed by one of them. 1 with
 * *reply set when refused. */
static int signature_refused(qv_server *s, struct MHD_Connection *c, req *q, const char *b,
                             size_t n, const char *fname, enum MHD_Result *reply) {
    char err[512];
    qvf_signature sig;
    if (qvf_signature_read(b, n, fname, &sig, err, sizeof err)) {
        *reply = qvs_reply_error(c, q, 400, "invalid_request_error", "invalid_signature",
                                 "audio_sample", "%s", err);
        return 1;
    }
    if (s->cfg.n_trusted_keys <= 0 || qvf_signature_trusted(&sig, s->trusted, s->cfg.n_trusted_keys))
        return 0;
    char id[17];
    qvu_hex(sig.key_id, sizeof sig.key_id, id);
    if (sig.present)
        *reply = qvs_reply_error(c, q, 403, "invalid_request_error", "untrusted_signer",
                                 "audio_sample", "%.128s: signed by key %s (signer \"%.64s\"), "
                                 "not one of this server's trusted keys", fname, id, sig.signer);
    else
        *reply = qvs_reply_error(c, q, 403, "invalid_request_error", "untrusted_signer",
                                 "audio_sample", "%.128s: not signed; this server takes voice "
                                 "files signed by its trusted keys only", fname);
    return 1;
}

/* An uploaded .qvoice: the structural check of qvf_read_file, then qv_voice_check against the
 * served models (it must fit one of them). name/consent from the form are written into META. */
static enum MHD_Result store_qvoice(qv_server *s, struct MHD_Connection *c, req *q,
                                    struct upload *u) {
    char err[512], out[4096];
    qvf_voice *v;
    size_t n;
    char *b;
    const char *fname = u->filename[0] ? u->filename : "upload";
    /* a raw x-vector (file_version 0) is no voice file, whatever its name */
    if (qvf_file_kind(NULL, u->magic, sizeof u->magic) != QVF_KIND_QVOICE)
        return qvs_reply_error(c, q, 400, "invalid_request_error", "invalid_voice_file",
                               "audio_sample", "%.128s: not a .qvoice voice file", fname);
    /* read once: the structure and the signature are checked on the same bytes */
    if (!(b = qvu_read_file(u->tmp, (size_t)s->cfg.max_upload_mb << 21, &n, err, sizeof err)))
        return qvs_reply_error(c, q, 500, "server_error", "io_error", NULL, "%s", err);
    if (qvf_read_mem(b, n, fname, 0, &v, err, sizeof err)) {
        free(b);
        return qvs_reply_error(c, q, 400, "invalid_request_error", "invalid_voice_file",
                               "audio_sample", "%.128s: %s", fname, qvs_without_path(err, fname));
    }
    enum MHD_Result refused;
    if (signature_refused(s, c, q, b, n, fname, &refused)) {
        qvf_voice_free(v);
        free(b);
        return refused;
    }
    const char *meta_name = qvf_meta_get(v, "name");
    int finite = 1;
    for (uint32_t i = 0; i < v->enc_dim; i++)
        finite &= isfinite(v->xvector[i]) != 0;
    if (!finite || (meta_name && strlen(meta_name) > NAME_MAX_BYTES)) {
        qvf_voice_free(v);
        free(b);
        return qvs_reply_error(c, q, 400, "invalid_request_error", "invalid_voice_file",
                               "audio_sample", "%.128s: %s", fname,
                               finite ? "its META name is longer than 128 bytes"
                                      : "its x-vector is not finite (NaN or infinity)");
    }
    cJSON *report = cJSON_CreateObject();
    {
        qv_voice *qv;
        enum qv_status st = qv_voice_open_memory(&qv, b, n, fname), fit = QV_E_VOICE;
        if (st) snprintf(err, sizeof err, "%s", qv_last_error());
        cJSON *fits = cJSON_AddArrayToObject(report, "fits_models");
        for (int i = 0; !st && i < s->n_models; i++) {
            enum qv_status k = qv_voice_check(qv, s->models[i].model, NULL);
            if (k) snprintf(err, sizeof err, "%s", qv_last_error());
            if (!k) {
                cJSON_AddItemToArray(fits, cJSON_CreateString(s->models[i].name));
                fit = QV_OK;
            }
        }
        if (!st) qv_voice_free(qv);
        if (st || fit) {
            qvf_voice_free(v);
            free(b);
            cJSON_Delete(report);
            return qvs_reply_error(c, q, 400, "invalid_request_error", "voice_unusable",
                                   "audio_sample", "%.128s: fits none of the served models: %s",
                                   fname, qvs_without_path(err, fname));
        }
    }
    const char *name = field(u, F_NAME), *consent = field(u, F_CONSENT);
    const char *about = field(u, F_DESCRIPTION), *old_about = qvf_meta_get(v, QVS_META_DESCRIPTION);
    const char *old = qvf_meta_get(v, "name"), *old_consent = qvf_meta_get(v, "consent.method");
    int rewrite = (name && (!old || strcmp(old, name))) || !old_consent || !old_consent[0] ||
                  (about && (!old_about || strcmp(old_about, about)));
    /* a copy: name may be META's own value, which qvf_meta_set frees (found by fuzz_upload) */
    char name_copy[512];
    snprintf(name_copy, sizeof name_copy, "%s", name ? name : old ? old : "");
    name = name_copy[0] ? name_copy : NULL;
    snprintf(out, sizeof out, "%s", u->tmp);
    if (rewrite) {
        int fd;
        snprintf(out, sizeof out, "%s/.new-%d-XXXXXX", s->voices_dir, (int)getpid());
        if ((fd = mkstemp(out)) < 0 || close(fd) || qvf_meta_set(v, "name", name) ||
            (about && qvf_meta_set(v, QVS_META_DESCRIPTION, about)) ||
            (!old_consent && (qvf_meta_set(v, "consent.method", "typed") ||
                              qvf_meta_set(v, "consent.statement", consent) ||
                              qvf_meta_set(v, "consent.collected_by", "qvoice-server upload"))) ||
            qvf_write_file(v, out, 4, err, sizeof err)) {
            unlink(out);
            qvf_voice_free(v);
            free(b);
            cJSON_Delete(report);
            return qvs_reply_error(c, q, 500, "server_error", "io_error", NULL, "%s", err);
        }
    }
    qvf_voice_free(v);
    free(b);
    return store(s, c, q, out, name_copy[0] ? name_copy : NULL, report, rewrite);
}

/* The voice file at path gets vLLM-Omni's speaker_description in its META (rewritten
 * atomically). 0 or -1 (err set). */
static int describe_file(const char *path, const char *about, char *err, size_t err_size) {
    qvf_voice *v;
    err[0] = 0;
    if (qvf_read_file(path, 0, &v, err, err_size)) return -1;
    int rc = qvf_meta_set(v, QVS_META_DESCRIPTION, about) ||
             qvf_write_file(v, path, v->file_version, err, err_size);
    if (rc && !err[0]) snprintf(err, err_size, "speaker_description: out of memory");
    qvf_voice_free(v);
    return rc ? -1 : 0;
}

static enum MHD_Result clone_upload(qv_server *s, struct MHD_Connection *c, req *q,
                                    struct upload *u) {
    char err[512], out[4096];
    if (!s->cloner)
        return qvs_reply_error(c, q, 501, "server_error", "not_implemented", "audio_sample",
                               "cloning from audio needs the server started with --clone-model "
                               "(a .qvoice upload works without)");
    int fd;
    snprintf(out, sizeof out, "%s/.new-%d-XXXXXX", s->voices_dir, (int)getpid());
    if ((fd = mkstemp(out)) < 0 || close(fd))
        return qvs_reply_error(c, q, 500, "server_error", "io_error", NULL, "%s: %s", out,
                               strerror(errno));
    qv_clone_request r = qv_clone_default_request();
    r.audio_path = u->tmp;
    r.ref_text = field(u, F_TRANSCRIPT);
    r.language = field(u, F_LANGUAGE);
    r.name = field(u, F_NAME) ? field(u, F_NAME) : ""; /* not the temporary's name (NULL) */
    r.consent = field(u, F_CONSENT);
    /* without a transcript the cleanest window is picked anyway: the report suggests the span
       to transcribe (hygiene.icl_window); the voice is the same (no ICL) */
    const char *win = field(u, F_ICL_WINDOW);
    if (!win && !r.ref_text) r.icl_window = QV_ICL_AUTO;
    if (win && qv_icl_window_parse(win, &r)) {
        unlink(out);
        return qvs_reply_error(c, q, 400, "invalid_request_error", "invalid_value", "icl_window",
                               "%s", qv_last_error());
    }
    char *report = NULL;
    double deadline = q->t0 + s->cfg.timeout_s;
    int sl = qvs_slot_take(s, c, -1, NULL, deadline);
    if (sl < 0) {
        unlink(out);
        return qvs_reply_not_admitted(s, c, q, sl, deadline);
    }
    enum qv_status st = qv_clone_run(s->cloner, &r, out, &report);
    qvs_slot_release(s, sl);
    const char *about = field(u, F_DESCRIPTION);
    if (!st && about && describe_file(out, about, err, sizeof err)) {
        unlink(out);
        qv_free(report);
        return qvs_reply_error(c, q, 500, "server_error", "io_error", NULL, "%s", err);
    }
    if (st) {
        snprintf(err, sizeof err, "%s", qv_last_error());
        unlink(out);
        qv_free(report);
        int status = st == QV_E_AUDIO || st == QV_E_INVALID ? 400 : 500;
        return qvs_reply_error(
            c, q, status, status == 400 ? "invalid_request_error" : "server_error",
            st == QV_E_AUDIO ? "invalid_audio" : "clone_failed",
            st == QV_E_AUDIO ? "audio_sample" : NULL, "%s: %s: %s",
            u->filename[0] ? u->filename : "upload", qv_strerror(st), qvs_without_path(err, u->tmp));
    }
    cJSON *rep = report ? cJSON_Parse(report) : NULL;
    qv_free(report);
    static const char *const internal[] = {"output", "audio", "model"}; /* server paths */
    for (int i = 0; i < 3; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(rep, internal[i]);
    return store(s, c, q, out, r.name, rep, 1);
}

enum MHD_Result qvs_upload_finish(qv_server *s, struct MHD_Connection *c, req *q) {
    struct upload *u = q->up;
    int complete = MHD_destroy_post_processor(q->pp) == MHD_YES;
    q->pp = NULL;
    if (u->status)
        return qvs_reply_error(c, q, u->status,
                               u->status >= 500 ? "server_error" : "invalid_request_error",
                               "invalid_upload", NULL, "%s", u->why);
    if (!complete)
        return qvs_reply_error(c, q, 400, "invalid_request_error", "invalid_upload", NULL,
                               "multipart body: truncated or malformed");
    if (u->fd < 0 || !u->n_bytes)
        return qvs_reply_error(c, q, 400, "invalid_request_error", "missing_field", "audio_sample",
                               "audio_sample: required (reference audio or a .qvoice file)");
    const char *consent = field(u, F_CONSENT), *name = field(u, F_NAME);
    if (!consent)
        return qvs_reply_error(
            c, q, 400, "invalid_request_error", "missing_field", "consent",
            "consent: required (a statement that the speaker agreed to cloning)");
    if (name && (qvs_is_id(name) || strchr(name, '/') || strlen(name) > NAME_MAX_BYTES))
        return qvs_reply_error(c, q, 400, "invalid_request_error", "invalid_value", "name",
                               "name %.128s: at most %d bytes, no '/', not a 64-hex id", name,
                               NAME_MAX_BYTES);
    close(u->fd);
    u->fd = -1;
    return qvf_file_kind(u->filename, u->magic, sizeof u->magic) == QVF_KIND_QVOICE
               ? store_qvoice(s, c, q, u)
               : clone_upload(s, c, q, u);
}

/* ==== what a voice holds: its reference, its fit, its likeness =============================== */

/* The voice id (from the library) opened as a qv_voice in *v, its file held by vr; 0, or an
 * error reply queued (returned in *ret). */
static int open_voice(qv_server *s, struct MHD_Connection *c, req *q, const char *id,
                      qvs_voice_ref *vr, qv_voice **v, enum MHD_Result *ret) {
    if (qvs_voice_lookup(s, q->key, id, vr)) return *ret = voice_not_found(c, q, id), -1;
    if (!qv_voice_open(v, vr->path)) return 0;
    char err[512];
    snprintf(err, sizeof err, "%s", qv_last_error());
    qvs_voice_ref_close(vr);
    *ret = qvs_reply_error(c, q, 500, "server_error", "invalid_voice_file", "voice_id",
                           "voice %s: %s", id, qvs_without_path(err, vr->path));
    return -1;
}

enum MHD_Result qvs_voice_reference(qv_server *s, struct MHD_Connection *c, req *q,
                                    const char *id) {
    const char *fmt = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "response_format");
    const char *mname = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "model");
    int format = fmt ? qv_format_parse(fmt) : QV_FORMAT_WAV, model = qvs_find_model(s, mname);
    if (format < 0 || !qv_format_writable(format))
        return qvs_reply_error(c, q, 400, "invalid_request_error", "invalid_value",
                               "response_format",
                               "response_format %.64s: expected " QV_FORMAT_NAMES
                               " (one this build writes)",
                               fmt);
    if (model < 0)
        return qvs_reply_error(c, q, 404, "invalid_request_error", "model_not_found", "model",
                               "model %.128s: not served", mname);
    qvs_voice_ref vr;
    qv_voice *v;
    enum MHD_Result ret;
    if (open_voice(s, c, q, id, &vr, &v, &ret)) return ret;
    if (!qv_voice_has_icl(v)) {
        qv_voice_free(v);
        qvs_voice_ref_close(&vr);
        return qvs_reply_error(c, q, 404, "invalid_request_error", "no_reference", "voice_id",
                               "voice %s: holds no ICL reference (cloned without a transcript)",
                               id);
    }
    double deadline = q->t0 + s->cfg.timeout_s;
    int sl = qvs_slot_take(s, c, -1, NULL, deadline); /* decoding costs what a synthesis does */
    if (sl < 0) {
        qv_voice_free(v);
        qvs_voice_ref_close(&vr);
        return qvs_reply_not_admitted(s, c, q, sl, deadline);
    }
    float *pcm;
    int64_t n;
    enum qv_status st = qv_voice_reference_audio(v, s->models[model].model, s->n_threads, &pcm, &n);
    qvs_slot_release(s, sl);
    qv_voice_free(v);
    qvs_voice_ref_close(&vr);
    uint8_t *out = NULL;
    size_t len;
    if (!st) { /* marked as the model's decoding of codes, as speak --decode-codes marks it */
        qv_provenance prov = qv_provenance_of(s->models[model].model, NULL, NULL);
        prov.watermark = !s->cfg.no_watermark;
        st = qv_audio_encode(format, pcm, n, &prov, &out, &len);
        qv_free(pcm);
    }
    if (st)
        return qvs_reply_error(c, q, 500, "server_error", "decoding_failed", NULL, "voice %s: %s",
                               id, qv_last_error());
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, out, qv_free);
    if (!r) {
        qv_free(out);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, qv_format_mime(format));
    ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    q->status = MHD_HTTP_OK;
    return ret;
}

enum MHD_Result qvs_voice_fit(qv_server *s, struct MHD_Connection *c, req *q, const char *id) {
    qvs_voice_ref vr;
    qv_voice *v;
    enum MHD_Result ret;
    if (open_voice(s, c, q, id, &vr, &v, &ret)) return ret;
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "models");
    cJSON_AddStringToObject(o, "id", vr.id);
    int any = 0;
    for (int i = 0; i < s->n_models; i++) {
        char *warn = NULL, detail[512] = "";
        enum qv_status st = qv_voice_check(v, s->models[i].model, &warn);
        if (st || warn) snprintf(detail, sizeof detail, "%s", st ? qv_last_error() : warn);
        qv_free(warn);
        snprintf(detail, sizeof detail, "%s", qvs_without_path(detail, vr.path));
        qvs_scrub(s, detail, sizeof detail);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "model", s->models[i].name);
        cJSON_AddStringToObject(m, "fit", !st                        ? "fits"
                                          : st == QV_E_FOREIGN_VOICE ? "foreign"
                                                                     : "unusable");
        if (detail[0]) cJSON_AddStringToObject(m, "detail", detail);
        cJSON_AddItemToArray(a, m);
        any |= !st;
    }
    cJSON_AddBoolToObject(o, "fits", any);
    qvs_library_note_fit(s, vr.id, any);
    qv_voice_free(v);
    qvs_voice_ref_close(&vr);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return qvs_reply_json(c, q, 200, body);
}

enum MHD_Result qvs_voice_similarity(qv_server *s, struct MHD_Connection *c, req *q,
                                     const char *id) {
    const char *to = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "to");
    if (!to || !to[0])
        return qvs_reply_error(c, q, 400, "invalid_request_error", "missing_field", "to",
                               "to: required (the voice to compare with)");
    qvs_voice_ref a, b;
    if (qvs_voice_lookup(s, q->key, id, &a)) return voice_not_found(c, q, id);
    if (qvs_voice_lookup(s, q->key, to, &b)) {
        qvs_voice_ref_close(&a);
        return voice_not_found(c, q, to);
    }
    double cosine;
    enum qv_status st = qv_clone_similarity(NULL, a.path, b.path, 0, &cosine, NULL);
    char err[512];
    snprintf(err, sizeof err, "%s", st ? qv_last_error() : "");
    qvs_voice_ref_close(&a);
    qvs_voice_ref_close(&b);
    if (st)
        return qvs_reply_error(c, q, 400, "invalid_request_error", "not_comparable", "to",
                               "voices %s and %s: %s", a.id, b.id, err);
    char body[256];
    snprintf(body, sizeof body, "{\"object\":\"voice.similarity\",\"a\":\"%s\",\"b\":\"%s\","
             "\"cosine\":%.6f}", a.id, b.id, cosine);
    return qvs_reply_json(c, q, 200, strdup(body));
}
