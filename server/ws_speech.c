/* ws_speech.c — WS /v1/audio/speech/stream, vLLM-Omni's streaming-text protocol: a session
 * config (the speech request's fields without input), text in pieces (input.text), input.done
 * (speak what is left; the connection stays open for the next utterance) and session.close. Text
 * is spoken sentence by sentence as soon as each is complete (qv_text_sentences, the chunker's
 * rules, with the markup tags in force carried to the next sentence), or with vLLM-Omni's
 * split_granularity clause by clause (qv_text_clauses), or none: all of it at input.done, one
 * request (timbre and prosody run on across sentences); each piece is one speech request
 * (qvs_speech_parse + qvs_speech_run: the same fields, admission and limits as POST
 * /v1/audio/speech) whose audio leaves as binary frames, as decoded with stream_audio, else one
 * frame per piece. Two threads per session: the reader (this connection's frames, timeouts, the
 * close handshake) and the speaker (one piece after another); a client that leaves cancels the
 * piece being spoken.
 */
#include <cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "server/server_impl.h"

#define LINGER_S 1.0 /* after our close frame, how long the client's reply is awaited */
#define QUEUED_MAX 8 /* text waiting to be spoken, in buffers of the pending limit */
#define SPACES " \t\r\n\f\v" /* trimmed from a piece's ends */

/* ==== types ================================================================================== */

/* split_granularity: where buffered text is cut into requests (names: split_names) */
enum split { SPLIT_NONE, SPLIT_SENTENCE, SPLIT_CLAUSE };
static const char *const split_names[] = {"none", "sentence", "clause"};

/* A queued piece of work: a sentence (its request body and the text it speaks), the end of an
 * utterance (input.done) or of the session (session.close). */
enum item_kind { ITEM_SENTENCE, ITEM_DONE, ITEM_CLOSE };
typedef struct item {
    enum item_kind kind;
    char *body, *text;
    struct item *next;
} item;

typedef struct ws_session {
    qv_server *s;
    const api_key *key;
    int refs; /* the request's and the upgrade's (under mu): MHD may fail to upgrade */
    int fd;
    struct MHD_UpgradeResponseHandle *urh;
    qvs_ws_reader rd;
    pthread_mutex_t wmu; /* frames leave one at a time */
    pthread_mutex_t mu;  /* everything below */
    pthread_cond_t cv;
    cJSON *config; /* the session's request fields (no input), NULL: none sent yet */
    int stream_audio, format;
    enum split split;
    char *pending; /* carry + text not yet spoken */
    size_t n_pending, carry_len;
    size_t n_chars, n_spoken; /* split none: code points of pending from its first non-space
                               * character, to its end and to its last non-space one */
    item *head, *tail;
    size_t n_queued;        /* bytes of the queued sentences' text */
    struct job *cur;        /* the sentence being spoken */
    int busy;               /* the speaker holds an item */
    int closing;            /* the session ends: the speaker stops */
    int close_sent, broken; /* under wmu (send_state) */
    double last_in;         /* the last message received (idle timeout) */
    /* the speaker's own */
    int utterance, sentence;
    bytes acc;    /* a sentence's audio when not stream_audio */
    int64_t sent; /* its bytes */
} session;

/* ==== sending ================================================================================ */

static int send_frame(session *w, int op, const void *p, size_t n) {
    pthread_mutex_lock(&w->wmu);
    int rc = w->broken || (op != QVS_WS_OP_CLOSE && w->close_sent) ? -1 : 0;
    if (!rc && qvs_ws_send(w->fd, op, p, n, qvs_now_s() + w->s->cfg.receive_s)) rc = -1;
    if (rc && !w->broken && !w->close_sent) w->broken = 1;
    if (op == QVS_WS_OP_CLOSE) w->close_sent = 1;
    pthread_mutex_unlock(&w->wmu);
    return rc;
}

/* close_sent + 2 * broken, read under wmu */
static int send_state(session *w) {
    pthread_mutex_lock(&w->wmu);
    int st = w->close_sent + 2 * w->broken;
    pthread_mutex_unlock(&w->wmu);
    return st;
}

