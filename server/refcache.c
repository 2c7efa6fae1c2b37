/* refcache.c — per-request references (vLLM-Omni's ref_audio, ref_text, x_vector_only_mode,
 * speaker_embedding) turned into an opened voice, and the cache that keeps them: entries keyed by
 * SHA-256 of the audio (or embedding), transcript, mode and the clone model's fingerprint, bounded
 * in bytes, least recently used evicted, shared by every slot. A reference is cloned exactly as an
 * upload is (qv_clone_run with the default request), so its voice speaks like the uploaded one.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "server/server_impl.h"
#include "util/fileio.h"
#include "util/sha256.h"

typedef struct ref_entry {
    uint8_t key[32];
    qv_voice *voice;
    size_t n_bytes;
    int refs;   /* the cache's own (while listed) + one per request using it */
    int listed; /* in the LRU list */
    struct ref_entry *prev, *next;
} ref_entry;

struct refcache {
    pthread_mutex_t mu;
    ref_entry *head, *tail; /* most recently used first */
    size_t n_bytes, max_bytes;
    int n_entries;
    uint64_t hits, misses, evictions;
    uint8_t fingerprint[32]; /* the clone model's; zero without one */
};

/* ==== the cache ============================================================================== */

int qvs_refcache_init(qv_server *s, char *err, size_t err_size) {
    struct refcache *rc = calloc(1, sizeof *rc);
    if (!rc) {
        snprintf(err, err_size, "reference cache: out of memory");
        return -1;
    }
    if (s->cfg.ref_audio_urls && curl_global_init(CURL_GLOBAL_DEFAULT)) {
        free(rc);
        snprintf(err, err_size, "--ref-audio-urls: libcurl did not start");
        return -1;
    }
    pthread_mutex_init(&rc->mu, NULL);
    rc->max_bytes = (size_t)s->cfg.ref_cache_mb << 20;
    s->refs = rc;
    if (s->cloner) qv_cloner_fingerprint(s->cloner, rc->fingerprint);
    return 0;
}

static void entry_unref(ref_entry *e) { /* rc->mu held */
    if (--e->refs) return;
    qv_voice_free(e->voice);
    free(e);
}

static void unlist(struct refcache *rc, ref_entry *e) { /* rc->mu held */
    if (e->prev)
        e->prev->next = e->next;
    else
        rc->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        rc->tail = e->prev;
    e->prev = e->next = NULL;
    e->listed = 0;
    rc->n_bytes -= e->n_bytes;
    rc->n_entries--;
}

static void push_front(struct refcache *rc, ref_entry *e) { /* rc->mu held */
    e->next = rc->head;
    e->prev = NULL;
    if (rc->head) rc->head->prev = e;
    rc->head = e;
    if (!rc->tail) rc->tail = e;
    e->listed = 1;
    rc->n_bytes += e->n_bytes;
    rc->n_entries++;
}

void qvs_refcache_free(qv_server *s) {
    struct refcache *rc = s->refs;
    if (!rc) return;
    while (rc->head) {
        ref_entry *e = rc->head;
        unlist(rc, e);
        entry_unref(e);
    }
    pthread_mutex_destroy(&rc->mu);
    free(rc);
    s->refs = NULL;
    if (s->cfg.ref_audio_urls) curl_global_cleanup();
}

ref_stats qvs_refcache_stats(qv_server *s) {
    struct refcache *rc = s->refs;
    pthread_mutex_lock(&rc->mu);
    ref_stats r = {rc->hits, rc->misses, rc->evictions, rc->n_bytes, rc->n_entries};
    pthread_mutex_unlock(&rc->mu);
    return r;
}

const qv_voice *qvs_ref_voice(const ref_entry *e) {
    return e->voice;
}

void qvs_ref_release(qv_server *s, ref_entry *e) {
    if (!e) return;
    pthread_mutex_lock(&s->refs->mu);
    entry_unref(e);
    pthread_mutex_unlock(&s->refs->mu);
}

