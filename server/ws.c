/* ws.c — RFC 6455 WebSocket framing for WS /v1/audio/speech/stream: the handshake's accept key,
 * a reader that turns received bytes into whole messages and control frames (masking,
 * fragmentation, size limits, the protocol's rules), and the frames the server sends. No
 * extensions are offered, so every RSV bit must be 0. Pure byte handling except qvs_ws_send;
 * tests/fuzz/fuzz_ws_frame.c drives the reader with hostile bytes.
 */
#include <errno.h>
#include <openssl/sha.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/server_impl.h"

/* ==== handshake ============================================================================== */

int qvs_ws_accept(const char *key, char out[QVS_WS_ACCEPT_SIZE]) {
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    uint8_t *nonce = NULL, digest[SHA_DIGEST_LENGTH];
    size_t n = 0, k = key ? strlen(key) : 0;
    /* a base64 16-byte nonce is 24 characters ("...==") */
    if (k != 24 || qvs_base64_decode(key, k, &nonce, &n) || n != 16) {
        free(nonce);
        return -1;
    }
    free(nonce);
    char buf[24 + sizeof guid];
    memcpy(buf, key, 24);
    memcpy(buf + 24, guid, sizeof guid);
    SHA1((const unsigned char *)buf, 24 + sizeof guid - 1, digest);
    bytes b = {0};
    if (qvs_base64_add(&b, digest, sizeof digest) || b.len + 1 != QVS_WS_ACCEPT_SIZE) {
        free(b.p);
        return -1;
    }
    memcpy(out, b.p, b.len);
    out[b.len] = 0;
    free(b.p);
    return 0;
}

/* ==== reader ================================================================================= */

void qvs_ws_reader_init(qvs_ws_reader *r, size_t max_message) {
    memset(r, 0, sizeof *r);
    r->max_message = max_message;
}

void qvs_ws_reader_free(qvs_ws_reader *r) {
    free(r->in.p);
    free(r->msg.p);
    memset(r, 0, sizeof *r);
}

int qvs_ws_reader_add(qvs_ws_reader *r, const void *p, size_t n) {
    if (r->off) { /* drop what earlier calls consumed */
        memmove(r->in.p, r->in.p + r->off, r->in.len - r->off);
        r->in.len -= r->off;
        r->off = 0;
    }
    return qvs_bytes_add(&r->in, p, n);
}

/* A protocol violation: the reader stays failed with code. */
static int violation(qvs_ws_reader *r, qvs_ws_event *e, int code, const char *why) {
    r->failed = code;
    e->close_code = code;
    e->why = why;
    return e->kind = QVS_WS_ERROR;
}

