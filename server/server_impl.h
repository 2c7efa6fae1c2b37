/* server_impl.h — what the files of server/ share: the server and per-request state, replies,
 * metrics, the speech and voice routes, audio encoding.
 */
#ifndef QV_SERVER_IMPL_H
#define QV_SERVER_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "include/qvoice.h"
#include "server/qvserver.h"

/* ==== routes and metrics ===================================================================== */

#define ROUTE_LIST(X)                                                                              \
    X(ROUTE_SPEECH, "speech")                                                                      \
    X(ROUTE_VOICES_LIST, "voices_list")                                                            \
    X(ROUTE_VOICES_UPLOAD, "voices_upload")                                                        \
    X(ROUTE_VOICE_GET, "voice_get")                                                                \
    X(ROUTE_VOICE_DELETE, "voice_delete")                                                          \
    X(ROUTE_HEALTH, "health")                                                                      \
    X(ROUTE_READY, "ready")                                                                        \
    X(ROUTE_METRICS, "metrics")                                                                    \
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
    uint64_t cancelled; /* syntheses stopped by a disconnect or the wall-time limit */
    double audio_seconds;
    histogram rtf, ttfa_s;
} metrics;

void qvs_metrics_init(metrics *m);
void qvs_metrics_request(metrics *m, enum route r, int status);
void qvs_metrics_synth(metrics *m, const qv_synth_stats *st);
/* Prometheus text exposition; malloc'd. batch_*: qv_model_batch_stats summed over the models. */
char *qvs_metrics_render(metrics *m, int active, int queued, int64_t batch_steps,
                         int64_t batch_frames);

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

struct qv_server {
    qv_server_config cfg;
    struct MHD_Daemon *daemon;
    int port;
    served_model *models;
    int n_models;
    qv_cloner *cloner;
    char *voices_dir;
    char **keys; /* accepted bearer keys */
    int n_keys;
    int n_threads;

    pthread_mutex_t mu; /* everything below */
    pthread_cond_t cv;  /* slot freed, request finished */
    slot *slots;
    int n_slots, n_queued, n_inflight, n_workers, draining;
    metrics met;
};

/* Per-request state (MHD's con_cls). */
typedef struct {
    enum route route;
    int status;
    char method[8];
    char *url;
    double t0;
    char *body; /* JSON body */
    size_t body_len, body_cap;
    int too_big;
    struct MHD_PostProcessor *pp; /* multipart upload */
    struct upload *up;
    struct job *job; /* speech synthesis in progress */
    char note[64];   /* added to the log line */
} req;

/* Log one formatted line through cfg.log. */
void qvs_srv_log(qv_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double qvs_now_s(void);
/* Waits on s->cv (s->mu held) for a signal or 100 ms. */
void qvs_wait_tick(qv_server *s);
/* Queues a JSON reply (takes ownership of the malloc'd body) / an OpenAI-style error. */
enum MHD_Result qvs_reply_json(struct MHD_Connection *c, req *q, int status, char *body);
enum MHD_Result qvs_reply_error(struct MHD_Connection *c, req *q, int status, const char *type,
                                const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* 1 when the peer has closed the connection (checked without blocking). */
int qvs_peer_gone(struct MHD_Connection *c);
/* Index of the served model called name (NULL: the default), or -1. */
int qvs_find_model(const qv_server *s, const char *name);

/* ==== speech (speech.c) ====================================================================== */

struct job;
/* Handles POST /v1/audio/speech once its JSON body is complete. */
enum MHD_Result qvs_speech_handle(qv_server *s, struct MHD_Connection *c, req *q);
/* The connection is gone (or finished): stop the synthesis if it still runs, drop the job. */
void qvs_speech_release(qv_server *s, req *q);

/* ==== voices (voices.c) ====================================================================== */

struct upload;
/* GET /v1/audio/voices, GET/DELETE /v1/audio/voices/{id}. */
enum MHD_Result qvs_voices_get(qv_server *s, struct MHD_Connection *c, req *q, const char *id);
enum MHD_Result qvs_voices_delete(qv_server *s, struct MHD_Connection *c, req *q, const char *id);
/* POST /v1/audio/voices: first call sets up the multipart parser (0 or an error queued). */
enum MHD_Result qvs_upload_begin(qv_server *s, struct MHD_Connection *c, req *q);
enum MHD_Result qvs_upload_data(qv_server *s, struct MHD_Connection *c, req *q, const char *data,
                                size_t *size);
enum MHD_Result qvs_upload_finish(qv_server *s, struct MHD_Connection *c, req *q);
void qvs_upload_free(struct upload *u);
/* Removes temporary files a killed server left in dir. */
void qvs_voices_clean(const char *dir);
/* Path of the library voice with this id (64 hex) or META name; 0, or -1 when none. */
int qvs_voice_lookup(const qv_server *s, const char *id_or_name, char *path, size_t path_size);

/* ==== byte buffers (bytes.c) ================================================================= */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} bytes;
/* Appends n bytes of p (p NULL: n uninitialised bytes); 0 or -1 (out of memory). */
int qvs_bytes_add(bytes *b, const void *p, size_t n);

/* Base64 of n bytes appended to b. */
int qvs_base64_add(bytes *b, const uint8_t *p, size_t n);

#endif
