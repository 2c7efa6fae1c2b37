/* reply.c — what every route handler of server/ shares: OpenAI-style JSON replies and errors,
 * the log line, the clock, the peer check and the model lookup. The router (server.c) calls the
 * handlers (speech.c, voices.c); they call only this file, so no two files of server/ call each
 * other in a circle.
 */
#include <cJSON.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/server_impl.h"

void qvs_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += (long)ms * 1000000;
    t.tv_sec += t.tv_nsec / 1000000000;
    t.tv_nsec %= 1000000000;
    pthread_cond_timedwait(cv, mu, &t);
}

/* Waits on s->cv (s->mu held) for a signal or 100 ms, whichever comes first. */
void qvs_wait_tick(qv_server *s) {
    qvs_timed_wait(&s->cv, &s->mu, 100);
}

double qvs_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

const char *qvs_without_path(const char *err, const char *path) {
    size_t n = strlen(path);
    return !strncmp(err, path, n) && !strncmp(err + n, ": ", 2) ? err + n + 2 : err;
}

/* Control bytes are written \xNN: a URL's %0A must not start a forged log line. */
void qvs_srv_log(const qv_server *s, const char *fmt, ...) {
    if (!s->cfg.log) return;
    char line[1024], out[4 * sizeof line];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)line; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            n += (size_t)snprintf(out + n, sizeof out - n, "\\x%02x", *p);
        else
            out[n++] = (char)*p;
    out[n] = 0;
    s->cfg.log(s->cfg.log_user, out);
}

int qvs_peer_gone(struct MHD_Connection *c) {
    if (!c) return 0; /* no connection (tests/fuzz/fuzz_speech_json.c): no one to lose */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

int qvs_find_model(const qv_server *s, const char *name) {
    if (!name) return 0;
    for (int i = 0; i < s->n_models; i++)
        if (!strcmp(name, s->models[i].name) || !strcmp(name, s->models[i].dir)) return i;
    /* OpenAI's model names select the default model, so stock clients work unchanged. */
    static const char *const aliases[] = {"tts-1", "tts-1-hd", "gpt-4o-mini-tts"};
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        if (!strcmp(name, aliases[i])) return 0;
    return -1;
}

/* ==== replies ================================================================================ */

enum MHD_Result qvs_reply_json(struct MHD_Connection *c, req *q, int status, char *body) {
    if (!body) {
        static char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                            "\"param\":null,\"code\":null}}";
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        body = strdup(oom);
        if (!body) return MHD_NO;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (status == MHD_HTTP_TOO_MANY_REQUESTS || status == MHD_HTTP_SERVICE_UNAVAILABLE)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    q->status = status;
    return ret;
}

/* Replaces in msg each mention of dir, with the rest of that path, by label. */
static void scrub_dir(char *msg, size_t size, const char *dir, const char *label) {
    size_t dn = dir ? strlen(dir) : 0;
    char *p;
    while (dn && (p = strstr(msg, dir))) {
        size_t end = dn + strcspn(p + dn, " :,;\"'()");
        size_t ln = strlen(label), tail = strlen(p + end);
        if ((size_t)(p - msg) + ln + tail + 1 > size) break;
        memmove(p + ln, p + end, tail + 1);
        memcpy(p, label, ln);
    }
}

void qvs_scrub(const qv_server *s, char *msg, size_t size) {
    scrub_dir(msg, size, s->voices_dir, "(voice library)");
    for (int i = 0; i < s->n_models; i++)
        scrub_dir(msg, size, s->models[i].dir, s->models[i].name);
    scrub_dir(msg, size, s->cfg.clone_model_dir, "(clone model)");
}

/* {"error":{"message","type","param","code"}}, malloc'd (NULL: out of memory); no server path
 * in the message (qvs_scrub). */
static char *error_body(req *q, const char *type, const char *code, const char *param, int omni,
                        const char *fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    qvs_scrub(q->srv, msg, sizeof msg);
    snprintf(q->note, sizeof q->note, "%.63s", code ? code : type);
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    if (omni) { /* beside OpenAI's object: vLLM-Omni's failed voice route, and FastAPI's detail */
        cJSON_AddFalseToObject(o, "success");
        cJSON_AddStringToObject(o, "detail", msg);
    }
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    if (code)
        cJSON_AddStringToObject(e, "code", code);
    else
        cJSON_AddNullToObject(e, "code");
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return body;
}

enum MHD_Result qvs_reply_error(struct MHD_Connection *c, req *q, int status, const char *type,
                                const char *code, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *body = error_body(q, type, code, param, 0, fmt, ap);
    va_end(ap);
    return qvs_reply_json(c, q, status, body);
}

enum MHD_Result qvs_reply_error_omni(struct MHD_Connection *c, req *q, int status,
                                     const char *type, const char *code, const char *param,
                                     const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *body = error_body(q, type, code, param, 1, fmt, ap);
    va_end(ap);
    return qvs_reply_json(c, q, status, body);
}

/* libmicrohttpd (0.9.75) refuses to queue a reply while a body arrives: reading the rest only to
 * answer at its end would let a client stream for as long as it likes. The reply is written to
 * the socket here, as nginx does with an early 413, and MHD_NO closes the connection. */
enum MHD_Result qvs_reply_cut(struct MHD_Connection *c, req *q, int status, const char *type,
                              const char *code, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *body = error_body(q, type, code, param, 0, fmt, ap);
    va_end(ap);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    q->status = status;
    if (body && ci) {
        char head[256];
        int n = snprintf(head, sizeof head,
                         "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                         status, MHD_get_reason_phrase_for((unsigned)status), strlen(body));
        /* best effort: the socket is blocking, the reply small; the client may be gone */
        if (send(ci->connect_fd, head, (size_t)n, MSG_NOSIGNAL) == n)
            (void)!send(ci->connect_fd, body, strlen(body), MSG_NOSIGNAL);
    }
    free(body);
    return MHD_NO;
}

int qvs_bad(verdict *v, int status, const char *code, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof v->msg, fmt, ap);
    va_end(ap);
    v->status = status;
    v->code = code;
    v->param = NULL;
    if (param) snprintf(v->field, sizeof v->field, "%s", param), v->param = v->field;
    return -1;
}
