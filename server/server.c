/* server.c — the HTTP side: libmicrohttpd daemon (one thread per connection), routing, bearer
 * auth, body limits, OpenAI-style error replies, /health /ready /metrics, one log line per
 * request, draining on shutdown.
 */
#include <cJSON.h>
#include <errno.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server/server_impl.h"
#include "voicefmt/qvf.h"

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    qv_server *s = cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = 0;
    qvs_srv_log(s, "libmicrohttpd: %s", line);
}

/* ==== slow clients =========================================================================== */

/* libmicrohttpd's timeout counts idle time only: a client sending a header byte every few seconds
 * would hold its connection (and its thread) for ever. Each connection is watched from its start
 * until its request has arrived whole; one not received within receive_s gets a 408 (when its
 * socket takes it at once) and is shut down (its thread's read returns 0 and the daemon closes
 * it). A keep-alive connection idle between requests is closed without a reply, as nginx does: a
 * 408 there could be read as the answer to a request the client sends at that moment. The daemon
 * reports CLOSED before it closes the descriptor, and both sides hold conn_mu, so a shut-down
 * descriptor is never a reused one. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    qv_server *s = cls;
    conn *k = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci || !(k = calloc(1, sizeof *k))) return; /* unwatched: the idle timeout still holds */
        k->fd = ci->connect_fd;
        k->deadline = qvs_now_s() + s->cfg.receive_s;
        k->state = CONN_REQUEST;
        pthread_mutex_lock(&s->conn_mu);
        k->next = s->conns;
        if (s->conns) s->conns->prev = k;
        s->conns = k;
        pthread_mutex_unlock(&s->conn_mu);
        *socket_context = k;
    } else if (k) {
        pthread_mutex_lock(&s->conn_mu);
        if (k->prev) k->prev->next = k->next;
        else s->conns = k->next;
        if (k->next) k->next->prev = k->prev;
        pthread_mutex_unlock(&s->conn_mu);
        free(k);
        *socket_context = NULL;
    }
}

/* CONN_IDLE: a request ended, the next one's clock starts now; CONN_REQUEST: its headers have
 * arrived (the clock runs on); CONN_DONE: it has arrived whole. */
static void conn_set(qv_server *s, struct MHD_Connection *c, enum conn_state state) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn *k = ci ? ci->socket_context : NULL;
    if (!k) return;
    pthread_mutex_lock(&s->conn_mu);
    if (state != CONN_REQUEST) k->deadline = qvs_now_s() + s->cfg.receive_s;
    k->state = state;
    pthread_mutex_unlock(&s->conn_mu);
}

/* The 408 of a request not received in time, written without blocking (a client that reads
 * nothing does not hold the watchdog); best effort, the connection is cut either way. */