static int send_json(session *w, cJSON *o) {
    char *t = o ? cJSON_PrintUnformatted(o) : NULL;
    int rc = t ? send_frame(w, QVS_WS_OP_TEXT, t, strlen(t)) : -1;
    free(t);
    cJSON_Delete(o);
    return rc;
}

static void send_close(session *w, int code, const char *why) {
    uint8_t b[125];
    size_t n = strlen(why) > 120 ? 120 : strlen(why);
    b[0] = (uint8_t)(code >> 8), b[1] = (uint8_t)code;
    memcpy(b + 2, why, n);
    send_frame(w, QVS_WS_OP_CLOSE, b, n + 2);
}

/* An error event: {"type":"error","message","code","param","status"}, with the sentence it
 * concerns (sentence >= 0). Not fatal: the session goes on. */
static void send_error(session *w, const verdict *v, int sentence) {
    cJSON *o = cJSON_CreateObject();
    char msg[sizeof v->msg];
    snprintf(msg, sizeof msg, "%s", v->msg);
    qvs_scrub(w->s, msg, sizeof msg);
    cJSON_AddStringToObject(o, "type", "error");
    cJSON_AddStringToObject(o, "message", msg);
    cJSON_AddStringToObject(o, "code", v->code ? v->code : "error");
    if (v->param) cJSON_AddStringToObject(o, "param", v->param);
    cJSON_AddNumberToObject(o, "status", v->status);
    if (sentence >= 0) {
        cJSON_AddNumberToObject(o, "utterance_index", w->utterance);
        cJSON_AddNumberToObject(o, "sentence_index", sentence);
    }
    send_json(w, o);
}

/* ==== the speaker ============================================================================ */

/* qv_write_fn of a sentence's encoder. */
static int audio_sink(void *user, const void *p, size_t n) {
    session *w = user;
    w->sent += (int64_t)n;
    if (w->stream_audio) return send_frame(w, QVS_WS_OP_BINARY, p, n);
    return qvs_bytes_add(&w->acc, p, n);
}

static int on_pcm(void *user, const float *x, int n) { /* user: the sentence's encoder */
    return qv_encoder_write(user, x, n) != QV_OK;
}

/* qvs_slot_take's -1 (queue full) and -2 (no slot in time) as the statuses a POST gets. */
static void no_slot(verdict *v, const qv_server *s) {
    if (v->status == -1)
        qvs_bad(v, 429, "busy", NULL, "all %d slots busy and %d requests queued; retry later",
                s->n_slots, s->cfg.max_queue);
    else if (v->status == -2)
        qvs_bad(v, 504, "timeout", NULL, "no synthesis slot within the timeout");
}

static cJSON *sentence_event(const session *w, const char *type, int sentence) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "utterance_index", w->utterance);
    cJSON_AddNumberToObject(o, "sentence_index", sentence);
    return o;
}

static void speak(session *w, const item *it) {
    qv_server *s = w->s;
    verdict v;
    qv_params p;
    int model, index = w->sentence++;
    double deadline = qvs_now_s() + s->cfg.timeout_s;
    struct job *j =
        qvs_speech_parse(s, NULL, w->key, it->body, strlen(it->body), deadline, &model, &p, &v);
    if (!j) {
        no_slot(&v, s);
        send_error(w, &v, index);
        return;
    }
    cJSON *o = sentence_event(w, "audio.start", index);
    cJSON_AddStringToObject(o, "sentence_text", it->text);
    cJSON_AddStringToObject(o, "format", qv_format_name(w->format));
    cJSON_AddNumberToObject(o, "sample_rate", QV_SAMPLE_RATE_HZ);
    send_json(w, o);
    qv_encoder *enc = NULL;
    w->acc.len = 0;
    w->sent = 0;
    qv_synth_stats st = {.struct_size = sizeof st};
    int rc = -1;
    pthread_mutex_lock(&w->mu);
    int go = !w->closing;
    if (go) w->cur = j;
    pthread_mutex_unlock(&w->mu);
    if (!go) goto out;
    if (qv_encoder_new(&enc, w->format, qvs_job_provenance(j), audio_sink, w, NULL)) {
        qvs_bad(&v, 503, "out_of_memory", NULL, "%s", qv_last_error());
    } else {
        rc = qvs_speech_run(s, j, model, &p, on_pcm, enc, &st, &v);
        if (qv_encoder_close(enc) && !rc)
            rc = qvs_bad(&v, 500, "encoding_failed", NULL, "%s", qv_last_error());
    }
    pthread_mutex_lock(&w->mu);
    w->cur = NULL;
    go = !w->closing;
    pthread_mutex_unlock(&w->mu);
    if (!go) goto out;
    if (!w->stream_audio && w->acc.len) send_frame(w, QVS_WS_OP_BINARY, w->acc.p, w->acc.len);
    if (rc) {
        no_slot(&v, s);
        send_error(w, &v, index);
    }
    if (st.warning[0]) { /* a markup tag the model cannot honour, ... */
        o = sentence_event(w, "warning", index);
        cJSON_AddStringToObject(o, "message", st.warning);
        send_json(w, o);
    }
    o = sentence_event(w, "audio.done", index);
    cJSON_AddNumberToObject(o, "total_bytes", (double)w->sent);
    cJSON_AddBoolToObject(o, "error", rc != 0);
    send_json(w, o);
out:
    qvs_speech_job_free(j);
}

