/* voices.c — the voice library over HTTP: DIR/<sha256>.qvoice files listed, described, downloaded,
 * deleted, and created by a multipart upload (reference audio cloned on the --clone-model Base,
 * or a .qvoice verified like `voicefmt verify --model`). The directory is read on each request,
 * so servers sharing it see each other's voices. New files appear by rename only; temporaries
 * start with '.' and are removed at start (qvs_voices_clean).
 */
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/server_impl.h"
#include "util/fileio.h"
#include "voicefmt/qvf.h"

#define FIELD_MAX_BYTES 16384 /* name, transcript, language, consent */

static int is_id(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return 0;
    return n == 64;
}

/* id of a library file name "<64 hex>.qvoice", or NULL. */
static int id_of(const char *fname, char id[65]) {
    size_t n = strlen(fname);
    if (n != 64 + 7 || strcmp(fname + 64, ".qvoice")) return 0;
    memcpy(id, fname, 64);
    id[64] = 0;
    return is_id(id);
}

void qvs_voices_clean(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) /* ours: .upload-*, .new-*; the atomic writers': *.tmp.* */
        if (!strncmp(e->d_name, ".upload-", 8) || !strncmp(e->d_name, ".new-", 5) ||
            strstr(e->d_name, ".qvoice.tmp.")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
}

static cJSON *describe(const char *id, const char *path, const qvf_voice *v) {
    struct stat st;
    cJSON *o = cJSON_CreateObject();
    const char *name = qvf_meta_get(v, "name"), *lang = qvf_meta_get(v, "language");
    static const char *const variants[] = {"unknown", "base", "custom_voice", "voice_design"};
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "voice");
    cJSON_AddStringToObject(o, "name", name ? name : "");
    cJSON_AddStringToObject(o, "language", lang ? lang : "");
    if (!stat(path, &st)) {
        cJSON_AddNumberToObject(o, "created_at", (double)st.st_mtime);
        cJSON_AddNumberToObject(o, "bytes", (double)st.st_size);
    }
    cJSON_AddNumberToObject(o, "file_version", v->file_version);
    cJSON_AddNumberToObject(o, "xvector_dim", v->enc_dim);
    cJSON_AddBoolToObject(o, "has_icl", v->n_frames > 0 && v->transcript);
    cJSON_AddNumberToObject(o, "icl_seconds", v->n_frames / QV_FRAME_RATE_HZ);
    cJSON_AddBoolToObject(o, "has_wdelta", v->has_wdelta);
    cJSON_AddStringToObject(o, "source_variant",
                            v->source.variant < 4 ? variants[v->source.variant] : "invalid");
    const char *consent = qvf_meta_get(v, "consent.method");
    cJSON_AddBoolToObject(o, "consent", consent && consent[0]);
    return o;
}

/* Calls fn for each library voice that reads cleanly; stops when fn returns non-zero. */
static int each_voice(const char *dir, int (*fn)(void *, const char *, const char *, qvf_voice *),
                      void *user) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    char id[65], path[4096], err[256];
    int stop = 0;
    while (!stop && (e = readdir(d))) {
        if (!id_of(e->d_name, id)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        qvf_voice *v;
        if (qvf_read_file(path, 0, &v, err, sizeof err)) continue;
        stop = fn(user, id, path, v);
        qvf_voice_free(v);
    }
    closedir(d);
    return stop;
}

struct find_ctx {
    const char *name;
    char *path;
    size_t size;
    char id[65];
};

static int find_fn(void *user, const char *id, const char *path, qvf_voice *v) {
    struct find_ctx *f = user;
    const char *name = qvf_meta_get(v, "name");
    if (!name || strcmp(name, f->name)) return 0;
    snprintf(f->path, f->size, "%s", path);
    memcpy(f->id, id, 65);
    return 1;
}

int qvs_voice_lookup(const qv_server *s, const char *key, char *path, size_t size) {
    if (is_id(key)) {
        snprintf(path, size, "%s/%s.qvoice", s->voices_dir, key);
        return access(path, R_OK) ? -1 : 0;
    }
    struct find_ctx f = {key, path, size, ""};
    return each_voice(s->voices_dir, find_fn, &f) == 1 ? 0 : -1;
}

static int list_fn(void *user, const char *id, const char *path, qvf_voice *v) {
    cJSON_AddItemToArray(user, describe(id, path, v));
    return 0;
}