static void send_timeout(const qv_server *s, int fd) {
    char body[256], reply[512];
    int bn = snprintf(body, sizeof body,
                      "{\"error\":{\"message\":\"request not received within %d s\","
                      "\"type\":\"invalid_request_error\",\"param\":null,"
                      "\"code\":\"request_timeout\"}}",
                      s->cfg.receive_s);
    int n = snprintf(reply, sizeof reply,
                     "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                     "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
                     bn, body);
    (void)!send(fd, reply, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static void *watchdog(void *arg) {
    qv_server *s = arg;
    pthread_mutex_lock(&s->conn_mu);
    while (!s->watch_stop) {
        double now = qvs_now_s();
        int cut = 0;
        for (conn *k = s->conns; k; k = k->next)
            if (k->state != CONN_DONE && now > k->deadline) {
                if (k->state == CONN_REQUEST) send_timeout(s, k->fd);
                shutdown(k->fd, SHUT_RDWR);
                k->state = CONN_DONE;
                cut++;
            }
        if (cut) {
            pthread_mutex_lock(&s->met.mu);
            s->met.slow_cut += (uint64_t)cut;
            pthread_mutex_unlock(&s->met.mu);
        }
        qvs_timed_wait(&s->conn_cv, &s->conn_mu, 200);
    }
    pthread_mutex_unlock(&s->conn_mu);
    return NULL;
}

/* ==== routes ================================================================================= */

/* The route of url; a /v1/audio/voices/ID[/SUB] route copies ID into id[id_size]. */
static enum route route_of(const char *url, char *id, size_t id_size) {
    static const char voices[] = "/v1/audio/voices";
    static const struct {
        const char *sub;
        enum route r;
    } subs[] = {{"", ROUTE_VOICE_GET},
                {"/reference", ROUTE_VOICE_REFERENCE},
                {"/fit", ROUTE_VOICE_FIT},
                {"/similarity", ROUTE_VOICE_SIMILARITY}};
    id[0] = 0;
    if (!strcmp(url, "/v1/audio/speech")) return ROUTE_SPEECH;
    if (!strcmp(url, "/v1/audio/detect")) return ROUTE_DETECT;
    if (!strcmp(url, "/v1/audio/speech/stream")) return ROUTE_SPEECH_STREAM;
    if (!strcmp(url, "/v1/audio/speech/batch")) return ROUTE_SPEECH_BATCH;
    if (!strcmp(url, voices)) return ROUTE_VOICES_LIST;
    if (!strncmp(url, voices, sizeof voices - 1) && url[sizeof voices - 1] == '/' &&
        url[sizeof voices] && url[sizeof voices] != '/') {
        const char *p = url + sizeof voices, *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        for (size_t i = 0; n < id_size && i < sizeof subs / sizeof *subs; i++)
            if (!strcmp(p + n, subs[i].sub)) {
                memcpy(id, p, n);
                id[n] = 0;
                return subs[i].r;
            }
        return ROUTE_OTHER;
    }
    if (!strcmp(url, "/health")) return ROUTE_HEALTH;
    if (!strcmp(url, "/ready")) return ROUTE_READY;
    if (!strcmp(url, "/metrics")) return ROUTE_METRICS;
    if (!strcmp(url, "/v1/models")) return ROUTE_MODELS;
    if (!strcmp(url, "/") || (!strncmp(url, "/studio/", 8) && url[8] && !strchr(url + 8, '/')))
        return ROUTE_STUDIO;
    return ROUTE_OTHER;
}

/* The route for this method, or -1 when the path exists but not with this method. */
static int route_method(enum route r, const char *method) {
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    switch (r) {
    case ROUTE_SPEECH:
    case ROUTE_DETECT:
    case ROUTE_SPEECH_BATCH:
        return post ? (int)r : -1;
    case ROUTE_SPEECH_STREAM:
        return !strcmp(method, "GET") ? (int)r : -1;
    case ROUTE_VOICES_LIST:
        return get ? (int)r : post ? ROUTE_VOICES_UPLOAD : -1;
    case ROUTE_VOICE_GET:
        return get ? (int)r : !strcmp(method, "DELETE") ? ROUTE_VOICE_DELETE : -1;
    case ROUTE_HEALTH:
    case ROUTE_READY:
    case ROUTE_METRICS:
    case ROUTE_MODELS:
    case ROUTE_STUDIO:
    case ROUTE_VOICE_REFERENCE:
    case ROUTE_VOICE_FIT:
    case ROUTE_VOICE_SIMILARITY:
        return get ? (int)r : -1;
    case ROUTE_VOICES_UPLOAD:
    case ROUTE_VOICE_DELETE:
    case ROUTE_OTHER:
    case ROUTE_COUNT:
        break;
    }
    return (int)r;
}

/* 1 with *k the request's key (NULL when the server has none), 0 when refused. Every key is
 * compared in constant time. */
/* The bearer key of the Authorization header; on the WebSocket route also ?api_key=KEY, as a
 * browser's WebSocket cannot send headers. */
static int authorized(const qv_server *s, struct MHD_Connection *c, enum route r,
                      const api_key **k) {
    *k = NULL;
    if (!s->n_keys) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h && !strncmp(h, "Bearer ", 7))
        h += 7;
    else if (!(r == ROUTE_SPEECH_STREAM &&
               (h = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "api_key"))))
        return 0;
    size_t n = strlen(h);
    for (int i = 0; i < s->n_keys; i++)
        if (strlen(s->keys[i].key) == n && !CRYPTO_memcmp(s->keys[i].key, h, n) && !*k)
            *k = &s->keys[i];
    return *k != NULL;
}

