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

/* A reply (or error message) naming the voices directory or the model directory: a leak. */
static void fuzz_no_path(const char *text) {
    if ((fuzz_voices_dir[0] && strstr(text, fuzz_voices_dir)) ||
        (fuzz_model_dir[0] && strstr(text, fuzz_model_dir))) {
        fprintf(stderr, "server path in a reply: %.400s\n", text);
        abort();
    }
}

static int fuzz_send_all(int fd, const void *p, size_t n) {
    for (size_t done = 0; done < n;) {
        ssize_t w = send(fd, (const char *)p + done, n - done, MSG_NOSIGNAL);
        if (w <= 0) return -1; /* the server may cut a body it refuses */
        done += (size_t)w;
    }
    return 0;
}

/* POSTs data[size] to path on s over loopback (one connection) and checks the reply: an HTTP
 * status line (or nothing, when the server cut the connection) naming no server path; aborts
 * otherwise. Returns the status, or 0 without a reply. */
static int fuzz_post(qv_server *s, const char *path, const char *type, const uint8_t *data,
                     size_t size) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)qv_server_port(s))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {20, 0};
    if (fd < 0) return 0;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return 0;
    }
    char head[512];
    int hn = snprintf(head, sizeof head,
                      "POST %s HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n"
                      "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n",
                      path, type, size);
    static char reply[1 << 16];
    size_t n = 0;
    if (!fuzz_send_all(fd, head, (size_t)hn)) fuzz_send_all(fd, data, size);
    shutdown(fd, SHUT_WR);
    for (ssize_t r; n + 1 < sizeof reply && (r = recv(fd, reply + n, sizeof reply - 1 - n, 0)) > 0;)
        n += (size_t)r;
    close(fd);
    reply[n] = 0;
    if (n && strncmp(reply, "HTTP/1.1 ", 9)) {
        fprintf(stderr, "not an HTTP reply: %.200s\n", reply);
        abort();
    }
    fuzz_no_path(reply);
    return n ? atoi(reply + 9) : 0;
}

#endif