static enum MHD_Result voice_not_found(struct MHD_Connection *c, req *q, const char *id) {
    return qvs_reply_error(c, q, MHD_HTTP_NOT_FOUND, "invalid_request_error", "voice_not_found",
                           "voice_id", "voice %s: not in the library", id);
}

enum MHD_Result qvs_voices_get(qv_server *s, struct MHD_Connection *c, req *q, const char *id) {
    char path[4096], err[512];
    if (!id) { /* the list, and the preset speakers of each model (vLLM-Omni's "voices") */
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
        cJSON *data = cJSON_AddArrayToObject(o, "data");
        if (each_voice(s->voices_dir, list_fn, data) < 0) {
            cJSON_Delete(o);
            return qvs_reply_error(c, q, 500, "server_error", "io_error", NULL, "%s: %s",
                                   s->voices_dir, strerror(errno));
        }
        char *body = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        return qvs_reply_json(c, q, 200, body);
    }
    if (qvs_voice_lookup(s, id, path, sizeof path)) return voice_not_found(c, q, id);
    const char *dl = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "download");
    if (dl && strcmp(dl, "0") && strcmp(dl, "false")) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
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
        const char *base = strrchr(path, '/') + 1;
        snprintf(disp, sizeof disp, "attachment; filename=\"%s\"", base);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_DISPOSITION, disp);
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        q->status = MHD_HTTP_OK;
        return ret;
    }
    qvf_voice *v;
    if (qvf_read_file(path, 0, &v, err, sizeof err))
        return qvs_reply_error(c, q, 500, "server_error", "voice_unreadable", NULL, "%s", err);
    char vid[65];
    const char *base = strrchr(path, '/') + 1;
    id_of(base, vid);
    cJSON *o = describe(vid, path, v);
    qvf_voice_free(v);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return qvs_reply_json(c, q, 200, body);
}

enum MHD_Result qvs_voices_delete(qv_server *s, struct MHD_Connection *c, req *q, const char *id) {
    char path[4096], vid[65];
    if (qvs_voice_lookup(s, id, path, sizeof path) || !id_of(strrchr(path, '/') + 1, vid))
        return voice_not_found(c, q, id);
    if (unlink(path) && errno != ENOENT)
        return qvs_reply_error(c, q, 500, "server_error", "io_error", NULL, "%s: %s", path,
                               strerror(errno));
    char body[160];
    snprintf(body, sizeof body, "{\"id\":\"%s\",\"object\":\"voice\",\"deleted\":true}", vid);
    return qvs_reply_json(c, q, 200, strdup(body));
}

/* ==== upload ================================================================================= */

enum { F_NAME, F_TRANSCRIPT, F_LANGUAGE, F_CONSENT, N_FIELDS };