/* UTF-8 and JSON escapes of the input, other fields (a speaker_embedding of 2048 floats), and
 * with a clone model a ref_audio of up to max_upload_mb in base64. */
static size_t body_limit(const qv_server *s, enum route r) {
    if (r == ROUTE_DETECT) return (size_t)s->cfg.max_upload_mb << 20; /* an audio file */
    size_t ref = s->cloner ? ((size_t)s->cfg.max_upload_mb << 20) / 3 * 4 + 4096 : 0;
    size_t one = 8 * (size_t)s->cfg.max_text_chars + 65536; /* a batch: that per item, one ref */
    return (r == ROUTE_SPEECH_BATCH ? QVS_BATCH_MAX_ITEMS : 1) * one + ref;
}

static enum MHD_Result health(struct MHD_Connection *c, req *q) {
    return qvs_reply_json(c, q, MHD_HTTP_OK, strdup("{\"status\":\"ok\"}"));
}

static enum MHD_Result ready(qv_server *s, struct MHD_Connection *c, req *q) {
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "models");
    pthread_mutex_lock(&s->mu);
    int draining = s->draining;
    pthread_mutex_unlock(&s->mu);
    cJSON_AddStringToObject(o, "status", draining ? "draining" : "ready");
    for (int i = 0; i < s->n_models; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", s->models[i].name);
        cJSON_AddStringToObject(m, "type", qv_model_type(s->models[i].model));
        cJSON_AddStringToObject(m, "size", qv_model_size(s->models[i].model));
        cJSON *langs = cJSON_AddArrayToObject(m, "languages"); /* "auto" first */
        for (int l = 0; l < qv_model_n_languages(s->models[i].model); l++)
            cJSON_AddItemToArray(langs,
                                 cJSON_CreateString(qv_model_language(s->models[i].model, l)));
        cJSON_AddItemToArray(a, m);
    }
    cJSON_AddBoolToObject(o, "cloning", s->cloner != NULL);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return qvs_reply_json(c, q, draining ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK, body);
}

/* OpenAI's model list (what vLLM-Omni clients call first): the served models by the name a
 * request's "model" takes, with vLLM's ModelCard root and parent (no path: the name). */
static enum MHD_Result models(qv_server *s, struct MHD_Connection *c, req *q) {
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "data");
    cJSON_AddStringToObject(o, "object", "list");
    for (int i = 0; i < s->n_models; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", s->models[i].name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "qvoice");
        cJSON_AddStringToObject(m, "root", s->models[i].name);
        cJSON_AddNullToObject(m, "parent");
        cJSON_AddStringToObject(m, "type", qv_model_type(s->models[i].model));
        cJSON_AddItemToArray(a, m);
    }
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return qvs_reply_json(c, q, MHD_HTTP_OK, body);
}

static enum MHD_Result metrics_reply(qv_server *s, struct MHD_Connection *c, req *q) {
    int active = 0, queued;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_slots; i++)
        active += s->slots[i].busy;
    queued = s->n_queued;
    pthread_mutex_unlock(&s->mu);
    int64_t steps = 0, frames = 0;
    for (int i = 0; i < s->n_models; i++) {
        int64_t a, b;
        qv_model_batch_stats(s->models[i].model, &a, &b);
        steps += a, frames += b;
    }
    ref_stats refs = qvs_refcache_stats(s);
    char *text = qvs_metrics_render(&s->met, active, queued, steps, frames, &refs);
    if (!text) return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    q->status = MHD_HTTP_OK;
    return ret;
}

