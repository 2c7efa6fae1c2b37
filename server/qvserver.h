/* qvserver.h — the HTTP server module of bin/qvoice-server (prefix qv_server_; not part of libqvoice): OpenAI's
 * POST /v1/audio/speech, a voice library under /v1/audio/voices, /health, /ready, /metrics.
 * Built on libmicrohttpd (one thread per connection); docs/server.md describes the routes.
 *
 * Usage:
 *     qv_server_config c = qv_server_default_config();
 *     const char *models[] = {"cache/tiny-cv"};
 *     c.model_dirs = models; c.n_models = 1; c.voices_dir = "voices";
 *     qv_server *s; char err[512];
 *     if (qv_server_start(&s, &c, err, sizeof err)) { fprintf(stderr, "%s\n", err); ... }
 *     ... wait for SIGTERM (block it before qv_server_start so the server's threads inherit the
 *     mask, then sigwait) ...
 *     qv_server_drain(s, 30); qv_server_free(s);
 *
 * Thread safety: the server runs on its own threads; qv_server_drain and qv_server_free are
 * called from one controlling thread. Nothing here prints: one line per request (and the
 * listening address) goes to c.log.
 */
#ifndef QVSERVER_H
#define QVSERVER_H

#include <stddef.h>

#include "include/qvoice.h"

typedef struct {
    const char *const *model_dirs; /* speech models; the first is the default */
    int n_models;
    const char *voices_dir;      /* voice library: <sha256>.qvoice files (created if missing) */
    const char *clone_model_dir; /* Base model for POST /v1/audio/voices with audio, or NULL */
    const char *listen;          /* "HOST:PORT"; port 0 picks a free one (qv_server_port) */
    const char *api_key_file;    /* one accepted bearer key per line, or NULL: no auth */
    int n_threads;               /* compute threads per synthesis (qv_threads_resolve) */
    int max_concurrency;         /* syntheses at once (one qv_synth each) */
    int max_queue;               /* requests waiting for a slot beyond that; more get 429 */
    int quant;                   /* enum qv_quant */
    int batch_streams;           /* concurrent syntheses of a model stepped together, frame by
                                    frame (qv_model_set_batching); 0 or 1: each on its own */
    double max_seconds;          /* cap on audio per request (0 = none); requests may ask less */
    int max_text_chars;          /* code points of input */
    int max_upload_mb;           /* multipart upload size */
    int timeout_s;               /* idle connection timeout and wall time of one request */
    int no_studio;               /* 1: no studio page (GET / and /studio/ answer 404) */
    void (*log)(void *user, const char *line); /* one line, no newline; NULL: silent */
    void *log_user;
} qv_server_config;

/* listen 127.0.0.1:8080, 1 thread, concurrency 1, queue 4, batches of up to 8 streams, bf16,
 * 120 s cap, 4096 chars, 20 MB uploads, 300 s timeout (a 120 s utterance at RTF 2 must fit); no
 * models, no voices dir, no auth, no log. */
qv_server_config qv_server_default_config(void);

typedef struct qv_server qv_server;

/* Loads the models (and the clone model), cleans temporary files a killed server left in the
 * voices directory, and starts listening. On failure *out = NULL and err = "FILE: problem". */
enum qv_status qv_server_start(qv_server **out, const qv_server_config *c, char *err,
                               size_t err_size);
int qv_server_port(const qv_server *s); /* the port listened on */
/* Stops accepting connections, answers 503 to new requests on open ones, and waits up to
 * timeout_s for requests in flight to finish. */
void qv_server_drain(qv_server *s, double timeout_s);
void qv_server_free(qv_server *s); /* stops everything; accepts NULL */

#endif