static void item_free(item *it) {
    if (!it) return;
    free(it->body);
    free(it->text);
    free(it);
}

static void *speaker(void *arg) {
    session *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->closing && !w->head)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->closing) break;
        item *it = w->head;
        w->head = it->next;
        if (!w->head) w->tail = NULL;
        w->n_queued -= it->text ? strlen(it->text) : 0;
        w->busy = 1;
        pthread_mutex_unlock(&w->mu);
        if (it->kind == ITEM_SENTENCE) {
            speak(w, it);
        } else if (it->kind == ITEM_DONE) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "type", "session.done");
            cJSON_AddNumberToObject(o, "utterance_index", w->utterance++);
            cJSON_AddNumberToObject(o, "total_sentences", w->sentence);
            w->sentence = 0;
            send_json(w, o);
        } else {
            send_close(w, 1000, "session.close");
        }
        item_free(it);
        pthread_mutex_lock(&w->mu);
        w->busy = 0;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* ==== the reader: client messages ============================================================ */

/* Appends a piece of work (mu held); body NULL for DONE and CLOSE. */
static int enqueue(session *w, enum item_kind kind, const char *text, size_t n) {
    item *it = calloc(1, sizeof *it);
    if (!it) return -1;
    it->kind = kind;
    if (kind == ITEM_SENTENCE) {
        while (n && strchr(SPACES, text[n - 1]))
            n--;
        while (n && strchr(SPACES, *text))
            text++, n--;
        cJSON *o = w->config ? cJSON_Duplicate(w->config, 1) : cJSON_CreateObject();
        it->text = strndup(text, n);
        if (o && it->text) cJSON_AddStringToObject(o, "input", it->text);
        it->body = o ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (!it->body || !it->text) {
            item_free(it);
            return -1;
        }
        w->n_queued += n;
    }
    if (w->tail)
        w->tail->next = it;
    else
        w->head = it;
    w->tail = it;
    pthread_cond_signal(&w->cv);
    return 0;
}

static int refuse(session *w, const char *code, const char *param, const char *msg) {
    verdict v;
    qvs_bad(&v, 400, code, param, "%s", msg);
    send_error(w, &v, -1);
    return 0;
}

/* Is pending[from, n) all white space? */
static int blank(const char *p, size_t from, size_t n) {
    for (size_t i = from; i < n; i++)
        if (!strchr(SPACES, p[i])) return 0;
    return 1;
}

/* Queues the whole sentences (or clauses) of the pending text; the rest waits, after the tags in
 * force. With split none everything waits for input.done. */
static int take_sentences(session *w) {
    size_t cut;
    char carry[QV_TEXT_CARRY_BYTES];
    if (w->split == SPLIT_NONE) return 0;
    if ((w->split == SPLIT_CLAUSE ? qv_text_clauses : qv_text_sentences)(w->pending, &cut, carry,
                                                                         sizeof carry)) {
        char m[512];
        snprintf(m, sizeof m, "input.text: %s (the buffered text is dropped)", qv_last_error());
        w->n_pending = w->carry_len = 0;
        w->pending[0] = 0;
        return refuse(w, "invalid_value", "text", m);
    }
    if (!cut) return 0;
    if (!blank(w->pending, w->carry_len, cut) && enqueue(w, ITEM_SENTENCE, w->pending, cut))
        return -1;
    size_t cl = strlen(carry), rest = w->n_pending - cut;
    char *np = malloc(cl + rest + 1);
    if (!np) return -1;
    memcpy(np, carry, cl);
    memcpy(np + cl, w->pending + cut, rest + 1);
    free(w->pending);
    w->pending = np;
    w->n_pending = cl + rest;
    w->carry_len = cl;
    return 0;
}