int qvs_ws_next(qvs_ws_reader *r, qvs_ws_event *e) {
    memset(e, 0, sizeof *e);
    if (r->failed) return violation(r, e, r->failed, "the connection already failed");
    for (;;) {
        const uint8_t *b = r->in.p + r->off;
        size_t have = r->in.len - r->off;
        if (have < 2) return e->kind = QVS_WS_MORE;
        int fin = b[0] >> 7, rsv = b[0] & 0x70, op = b[0] & 0x0F, masked = b[1] >> 7;
        uint64_t len = b[1] & 0x7F;
        size_t head = 2;
        if (rsv) return violation(r, e, 1002, "RSV bits set (no extension)");
        if (!masked) return violation(r, e, 1002, "client frame not masked");
        if (op != QVS_WS_OP_CONT && op != QVS_WS_OP_TEXT && op != QVS_WS_OP_BINARY &&
            op != QVS_WS_OP_CLOSE && op != QVS_WS_OP_PING && op != QVS_WS_OP_PONG)
            return violation(r, e, 1002, "unknown opcode");
        int control = op >= QVS_WS_OP_CLOSE;
        if (control && (!fin || len > 125))
            return violation(r, e, 1002, "control frame fragmented or over 125 bytes");
        if (len == 126) {
            if (have < 4) return e->kind = QVS_WS_MORE;
            len = (uint64_t)b[2] << 8 | b[3];
            head = 4;
        } else if (len == 127) {
            if (have < 10) return e->kind = QVS_WS_MORE;
            len = 0;
            for (int i = 0; i < 8; i++)
                len = len << 8 | b[2 + i];
            head = 10;
            if (len >> 63) return violation(r, e, 1002, "frame length over 2^63");
        }
        /* refused from its header, before its payload is buffered */
        size_t assembled = r->msg_op ? r->msg.len : 0;
        if (!control && len > r->max_message - assembled)
            return violation(r, e, 1009, "message over the size limit");
        if (!control && op != QVS_WS_OP_CONT && r->msg_op)
            return violation(r, e, 1002, "new message inside a fragmented one");
        if (op == QVS_WS_OP_CONT && !r->msg_op)
            return violation(r, e, 1002, "continuation without a message");
        if (have - head < 4 + len) return e->kind = QVS_WS_MORE;
        const uint8_t *mask = b + head;
        uint8_t *pay = r->in.p + r->off + head + 4;
        for (uint64_t i = 0; i < len; i++)
            pay[i] ^= mask[i & 3];
        r->off += head + 4 + (size_t)len;
        if (control) {
            e->kind = op == QVS_WS_OP_CLOSE  ? QVS_WS_CLOSE
                      : op == QVS_WS_OP_PING ? QVS_WS_PING
                                             : QVS_WS_PONG;
            e->p = pay;
            e->n = (size_t)len;
            if (op == QVS_WS_OP_CLOSE) {
                if (len == 1) return violation(r, e, 1002, "close payload of 1 byte");
                e->close_code = len >= 2 ? pay[0] << 8 | pay[1] : 1005;
                int c = e->close_code;
                if (len >= 2 && (c < 1000 || c == 1004 || c == 1005 || c == 1006 ||
                                 (c > 1011 && c < 3000) || c > 4999))
                    return violation(r, e, 1002, "invalid close code");
            }
            return e->kind;
        }
        if (fin && !r->msg_op) { /* a whole message in one frame: no copy */
            e->kind = op == QVS_WS_OP_TEXT ? QVS_WS_TEXT : QVS_WS_BINARY;
            e->p = pay;
            e->n = (size_t)len;
            return e->kind;
        }
        if (!r->msg_op) r->msg_op = op, r->msg.len = 0;
        if (qvs_bytes_add(&r->msg, pay, (size_t)len)) return violation(r, e, 1011, "out of memory");
        if (fin) {
            e->kind = r->msg_op == QVS_WS_OP_TEXT ? QVS_WS_TEXT : QVS_WS_BINARY;
            e->p = r->msg.p;
            e->n = r->msg.len;
            r->msg_op = 0;
            return e->kind;
        }
    }
}

/* ==== sending ================================================================================ */

size_t qvs_ws_header(uint8_t h[QVS_WS_HEADER_MAX], int opcode, size_t n) {
    h[0] = (uint8_t)(0x80 | opcode);
    if (n < 126) {
        h[1] = (uint8_t)n;
        return 2;
    }
    if (n <= 0xFFFF) {
        h[1] = 126;
        h[2] = (uint8_t)(n >> 8);
        h[3] = (uint8_t)n;
        return 4;
    }
    h[1] = 127;
    for (int i = 0; i < 8; i++)
        h[2 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
    return 10;
}

/* All of p[n] to fd, waiting at most until deadline (qvs_now_s) for a slow reader. */
static int send_all(int fd, const uint8_t *p, size_t n, double deadline) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            p += k, n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
        int ms = (int)((deadline - qvs_now_s()) * 1000);
        if (ms <= 0) return -1;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        if (poll(&pf, 1, ms > 200 ? 200 : ms) < 0 && errno != EINTR) return -1;
    }
    return 0;
}

int qvs_ws_send(int fd, int opcode, const void *p, size_t n, double deadline) {
    uint8_t h[QVS_WS_HEADER_MAX];
    size_t hn = qvs_ws_header(h, opcode, n);
    return send_all(fd, h, hn, deadline) || (n && send_all(fd, p, n, deadline)) ? -1 : 0;
}