/* The entry with key, moved to the front and held for the caller; NULL when absent. */
static ref_entry *lookup(struct refcache *rc, const uint8_t key[32]) {
    pthread_mutex_lock(&rc->mu);
    ref_entry *e = rc->head;
    while (e && memcmp(e->key, key, 32))
        e = e->next;
    if (e) {
        unlist(rc, e);
        push_front(rc, e);
        e->refs++;
        rc->hits++;
    } else {
        rc->misses++;
    }
    pthread_mutex_unlock(&rc->mu);
    return e;
}

/* Lists a new entry (taking v) and evicts the least recently used beyond the bound; the entry is
 * held for the caller. One larger than the whole bound is used but not kept. */
static ref_entry *insert(struct refcache *rc, const uint8_t key[32], qv_voice *v, size_t n) {
    ref_entry *e = calloc(1, sizeof *e);
    if (!e) {
        qv_voice_free(v);
        return NULL;
    }
    memcpy(e->key, key, 32);
    e->voice = v;
    e->n_bytes = n;
    e->refs = 1;
    pthread_mutex_lock(&rc->mu);
    if (n <= rc->max_bytes) {
        e->refs++;
        push_front(rc, e);
        while (rc->n_bytes > rc->max_bytes && rc->tail != e) {
            ref_entry *old = rc->tail;
            unlist(rc, old);
            entry_unref(old);
            rc->evictions++;
        }
    }
    pthread_mutex_unlock(&rc->mu);
    return e;
}

/* ==== references ============================================================================= */

/* file://PATH inside cfg.ref_audio_dir (after resolving links), read whole up to max bytes. */
static int read_allowed_file(qv_server *s, const char *url, size_t max, uint8_t **out,
                             size_t *n_out, verdict *w) { /* replies never echo the path */
    if (!s->cfg.ref_audio_dir)
        return qvs_bad(w, 400, "unsupported_value", "ref_audio",
                       "ref_audio: file:// URLs are refused (the server was started without "
                       "--ref-audio-dir); send the audio as a base64 data URL");
    char dir[PATH_MAX], path[PATH_MAX];
    if (!realpath(s->cfg.ref_audio_dir, dir) || !realpath(url + 7, path) ||
        strncmp(path, dir, strlen(dir)) || path[strlen(dir)] != '/')
        return qvs_bad(w, 400, "invalid_value", "ref_audio",
                       "ref_audio: the file:// path is not a file inside the allowed reference "
                       "directory");
    char err[256];
    struct stat st; /* a regular file only: a FIFO there would block the connection's thread */
    if (stat(path, &st) || !S_ISREG(st.st_mode) ||
        !(*out = (uint8_t *)qvu_read_file(path, max, n_out, err, sizeof err)))
        return qvs_bad(w, 400, "invalid_value", "ref_audio",
                       "ref_audio: the file:// path is not a readable file of at most %zu bytes",
                       max);
    return 0;
}

/* An http(s) URL under one of cfg.ref_audio_urls' comma-separated prefixes (each ends in a '/'
 * after its host, so the host is the prefix's), fetched whole: no redirects, at most max bytes,
 * within REF_FETCH_SECONDS. Off by default: a fetch on a client's behalf reaches what the server
 * can reach (SSRF), so the operator names what may be fetched. */
