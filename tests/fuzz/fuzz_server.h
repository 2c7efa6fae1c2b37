/* fuzz_server.h — what the HTTP fuzz targets share: one qv_server per process, started in-process
 * on 127.0.0.1:0 with $QVOICE_CACHE/tiny-cv and a voices directory of its own in /dev/shm (one
 * voice uploaded by the upload target stays for the rest of the run), and the check that a reply
 * names no server path. Included by the targets and by tests/unit/test_server_replay.c.
 */
#ifndef FUZZ_SERVER_H
#define FUZZ_SERVER_H

#include <arpa/inet.h>
#include <signal.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "server/server_impl.h"

static char fuzz_voices_dir[64];
static char fuzz_model_dir[1024];

/* The server, started once. Without it (no $QVOICE_CACHE/tiny-cv) the run stops with a message:
 * a target that passed every input untested would report a clean run. */
static qv_server *fuzz_server(void) {
    static int tried;
    static qv_server *s;
    if (tried) return s;
    tried = 1;
    const char *cache = getenv("QVOICE_CACHE");
    snprintf(fuzz_model_dir, sizeof fuzz_model_dir, "%s/tiny-cv", cache ? cache : "cache");
    /* in memory when it can be: every accepted upload is written with fsyncs */
    snprintf(fuzz_voices_dir, sizeof fuzz_voices_dir, "%s/qvoice-fuzz-server.XXXXXX",
             access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm");
    if (!mkdtemp(fuzz_voices_dir)) {
        perror(fuzz_voices_dir);
        exit(1);
    }
    signal(SIGPIPE, SIG_IGN); /* as server/main.c: a client that left is not a reason to die */
    static const char *models[1];
    models[0] = fuzz_model_dir;
    qv_server_config c = qv_server_default_config();
    c.model_dirs = models;
    c.n_models = 1;
    c.voices_dir = fuzz_voices_dir;
    c.listen = "127.0.0.1:0";
    c.max_seconds = 0.2; /* a valid speech request costs little */
    c.max_upload_mb = 1;
    c.max_voices = 64;
    c.timeout_s = 10;
    c.receive_s = 5;
    char err[512];
    if (qv_server_start(&s, &c, err, sizeof err)) {
        fprintf(stderr, "fuzz_server: cannot start (needs %s: make models): %s\n", fuzz_model_dir,
                err);
        rmdir(fuzz_voices_dir);
        exit(1);
    }
    return s;
}

/* 1 when text names path and the request in[n] did not: a reply may echo what the client sent
 * (fuzz_upload learnt the voices directory from a comparison and put it into a consent statement,
 * which the upload's reply repeats), and that reveals nothing. */
static int fuzz_names(const char *text, const char *path, const uint8_t *in, size_t n) {
    return path[0] && strstr(text, path) && !memmem(in, n, path, strlen(path));
}

/* A reply (or error message) to the request in[n] naming the voices directory or the model
 * directory: a leak. */
static void fuzz_no_path(const char *text, const uint8_t *in, size_t n) {
    if (fuzz_names(text, fuzz_voices_dir, in, n) || fuzz_names(text, fuzz_model_dir, in, n)) {
        fprintf(stderr, "server path in a reply: %.400s\n", text);
        abort();
    }
}

static int fuzz_send_all(int fd, const void *p, size_t n, int flags) {
    for (size_t done = 0; done < n;) {
        ssize_t w = send(fd, (const char *)p + done, n - done, MSG_NOSIGNAL | flags);
        if (w <= 0) return -1; /* the server may cut a body it refuses */
        done += (size_t)w;
    }
    return 0;
}

static int fuzz_connect(const qv_server *s) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)qv_server_port(s))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {20, 0};
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A chunked body's framing, fed as it arrives: hex size line, data, CRLF, ..., a 0 size line and
 * trailer lines up to an empty one. */
typedef struct {
    int state; /* 0 size, 1 extension, 2 data, 3 end of data line, 4 trailer */
    uint64_t left;
    int line;
} fuzz_chunked;

/* 1 once the last chunk and the trailer have passed. */
static int fuzz_chunked_feed(fuzz_chunked *k, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (k->state == 2) {
            size_t take = k->left < n - i ? (size_t)k->left : n - i;
            i += take - 1;
            if (!(k->left -= take)) k->state = 3;
        } else if (ch == '\n' && k->state <= 1) {
            k->state = k->left ? 2 : 4;
            k->line = 0;
        } else if (k->state == 0 && strchr("0123456789abcdefABCDEF", ch) && k->left >> 40 == 0) {
            k->left = k->left * 16 + (uint64_t)(ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
        } else if (k->state == 0 && ch == ';') {
            k->state = 1;
        } else if (k->state == 3 && ch == '\n') {
            k->state = 0;
        } else if (k->state == 4 && ch == '\n') {
            if (!k->line) return 1;
            k->line = 0;
        } else if (k->state == 4 && ch != '\r') {
            k->line++;
        }
    }
    return 0;
}