/* First call of a request: headers only. Refusals that need no body are answered here. */
static enum MHD_Result begin(qv_server *s, struct MHD_Connection *c, req *q) {
    pthread_mutex_lock(&s->mu);
    int draining = s->draining;
    pthread_mutex_unlock(&s->mu);
    if (draining)
        return qvs_reply_error(c, q, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", "shutting_down",
                               NULL, "the server is shutting down");
    const union MHD_ConnectionInfo *di = MHD_get_connection_info(c, MHD_CONNECTION_INFO_DAEMON);
    if (q->route == ROUTE_OTHER ||
        (di && di->daemon == s->probe && q->route != ROUTE_HEALTH && q->route != ROUTE_READY &&
         q->route != ROUTE_METRICS))
        return qvs_reply_error(c, q, MHD_HTTP_NOT_FOUND, "invalid_request_error", "not_found", NULL,
                               "%s %s: no such route", q->method, q->url);
    int r = route_method(q->route, q->method);
    if (r < 0)
        return qvs_reply_error(c, q, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error",
                               "method_not_allowed", NULL, "%s %s: method not allowed", q->method,
                               q->url);
    q->route = (enum route)r;
    if (!strncmp(q->url, "/v1/", 4) && !authorized(s, c, q->route, &q->key))
        return qvs_reply_error(c, q, MHD_HTTP_UNAUTHORIZED, "invalid_request_error",
                               "invalid_api_key", NULL,
                               "missing or invalid bearer key (Authorization: Bearer KEY)");
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long len = cl ? strtoull(cl, NULL, 10) : 0;
    if ((q->route == ROUTE_SPEECH || q->route == ROUTE_SPEECH_BATCH) &&
        len > body_limit(s, q->route))
        return qvs_reply_error(c, q, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error",
                               "request_too_large", NULL, "request body of %llu bytes exceeds %zu",
                               len, body_limit(s, q->route));
    if (q->route == ROUTE_VOICES_UPLOAD || q->route == ROUTE_DETECT) {
        if (len > (unsigned long long)s->cfg.max_upload_mb << 20)
            return qvs_reply_error(c, q, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error",
                                   "upload_too_large", NULL, "upload of %llu bytes exceeds %d MB",
                                   len, s->cfg.max_upload_mb);
        if (q->route == ROUTE_DETECT) return MHD_YES; /* a raw body, kept whole */
        return qvs_upload_begin(s, c, q);
    }
    return MHD_YES;
}

