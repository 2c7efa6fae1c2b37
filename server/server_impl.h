/* server_impl.h — what the files of server/ share: the server and per-request state, replies,
 * metrics, the speech and voice routes, audio encoding.
 */
#ifndef QV_SERVER_IMPL_H
#define QV_SERVER_IMPL_H

#include <cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "include/qvoice.h"
#include "server/qvserver.h"

/* ==== routes and metrics ===================================================================== */

#define ROUTE_LIST(X)                                                                              \
    X(ROUTE_SPEECH, "speech")                                                                      \
    X(ROUTE_SPEECH_STREAM, "speech_stream")                                                        \
    X(ROUTE_SPEECH_BATCH, "speech_batch")                                                          \
    X(ROUTE_VOICES_LIST, "voices_list")                                                            \
    X(ROUTE_VOICES_UPLOAD, "voices_upload")                                                        \
    X(ROUTE_VOICE_GET, "voice_get")                                                                \
    X(ROUTE_VOICE_DELETE, "voice_delete")                                                          \
    X(ROUTE_VOICE_REFERENCE, "voice_reference")                                                    \
    X(ROUTE_VOICE_FIT, "voice_fit")                                                                \
    X(ROUTE_VOICE_SIMILARITY, "voice_similarity")                                                  \
    X(ROUTE_HEALTH, "health")                                                                      \
    X(ROUTE_READY, "ready")                                                                        \
    X(ROUTE_METRICS, "metrics")                                                                    \
    X(ROUTE_MODELS, "models")                                                                      \
    X(ROUTE_STUDIO, "studio")                                                                      \
    X(ROUTE_DETECT, "detect")                                                                      \
    X(ROUTE_OTHER, "other")
#define ROUTE_ENUM_(name, text) name,
enum route { ROUTE_LIST(ROUTE_ENUM_) ROUTE_COUNT };
#undef ROUTE_ENUM_

#define N_STATUS_SLOTS 24 /* distinct HTTP status codes tracked per route */
#define N_BUCKETS 12

typedef struct {
    double le[N_BUCKETS]; /* upper bounds; +Inf implied */
    uint64_t count[N_BUCKETS + 1];
    uint64_t n;
    double sum;
} histogram;

typedef struct {
    pthread_mutex_t mu;
    int status[ROUTE_COUNT][N_STATUS_SLOTS];
    uint64_t requests[ROUTE_COUNT][N_STATUS_SLOTS];
    uint64_t stream_errors; /* streamed responses cut after their 200 (guard, failure, limit) */
    uint64_t guard_failures;
    uint64_t slow_cut; /* connections whose request did not arrive within receive_s */
    uint64_t cancelled; /* syntheses stopped by a disconnect or the wall-time limit */
    double audio_seconds;
    histogram rtf, ttfa_s;
} metrics;

void qvs_metrics_init(metrics *m);
void qvs_metrics_request(metrics *m, enum route r, int status);
void qvs_metrics_synth(metrics *m, const qv_synth_stats *st);
/* The reference cache's counters (refcache.c). */
typedef struct {
    uint64_t hits, misses, evictions;
    size_t n_bytes;
    int n_entries;
} ref_stats;
/* Prometheus text exposition; malloc'd. batch_*: qv_model_batch_stats summed over the models. */
char *qvs_metrics_render(metrics *m, int active, int queued, int64_t batch_steps,
                         int64_t batch_frames, const ref_stats *refs);

/* ==== server ================================================================================= */

typedef struct {
    qv_synth *synth; /* NULL until first used or after a failed rebuild */
    int model;       /* index into models */
    qv_params params;
    int busy;
} slot;

typedef struct {
    char *dir, *name; /* name: basename of dir, what requests put in "model" */
    qv_model *model;
} served_model;