struct upload {
    qv_server *s;
    char tmp[4096]; /* the uploaded file, DIR/.upload-XXXXXX */
    int fd;
    uint64_t n_bytes;
    uint64_t n_dropped; /* body bytes read after an error */
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
    static const char *const names[][2] = {
        {"name", NULL}, {"transcript", "ref_text"}, {"language", NULL}, {"consent", NULL}};
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
    if (is_file_field(key)) {
        if (u->fd < 0 || (off == 0 && u->n_bytes)) {
            if (u->tmp[0]) { /* a second file part (off 0: a part's first bytes) */
                u->status = 400;
                snprintf(u->why, sizeof u->why, "%s: one audio file per upload", key);
                return MHD_NO;
            }
            snprintf(u->tmp, sizeof u->tmp, "%s/.upload-XXXXXX", u->s->voices_dir);
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

/* libmicrohttpd cannot queue a reply while a body arrives (MHD_queue_response fails and the
 * client would get a closed connection): after an error the rest of the body is read and dropped,
 * up to --max-upload-mb more, and qvs_upload_finish replies. */
enum MHD_Result qvs_upload_data(qv_server *s, struct MHD_Connection *c, req *q, const char *data,
                                size_t *size) {
    struct upload *u = q->up;
    if (u->status) {
        u->n_dropped += *size;
        *size = 0;
        if (u->n_dropped <= (uint64_t)s->cfg.max_upload_mb << 20) return MHD_YES;
        q->status = u->status; /* for the log line and the metrics: the connection is closed */
        snprintf(q->note, sizeof q->note, "dropped: %.50s", u->why);
        return MHD_NO;
    }
    if (MHD_post_process(q->pp, data, *size) != MHD_YES && !u->status) {
        u->status = 400;
        snprintf(u->why, sizeof u->why, "multipart body: malformed");
    }
    *size = 0;
    return MHD_YES;
}

/* Field f as a NUL-terminated string, or NULL when absent or empty. */
static const char *field(struct upload *u, int f) {
    if (!u->field[f].len || qvs_bytes_add(&u->field[f], "", 1)) return NULL;
    u->field[f].len--;
    return (const char *)u->field[f].p;
}

struct name_ctx {
    const char *name, *id;
    int taken;
};
static int name_fn(void *user, const char *id, const char *path, qvf_voice *v) {
    struct name_ctx *n = user;
    const char *name = qvf_meta_get(v, "name");
    n->taken |= name && !strcmp(name, n->name) && strcmp(id, n->id);
    return n->taken;
}

/* Puts the finished voice file src into the library as <sha256>.qvoice (util's atomic writer)
 * and removes src; replies with its description and the report. */
static enum MHD_Result store(qv_server *s, struct MHD_Connection *c, req *q, const char *src,
                             const char *name, cJSON *report) {
    uint8_t h[32];
    char id[65], dst[4096], err[512];
    size_t n;
    char *b = qvu_read_file(src, (size_t)s->cfg.max_upload_mb << 21, &n, err, sizeof err);
    unlink(src);
    if (!b || qvf_sha256(b, n, h)) {
        free(b);
        cJSON_Delete(report);
        return qvs_reply_error(c, q, 500, "server_error", "io_error", NULL, "%s", err);
    }
    for (int i = 0; i < 32; i++)
        snprintf(id + 2 * i, 3, "%02x", h[i]);
    struct name_ctx nc = {name, id, 0};
    if (name) each_voice(s->voices_dir, name_fn, &nc);
    if (nc.taken) {
        free(b);
        cJSON_Delete(report);
        return qvs_reply_error(c, q, 409, "invalid_request_error", "voice_exists", "name",
                               "name %s: another library voice has it (DELETE it first)", name);
    }
    snprintf(dst, sizeof dst, "%s/%s.qvoice", s->voices_dir, id);
    qvu_wfile *w;
    FILE *f = NULL;
    int bad = qvu_wfile_open(&w, dst, err, sizeof err);
    if (!bad && (!(f = qvu_wfile_stream(w)) || fwrite(b, 1, n, f) != n)) {
        qvu_wfile_abort(w);
        snprintf(err, sizeof err, "%s.qvoice: cannot write", id);
        bad = 1;
    }
    if (bad || qvu_wfile_commit(w, err, sizeof err)) {
        free(b);
        cJSON_Delete(report);
        return qvs_reply_error(c, q, 500, "server_error", "io_error", NULL, "%s", err);
    }
    qvf_voice *v;
    int rc = qvf_read_mem(b, n, dst, 0, &v, err, sizeof err);
    cJSON *o = rc ? cJSON_CreateObject() : describe(id, dst, v);
    if (!rc) qvf_voice_free(v);
    free(b);
    if (report) cJSON_AddItemToObject(o, "report", report);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return qvs_reply_json(c, q, 200, body);
}

/* err without its leading "PATH: " (the client knows the file by its own name). */
static const char *without_path(const char *err, const char *path) {
    size_t n = strlen(path);
    return !strncmp(err, path, n) && !strncmp(err + n, ": ", 2) ? err + n + 2 : err;
}

/* An uploaded .qvoice: the structural check of qvf_read_file, then qv_voice_check against the
 * served models (it must fit one of them). name/consent from the form are written into META. */
static enum MHD_Result store_qvoice(qv_server *s, struct MHD_Connection *c, req *q,
                                    struct upload *u) {
    char err[512], out[4096];
    qvf_voice *v;
    if (qvf_read_file(u->tmp, 0, &v, err, sizeof err))
        return qvs_reply_error(c, q, 400, "invalid_request_error", "invalid_voice_file",
                               "audio_sample", "%s: %s", u->filename[0] ? u->filename : "upload",
                               without_path(err, u->tmp));
    cJSON *report = cJSON_CreateObject();
    {
        qv_voice *qv;
        enum qv_status st = qv_voice_open(&qv, u->tmp), fit = QV_E_VOICE;
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
            cJSON_Delete(report);
            return qvs_reply_error(c, q, 400, "invalid_request_error", "voice_unusable",
                                   "audio_sample", "%s: fits none of the served models: %s",
                                   u->filename[0] ? u->filename : "upload",
                                   without_path(err, u->tmp));
        }
    }
    const char *name = field(u, F_NAME), *consent = field(u, F_CONSENT);
    const char *old = qvf_meta_get(v, "name"), *old_consent = qvf_meta_get(v, "consent.method");
    int rewrite = (name && (!old || strcmp(old, name))) || !old_consent || !old_consent[0];
    if (!name) name = old;
    snprintf(out, sizeof out, "%s", u->tmp);
    if (rewrite) {
        int fd;
        snprintf(out, sizeof out, "%s/.new-XXXXXX", s->voices_dir);
        if ((fd = mkstemp(out)) < 0 || close(fd) || qvf_meta_set(v, "name", name) ||
            (!old_consent && (qvf_meta_set(v, "consent.method", "typed") ||
                              qvf_meta_set(v, "consent.statement", consent) ||
                              qvf_meta_set(v, "consent.collected_by", "qvoice-server upload"))) ||
            qvf_write_file(v, out, 4, err, sizeof err)) {
            unlink(out);
            qvf_voice_free(v);
            cJSON_Delete(report);
            return qvs_reply_error(c, q, 500, "server_error", "io_error", NULL, "%s", err);
        }
    }
    char name_copy[512];
    snprintf(name_copy, sizeof name_copy, "%s", name ? name : "");
    qvf_voice_free(v);
    return store(s, c, q, out, name_copy[0] ? name_copy : NULL, report);
}

static enum MHD_Result clone_upload(qv_server *s, struct MHD_Connection *c, req *q,
                                    struct upload *u) {
    char err[512], out[4096];
    if (!s->cloner)
        return qvs_reply_error(c, q, 501, "server_error", "not_implemented", "audio_sample",
                               "cloning from audio needs the server started with --clone-model "
                               "(a .qvoice upload works without)");
    int fd;
    snprintf(out, sizeof out, "%s/.new-XXXXXX", s->voices_dir);
    if ((fd = mkstemp(out)) < 0 || close(fd))
        return qvs_reply_error(c, q, 500, "server_error", "io_error", NULL, "%s: %s", out,
                               strerror(errno));
    qv_clone_request r = qv_clone_default_request();
    r.audio_path = u->tmp;
    r.ref_text = field(u, F_TRANSCRIPT);
    r.language = field(u, F_LANGUAGE);
    r.name = field(u, F_NAME);
    r.consent = field(u, F_CONSENT);
    char *report = NULL;
    enum qv_status st = qv_clone_run(s->cloner, &r, out, &report);
    if (st) {
        snprintf(err, sizeof err, "%s", qv_last_error());
        unlink(out);
        qv_free(report);
        int status = st == QV_E_AUDIO || st == QV_E_INVALID ? 400 : 500;
        return qvs_reply_error(
            c, q, status, status == 400 ? "invalid_request_error" : "server_error",
            st == QV_E_AUDIO ? "invalid_audio" : "clone_failed",
            st == QV_E_AUDIO ? "audio_sample" : NULL, "%s: %s: %s",
            u->filename[0] ? u->filename : "upload", qv_strerror(st), without_path(err, u->tmp));
    }
    cJSON *rep = report ? cJSON_Parse(report) : NULL;
    qv_free(report);
    static const char *const internal[] = {"output", "audio", "model"}; /* server paths */
    for (int i = 0; i < 3; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(rep, internal[i]);
    return store(s, c, q, out, r.name, rep);
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
    if (name && (is_id(name) || strchr(name, '/') || strlen(name) > 128))
        return qvs_reply_error(c, q, 400, "invalid_request_error", "invalid_value", "name",
                               "name %s: at most 128 bytes, no '/', not a 64-hex id", name);
    close(u->fd);
    u->fd = -1;
    size_t fl = strlen(u->filename);
    int is_qvoice =
        !memcmp(u->magic, "QVCE", 4) || (fl > 7 && !strcmp(u->filename + fl - 7, ".qvoice"));
    return is_qvoice ? store_qvoice(s, c, q, u) : clone_upload(s, c, q, u);
}
