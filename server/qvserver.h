/* qvserver.h — the HTTP server module of bin/qvoice-server (prefix qv_server_; not part of libqvoice): OpenAI's
 * POST /v1/audio/speech, WS /v1/audio/speech/stream (text in pieces, vLLM-Omni's protocol), a
 * voice library under /v1/audio/voices, /health, /ready, /metrics.
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
    const char *ref_audio_dir;   /* speech requests may name ref_audio file:// URLs inside it;
                                    NULL: file:// refused */
    const char *ref_audio_urls;  /* comma-separated http(s) URL prefixes (each with a '/' after
                                    its host) ref_audio may be fetched from; NULL: refused */
    int ref_cache_mb;            /* MB of per-request reference voices kept (LRU) */
    const char *listen;          /* "HOST:PORT"; port 0 picks a free one (qv_server_port) */
    const char *api_key_file;    /* accepted bearer keys, one per line: "name:admin:KEY" or
                                    "name:user:KEY" (a user key deletes only the voices it
                                    uploaded, and they are its own), or a plain KEY (admin);
                                    NULL: no auth */
    int n_threads;               /* compute threads per synthesis (qv_threads_resolve) */
    int max_concurrency;         /* syntheses at once (one qv_synth each) */
    int max_queue;               /* requests waiting for a slot beyond that; more get 429 */
    int quant;                   /* enum qv_quant */
    int batch_streams;           /* concurrent syntheses of a model stepped together, frame by
                                    frame (qv_model_set_batching); 0 or 1: each on its own */
    double max_seconds;          /* cap on audio per request (0 = none); requests may ask less */
    int max_text_chars;          /* code points of input */
    int max_upload_mb;           /* multipart upload size */
    int max_voices;              /* voices in the library; more uploads get 507 */
    int max_library_mb;          /* bytes of the library's voice files; the same */
    int no_watermark;            /* 1: audio without the synthetic mark (docs/provenance.md) */
    int timeout_s;               /* idle connection timeout and wall time of one request */
    int receive_s;               /* total time to receive one request's headers and body; a
                                    slower client is disconnected (not idle-only: a trickle too) */
    int max_connections;         /* open connections on listen */
    int max_connections_per_ip;  /* of them from one client address (behind a proxy: all of
                                    them come from the proxy's, so raise it to max_connections) */
    const char *probe_listen;    /* "HOST:PORT" of a second listener serving only /health,
                                    /ready and /metrics with a budget of its own, answerable
                                    while listen's connections are all taken; NULL: none */
    int no_studio;               /* 1: no studio page (GET / and /studio/ answer 404) */
    const char *sign_key;        /* private Ed25519 key (PEM): the voices the server makes (cloned,
                                    or an upload it rewrote) are signed with it; NULL: unsigned */
    const char *signer;          /* the signer name those signatures carry; NULL: none */
    const char *const *trusted_keys; /* public keys (PEM): a .qvoice upload must carry a valid */
    int n_trusted_keys;              /* signature by one of them; 0: signed or not */
    void (*log)(void *user, const char *line); /* one line, no newline; NULL: silent */
    void *log_user;
} qv_server_config;

/* listen 127.0.0.1:8080, 1 thread, concurrency 1, queue 4, batches of up to 8 streams, bf16,
 * 120 s cap, 4096 chars, 20 MB uploads, 256 MB of per-request references, 1000 voices in
 * 20480 MB, 300 s timeout (a 120 s utterance at RTF 2 must fit), 60 s to receive a request, 256
 * connections, 16 per address; no probe listener, no models, no voices dir, no auth, no log. */
qv_server_config qv_server_default_config(void);

typedef struct qv_server qv_server;

/* Loads the models (and the clone model), cleans temporary files a killed server left in the
 * voices directory, and starts listening. On failure *out = NULL and err = "FILE: problem". */
enum qv_status qv_server_start(qv_server **out, const qv_server_config *c, char *err,
                               size_t err_size);
int qv_server_port(const qv_server *s); /* the port listened on */
int qv_server_probe_port(const qv_server *s); /* probe_listen's port, or 0 */
/* Stops accepting connections, answers 503 to new requests on open ones, and waits up to
 * timeout_s for requests in flight to finish. */
void qv_server_drain(qv_server *s, double timeout_s);
void qv_server_free(qv_server *s); /* stops everything; accepts NULL */

#endif