static enum MHD_Result finish(qv_server *s, struct MHD_Connection *c, req *q, const char *id) {
    conn_set(s, c, CONN_DONE);
    switch (q->route) {
    case ROUTE_SPEECH:
        return qvs_speech_handle(s, c, q);
    case ROUTE_SPEECH_STREAM:
        return qvs_ws_speech_upgrade(s, c, q, body_limit(s, ROUTE_SPEECH));
    case ROUTE_SPEECH_BATCH:
        return qvs_batch_handle(s, c, q);
    case ROUTE_VOICES_LIST:
    case ROUTE_VOICE_GET:
        return qvs_voices_get(s, c, q, id);
    case ROUTE_VOICE_DELETE:
        return qvs_voices_delete(s, c, q, id);
    case ROUTE_VOICE_REFERENCE:
        return qvs_voice_reference(s, c, q, id);
    case ROUTE_VOICE_FIT:
        return qvs_voice_fit(s, c, q, id);
    case ROUTE_VOICE_SIMILARITY:
        return qvs_voice_similarity(s, c, q, id);
    case ROUTE_VOICES_UPLOAD:
        return qvs_upload_finish(s, c, q);
    case ROUTE_HEALTH:
        return health(c, q);
    case ROUTE_READY:
        return ready(s, c, q);
    case ROUTE_METRICS:
        return metrics_reply(s, c, q);
    case ROUTE_MODELS:
        return models(s, c, q);
    case ROUTE_STUDIO:
        return qvs_studio_get(s, c, q);
    case ROUTE_DETECT:
        return qvs_detect_handle(s, c, q);
    case ROUTE_OTHER:
    case ROUTE_COUNT:
        break;
    }
    return MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *size, void **con_cls) {
    qv_server *s = cls;
    req *q = *con_cls;
    if (!q) {
        if (!(q = calloc(1, sizeof *q)) || !(q->url = strdup(url))) {
            free(q);
            return MHD_NO;
        }
        *con_cls = q;
        q->srv = s;
        q->t0 = qvs_now_s();
        snprintf(q->method, sizeof q->method, "%s", method);
        q->route = route_of(url, q->id, sizeof q->id);
        conn_set(s, c, CONN_REQUEST);
        pthread_mutex_lock(&s->mu);
        s->n_inflight++;
        pthread_mutex_unlock(&s->mu);
        return begin(s, c, q);
    }
    const char *id = q->id[0] ? q->id : NULL;
    if (q->status) { /* answered already: the rest of the body is discarded */
        conn_set(s, c, CONN_DONE);
        *size = 0;
        return MHD_YES;
    }
    if (*size) {
        if (q->route == ROUTE_VOICES_UPLOAD) return qvs_upload_data(c, q, data, size);
        if (q->body_len + *size > body_limit(s, q->route)) { /* chunked: no length to check */
            return qvs_reply_cut(c, q, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error",
                                 "request_too_large", NULL, "request body exceeds %zu bytes",
                                 body_limit(s, q->route));
        }
        {
            bytes b = {(uint8_t *)q->body, q->body_len, q->body_cap};
            if (qvs_bytes_add(&b, data, *size) || qvs_bytes_add(&b, "", 1)) return MHD_NO;
            q->body = (char *)b.p;
            q->body_len = b.len - 1; /* kept NUL-terminated */
            q->body_cap = b.cap;
        }
        *size = 0;
        return MHD_YES;
    }
    return finish(s, c, q, id);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    qv_server *s = cls;
    req *q = *con_cls;
    /* the next request on this connection starts its clock now; an upgraded one (a WebSocket)
     * has none, and its session keeps its own time (ws_speech.c) */
    conn_set(s, c, q && q->status == MHD_HTTP_SWITCHING_PROTOCOLS ? CONN_DONE : CONN_IDLE);
    if (!q) return;
    if (q->ws) qvs_ws_speech_release(q->ws, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    qvs_speech_release(s, q); /* a disconnect cancels the synthesis at once */
    qvs_upload_free(q->up);
    if (q->pp) MHD_destroy_post_processor(q->pp);
    int status = q->status ? q->status : 499; /* nginx's "client closed request" */
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !q->note[0])
        snprintf(q->note, sizeof q->note, "%s",
                 toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT      ? "client-abort"
                 : toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? "timeout"
                                                                 : "incomplete");
    qvs_metrics_request(&s->met, q->route, status);
    qvs_srv_log(s, "%s %s %d %.3fs%s%s", q->method, q->url, status, qvs_now_s() - q->t0,
                q->note[0] ? " " : "", q->note);
    free(q->body);
    free(q->url);
    free(q);
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    s->n_inflight--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ==== start / stop =========================================================================== */

qv_server_config qv_server_default_config(void) {
    return (qv_server_config){.listen = "127.0.0.1:8080",
                              .n_threads = 0,
                              .max_concurrency = 1,
                              .max_queue = 4,
                              .batch_streams = QV_BATCH_MAX_STREAMS,
                              .quant = QV_QUANT_BF16,
                              .max_seconds = 120,
                              .max_text_chars = 4096,
                              .max_upload_mb = 20,
                              .ref_cache_mb = 256,
                              .max_voices = 1000,
                              .max_library_mb = 20480,
                              .timeout_s = 300,
                              .receive_s = 60,
                              .max_connections = 256,
                              .max_connections_per_ip = 16};
}

/* One key file line: "name:admin:KEY", "name:user:KEY", or a plain KEY (an admin named
 * "line N", as every key could manage every voice before roles). 0, or -1 out of memory. */
static int add_key(qv_server *s, const char *line, int line_no) {
    api_key *k = realloc(s->keys, (size_t)(s->n_keys + 1) * sizeof *k);
    if (!k) return -1;
    s->keys = k;
    k = &s->keys[s->n_keys];
    const char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    int role = !c2 ? -1
               : c2 - c1 == 6 && !strncmp(c1 + 1, "admin", 5) ? 1
               : c2 - c1 == 5 && !strncmp(c1 + 1, "user", 4)  ? 0
                                                              : -1;
    char plain[32];
    snprintf(plain, sizeof plain, "line %d", line_no);
    k->name = role >= 0 && c1 > line ? strndup(line, (size_t)(c1 - line)) : strdup(plain);
    k->key = strdup(role >= 0 && c1 > line ? c2 + 1 : line);
    k->admin = role != 0;
    if (!k->name || !k->key) {
        free(k->name);
        free(k->key);
        return -1;
    }
    s->n_keys++;
    return 0;
}

/* Lines are read whole, however long (a key of 2 kB is one key, not two). */
static int read_keys(qv_server *s, const char *path, char *err, size_t es) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, es, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int no = 0, rc = 0;
    while ((got = getline(&line, &cap, f)) >= 0) {
        no++;
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        if (add_key(s, line, no)) {
            snprintf(err, es, "%s: out of memory", path);
            rc = -1;
            break;
        }
    }
    free(line);
    fclose(f);
    if (!rc && !s->n_keys) {
        snprintf(err, es, "%s: no keys (one per line: KEY or NAME:admin|user:KEY)", path);
        rc = -1;
    }
    return rc;
}