/* input.done: what is left is one more sentence; then the utterance ends. */
static int flush_pending(session *w) {
    if (w->n_pending && !blank(w->pending, w->carry_len, w->n_pending) &&
        enqueue(w, ITEM_SENTENCE, w->pending, w->n_pending))
        return -1;
    w->n_pending = w->carry_len = w->n_chars = w->n_spoken = 0;
    if (w->pending) w->pending[0] = 0;
    return enqueue(w, ITEM_DONE, NULL, 0);
}

/* session.config: the speech request's fields without input, checked as a request would be
 * (a per-request reference is cloned here, once, into the cache the sentences then hit). */
static int configure(session *w, cJSON *o) {
    pthread_mutex_lock(&w->mu);
    int busy = w->n_pending > w->carry_len || w->head || w->busy;
    pthread_mutex_unlock(&w->mu);
    if (busy)
        return refuse(w, "invalid_state", NULL,
                      "session.config: text is still buffered or being spoken (send it after "
                      "session.done)");
    static const char *const refused[][2] = {
        {"input", "input: the text comes in input.text messages"},
        {"stream_format", "stream_format: the WebSocket streams binary frames (stream_audio)"},
        {"stream", "stream: the WebSocket streams binary frames (stream_audio)"}};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (cJSON_GetObjectItemCaseSensitive(o, refused[i][0]))
            return refuse(w, "invalid_value", refused[i][0], refused[i][1]);
    cJSON *sa = cJSON_GetObjectItemCaseSensitive(o, "stream_audio");
    if (sa && !cJSON_IsBool(sa) && !cJSON_IsNull(sa))
        return refuse(w, "invalid_type", "stream_audio", "stream_audio: expected true or false");
    /* vLLM-Omni's split_granularity; absent, sentence (vLLM-Omni's default is none): text that
     * is still being written is spoken as each sentence completes */
    cJSON *sg = cJSON_GetObjectItemCaseSensitive(o, "split_granularity");
    enum split split = SPLIT_SENTENCE;
    if (sg && !cJSON_IsNull(sg)) {
        const int n = sizeof split_names / sizeof *split_names;
        int i = 0;
        while (cJSON_IsString(sg) && i < n && strcmp(sg->valuestring, split_names[i]))
            i++;
        if (!cJSON_IsString(sg) || i == n)
            return refuse(w, "invalid_value", "split_granularity",
                          "split_granularity: expected none, sentence or clause");
        split = (enum split)i;
    }
    cJSON *rf = cJSON_GetObjectItemCaseSensitive(o, "response_format");
    int format = QV_FORMAT_WAV;
    if (cJSON_IsString(rf) && !qv_format_progressive(format = qv_format_parse(rf->valuestring)))
        return refuse(w, "unsupported_format", "response_format",
                      "response_format: the WebSocket sends wav, pcm or aac");
    cJSON *c = cJSON_Duplicate(o, 1);
    if (!c) return -1;
    cJSON_DeleteItemFromObjectCaseSensitive(c, "type");
    cJSON_DeleteItemFromObjectCaseSensitive(c, "stream_audio");
    cJSON_DeleteItemFromObjectCaseSensitive(c, "split_granularity");
    cJSON_AddStringToObject(c, "input", "."); /* checked as a request */
    char *body = cJSON_PrintUnformatted(c);
    cJSON_DeleteItemFromObjectCaseSensitive(c, "input");
    verdict v;
    qv_params p;
    int model;
    struct job *j = body ? qvs_speech_parse(w->s, NULL, w->key, body, strlen(body),
                                            qvs_now_s() + w->s->cfg.timeout_s, &model, &p, &v)
                         : NULL;
    free(body);
    if (!j) {
        cJSON_Delete(c);
        no_slot(&v, w->s);
        send_error(w, &v, -1);
        return 0;
    }
    qvs_speech_job_free(j);
    pthread_mutex_lock(&w->mu);
    cJSON_Delete(w->config);
    w->config = c;
    w->stream_audio = cJSON_IsTrue(sa);
    w->format = format;
    w->split = split;
    w->n_pending = w->carry_len = w->n_chars = w->n_spoken = 0;
    if (w->pending) w->pending[0] = 0;
    pthread_mutex_unlock(&w->mu);
    return 0;
}