#define REF_FETCH_SECONDS 10
static int url_allowed(const char *prefixes, const char *url) {
    for (const char *p = prefixes; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n && !strncmp(url, p, n)) return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

struct fetch_buf {
    uint8_t *p;
    size_t n, max;
    int over;
};

static size_t fetch_write(char *data, size_t size, size_t nmemb, void *user) {
    struct fetch_buf *b = user;
    size_t n = size * nmemb;
    if (n > b->max - b->n) {
        b->over = 1;
        return 0; /* aborts the transfer */
    }
    uint8_t *q = realloc(b->p, b->n + n);
    if (!q) return 0;
    memcpy(q + b->n, data, n);
    b->p = q;
    b->n += n;
    return n;
}

static int fetch_url(qv_server *s, const char *url, size_t max, uint8_t **out, size_t *n_out,
                     verdict *w) {
    if (!s->cfg.ref_audio_urls || !url_allowed(s->cfg.ref_audio_urls, url))
        return qvs_bad(w, 400, "unsupported_value", "ref_audio",
                       "ref_audio: this URL is not under a prefix the server may fetch "
                       "(--ref-audio-urls); send the audio as a base64 data URL "
                       "(data:audio/wav;base64,...)");
    struct fetch_buf b = {NULL, 0, max, 0};
    long status = 0;
    CURL *c = curl_easy_init();
    CURLcode rc = CURLE_FAILED_INIT;
    if (c) {
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* many threads: no SIGALRM timeouts */
        curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)REF_FETCH_SECONDS);
        curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)max);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, fetch_write);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        rc = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(c);
    }
    if (rc == CURLE_OK && status == 200 && b.n) {
        *out = b.p, *n_out = b.n;
        return 0;
    }
    free(b.p);
    if (b.over || rc == CURLE_FILESIZE_EXCEEDED)
        return qvs_bad(w, 413, "request_too_large", "ref_audio",
                       "ref_audio: the URL's audio is over the %d MB upload limit",
                       s->cfg.max_upload_mb);
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return qvs_bad(w, 504, "upstream_timeout", "ref_audio",
                       "ref_audio: the URL did not deliver within %d s", REF_FETCH_SECONDS);
    if (rc == CURLE_OK)
        return qvs_bad(w, 502, "upstream_error", "ref_audio",
                       "ref_audio: the URL answered HTTP %ld (redirects are not followed)", status);
    return qvs_bad(w, 502, "upstream_error", "ref_audio",
                   "ref_audio: the URL could not be fetched (%s)", curl_easy_strerror(rc));
}

/* The reference's bytes: a data URL, plain base64, an allowed file:// path or http(s) URL. */
static int ref_bytes(qv_server *s, const char *a, uint8_t **out, size_t *n, verdict *w) {
    size_t max = (size_t)s->cfg.max_upload_mb << 20;
    if (!strncmp(a, "file://", 7)) return read_allowed_file(s, a, max, out, n, w);
    if (!strncmp(a, "http://", 7) || !strncmp(a, "https://", 8))
        return fetch_url(s, a, max, out, n, w);
    const char *b64 = a;
    if (!strncmp(a, "data:", 5)) {
        const char *comma = strchr(a, ',');
        if (!comma || comma - a < 12 || strncmp(comma - 7, ";base64", 7))
            return qvs_bad(w, 400, "invalid_value", "ref_audio",
                           "ref_audio: a data URL must be data:<type>;base64,<data>");
        b64 = comma + 1;
    }
    if (strlen(b64) / 4 * 3 > max)
        return qvs_bad(w, 413, "request_too_large", "ref_audio",
                       "ref_audio: more than the %d MB upload limit", s->cfg.max_upload_mb);
    if (qvs_base64_decode(b64, strlen(b64), out, n) || *n == 0)
        return qvs_bad(w, 400, "invalid_value", "ref_audio",
                       "ref_audio: neither a data URL, base64 audio nor a file:// URL");
    return 0;
}

static int ref_key(const struct refcache *rc, int kind, const char *text, const void *p,
                    size_t n, uint8_t key[32]) {
    uint8_t head[2] = {(uint8_t)kind, text != NULL};
    uint64_t tn = text ? strlen(text) : 0;
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)(tn >> (8 * i));
    qvu_sha256_ctx *h = qvu_sha256_begin();
    int bad = !h || qvu_sha256_add(h, "qvoice-ref-v1", 13) ||
              qvu_sha256_add(h, rc->fingerprint, 32) || qvu_sha256_add(h, head, 2) ||
              qvu_sha256_add(h, len, 8) || qvu_sha256_add(h, text ? text : "", tn) ||
              qvu_sha256_add(h, p, n);
    return qvu_sha256_end(h, key) || bad ? -1 : 0; /* end frees h in every case */
}

/* A temporary in the voices directory that qvs_voices_clean removes if we die. */
static int temp_path(qv_server *s, char *path, size_t size, int *fd) {
    snprintf(path, size, "%s/.new-%d-XXXXXX", s->voices_dir, (int)getpid());
    return (*fd = mkstemp(path)) < 0 ? -1 : 0;
}

/* Writes p[n] to fd and closes it: 0 or -1. */
static int write_close(int fd, const void *p, size_t n) {
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        return -1;
    }
    int bad = fwrite(p, 1, n, f) != n;
    return fclose(f) || bad ? -1 : 0;
}