static int parse_listen(const char *listen, struct sockaddr_storage *ss, char *err, size_t es) {
    char host[256];
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof host || !colon[1]) {
        snprintf(err, es, "--listen %s: expected HOST:PORT", listen);
        return -1;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = 0;
    if (host[0] == '[' && host[strlen(host) - 1] == ']') { /* [::1]:8080 */
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE},
                    *ai;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc) {
        snprintf(err, es, "--listen %s: %s", listen, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    return 0;
}

static int load_models(qv_server *s, const qv_server_config *c, char *err, size_t es) {
    if (c->n_models < 1) {
        snprintf(err, es, "server: no model (-m MODEL_DIR)");
        return QV_E_INVALID;
    }
    if (!(s->models = calloc((size_t)c->n_models, sizeof *s->models))) return QV_E_NOMEM;
    s->n_models = c->n_models;
    for (int i = 0; i < c->n_models; i++) {
        served_model *m = &s->models[i];
        if (!(m->dir = strdup(c->model_dirs[i]))) return QV_E_NOMEM;
        size_t n = strlen(m->dir);
        while (n > 1 && m->dir[n - 1] == '/')
            m->dir[--n] = 0;
        const char *base = strrchr(m->dir, '/');
        if (!(m->name = strdup(base ? base + 1 : m->dir))) return QV_E_NOMEM;
        enum qv_status st = qv_model_load(&m->model, m->dir);
        if (st) snprintf(err, es, "%s", qv_last_error());
        if (!st && (st = qv_model_set_batching(m->model, c->batch_streams)))
            snprintf(err, es, "%s: cannot batch %d streams: %s", m->dir, c->batch_streams,
                     qv_strerror(st));
        if (st) return st;
    }
    return QV_OK;
}

/* The probe listener's budget: a few orchestrator probes at once, none of them slow. */
#define PROBE_CONNECTIONS 16

static int start_daemon(qv_server *s, struct MHD_Daemon **d, int *port, const char *listen,
                        unsigned max_connections, char *err, size_t es) {
    struct sockaddr_storage ss;
    if (parse_listen(listen, &ss, err, es)) return -1;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_ALLOW_UPGRADE |
                     MHD_USE_AUTO | MHD_USE_ITC | MHD_USE_ERROR_LOG |
                     (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    *d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)s->cfg.timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_CONNECTION_LIMIT,
        max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)s->cfg.max_connections_per_ip, MHD_OPTION_END);
    if (!*d) {
        snprintf(err, es, "--listen %s: cannot listen (address in use or not local?)", listen);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(*d, MHD_DAEMON_INFO_BIND_PORT);
    *port = di ? di->port : 0;
    return 0;
}

