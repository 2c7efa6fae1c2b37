/* fuzz_ws_frame.c — the WebSocket reader of WS /v1/audio/speech/stream (server/ws.c) on hostile
 * bytes: byte 0 picks the message limit (64 B .. 16 KiB), byte 1 the size of the pieces the bytes
 * arrive in; the rest is what a client sent. Every event must keep to the protocol's bounds (a
 * data message within the limit, a control payload within 125 bytes, a close code the RFC allows),
 * a violation must repeat on every later call, and the handshake's accept key must take any
 * Sec-WebSocket-Key without harm. Replayed by tests/unit/test_server_ws.c.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t limit = (size_t)64 << (data[0] % 9), piece = 1 + data[1] % 64;
    data += 2, size -= 2;
    char key[64], acc[QVS_WS_ACCEPT_SIZE];
    size_t k = size < sizeof key - 1 ? size : sizeof key - 1;
    memcpy(key, data, k);
    key[k] = 0;
    if (!qvs_ws_accept(key, acc) && strlen(acc) != QVS_WS_ACCEPT_SIZE - 1) abort();
    qvs_ws_reader r;
    qvs_ws_reader_init(&r, limit);
    int failed = 0;
    for (size_t at = 0; at < size && !failed; at += piece) {
        size_t n = size - at < piece ? size - at : piece;
        if (qvs_ws_reader_add(&r, data + at, n)) break;
        qvs_ws_event e;
        while (qvs_ws_next(&r, &e) != QVS_WS_MORE) {
            switch (e.kind) {
            case QVS_WS_TEXT:
            case QVS_WS_BINARY:
                if (e.n > limit || (e.n && !e.p)) abort();
                break;
            case QVS_WS_PING:
            case QVS_WS_PONG:
                if (e.n > 125) abort();
                break;
            case QVS_WS_CLOSE:
                if (e.n > 125 || e.close_code < 1000 || e.close_code > 4999) abort();
                break;
            case QVS_WS_ERROR:
                if (e.close_code != 1002 && e.close_code != 1009 && e.close_code != 1011) abort();
                failed = e.close_code;
                break;
            case QVS_WS_MORE:
                break;
            }
            if (e.n) { /* the payload is readable whole */
                volatile uint8_t sum = 0;
                for (size_t i = 0; i < e.n; i++)
                    sum ^= e.p[i];
                (void)sum;
            }
            if (failed) break;
        }
    }
    if (failed) { /* the reader stays failed */
        qvs_ws_event e;
        if (qvs_ws_next(&r, &e) != QVS_WS_ERROR || e.close_code != failed) abort();
    }
    qvs_ws_reader_free(&r);
    return 0;
}