/* Clones audio[n] (a slot taken for it like an upload's) into an opened voice. */
static int clone_ref(qv_server *s, struct MHD_Connection *c, double deadline, const uint8_t *audio,
                     size_t n, const char *text, qv_voice **v, size_t *n_bytes, verdict *w) {
    char in[4096], out[4096];
    int fd_in, fd_out;
    if (temp_path(s, in, sizeof in, &fd_in))
        return qvs_bad(w, 500, "io_error", NULL, "temporary file");
    if (write_close(fd_in, audio, n) || temp_path(s, out, sizeof out, &fd_out)) {
        unlink(in);
        return qvs_bad(w, 500, "io_error", NULL, "temporary file: %s", strerror(errno));
    }
    close(fd_out);
    qv_clone_request r = qv_clone_default_request();
    r.audio_path = in;
    r.ref_text = text;
    int sl = qvs_slot_take(s, c, -1, NULL, deadline);
    if (sl < 0) {
        unlink(in);
        unlink(out);
        w->status = sl;
        return -1;
    }
    enum qv_status st = qv_clone_run(s->cloner, &r, out, NULL);
    qvs_slot_release(s, sl);
    unlink(in);
    struct stat sb;
    if (!st && !stat(out, &sb)) *n_bytes = (size_t)sb.st_size;
    if (!st) st = qv_voice_open(v, out);
    unlink(out);
    if (st) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", qv_last_error());
        qvs_scrub(s, detail, sizeof detail);
        int client = st == QV_E_AUDIO || st == QV_E_INVALID;
        const char *field = st == QV_E_INVALID && text ? "ref_text" : "ref_audio";
        return qvs_bad(w, client ? 400 : 500,
                       !client            ? "clone_failed"
                       : st == QV_E_AUDIO ? "invalid_audio"
                                          : "invalid_value",
                       field, "%s: %s: %s", field, qv_strerror(st), detail);
    }
    return 0;
}

/* An x-vector of n floats as a voice, made in memory. */
static int embedding_voice(const float *x, int n, qv_voice **v, verdict *w) {
    const enum qv_status st = qv_voice_from_parts(v, x, n, NULL, 0, NULL, NULL);
    if (st == QV_E_NOMEM) return qvs_bad(w, 503, "out_of_memory", NULL, "out of memory");
    if (st)
        return qvs_bad(w, 400, "invalid_value", "speaker_embedding", "speaker_embedding: %s",
                       qv_strerror(st));
    return 0;
}

int qvs_ref_get(qv_server *s, struct MHD_Connection *c, double deadline, const ref_spec *r,
                ref_entry **out, verdict *w) {
    struct refcache *rc = s->refs;
    uint8_t key[32], *audio = NULL;
    size_t n = 0, n_bytes = 0;
    qv_voice *v = NULL;
    int rv = 0;
    *out = NULL;
    if (r->embedding) {
        if (ref_key(rc, 1, NULL, r->embedding, (size_t)r->n_embedding * sizeof(float), key))
            return qvs_bad(w, 503, "out_of_memory", NULL, "out of memory");
        if ((*out = lookup(rc, key))) return 0;
        if ((rv = embedding_voice(r->embedding, r->n_embedding, &v, w))) goto done;
        n_bytes = (size_t)r->n_embedding * sizeof(float);
    } else {
        if (!s->cloner) {
            rv = qvs_bad(w, 400, "unsupported_value", "ref_audio",
                         "ref_audio: per-request cloning needs the server started with "
                         "--clone-model (a Base model)");
            goto done;
        }
        if ((rv = ref_bytes(s, r->audio, &audio, &n, w))) goto done;
        if (ref_key(rc, 0, r->text, audio, n, key)) {
            rv = qvs_bad(w, 503, "out_of_memory", NULL, "out of memory");
            goto done;
        }
        if ((*out = lookup(rc, key))) goto done;
        if ((rv = clone_ref(s, c, deadline, audio, n, r->text, &v, &n_bytes, w))) goto done;
    }
    if (!(*out = insert(rc, key, v, n_bytes)))
        rv = qvs_bad(w, 503, "out_of_memory", NULL, "out of memory");
done:
    free(audio);
    return rv ? -1 : 0;
}