/* The signing key and the trusted public keys of c, each named in err when it cannot be
 * loaded. 0 or -1. */
static int load_signing(qv_server *s, const qv_server_config *c, char *err, size_t es) {
    if (c->sign_key && qvf_key_load(c->sign_key, 1, &s->sign_key, s->sign_pub, err, es)) return -1;
    if (c->n_trusted_keys > 0 &&
        !(s->trusted = calloc((size_t)c->n_trusted_keys, sizeof *s->trusted))) {
        snprintf(err, es, "server: out of memory");
        return -1;
    }
    for (int i = 0; i < c->n_trusted_keys; i++) {
        void *k = NULL;
        if (qvf_key_load(c->trusted_keys[i], 0, &k, s->trusted[i], err, es)) return -1;
        qvf_key_free(k);
    }
    return 0;
}

enum qv_status qv_server_start(qv_server **out, const qv_server_config *c, char *err, size_t es) {
    *out = NULL;
    if (!c->voices_dir || c->max_concurrency < 1 || c->max_queue < 0 || c->batch_streams < 0 ||
        c->batch_streams > QV_BATCH_MAX_STREAMS || c->max_text_chars < 1 || c->max_upload_mb < 1 ||
        c->timeout_s < 1 || c->max_seconds < 0 || c->receive_s < 1 || c->max_voices < 0 ||
        c->max_library_mb < 0 || c->ref_cache_mb < 0 || c->max_connections < 1 ||
        c->max_connections_per_ip < 1 || c->n_trusted_keys < 0) {
        snprintf(err, es, "server: invalid configuration (voices dir, limits)");
        return QV_E_INVALID;
    }
    qv_server *s = calloc(1, sizeof *s);
    if (!s) return QV_E_NOMEM;
    s->cfg = *c;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->conn_mu, NULL);
    pthread_cond_init(&s->conn_cv, NULL);
    qvs_metrics_init(&s->met);
    enum qv_status st = load_models(s, c, err, es);
    if (st) goto fail;
    st = QV_E_INVALID;
    if (!(s->voices_dir = strdup(c->voices_dir))) goto nomem;
    if (mkdir(s->voices_dir, 0755) && errno != EEXIST) {
        snprintf(err, es, "%s: %s", s->voices_dir, strerror(errno));
        goto fail;
    }
    qvs_voices_clean(s->voices_dir);
    if (c->api_key_file && read_keys(s, c->api_key_file, err, es)) goto fail;
    if (load_signing(s, c, err, es)) goto fail;
    if (qvs_library_open(s, err, es)) goto fail;
    s->n_threads = qv_threads_resolve(c->n_threads);
    if (c->clone_model_dir &&
        (st = qv_cloner_load(&s->cloner, c->clone_model_dir, s->n_threads))) {
        snprintf(err, es, "%s", qv_last_error());
        goto fail;
    }
    if (qvs_refcache_init(s, err, es)) goto fail;
    if (!(s->slots = calloc((size_t)c->max_concurrency, sizeof *s->slots))) goto nomem;
    s->n_slots = c->max_concurrency;
    for (int i = 0; i < s->n_slots;
         i++) { /* built now: allocation and int8 weights before /ready */
        s->slots[i].params = qv_model_params(s->models[0].model);
        s->slots[i].params.n_threads = s->n_threads;
        s->slots[i].params.quant = c->quant;
        if ((st = qv_synth_new(&s->slots[i].synth, s->models[0].model, &s->slots[i].params))) {
            snprintf(err, es, "%s: cannot create a synthesizer: %s", s->models[0].dir,
                     qv_last_error());
            goto fail;
        }
    }
    st = QV_E_INVALID;
    if (start_daemon(s, &s->daemon, &s->port, c->listen ? c->listen : "127.0.0.1:8080",
                     (unsigned)c->max_connections, err, es) ||
        (c->probe_listen && start_daemon(s, &s->probe, &s->probe_port, c->probe_listen,
                                         PROBE_CONNECTIONS, err, es)))
        goto fail;
    if (pthread_create(&s->watchdog, NULL, watchdog, s)) goto nomem;
    s->watching = 1;
    *out = s;
    return QV_OK;