/* An open connection on listen, watched until its request has arrived (server.c). */
enum conn_state {
    CONN_DONE,    /* the request has arrived (or been answered) */
    CONN_REQUEST, /* a request is arriving: cut with a 408 at the deadline */
    CONN_IDLE     /* keep-alive, between requests: closed without a reply at the deadline */
};
typedef struct conn {
    int fd;
    double deadline; /* of the request being received */
    enum conn_state state;
    struct conn *prev, *next;
} conn;

/* A bearer key from --api-key-file: "name:role:key" (role admin or user), or a plain line (an
 * admin key named by its line number). */
typedef struct {
    char *name, *key;
    int admin;
} api_key;

struct library; /* library.c */

struct qv_server {
    qv_server_config cfg;
    struct MHD_Daemon *daemon, *probe; /* probe: /health /ready /metrics only */
    int port, probe_port;
    pthread_mutex_t conn_mu; /* conns, watch_stop */
    pthread_cond_t conn_cv;
    conn *conns;
    int watch_stop, watching;
    pthread_t watchdog;
    served_model *models;
    int n_models;
    qv_cloner *cloner;
    char *voices_dir;
    api_key *keys; /* accepted bearer keys */
    int n_keys;
    void *sign_key;          /* cfg.sign_key loaded (qvf_key_load), or NULL */
    uint8_t sign_pub[32];    /* its raw public key: the voices this server signed are trusted */
    uint8_t (*trusted)[32];  /* cfg.trusted_keys' raw public keys */
    struct library *lib;
    struct refcache *refs; /* refcache.c */
    int n_threads;

    pthread_mutex_t mu; /* everything below */
    pthread_cond_t cv;  /* slot freed, request finished */
    slot *slots;
    int n_slots, n_queued, n_inflight, n_workers, draining;
    int n_ws; /* WebSocket sessions running (ws_speech.c); qv_server_free waits for them */
    metrics met;
};

/* Per-request state (MHD's con_cls). */
typedef struct {
    qv_server *srv;
    enum route route;
    int status;
    char method[8];
    char *url;
    double t0;
    char *body; /* JSON body */
    size_t body_len, body_cap;
    struct MHD_PostProcessor *pp; /* multipart upload */
    struct upload *up;
    struct job *job; /* speech synthesis in progress */
    struct ws_session *ws; /* an upgrade to WS /v1/audio/speech/stream (ws_speech.c) */
    const api_key *key;  /* the request's key; NULL without auth */
    char id[256];        /* the voice id or name of a /v1/audio/voices/ID[/...] route */
    char note[64];   /* added to the log line */
} req;

/* ==== shared by the handlers (reply.c) ======================================================= */

/* A refused request: the HTTP status and OpenAI error code, the field it names (or NULL: param
 * points into field, a copy, so a name from a parsed body outlives the body). */