/* Counts p's code points into *n_chars and *n_spoken (session: split none), as the request's
 * input will be: without the white space enqueue trims at either end. */
static void count_chars(const char *p, size_t *n_chars, size_t *n_spoken) {
    for (; *p; p++) {
        if (((unsigned char)*p & 0xC0) == 0x80) continue;
        int space = strchr(SPACES, *p) != NULL;
        if (space && !*n_chars) continue;
        ++*n_chars;
        if (!space) *n_spoken = *n_chars;
    }
}

/* input.text: appended, its whole sentences queued. */
static int add_text(session *w, cJSON *o) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "text");
    if (!cJSON_IsString(t)) return refuse(w, "invalid_type", "text", "text: expected a string");
    size_t n = strlen(t->valuestring);
    /* a sentence may not grow past the request limit (UTF-8: up to 4 bytes a character) */
    const int max = w->s->cfg.max_text_chars;
    size_t limit = 4 * (size_t)max + QV_TEXT_CARRY_BYTES;
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    size_t n_chars = w->n_chars, n_spoken = w->n_spoken;
    if (w->split == SPLIT_NONE) count_chars(t->valuestring, &n_chars, &n_spoken);
    if (n_spoken > (size_t)max) { /* split none: the utterance is one request */
        pthread_mutex_unlock(&w->mu);
        char m[256];
        snprintf(m, sizeof m,
                 "input.text: the buffered text, %zu characters, exceeds the limit of %d of its "
                 "one request (split_granularity none; the piece is dropped)",
                 n_spoken, max);
        return refuse(w, "input_too_long", "text", m);
    }
    if (w->n_pending + n > limit || w->n_queued > QUEUED_MAX * limit) {
        int queued = w->n_queued > QUEUED_MAX * limit;
        pthread_mutex_unlock(&w->mu);
        return refuse(w, "input_too_long", "text",
                      queued ? "input.text: too much text waits to be spoken (the piece is "
                               "dropped; send more after audio.done events)"
                             : "input.text: the buffered text exceeds the limit without a "
                               "sentence end (the piece is dropped)");
    }
    char *np = realloc(w->pending, w->n_pending + n + 1);
    if (!np) {
        rc = -1;
    } else {
        w->pending = np;
        memcpy(np + w->n_pending, t->valuestring, n + 1);
        w->n_pending += n;
        w->n_chars = n_chars;
        w->n_spoken = n_spoken;
        rc = take_sentences(w);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* One text message; -1 out of memory. */
static int on_message(session *w, const uint8_t *p, size_t n) {
    cJSON *o = cJSON_ParseWithLength((const char *)p, n);
    cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    int rc = 0;
    if (!cJSON_IsObject(o) || !cJSON_IsString(t)) {
        rc = refuse(w, "invalid_json", "type", "message: not a JSON object with a type");
    } else if (!strcmp(t->valuestring, "session.config")) {
        rc = configure(w, o);
    } else if (!strcmp(t->valuestring, "input.text")) {
        rc = add_text(w, o);
    } else if (!strcmp(t->valuestring, "input.done") || !strcmp(t->valuestring, "session.close")) {
        /* session.close speaks what input.text left too, then closes */
        int close = t->valuestring[0] == 's';
        pthread_mutex_lock(&w->mu);
        if (!close || !blank(w->pending, w->carry_len, w->n_pending)) rc = flush_pending(w);
        if (!rc && close) rc = enqueue(w, ITEM_CLOSE, NULL, 0);
        pthread_mutex_unlock(&w->mu);
    } else {
        char m[200];
        snprintf(m, sizeof m,
                 "type %.64s: expected session.config, input.text, input.done or session.close",
                 t->valuestring);
        rc = refuse(w, "invalid_value", "type", m);
    }
    cJSON_Delete(o);
    return rc;
}

/* Handles every whole frame received: 1 the session ends, 0 go on. */
static int on_frames(session *w) {
    qvs_ws_event e;
    while (qvs_ws_next(&w->rd, &e) != QVS_WS_MORE) {
        switch (e.kind) {
        case QVS_WS_TEXT:
            w->last_in = qvs_now_s();
            if (on_message(w, e.p, e.n)) {
                send_close(w, 1011, "out of memory");
                return 1;
            }
            break;
        case QVS_WS_BINARY:
            refuse(w, "invalid_type", NULL, "binary message: send JSON text messages");
            break;
        case QVS_WS_PING:
            send_frame(w, QVS_WS_OP_PONG, e.p, e.n);
            break;
        case QVS_WS_PONG:
        case QVS_WS_MORE:
            break;
        case QVS_WS_CLOSE: /* echo its code; what is still being spoken is cancelled */
            if (!(send_state(w) & 1)) {
                uint8_t b[2] = {(uint8_t)(e.close_code >> 8), (uint8_t)e.close_code};
                send_frame(w, QVS_WS_OP_CLOSE, b, e.close_code == 1005 ? 0 : 2);
            }
            return 1;
        case QVS_WS_ERROR:
            send_close(w, e.close_code, e.why);
            return 1;
        }
    }
    return 0;
}

/* ==== the session ============================================================================ */

/* Drops n references; the last frees the session. */
static void session_unref(session *w, int n) {
    pthread_mutex_lock(&w->mu);
    int last = (w->refs -= n) == 0;
    pthread_mutex_unlock(&w->mu);
    if (!last) return;
    while (w->head) {
        item *it = w->head;
        w->head = it->next;
        item_free(it);
    }
    qvs_ws_reader_free(&w->rd);
    cJSON_Delete(w->config);
    free(w->pending);
    free(w->acc.p);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->wmu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

void qvs_ws_speech_release(session *w, int upgraded) {
    session_unref(w, upgraded ? 1 : 2); /* not upgraded: on_upgrade never runs */
}

/* Closes the socket (MHD closes it once told) and drops the upgrade's reference. */
static void session_end(session *w) {
    qv_server *s = w->s;
    MHD_upgrade_action(w->urh, MHD_UPGRADE_ACTION_CLOSE);
    session_unref(w, 1);
    pthread_mutex_lock(&s->mu);
    s->n_ws--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void *session_main(void *arg) {
    session *w = arg;
    qv_server *s = w->s;
    pthread_t sp;
    int speaking = !pthread_create(&sp, NULL, speaker, w);
    double t0 = qvs_now_s(), linger = 0;
    w->last_in = t0;
    int done = !speaking || on_frames(w); /* bytes that came with the upgrade */
    if (!speaking) send_close(w, 1011, "cannot start the session");
    while (!done) {
        pthread_mutex_lock(&s->mu);
        int draining = s->draining;
        pthread_mutex_unlock(&s->mu);
        double now = qvs_now_s();
        pthread_mutex_lock(&w->mu);
        int quiet = !w->head && !w->busy;
        int idle = quiet && now - w->last_in > s->cfg.receive_s;
        /* a draining server lets a session finish what it was given, then closes it */
        int stopping = draining == 2 || (draining && quiet && w->n_pending <= w->carry_len);
        pthread_mutex_unlock(&w->mu);
        int st = send_state(w), close_sent = st & 1;
        if (st & 2) break;
        if (close_sent && !linger) linger = now + LINGER_S;
        if (linger && now > linger) break;
        if (!close_sent && (stopping || idle || now - t0 > s->cfg.timeout_s)) {
            send_close(w, stopping ? 1001 : 1008,
                       stopping ? "server shutting down"
                       : idle   ? "idle: no message within the receive timeout"
                                : "session over the server's timeout");
            continue;
        }
        struct pollfd pf = {.fd = w->fd, .events = POLLIN};
        int r = poll(&pf, 1, 200);
        if (r < 0 && errno != EINTR) break;
        if (r <= 0) continue;
        uint8_t buf[16384];
        ssize_t k = recv(w->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            break; /* gone without a close frame */
        if (k > 0 && qvs_ws_reader_add(&w->rd, buf, (size_t)k)) {
            send_close(w, 1011, "out of memory");
            break;
        }
        if (k > 0) done = on_frames(w);
    }
    /* after our close frame the client may still be sending: read it away until its close or
     * LINGER_S, so that closing the socket with unread bytes does not reset the connection
     * before our close frame is read */
    for (double end = qvs_now_s() + LINGER_S; send_state(w) == 1 && qvs_now_s() < end;) {
        struct pollfd pf = {.fd = w->fd, .events = POLLIN};
        uint8_t buf[16384];
        ssize_t k = poll(&pf, 1, 100) > 0 ? recv(w->fd, buf, sizeof buf, MSG_DONTWAIT) : 1;
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
    pthread_mutex_lock(&w->mu);
    w->closing = 1;
    if (w->cur) qvs_job_cancel(w->cur); /* counted in the metrics' cancelled */
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (speaking) pthread_join(sp, NULL);
    session_end(w);
    return NULL;
}

/* MHD's upgrade callback: the socket is ours from here. */
static void on_upgrade(void *cls, struct MHD_Connection *c, void *con_cls, const char *extra,
                       size_t n_extra, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh) {
    (void)c, (void)con_cls;
    session *w = cls;
    qv_server *s = w->s;
    w->fd = sock;
    w->urh = urh;
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&s->mu);
    s->n_ws++;
    pthread_mutex_unlock(&s->mu);
    if ((n_extra && qvs_ws_reader_add(&w->rd, extra, n_extra)) ||
        pthread_create(&th, &at, session_main, w))
        session_end(w);
    pthread_attr_destroy(&at);
}

/* A comma-separated header value holding token (case-insensitive). */
static int has_token(const char *h, const char *token) {
    size_t n = strlen(token);
    for (const char *p = h; p && *p;) {
        while (*p == ' ' || *p == ',' || *p == '\t')
            p++;
        if (!strncasecmp(p, token, n) && (!p[n] || p[n] == ',' || p[n] == ' ')) return 1;
        p = strchr(p, ',');
    }
    return 0;
}

enum MHD_Result qvs_ws_speech_upgrade(qv_server *s, struct MHD_Connection *c, req *q,
                                      size_t max_message) {
    const char *up = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_UPGRADE),
               *co = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONNECTION),
               *ver = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Version"),
               *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Key");
    char accept[QVS_WS_ACCEPT_SIZE];
    if (!up || strcasecmp(up, "websocket") || !co || !has_token(co, "upgrade"))
        return qvs_reply_error(c, q, 426, "invalid_request_error", "upgrade_required", NULL,
                               "GET /v1/audio/speech/stream: a WebSocket (Upgrade: websocket, "
                               "Connection: Upgrade)");
    if (!ver || strcmp(ver, "13")) {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Sec-WebSocket-Version", "13");
        enum MHD_Result ret = MHD_queue_response(c, 426, r);
        MHD_destroy_response(r);
        q->status = 426;
        return ret;
    }
    if (qvs_ws_accept(key, accept))
        return qvs_reply_error(c, q, 400, "invalid_request_error", "invalid_value", NULL,
                               "Sec-WebSocket-Key: expected the base64 of 16 bytes");
    session *w = calloc(1, sizeof *w);
    if (!w) return MHD_NO;
    w->refs = 2;
    w->s = s;
    w->key = q->key;
    w->fd = -1;
    w->format = QV_FORMAT_WAV;
    w->split = SPLIT_SENTENCE; /* when session.config does not say */
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->wmu, NULL);
    pthread_cond_init(&w->cv, NULL);
    qvs_ws_reader_init(&w->rd, max_message);
    struct MHD_Response *r = MHD_create_response_for_upgrade(on_upgrade, w);
    if (!r) {
        session_unref(w, 2);
        return MHD_NO;
    }
    q->ws = w; /* released when the request completes */
    MHD_add_response_header(r, MHD_HTTP_HEADER_UPGRADE, "websocket");
    MHD_add_response_header(r, "Sec-WebSocket-Accept", accept);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_SWITCHING_PROTOCOLS, r);
    MHD_destroy_response(r);
    q->status = MHD_HTTP_SWITCHING_PROTOCOLS;
    return ret;
}