nomem:
    st = QV_E_NOMEM;
    snprintf(err, es, "server: out of memory");
fail:
    qv_server_free(s);
    return st;
}

int qv_server_port(const qv_server *s) {
    return s->port;
}

int qv_server_probe_port(const qv_server *s) {
    return s->probe_port;
}

void qv_server_drain(qv_server *s, double timeout_s) {
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET) close(fd);
    double end = qvs_now_s() + timeout_s;
    pthread_mutex_lock(&s->mu);
    while ((s->n_inflight > 0 || s->n_ws > 0) && qvs_now_s() < end) {
        qvs_wait_tick(s);
    }
    pthread_mutex_unlock(&s->mu);
}

void qv_server_free(qv_server *s) {
    if (!s) return;
    if (s->watching) {
        pthread_mutex_lock(&s->conn_mu);
        s->watch_stop = 1;
        pthread_cond_broadcast(&s->conn_cv);
        pthread_mutex_unlock(&s->conn_mu);
        pthread_join(s->watchdog, NULL);
    }
    if (s->probe) MHD_stop_daemon(s->probe);
    if (s->daemon) {
        pthread_mutex_lock(&s->mu);
        s->draining = 2; /* requests still running give up (speech.c) */
        /* WebSocket sessions own their sockets: they see draining 2 within a poll and end
         * (the daemon must not close an upgraded socket under them) */
        while (s->n_ws > 0)
            qvs_wait_tick(s);
        pthread_mutex_unlock(&s->mu);
        MHD_stop_daemon(s->daemon); /* closing the connections cancels their syntheses */
        pthread_mutex_lock(&s->mu);
        while (s->n_workers > 0)
            pthread_cond_wait(&s->cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
    }
    for (int i = 0; i < s->n_slots; i++)
        qv_synth_free(s->slots[i].synth);
    free(s->slots);
    qvs_refcache_free(s);
    if (s->cloner) qv_cloner_free(s->cloner);
    for (int i = 0; i < s->n_models; i++) {
        qv_model_free(s->models[i].model);
        free(s->models[i].dir);
        free(s->models[i].name);
    }
    free(s->models);
    for (int i = 0; i < s->n_keys; i++) {
        free(s->keys[i].name);
        free(s->keys[i].key);
    }
    free(s->keys);
    qvf_key_free(s->sign_key);
    free(s->trusted);
    qvs_library_free(s);
    free(s->voices_dir);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->conn_cv);
    pthread_mutex_destroy(&s->conn_mu);
    pthread_mutex_destroy(&s->met.mu);
    free(s);
}