typedef struct {
    int status; /* 0 = valid */
    const char *code, *param;
    char msg[512], field[64];
} verdict;
/* Fills v; returns -1. */
int qvs_bad(verdict *v, int status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* err without its leading "PATH: " (the client knows the file by its own name, or as the
 * request body). */
const char *qvs_without_path(const char *err, const char *path);
/* Log one formatted line through cfg.log. */
void qvs_srv_log(const qv_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double qvs_now_s(void);
/* pthread_cond_timedwait for a signal or ms milliseconds (mu held). */
void qvs_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int ms);
/* Waits on s->cv (s->mu held) for a signal or 100 ms. */
void qvs_wait_tick(qv_server *s);
/* Queues a JSON reply (takes ownership of the malloc'd body) / an OpenAI-style error. */
enum MHD_Result qvs_reply_json(struct MHD_Connection *c, req *q, int status, char *body);
enum MHD_Result qvs_reply_error(struct MHD_Connection *c, req *q, int status, const char *type,
                                const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* msg without server paths: the voices directory (and the temporaries in it), the model
 * directories become what a client knows them as. Every error reply goes through it. */
void qvs_scrub(const qv_server *s, char *msg, size_t size);
/* The same error with vLLM-Omni's top-level fields of a failed voice route beside the error
 * object: "success": false and "detail" (the message, where FastAPI's HTTPException puts it). */
enum MHD_Result qvs_reply_error_omni(struct MHD_Connection *c, req *q, int status,
                                     const char *type, const char *code, const char *param,
                                     const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* The same error while a request body still arrives: written at once and the connection
 * closed (returns MHD_NO). */
enum MHD_Result qvs_reply_cut(struct MHD_Connection *c, req *q, int status, const char *type,
                              const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* 1 when the peer has closed the connection (checked without blocking). */
int qvs_peer_gone(struct MHD_Connection *c);

/* Index of the served model called name (NULL: the default), or -1. */
int qvs_find_model(const qv_server *s, const char *name);

/* ==== admission (admit.c) =================================================================== */

/* Takes a free slot, waiting in the queue up to deadline: its index (marked busy); -1 the queue is
 * full; -2 gave up (the client left, the deadline passed, the server stops). model >= 0 prefers a
 * slot already built for (model, p); -1 (a clone) takes any. */
int qvs_slot_take(qv_server *s, struct MHD_Connection *c, int model, const qv_params *p,
                  double deadline);
void qvs_slot_release(qv_server *s, int i);
int qvs_params_equal(const qv_params *a, const qv_params *b);
/* The reply for qvs_slot_take's -1 (429, Retry-After) or -2 (504 past deadline, else MHD_NO). */
enum MHD_Result qvs_reply_not_admitted(qv_server *s, struct MHD_Connection *c, req *q, int why,
                                       double deadline);

/* ==== speech (speech.c) ====================================================================== */

struct job;
/* A speech request's fields (o, a JSON object) against the names it may carry: OpenAI's,
 * vLLM-Omni's and qvoice's (docs/server.md), plus extra (NULL: none; the batch's "items"), each
 * once. 0, or -1 with v set: 400 unknown_field or duplicate_field naming it. A field the server
 * accepts is honoured or refused, never ignored. */
int qvs_speech_fields(const cJSON *o, const char *extra, verdict *v);
/* The speech request body[len] (NUL-terminated: body[len] is read) read and checked (model, voice, language, format, sampling; a
 * per-request reference cloned or found in the cache, waiting up to deadline, c may be NULL) with
 * nothing synthesized: a job to run (free with qvs_speech_job_free) with its model index and
 * parameters, or NULL with v set (status -1/-2: no slot for that clone, qvs_slot_take). What POST
 * /v1/audio/speech runs first, and what tests/fuzz/fuzz_speech_json.c calls without a socket. */
struct job *qvs_speech_parse(qv_server *s, struct MHD_Connection *c, const api_key *k,
                             const char *body, size_t len, double deadline, int *model,
                             qv_params *p, verdict *v);
/* Runs a parsed job on the calling thread (the WebSocket's sentences, ws_speech.c): a slot for
 * (model, p) taken up to the job's deadline, the audio through fn as it is decoded (fn returning
 * non-zero stops it; the request's cap applies), the metrics counted. 0, or -1 with v set
 * (status -1/-2: no slot, as qvs_slot_take; else the failure's status and message). */
int qvs_speech_run(qv_server *s, struct job *j, int model, const qv_params *p, qv_pcm_fn fn,
                   void *user, qv_synth_stats *st, verdict *v);
void qvs_speech_job_free(struct job *j); /* accepts NULL */
/* Starts a parsed job's synthesis on a slot of model (the one admission path): 0, or
 * qvs_slot_take's -1 (queue full) / -2 (client gone, past deadline, stopping), -3 no
 * synthesizer for p, -4 no thread. */
int qvs_job_start(qv_server *s, struct MHD_Connection *c, struct job *j, int model,
                  const qv_params *p);
int qvs_job_is_stream(const struct job *j); /* asked for a stream (stream, stream_format) */
/* What every output of j says of its voice and model (the encoder's qv_provenance). */
const qv_provenance *qvs_job_provenance(const struct job *j);
int qvs_job_rate(const struct job *j); /* the output's sample rate: sample_rate, else 24000 */
/* Stops a job's synthesis if it still runs (from another thread), or before it starts. */
void qvs_job_cancel(struct job *j);
/* A whole (non-streamed) job's outcome, once it has ended. */
typedef struct {
    int status;             /* 0: audio (audio[n_bytes], free with qv_free), else HTTP status */
    const char *code;       /* the error's code (status != 0) */
    const char *param;      /* the field it names, or NULL */
    char msg[600];          /* the error's message (status != 0) */
    uint8_t *audio;         /* the encoded file */
    size_t n_bytes;
    const char *media_type; /* of its response_format */
    char warning[512];      /* "" or the synthesis's warning (instruct dropped, ...) */
    int input_tokens, output_tokens; /* usage */
    int audio_tokens;                /* of input_tokens: the ICL reference's frames */
} qvs_job_result;
/* Waits for a started whole job (cancelling it when the client leaves or the deadline passes)
 * and encodes its audio: 0 (*res set), -1 the client left. */
int qvs_job_finish(struct job *j, qvs_job_result *res);
/* Handles POST /v1/audio/speech once its JSON body is complete. */
enum MHD_Result qvs_speech_handle(qv_server *s, struct MHD_Connection *c, req *q);
/* The connection is gone (or finished): stop the synthesis if it still runs, drop the job. */
void qvs_speech_release(qv_server *s, req *q);

/* ==== batches (batch.c) ====================================================================== */

#define QVS_BATCH_MAX_ITEMS 32 /* vLLM-Omni's tts_batch_max_items default */
/* Handles POST /v1/audio/speech/batch once its JSON body is complete. */
enum MHD_Result qvs_batch_handle(qv_server *s, struct MHD_Connection *c, req *q);

/* ==== voices (voices.c) ====================================================================== */

struct upload;
/* GET /v1/audio/voices, GET/DELETE /v1/audio/voices/{id}. */
enum MHD_Result qvs_voices_get(qv_server *s, struct MHD_Connection *c, req *q, const char *id);
enum MHD_Result qvs_voices_delete(qv_server *s, struct MHD_Connection *c, req *q, const char *id);
/* GET /v1/audio/voices/{id}/reference (the ICL codes decoded: what the file holds), .../fit
 * (qv_voice_check against each served model), .../similarity?to=ID (x-vector cosine). */
enum MHD_Result qvs_voice_reference(qv_server *s, struct MHD_Connection *c, req *q,
                                    const char *id);
enum MHD_Result qvs_voice_fit(qv_server *s, struct MHD_Connection *c, req *q, const char *id);
enum MHD_Result qvs_voice_similarity(qv_server *s, struct MHD_Connection *c, req *q,
                                     const char *id);
/* POST /v1/audio/voices: first call sets up the multipart parser (0 or an error queued). */
enum MHD_Result qvs_upload_begin(qv_server *s, struct MHD_Connection *c, req *q);
enum MHD_Result qvs_upload_data(struct MHD_Connection *c, req *q, const char *data,
                                size_t *size);
enum MHD_Result qvs_upload_finish(qv_server *s, struct MHD_Connection *c, req *q);
void qvs_upload_free(struct upload *u);
/* POST /v1/audio/detect (detect.c): the watermark report of the audio in the request body. */
enum MHD_Result qvs_detect_handle(qv_server *s, struct MHD_Connection *c, req *q);
/* Removes temporary files a killed server left in dir. */
void qvs_voices_clean(const char *dir);

/* ==== the library's index (library.c) ======================================================== */

/* Reads s->voices_dir into the index (each voice read and checked once); 0 or -1 with err. */
int qvs_library_open(qv_server *s, char *err, size_t err_size);
void qvs_library_free(qv_server *s);
int qvs_is_id(const char *s); /* 64 lowercase hex */
/* A library voice to open by path: its file, or for a voice stored without its text side the
 * whole file put together in memory (fd >= 0, path /proc/self/fd/N: valid until closed). */
typedef struct {
    char path[4096];
    char id[65];
    int fd;
    int icl_frames; /* its ICL reference's frames (usage's audio_tokens); 0 without ICL */
} qvs_voice_ref;
/* The library voice with this id or META name that key k may use; 0, or -1 when none (or it
 * cannot be put together). Close r with qvs_voice_ref_close. */
int qvs_voice_lookup(qv_server *s, const api_key *k, const char *id_or_name, qvs_voice_ref *r);
void qvs_voice_ref_close(qvs_voice_ref *r); /* accepts a ref already closed */
/* id_or_name NULL: an array describing every voice k may use (with "deletable", and "owner" for
 * an admin); else that voice's description, or NULL. Caller frees. */
cJSON *qvs_library_describe(qv_server *s, const api_key *k, const char *id_or_name);
/* Records in voice id's description whether it fits a served model ("fits"; what GET .../fit
 * found: the served models do not change while the server runs), so later lists carry it. */
void qvs_library_note_fit(qv_server *s, const char *id, int fits);
/* Stores the voice file b[n] as <sha256>.qvoice owned by k (a user key), atomically with the
 * name check and the caps: 0 (id, *desc set; replaced: the id of the voice of that name it
 * replaced, as vLLM-Omni does, or ""), 403 the name is a voice k may not manage, 507 full, 500;
 * why set. */
int qvs_library_add(qv_server *s, const api_key *k, const uint8_t *b, size_t n, const char *name,
                    char id[65], char replaced[65], cJSON **desc, char *why, size_t why_size);
/* The META key of vLLM-Omni's speaker_description (free text given at upload, listed). */
#define QVS_META_DESCRIPTION "speaker_description"
/* Deletes the voice k names: 0 (id set), 404 none k may use, 403 not k's, 500. */
int qvs_library_remove(qv_server *s, const api_key *k, const char *id_or_name, char id[65]);

/* ==== per-request references (refcache.c) =================================================== */

/* A request's reference: audio (a data URL, base64, or file:// inside cfg.ref_audio_dir) with
 * its transcript (NULL: x-vector only), or an x-vector embedding[n_embedding] instead. */
typedef struct {
    const char *audio, *text;
    const float *embedding;
    int n_embedding;
} ref_spec;
typedef struct ref_entry ref_entry;

int qvs_refcache_init(qv_server *s, char *err, size_t err_size); /* 0 or -1 with err */
void qvs_refcache_free(qv_server *s);
ref_stats qvs_refcache_stats(qv_server *s);
/* The voice of r, from the cache or cloned on the clone model (taking a slot up to deadline, as
 * an upload does) and cached: 0 with *out held (release with qvs_ref_release); else -1 with v
 * set (v->status -1/-2: no slot, as qvs_slot_take). */
int qvs_ref_get(qv_server *s, struct MHD_Connection *c, double deadline, const ref_spec *r,
                ref_entry **out, verdict *v);
const qv_voice *qvs_ref_voice(const ref_entry *e); /* borrowed while held */
void qvs_ref_release(qv_server *s, ref_entry *e);  /* accepts NULL */

/* ==== byte buffers (bytes.c) ================================================================= */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} bytes;
/* Appends n bytes of p (p NULL: n uninitialised bytes); 0 or -1 (out of memory). */
int qvs_bytes_add(bytes *b, const void *p, size_t n);

/* Base64 of n bytes appended to b. */
int qvs_base64_add(bytes *b, const uint8_t *p, size_t n);
/* Standard base64 in[n] (white space skipped) into a malloc'd *out of *n_out bytes; 0, or -1
 * when it is not base64 (or out of memory). */
int qvs_base64_decode(const char *in, size_t n, uint8_t **out, size_t *n_out);

/* ==== WebSocket framing (ws.c) ============================================================== */

enum { QVS_WS_OP_CONT = 0, QVS_WS_OP_TEXT = 1, QVS_WS_OP_BINARY = 2, QVS_WS_OP_CLOSE = 8,
       QVS_WS_OP_PING = 9, QVS_WS_OP_PONG = 10 };
#define QVS_WS_ACCEPT_SIZE 29 /* base64 of a SHA-1 and a NUL */
#define QVS_WS_HEADER_MAX 10

/* Sec-WebSocket-Accept for the client's Sec-WebSocket-Key: 0, or -1 when key is no base64 of
 * 16 bytes. */
int qvs_ws_accept(const char *key, char out[QVS_WS_ACCEPT_SIZE]);

/* Received bytes turned into messages. A message (all its fragments) over max_message is
 * refused from the header that makes it so, before its payload is buffered. */
typedef struct {
    bytes in;   /* received, from off */
    size_t off;
    bytes msg;  /* a fragmented message being put together */
    int msg_op; /* its opcode, 0 none */
    size_t max_message;
    int failed; /* the close code of a violation: every later call repeats it */
} qvs_ws_reader;
enum qvs_ws_kind { QVS_WS_MORE, QVS_WS_TEXT, QVS_WS_BINARY, QVS_WS_PING, QVS_WS_PONG,
                   QVS_WS_CLOSE, QVS_WS_ERROR };
typedef struct {
    enum qvs_ws_kind kind;
    const uint8_t *p; /* TEXT, BINARY, PING, PONG, CLOSE: the unmasked payload, valid until the
                         next qvs_ws_reader_add */
    size_t n;
    int close_code;   /* CLOSE: the peer's (1005 none); ERROR: the one to close with (1002
                         protocol error, 1009 too big, 1011 out of memory) */
    const char *why;  /* ERROR */
} qvs_ws_event;
void qvs_ws_reader_init(qvs_ws_reader *r, size_t max_message);
void qvs_ws_reader_free(qvs_ws_reader *r);
int qvs_ws_reader_add(qvs_ws_reader *r, const void *p, size_t n); /* 0 or -1 out of memory */
/* The next event of the bytes added so far (its kind, also in e->kind): QVS_WS_MORE when they
 * hold no whole frame. */
int qvs_ws_next(qvs_ws_reader *r, qvs_ws_event *e);
/* An unmasked, unfragmented server frame: the header of an n-byte payload in h (its length). */
size_t qvs_ws_header(uint8_t h[QVS_WS_HEADER_MAX], int opcode, size_t n);
/* Sends one frame on fd, giving up at deadline (qvs_now_s) on a reader that does not read: 0 or
 * -1. Callers serialise their frames. */
int qvs_ws_send(int fd, int opcode, const void *p, size_t n, double deadline);

/* ==== WS /v1/audio/speech/stream (ws_speech.c) ================================================ */

/* Answers the upgrade request (101 with the accept key, or a 4xx naming the header) and runs
 * the session on a thread of its own once upgraded; a message may have max_message bytes (the
 * speech body's limit). */
enum MHD_Result qvs_ws_speech_upgrade(qv_server *s, struct MHD_Connection *c, req *q,
                                      size_t max_message);
/* The request of an upgrade completed: upgraded (its session runs, or ran) or not (the 101 did not
 * go out, and the session never starts). */
void qvs_ws_speech_release(struct ws_session *w, int upgraded);

/* ==== studio (studio.c) ====================================================================== */

/* One embedded file of server/studio/; the table (generated by scripts/embed-studio.sh) ends
 * with a NULL name. */
typedef struct {
    const char *name; /* base name, as in /studio/NAME */
    const unsigned char *data;
    size_t size;
} qvs_asset;
extern const qvs_asset qvs_studio_assets[];
/* GET / (index.html) and GET /studio/NAME, with the studio's Content-Security-Policy; 404 when
 * the name is unknown or cfg.no_studio. */
enum MHD_Result qvs_studio_get(qv_server *s, struct MHD_Connection *c, req *q);

#endif