/* One reply from fd into reply[cap] (NUL-terminated; the rest of a longer body is read and
 * dropped): its length, 0 when the connection closed first. The body ends after Content-Length
 * bytes, after its last chunk, or when the server closes. *keep: the connection may carry the
 * next request (framed, read whole, no "Connection: close"). */
static size_t fuzz_read_reply(int fd, char *reply, size_t cap, int *keep) {
    size_t n = 0, want = (size_t)-1, total = 0;
    int head = 0, chunked = 0, done = 0, shut = 0;
    fuzz_chunked k = {0};
    char sink[4096];
    while (!done && total < want) {
        char *to = n + 1 < cap ? reply + n : sink;
        size_t room = n + 1 < cap ? cap - 1 - n : sizeof sink;
        if (want != (size_t)-1 && room > want - total) room = want - total;
        ssize_t r = recv(fd, to, room, 0);
        if (r <= 0) break;
        total += (size_t)r;
        if (to != sink) n += (size_t)r;
        reply[n] = 0;
        const char *end = head ? NULL : strstr(reply, "\r\n\r\n");
        if (end) { /* the head is whole: how the body ends, and whether the server keeps the line */
            head = 1;
            size_t at = (size_t)(end + 4 - reply);
            const char *cl = strcasestr(reply, "\r\nContent-Length:"),
                       *te = strcasestr(reply, "\r\nTransfer-Encoding: chunked"),
                       *cc = strcasestr(reply, "\r\nConnection: close");
            shut = cc && cc < end;
            if (te && te < end) {
                chunked = 1;
                done = fuzz_chunked_feed(&k, reply + at, n - at);
            } else if (cl && cl < end) {
                want = at + strtoull(cl + 17, NULL, 10);
            }
        } else if (chunked) {
            done = fuzz_chunked_feed(&k, to, (size_t)r);
        }
    }
    *keep = !shut && (done || (want != (size_t)-1 && total == want));
    return n;
}

/* POSTs data[size] to path on s over loopback and checks the reply: an HTTP status line (or
 * nothing, when the server cut the connection) naming no server path; aborts otherwise. Returns
 * the status, or 0 without a reply. One keep-alive connection serves input after input (a
 * connection and a server thread per input halved the executions per CPU second); a new one is
 * made when the server closed it, and a request that found the kept one closed is sent again. */
static int fuzz_post(qv_server *s, const char *path, const char *type, const uint8_t *data,
                     size_t size) {
    static int fd = -1;
    static char reply[1 << 16];
    char head[512];
    int hn = snprintf(head, sizeof head,
                      "POST %s HTTP/1.1\r\nHost: fuzz\r\nContent-Type: %s\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      path, type, size);
    size_t n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        int reused = fd >= 0, keep = 0;
        if (fd < 0 && (fd = fuzz_connect(s)) < 0) return 0;
        if (!fuzz_send_all(fd, head, (size_t)hn, MSG_MORE)) fuzz_send_all(fd, data, size, 0);
        n = fuzz_read_reply(fd, reply, sizeof reply, &keep);
        if (!keep) {
            close(fd);
            fd = -1;
        }
        if (n || !reused) break; /* a kept connection the server had closed meanwhile: again */
    }
    /* until the server has finished the request and dropped a connection it closed: a crash is
     * then charged to the input that caused it, not to the next one, and fewer inputs end with
     * mallocs the server has yet to free (libFuzzer re-runs those under a full leak scan) */
    pthread_mutex_lock(&s->mu);
    while (s->n_inflight)
        qvs_timed_wait(&s->cv, &s->mu, 100);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&s->conn_mu);
    while (fd < 0 && s->conns)
        qvs_timed_wait(&s->conn_cv, &s->conn_mu, 1);
    pthread_mutex_unlock(&s->conn_mu);
    if (n && strncmp(reply, "HTTP/1.1 ", 9)) {
        fprintf(stderr, "not an HTTP reply: %.200s\n", reply);
        abort();
    }
    fuzz_no_path(reply, data, size);
    return n ? atoi(reply + 9) : 0;
}

#endif
